//! The certificates of the TLS rows (`rtt_64_tls`, `bulk_8m_tls`): a CA
//! made for the run and a site certificate each for the server and the
//! client, written to a private temporary directory so a server in its
//! own process (`sitenet bench --serve sitenet-tls --tls-dir DIR`) loads
//! them as `sitenet node --cert --key --ca` would.

use std::path::{Path, PathBuf};

use sitenet_transport::tls::{certs, TlsIdentity};

use super::BenchError;

/// The run's CA and certificates; the directory is removed when dropped.
pub(super) struct BenchPki {
    dir: PathBuf,
    /// The client node's identity.
    pub(super) client_identity: TlsIdentity,
}

fn failed(e: impl std::fmt::Display) -> BenchError {
    BenchError::Server("sitenet-tls", e.to_string())
}

impl BenchPki {
    pub(super) fn new() -> Result<Self, BenchError> {
        let dir = std::env::temp_dir().join(format!(
            "sitenet-bench-tls-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let ca = dir.join("ca");
        certs::write_ca(&ca).map_err(failed)?;
        certs::write_site(&ca, &dir.join("server")).map_err(failed)?;
        certs::write_site(&ca, &dir.join("client")).map_err(failed)?;
        let client_identity = Self::identity(&dir, "client")?;
        Ok(Self {
            dir,
            client_identity,
        })
    }

    /// Where the files are (for `--tls-dir`).
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's identity from the files in `dir`.
    pub(super) fn server_identity(dir: &Path) -> Result<TlsIdentity, BenchError> {
        Self::identity(dir, "server")
    }

    fn identity(dir: &Path, who: &str) -> Result<TlsIdentity, BenchError> {
        let (cert, key) = certs::site_files(&dir.join(who));
        let (ca, _) = certs::ca_files(&dir.join("ca"));
        TlsIdentity::from_pem_files(&cert, &key, &ca).map_err(failed)
    }
}

impl Drop for BenchPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
