//! Cookie files (issue 18): a cookie kept on disk as 64 hexadecimal
//! digits, readable by its owner only. As ssh refuses a private key that
//! others can read, a cookie file readable by group or others is refused:
//! a secret anyone on the host can read makes anyone on the host a member.

use std::io::Write;
use std::path::{Path, PathBuf};

use sitenet_protocols::handshake::cookie::COOKIE_LEN;
use sitenet_protocols::Cookie;
use thiserror::Error;
use zeroize::Zeroizing;

/// Why a cookie file was not read or written.
#[derive(Debug, Error)]
pub enum CookieFileError {
    /// The file could not be read or written.
    #[error("cookie file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is readable or writable by group or others.
    #[error(
        "cookie file {path} is accessible by group or others (mode {mode:04o}); \
         a cookie must be private to its owner: chmod 600 {path}"
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file does not hold a cookie.
    #[error("cookie file {path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: sitenet_protocols::handshake::CookieError,
    },
    /// `create` never overwrites a file.
    #[error("cookie file {0} exists; not overwriting it")]
    Exists(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CookieFileError + '_ {
    move |source| CookieFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads the cookie in `path`, refusing a file readable by group or
/// others.
pub fn load(path: &Path) -> Result<Cookie, CookieFileError> {
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if let Some(mode) = sitenet_transport::tls::too_open(&meta) {
        return Err(CookieFileError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(io(path))?);
    Cookie::from_text(&text).map_err(|source| CookieFileError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Writes a fresh random cookie to `path` (created with mode 0600; an
/// existing file is never overwritten) and returns it.
pub fn create(path: &Path) -> Result<Cookie, CookieFileError> {
    let secret = Zeroizing::new(rand::random::<[u8; COOKIE_LEN]>());
    let cookie = Cookie::new(*secret);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CookieFileError::Exists(path.to_owned())
        } else {
            io(path)(e)
        }
    })?;
    f.write_all(cookie.to_text().as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io(path))?;
    Ok(cookie)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_cookie_loads_back_and_an_open_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("sitenet-cookie-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cookie");
        let _ = std::fs::remove_file(&path);
        let made = create(&path).unwrap();
        assert_eq!(load(&path).unwrap().id(), made.id());
        assert!(matches!(create(&path), Err(CookieFileError::Exists(_))));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = load(&path).unwrap_err();
            assert!(
                matches!(e, CookieFileError::TooOpen { mode: 0o644, .. }),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
