//! TLS with per-site certificates: the third level of trust
//! (docs/threats.md). At the open level anyone who reaches a port can be
//! any site; with a cookie only members get in, but a member can still
//! claim another member's id. With TLS a peer can only be the site its
//! certificate names: each site holds a certificate signed by the
//! deployment's CA that names exactly one site id, and the handshake
//! machines refuse a claim the certificate does not name.
//!
//! - [`TlsIdentity`]: this site's certificate, key and CA, loaded from PEM
//!   files ([`TlsIdentity::from_pem_files`]); a node takes its site id from
//!   it.
//! - [`TlsSession`]: rustls's sans-IO engine for one channel, driven by the
//!   TransObject's own byte pumping (non-blocking reads and writes on the
//!   [`Channel`](crate::Channel)), so TLS adds no async layer and no task:
//!   the readiness path is the plain one.
//! - [`certs`]: a CA and site certificates, for `sitenet cert ca` and
//!   `sitenet cert site`.
//!
//! How a certificate names a site: one DNS subject-alternative name
//! `<32 hex digits>.site.sitenet` ([`site_name`]). A DNS name, not a URI,
//! because it is what webpki checks a certificate against: the verifier
//! reads the id from the certificate, then has webpki verify the chain,
//! the validity period and that name together.

pub mod certs;
mod session;
mod verify;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sitenet_protocols::SiteId;
use thiserror::Error;

pub use session::TlsSession;

/// The suffix of the DNS name a site certificate carries (see [`site_name`]).
pub const SITE_NAME_SUFFIX: &str = ".site.sitenet";

/// The DNS name a site certificate carries for `site`:
/// `<32 hex digits>.site.sitenet`.
///
/// ```
/// use sitenet_protocols::SiteId;
/// use sitenet_transport::tls::{site_name, site_of_name};
///
/// let name = site_name(SiteId(0xabc));
/// assert_eq!(name, "00000000000000000000000000000abc.site.sitenet");
/// assert_eq!(site_of_name(&name), Some(SiteId(0xabc)));
/// assert_eq!(site_of_name("abc.site.sitenet"), None);
/// assert_eq!(site_of_name("example.com"), None);
/// ```
pub fn site_name(site: SiteId) -> String {
    format!("{site}{SITE_NAME_SUFFIX}")
}

/// The site a DNS name of the form [`site_name`] gives names, if it is one.
pub fn site_of_name(name: &str) -> Option<SiteId> {
    name.strip_suffix(SITE_NAME_SUFFIX)
        .and_then(SiteId::parse_hex)
}

/// Why TLS could not be set up. Each message names the file and says how
/// to fix it.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A file that would be overwritten exists: certificate and key files
    /// are never replaced (a key lost that way cannot be recovered).
    #[error("{0} exists: refusing to overwrite it (choose another directory or remove it)")]
    Exists(PathBuf),
    /// A PEM file holds nothing usable of the kind expected.
    #[error("{path}: {what} (expected a PEM file as `sitenet cert` writes)")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// A private key file is readable by group or others; refused as ssh
    /// refuses such a key.
    #[error(
        "key file {path} is readable by group or others (mode {mode:o}): \
         make it private with `chmod 600 {path}`"
    )]
    KeyPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The certificate does not name exactly one site id.
    #[error(
        "the certificate in {0} does not name exactly one site: a site certificate carries one \
         DNS name <32 hex digits>.site.sitenet (make one with `sitenet cert site`)"
    )]
    NoSiteId(PathBuf),
    /// rustls refused the configuration (a key that does not match the
    /// certificate, an unusable CA certificate).
    #[error("TLS configuration refused: {0}")]
    Config(String),
    /// A certificate could not be made.
    #[error("cannot make the certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// This site's TLS identity: its certificate (naming its site id), its
/// private key and the CA certificates it trusts, turned into rustls
/// configurations for both roles. Cheap to clone; shared by every channel
/// of a node.
///
/// # Example
///
/// ```
/// use sitenet_protocols::SiteId;
/// use sitenet_transport::tls::{certs, TlsIdentity};
///
/// let ca = certs::new_ca()?;
/// let site = certs::new_site(&ca, SiteId(7), &certs::Validity::default())?;
/// let id = TlsIdentity::from_pem(&site.cert_pem, &site.key_pem, &ca.cert_pem)?;
/// assert_eq!(id.site(), SiteId(7));
/// # Ok::<(), sitenet_transport::tls::TlsError>(())
/// ```
#[derive(Clone)]
pub struct TlsIdentity {
    site: SiteId,
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    /// The file the CA certificates came from (`None` from PEM text): a
    /// refusal of trust names it.
    ca_file: Option<Arc<Path>>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("site", &self.site)
            .finish_non_exhaustive()
    }
}

/// How many plaintext bytes a TLS session may hold encrypted and unsent
/// (rustls's buffer limit): what waits there is beyond the reach of
/// sitenet's scheduler, like the kernel's send buffer, so it is kept to
/// four records.
pub const TLS_SEND_LIMIT: usize = 64 << 10;

impl TlsIdentity {
    /// Loads a site certificate (`cert`, PEM: the site's certificate
    /// first, then any intermediates), its private key (`key`, PEM, mode
    /// 0600 or stricter) and the CA certificates to trust (`ca`, PEM).
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        check_private(key)?;
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| TlsError::Read {
                path: p.to_owned(),
                source,
            })
        };
        let key_pem = zeroize::Zeroizing::new(read(key)?);
        let mut id = Self::build(
            parse_certs(cert, &read(cert)?)?,
            parse_key(key, &key_pem)?,
            parse_certs(ca, &read(ca)?)?,
            cert,
        )?;
        id.ca_file = Some(Arc::from(ca));
        Ok(id)
    }

    /// The same from PEM text (tests, and programs that keep their
    /// certificates elsewhere).
    pub fn from_pem(cert_pem: &str, key_pem: &str, ca_pem: &str) -> Result<Self, TlsError> {
        let (c, k, a) = (Path::new("<cert>"), Path::new("<key>"), Path::new("<ca>"));
        Self::build(
            parse_certs(c, cert_pem)?,
            parse_key(k, key_pem)?,
            parse_certs(a, ca_pem)?,
            c,
        )
    }

    fn build(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        ca: Vec<CertificateDer<'static>>,
        cert_path: &Path,
    ) -> Result<Self, TlsError> {
        let site = verify::site_of_cert(&chain[0])
            .ok_or_else(|| TlsError::NoSiteId(cert_path.to_owned()))?;
        let mut roots = RootCertStore::empty();
        for c in ca {
            roots
                .add(c)
                .map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = |e: rustls::Error| TlsError::Config(e.to_string());
        let server_verifier = verify::SiteServerVerifier::new(roots.clone(), provider.clone())?;
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(server_verifier))
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(config)?;
        // Every channel proves its certificate anew: no resumption, no
        // server name sent (the id is in the certificate, not the name).
        client.resumption = rustls::client::Resumption::disabled();
        client.enable_sni = false;
        let client_verifier = verify::SiteClientVerifier::new(roots, provider.clone())?;
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config)?
            .with_client_cert_verifier(Arc::new(client_verifier))
            .with_single_cert(chain, key)
            .map_err(config)?;
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        Ok(Self {
            site,
            client: Arc::new(client),
            server: Arc::new(server),
            ca_file: None,
        })
    }

    /// The site id this identity's certificate names: the node's own.
    pub fn site(&self) -> SiteId {
        self.site
    }

    /// The rustls configuration this site dials with (for a program that
    /// runs TLS itself: tests speaking the protocol by hand).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// The rustls configuration this site accepts with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// A session for a channel this site dialed.
    pub fn client_session(&self) -> io::Result<TlsSession> {
        let name = rustls::pki_types::ServerName::try_from(site_name(self.site))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = rustls::ClientConnection::new(self.client.clone(), name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(TlsSession::new(conn.into(), self.ca_file.clone()))
    }

    /// A session for a channel this site accepted.
    pub fn server_session(&self) -> io::Result<TlsSession> {
        let conn = rustls::ServerConnection::new(self.server.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(TlsSession::new(conn.into(), self.ca_file.clone()))
    }
}

fn parse_certs(path: &Path, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            what: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            what: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

fn parse_key(path: &Path, pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        what: format!("no usable private key ({e})"),
    })
}

/// Refuses a key file that group or others may read (Unix; elsewhere the
/// file system's own protection applies).
pub fn check_private(path: &Path) -> Result<(), TlsError> {
    let meta = std::fs::metadata(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    match too_open(&meta) {
        Some(mode) => Err(TlsError::KeyPermissions {
            path: path.to_owned(),
            mode,
        }),
        None => Ok(()),
    }
}

/// The permission bits of a secret's file if group or others have any
/// access to it (a key, a cookie: refused as ssh refuses such a key);
/// `None` if only its owner has, or off Unix.
pub fn too_open(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o7777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}
