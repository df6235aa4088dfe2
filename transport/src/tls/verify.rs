//! The certificate verifiers: webpki checks the chain to the deployment's
//! CA and the validity period; these add that a certificate names exactly
//! one site ([`super::site_name`]). Which site it names is bound to the
//! site the peer claims by the handshake machines (`Initiator::certified`,
//! `Acceptor::certified` in sitenet-protocols), not here: the verifier
//! runs before the peer has claimed anything.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore};
use sitenet_protocols::SiteId;

use super::{site_name, site_of_name, TlsError};

/// The handshake signature checks, as webpki's verifier (`self.inner`)
/// makes them: the two verifiers add a rule about names, not about
/// signatures.
macro_rules! signatures_by_inner {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    };
}

/// The site a certificate (DER) names: its one DNS name of the form
/// `<32 hex>.site.sitenet`. `None` if it names none, several, or does not
/// parse.
pub(crate) fn site_of_cert(der: &CertificateDer<'_>) -> Option<SiteId> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let mut found = None;
    for name in &san.value.general_names {
        if let GeneralName::DNSName(n) = name {
            if let Some(id) = site_of_name(n) {
                if found.replace(id).is_some() {
                    return None;
                }
            }
        }
    }
    found
}

fn names_no_site() -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
}

/// webpki's verdict, with a signature that does not verify against the
/// trusted CA of the same name said as what it means here: the certificate
/// is not signed by a CA this site trusts (`UnknownIssuer`, whose alert
/// tells the peer `UnknownCA`, where `BadSignature`'s says
/// `DecryptError`).
fn as_trust(e: rustls::Error) -> rustls::Error {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::BadSignature) => {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        }
        e => e,
    }
}

/// A dialing site's check of the certificate the acceptor presents: the
/// site it names is read from it, then webpki verifies the chain, the
/// validity and that name (the name the dialer passed to rustls is
/// ignored: a dialer often knows only an address).
#[derive(Debug)]
pub(crate) struct SiteServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl SiteServerVerifier {
    pub(crate) fn new(
        roots: Arc<RootCertStore>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| TlsError::Config(format!("CA certificates: {e}")))?;
        Ok(Self { inner })
    }
}

impl ServerCertVerifier for SiteServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let site = site_of_cert(end_entity).ok_or_else(names_no_site)?;
        let name = ServerName::try_from(site_name(site)).map_err(|_| names_no_site())?;
        self.inner
            .verify_server_cert(end_entity, intermediates, &name, ocsp_response, now)
            .map_err(as_trust)
    }

    signatures_by_inner!();
}

/// An accepting site's check of the dialer's certificate: mandatory, chained
/// to the deployment's CA, valid now, naming exactly one site.
#[derive(Debug)]
pub(crate) struct SiteClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl SiteClientVerifier {
    pub(crate) fn new(
        roots: Arc<RootCertStore>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let inner = WebPkiClientVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| TlsError::Config(format!("CA certificates: {e}")))?;
        Ok(Self { inner })
    }
}

impl ClientCertVerifier for SiteClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        site_of_cert(end_entity).ok_or_else(names_no_site)?;
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(as_trust)
    }

    signatures_by_inner!();
}
