//! Making a deployment's CA and its sites' certificates, so that trying
//! TLS takes two commands (`sitenet cert ca DIR`, `sitenet cert site --ca
//! DIR DIR2`), as CockroachDB's `cert create-ca` / `create-node` do.
//!
//! Keys are ECDSA P-256. A site certificate names one site id
//! ([`super::site_name`]) and may authenticate both roles (a site dials
//! and accepts). Files are written with `create_new` (an existing file is
//! never replaced) and keys with mode 0600.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use sitenet_protocols::SiteId;
use zeroize::Zeroizing;

use super::{site_name, TlsError};

/// A certificate and its private key, both PEM.
pub struct CertAndKey {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (wiped when dropped).
    pub key_pem: Zeroizing<String>,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey").finish_non_exhaustive()
    }
}

/// When a certificate is valid.
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    /// Not before this time.
    pub not_before: SystemTime,
    /// Not after this time.
    pub not_after: SystemTime,
}

/// A site certificate's default lifetime: a year.
pub const SITE_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A CA certificate's lifetime: ten years.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Validity {
    /// From an hour ago (clocks differ) for `lifetime`.
    pub fn starting_now(lifetime: Duration) -> Self {
        let now = SystemTime::now();
        Self {
            not_before: now - Duration::from_secs(3600),
            not_after: now + lifetime,
        }
    }
}

impl Default for Validity {
    /// [`SITE_VALIDITY`], starting now.
    fn default() -> Self {
        Self::starting_now(SITE_VALIDITY)
    }
}

/// A fresh self-signed CA, valid for [`CA_VALIDITY`].
pub fn new_ca() -> Result<CertAndKey, TlsError> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "sitenet deployment CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut p, &Validity::starting_now(CA_VALIDITY));
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: Zeroizing::new(key.serialize_pem()),
    })
}

/// A certificate for `site` signed by `ca`, valid for `validity`.
pub fn new_site(
    ca: &CertAndKey,
    site: SiteId,
    validity: &Validity,
) -> Result<CertAndKey, TlsError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = CertificateParams::from_ca_cert_pem(&ca.cert_pem)?.self_signed(&ca_key)?;
    let mut p = CertificateParams::new(vec![site_name(site)])?;
    p.distinguished_name
        .push(DnType::CommonName, format!("sitenet site {site}"));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    set_validity(&mut p, validity);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer, &ca_key)?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: Zeroizing::new(key.serialize_pem()),
    })
}

fn set_validity(p: &mut CertificateParams, v: &Validity) {
    p.not_before = v.not_before.into();
    p.not_after = v.not_after.into();
}

/// The files of a CA directory: `DIR/ca.pem` and `DIR/ca.key`.
pub fn ca_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.pem"), dir.join("ca.key"))
}

/// The files of a site directory: `DIR/site.pem` and `DIR/site.key`.
pub fn site_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("site.pem"), dir.join("site.key"))
}

/// Makes a CA and writes it to `dir` (created if missing): `ca.pem`, and
/// `ca.key` with mode 0600. Neither file may exist yet.
pub fn write_ca(dir: &Path) -> Result<(PathBuf, PathBuf), TlsError> {
    let (cert, key) = ca_files(dir);
    refuse_existing(&[&cert, &key])?;
    let ca = new_ca()?;
    write_pair(dir, &cert, &key, &ca)?;
    Ok((cert, key))
}

/// Reads the CA in `ca_dir` (as [`write_ca`] wrote it).
pub fn read_ca(ca_dir: &Path) -> Result<CertAndKey, TlsError> {
    let (cert, key) = ca_files(ca_dir);
    super::check_private(&key)?;
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| TlsError::Read {
            path: p.to_owned(),
            source,
        })
    };
    Ok(CertAndKey {
        cert_pem: read(&cert)?,
        key_pem: Zeroizing::new(read(&key)?),
    })
}

/// Makes a certificate for a fresh random site id, signed by the CA in
/// `ca_dir`, and writes it to `dir` (created if missing): `site.pem`, and
/// `site.key` with mode 0600. Returns the site id and the two paths.
pub fn write_site(ca_dir: &Path, dir: &Path) -> Result<(SiteId, PathBuf, PathBuf), TlsError> {
    let (cert, key) = site_files(dir);
    refuse_existing(&[&cert, &key])?;
    let ca = read_ca(ca_dir)?;
    let site = SiteId(rand::random());
    let pair = new_site(&ca, site, &Validity::default())?;
    write_pair(dir, &cert, &key, &pair)?;
    Ok((site, cert, key))
}

fn refuse_existing(paths: &[&Path]) -> Result<(), TlsError> {
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(TlsError::Exists(p.to_path_buf())),
        None => Ok(()),
    }
}

fn write_pair(dir: &Path, cert: &Path, key: &Path, pair: &CertAndKey) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    write_new(key, pair.key_pem.as_bytes(), 0o600)?;
    write_new(cert, pair.cert_pem.as_bytes(), 0o644)
}

/// Writes a file that must not exist yet, with `mode` from its creation
/// (a key is never readable by others, not even for an instant).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let err = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            TlsError::Exists(path.to_owned())
        } else {
            TlsError::Write {
                path: path.to_owned(),
                source,
            }
        }
    };
    let mut f = o.open(path).map_err(err)?;
    f.write_all(bytes).map_err(err)
}
