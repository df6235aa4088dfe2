//! The acceptor's machine: PRESENT out, NEGOTIATE in (the decision and the
//! answer belong to the site's ComObject).

use super::*;
use crate::base::coverage;
use crate::base::site::SiteId;
use crate::connection::error::{OpenError, ProtocolError};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::FrameKind;
use crate::wire::version::{Agreed, Speaks};

/// The acceptor's side of the open protocol, up to NEGOTIATE. The decision
/// and the answer belong to the site's ComObject ([`crate::connection::link`]).
#[derive(Debug)]
pub struct Acceptor {
    local_site: SiteId,
    /// This handshake's nonce, sent in PRESENT.
    nonce: Nonce,
    done: bool,
    /// PRESENT could not be written (this node's listen list does not fit).
    unwritable: bool,
    /// The cookies this node holds (none: the open level).
    keys: Keyring,
    /// The transcript so far (PRESENT), kept only when a cookie is held.
    transcript: Option<Box<cookie::Transcript>>,
    /// This side's proof for the answer, once NEGOTIATE proved the cookie.
    answer_proof: Option<CookieProof>,
    /// What TLS proved of the peer (see [`certificate`]).
    certificate: PeerCertificate,
    /// What this node offered in PRESENT: NEGOTIATE must choose from it.
    speaks: Speaks,
}

impl Acceptor {
    /// Starts an accepted channel: writes PRESENT to `output`. `nonce`
    /// must be drawn at random for this handshake (the initiator's proof
    /// of continuity is bound to it).
    pub fn new(local: &LocalInfo, nonce: Nonce, output: &mut ByteBuffer) -> Self {
        Self::with_keys(local, nonce, Keyring::default(), output)
    }

    /// The same at the cookie level: NEGOTIATE must prove one of `keys`
    /// (none: the open level, exactly [`Acceptor::new`]), and is refused
    /// before it is returned if it does not (see [`cookie`]).
    pub fn with_keys(
        local: &LocalInfo,
        nonce: Nonce,
        keys: Keyring,
        output: &mut ByteBuffer,
    ) -> Self {
        let present = Present {
            versions: local.speaks.versions,
            caps: local.speaks.caps,
            site: local.site,
            listen: local.listen.clone(),
            nonce,
        };
        let payload = encode_control(&present);
        // If PRESENT cannot be written, the first call to `handle_input`
        // says so (`LocalInfo::validate` catches it when the node starts).
        let unwritable = !write_payload(output, FrameKind::Present, &payload);
        let transcript = (!keys.is_open()).then(|| Box::new(cookie::Transcript::new(&payload)));
        Self {
            local_site: local.site,
            nonce,
            done: false,
            unwritable,
            keys,
            transcript,
            answer_proof: None,
            certificate: PeerCertificate::NotRequired,
            speaks: local.speaks,
        }
    }

    /// This node speaks TLS: NEGOTIATE must claim the site the
    /// peer's certificate names ([`certified`](Self::certified)), or it is
    /// refused before it is returned, with
    /// [`OpenError::NotCertified`].
    pub fn require_certificate(mut self) -> Self {
        self.certificate = PeerCertificate::Required;
        self
    }

    /// The site the peer's verified TLS certificate names: the driver calls
    /// it once the TLS handshake finished, before it feeds NEGOTIATE.
    pub fn certified(&mut self, site: SiteId) {
        self.certificate.certify(site);
    }

    /// What TLS proved of the peer.
    pub fn peer_certificate(&self) -> PeerCertificate {
        self.certificate
    }

    /// This side's cookie proof for its answer (see
    /// [`NegotiateAns::with_cookie`]): `Some` once a NEGOTIATE proved one of
    /// this node's cookies, `None` at the open level. Never computed for an
    /// initiator that did not prove itself first.
    pub fn answer_proof(&self) -> Option<CookieProof> {
        self.answer_proof
    }

    /// The nonce this acceptor presented: the site's ComObject checks the
    /// NEGOTIATE's proof against it.
    pub fn nonce(&self) -> Nonce {
        self.nonce
    }

    /// Feeds received bytes; `Ok(Some(negotiate))` once NEGOTIATE arrived and
    /// is valid (and, holding a cookie, proved it). A NEGOTIATE that fails
    /// authentication is answered here, on `output`, with
    /// [`RefuseReason::Unauthenticated`], and the error is
    /// [`OpenError::AuthenticationFailed`]: the driver writes `output` and
    /// closes, having allocated nothing for the peer.
    pub fn handle_input(
        &mut self,
        input: &mut ByteBuffer,
        output: &mut ByteBuffer,
    ) -> Result<Option<Negotiate>, OpenError> {
        if self.done {
            return Ok(None);
        }
        if self.unwritable {
            self.done = true;
            return Err(OpenError::LocalConfig(
                "PRESENT does not fit the handshake payload limit or the output ring; \
                 check LocalInfo::validate"
                    .into(),
            ));
        }
        let Some((h, payload)) = read_frame(input, MAX_HANDSHAKE_PAYLOAD)
            .map_err(|e| first_frame_error(e, &self.speaks))?
        else {
            return Ok(None);
        };
        self.done = true;
        if h.kind != FrameKind::Negotiate {
            return Err(ProtocolError::Unexpected {
                kind: h.kind,
                state: "expecting NEGOTIATE",
            }
            .into());
        }
        let n: Negotiate = decode("NEGOTIATE", &payload)?;
        // The choice must be from what PRESENT offered.
        self.speaks.check_choice(Agreed {
            version: n.version,
            caps: n.caps,
        })?;
        if n.site == self.local_site {
            return Err(OpenError::SelfConnection(n.site));
        }
        if n.buffer_size < MIN_BUFFER || n.listen.len() > MAX_LISTEN {
            return Err(ProtocolError::Malformed {
                what: "NEGOTIATE",
                reason: format!(
                    "buffer size {} below {MIN_BUFFER} or {} listen addresses",
                    n.buffer_size,
                    n.listen.len()
                ),
            }
            .into());
        }
        // Its successor must exist: last_generation + 1 <= MAX_GENERATION.
        if n.last_generation >= MAX_GENERATION {
            return Err(ProtocolError::Malformed {
                what: "NEGOTIATE",
                reason: format!(
                    "last generation {} at or beyond {MAX_GENERATION}",
                    n.last_generation
                ),
            }
            .into());
        }
        // TLS: the claim must be the site the certificate names.
        if let Err(e) = self.certificate.check(n.site) {
            refuse_unauthenticated(output);
            return Err(e);
        }
        // The cookie, last: the message is well formed and names another
        // site; whether it comes from a member decides whether anything is
        // allocated for it. Open on both sides: nothing to hash.
        if !self.keys.is_open() || n.cookie.is_some() {
            let proven = match &self.transcript {
                Some(t) => {
                    cookie::check_initiator(&self.keys, &t.with_negotiate(&n), n.cookie.as_ref())
                }
                None => Err(AuthFailure::NotHeld),
            };
            match proven {
                Ok(p) => self.answer_proof = p,
                Err(e) => {
                    refuse_unauthenticated(output);
                    return Err(OpenError::AuthenticationFailed(e));
                }
            }
        }
        Ok(Some(n))
    }
}

/// Answers a NEGOTIATE whose proof (a cookie, a certificate's name) fails:
/// a REFUSE naming authentication.
fn refuse_unauthenticated(output: &mut ByteBuffer) {
    coverage::hit(coverage::Point::RefuseUnauthenticated);
    write_answer(output, &NegotiateAns::Refuse(RefuseReason::Unauthenticated));
}
