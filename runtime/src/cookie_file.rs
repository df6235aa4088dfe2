//! Cookie files: a cookie kept on disk as 64 hexadecimal
//! digits, readable by its owner only. As ssh refuses a private key that
//! others can read, a cookie file readable by group or others is refused:
//! a secret anyone on the host can read makes anyone on the host a member.

use std::io::Write;
use std::path::{Path, PathBuf};

use sitenet_protocols::connection::handshake::cookie::COOKIE_LEN;
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
        source: sitenet_protocols::connection::handshake::CookieError,
    },
    /// `create` never overwrites a file.
    #[error("cookie file {0} exists; not overwriting it")]
    Exists(PathBuf),
    /// [`default_path`] found none of the variables that name it.
    #[error(
        "no cookie file given and none by default: SITENET_COOKIE_FILE, XDG_CONFIG_HOME and HOME \
         are all unset; set SITENET_COOKIE_FILE=PATH, pass --cookie-file PATH, or choose the \
         open level with --open"
    )]
    NoDefault,
}

/// The variable that names the user's cookie file, before
/// `$XDG_CONFIG_HOME/sitenet/cookie` and `~/.config/sitenet/cookie`.
pub const COOKIE_FILE_VAR: &str = "SITENET_COOKIE_FILE";

/// The user's own cookie file, which the command line proves when given
/// neither a cookie file nor a certificate (as Erlang keeps
/// `~/.erlang.cookie`): `$SITENET_COOKIE_FILE` if set, else
/// `$XDG_CONFIG_HOME/sitenet/cookie`, else `$HOME/.config/sitenet/cookie`
/// (an empty variable counts as unset; a relative `XDG_CONFIG_HOME` is
/// ignored, as the XDG specification says). `var` reads the environment
/// (`std::env::var_os`; a test passes its own).
pub fn default_path(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, CookieFileError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = set(COOKIE_FILE_VAR) {
        return Ok(p);
    }
    if let Some(xdg) = set("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        return Ok(xdg.join("sitenet").join("cookie"));
    }
    set("HOME")
        .map(|home| home.join(".config").join("sitenet").join("cookie"))
        .ok_or(CookieFileError::NoDefault)
}

/// Reads the cookie in `path`, or makes one there if there is no file: a
/// fresh random cookie, written whole before the file appears under its
/// name (mode 0600; missing parent directories are made with mode 0700).
/// Returns it and whether it was made now. Two processes starting at once
/// end up with the same cookie: the one that loses the race reads the
/// winner's. A file that exists is never rewritten, and is refused as
/// [`load`] refuses it (readable by group or others, not a cookie).
pub fn load_or_create(path: &Path) -> Result<(Cookie, bool), CookieFileError> {
    match load(path) {
        Err(CookieFileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound => {}
        other => return other.map(|c| (c, false)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            b.mode(0o700);
        }
        b.create(dir).map_err(io(dir))?;
    }
    // Written under a name of its own, then linked to its real name, which
    // fails if the name is taken: no one ever reads a half-written cookie.
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(
        ".{name}.{}.{:016x}.new",
        std::process::id(),
        rand::random::<u64>()
    ));
    let cookie = create(&tmp)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((cookie, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load(path).map(|c| (c, false)),
        Err(e) => Err(io(path)(e)),
    }
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
    fn the_default_path_is_the_variable_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let p = |s: &str| PathBuf::from(s);
        let all = env(&[
            ("SITENET_COOKIE_FILE", "/c/cookie"),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(default_path(all).unwrap(), p("/c/cookie"));
        let xdg = env(&[
            ("SITENET_COOKIE_FILE", ""),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(default_path(xdg).unwrap(), p("/x/sitenet/cookie"));
        let relative_xdg = env(&[("XDG_CONFIG_HOME", "x"), ("HOME", "/h")]);
        assert_eq!(
            default_path(relative_xdg).unwrap(),
            p("/h/.config/sitenet/cookie")
        );
        assert!(matches!(
            default_path(env(&[])),
            Err(CookieFileError::NoDefault)
        ));
    }

    #[test]
    fn load_or_create_makes_private_directories_and_keeps_an_existing_cookie() {
        let dir = std::env::temp_dir().join(format!(
            "sitenet-cookie-default-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let path = dir.join("a/b/cookie");
        let (made, created) = load_or_create(&path).unwrap();
        assert!(created);
        let (again, created) = load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(again.id(), made.id());
        // Nothing but the cookie is left in its directory.
        let names: Vec<_> = std::fs::read_dir(dir.join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["cookie"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&dir.join("a/b")), 0o700);
            assert_eq!(mode(&dir.join("a")), 0o700);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
