//! Binding a claimed site id to what TLS proved.
//!
//! Under TLS each side's certificate names exactly one site, and the
//! transport tells the handshake machine which once the TLS handshake
//! verified it. The machine then refuses a claim — the acceptor's PRESENT,
//! the initiator's NEGOTIATE — for any other site, and a claim on a channel
//! whose peer proved no certificate at all: a member can be only the site
//! its certificate names. The check is the machine's, not the transport's,
//! because the claim is only known once the open protocol's message
//! arrives; it happens before anything is allocated for the peer.

use crate::base::site::SiteId;
use crate::connection::error::OpenError;

/// What the transport proved of the peer's identity, as the handshake
/// machines need it.
///
/// ```
/// use sitenet_protocols::connection::handshake::PeerCertificate;
/// use sitenet_protocols::{OpenError, SiteId};
///
/// // Open and cookie levels: no certificate, any claim goes on.
/// assert!(PeerCertificate::NotRequired.check(SiteId(1)).is_ok());
/// // TLS: only the site the certificate names.
/// let tls = PeerCertificate::Names(SiteId(1));
/// assert!(tls.check(SiteId(1)).is_ok());
/// assert_eq!(
///     tls.check(SiteId(2)),
///     Err(OpenError::NotCertified { claimed: SiteId(2), certified: Some(SiteId(1)) })
/// );
/// // Required, but the channel proved none (a plain channel to a TLS node).
/// assert!(PeerCertificate::Required.check(SiteId(1)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerCertificate {
    /// This node does not use TLS: claims are judged by the cookie and the
    /// pair's continuity only.
    #[default]
    NotRequired,
    /// This node uses TLS; the peer's certificate is not (yet) known.
    Required,
    /// The peer's verified certificate names this site.
    Names(SiteId),
}

impl PeerCertificate {
    /// Records the site the peer's verified certificate names (a node that
    /// does not require certificates records nothing).
    pub fn certify(&mut self, site: SiteId) {
        if *self != Self::NotRequired {
            *self = Self::Names(site);
        }
    }

    /// Whether a claim to be `claimed` may go on.
    pub fn check(self, claimed: SiteId) -> Result<(), OpenError> {
        match self {
            Self::NotRequired => Ok(()),
            Self::Names(c) if c == claimed => Ok(()),
            Self::Names(c) => Err(OpenError::NotCertified {
                claimed,
                certified: Some(c),
            }),
            Self::Required => Err(OpenError::NotCertified {
                claimed,
                certified: None,
            }),
        }
    }

    /// The peer proved it is the site it claims (so an unproven claim on
    /// a session is a restart of that site, not a takeover).
    pub fn proves(self, claimed: SiteId) -> bool {
        self == Self::Names(claimed)
    }
}
