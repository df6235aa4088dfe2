//! The initiator's machine: PRESENT in, NEGOTIATE out, NEGOTIATE_ANS in.

use super::*;
use crate::base::site::SiteId;
use crate::connection::error::{FrameError, OpenError, ProtocolError};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::FrameKind;
use crate::wire::version::{Agreed, Capabilities, Speaks};

/// The initiator's side of the open protocol.
#[derive(Debug)]
pub enum Initiator {
    /// Waiting for the acceptor's PRESENT.
    ExpectPresent {
        /// Who we are.
        local: LocalInfo,
        /// The id the `SiteRef` already holds, if any.
        expected: Option<SiteId>,
        /// Session numbers to put in NEGOTIATE.
        last_received: u64,
        /// Last generation seen working.
        last_generation: u64,
        /// This attempt, sent in NEGOTIATE.
        attempt: Attempt,
        /// This handshake's nonce, sent in NEGOTIATE.
        nonce: Nonce,
        /// The secret of our session with the expected site, if any: its
        /// proof goes in NEGOTIATE.
        secret: Option<PairSecret>,
        /// Our session tag with the expected site, sent in NEGOTIATE.
        session: SessionTag,
        /// The cookies we hold (none: the open level).
        keys: Keyring,
        /// What TLS proved of the acceptor (see [`certificate`]).
        certificate: PeerCertificate,
    },
    /// NEGOTIATE sent; waiting for the answer.
    ExpectAnswer {
        /// The acceptor's presentation.
        present: Present,
        /// What we proposed.
        proposed: Negotiate,
        /// The cookies we hold: the answer must prove the one we proved.
        keys: Keyring,
        /// The transcript's hash, if we hold a cookie.
        transcript: Option<[u8; 32]>,
        /// The acceptor put us in its waiting line: the latest `WAIT` not
        /// yet taken by the driver ([`take_wait`](Initiator::take_wait)).
        wait: Option<Wait>,
    },
    /// The acceptor refused the channel after presenting itself as `site`.
    Refused {
        /// Who the acceptor is.
        site: SiteId,
    },
    /// The handshake finished (successfully or not).
    Done,
}

/// A successful open, from the initiator's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The acceptor's presentation.
    pub present: Present,
    /// Settled buffer size.
    pub buffer_size: u32,
    /// Largest message the peer accepts.
    pub peer_max_message: u64,
    /// Last message number the peer received from us: resume after it.
    pub peer_last_received: u64,
    /// This channel's generation.
    pub generation: u64,
    /// The acceptor has no session state for us (never worked with us, or
    /// forgot us): see [`NegotiateAns::Accept`]'s `fresh`.
    pub peer_fresh: bool,
    /// The secret this handshake agreed, if the answer said so (`rekey`):
    /// the pair's from now on (see [`continuity`](super::continuity)).
    pub pair_secret: Option<PairSecret>,
    /// The session both sides number in from now on (see [`SessionTag`]):
    /// ours, unless the answer is fresh.
    pub session: SessionTag,
    /// The version and capabilities the channel uses (see
    /// [`crate::wire::version`]).
    pub agreed: Agreed,
}

impl Initiator {
    /// The site the acceptor presented itself as, once PRESENT was accepted
    /// (still known after the acceptor refuses the channel: a refusal from a
    /// site already known under another name tells the driver who it is).
    pub fn presented(&self) -> Option<SiteId> {
        match self {
            Self::ExpectAnswer { present, .. } => Some(present.site),
            Self::Refused { site } => Some(*site),
            _ => None,
        }
    }

    /// The acceptor's latest `WAIT` (it put this connection in its waiting
    /// line, docs/protocol.md §4.12), once: the driver tells its ComObject
    /// (which then waits with a give-up deadline instead of the handshake
    /// timeout) and keeps reading for the answer. `None` when no new
    /// `WAIT` arrived since the last call.
    pub fn take_wait(&mut self) -> Option<Wait> {
        match self {
            Self::ExpectAnswer { wait, .. } => wait.take(),
            _ => None,
        }
    }

    /// Starts an open as initiator. `nonce` must be drawn at random for
    /// this handshake.
    pub fn new(
        local: LocalInfo,
        expected: Option<SiteId>,
        last_received: u64,
        last_generation: u64,
        nonce: Nonce,
    ) -> Self {
        Self::ExpectPresent {
            local,
            expected,
            last_received,
            last_generation,
            attempt: Attempt::UNKNOWN,
            nonce,
            secret: None,
            session: 0,
            keys: Keyring::default(),
            certificate: PeerCertificate::NotRequired,
        }
    }

    /// This node speaks TLS: PRESENT must name the site the
    /// acceptor's certificate names ([`certified`](Self::certified)), or
    /// the open fails with [`OpenError::NotCertified`]. Has no effect once
    /// PRESENT was handled.
    pub fn require_certificate(mut self) -> Self {
        if let Self::ExpectPresent { certificate, .. } = &mut self {
            *certificate = PeerCertificate::Required;
        }
        self
    }

    /// The site the acceptor's verified TLS certificate names: the driver
    /// calls it once the TLS handshake finished, before it feeds PRESENT.
    pub fn certified(&mut self, site: SiteId) {
        if let Self::ExpectPresent { certificate, .. } = self {
            certificate.certify(site);
        }
    }

    /// The cookies this node holds (see [`cookie`]): NEGOTIATE proves the
    /// primary, and the answer must prove it back, or the open fails with
    /// [`OpenError::AuthenticationFailed`]. None (the default) is the open
    /// level. Has no effect once PRESENT was handled.
    pub fn with_keys(mut self, k: Keyring) -> Self {
        if let Self::ExpectPresent { keys, .. } = &mut self {
            *keys = k;
        }
        self
    }

    /// The secret of our session with the site (from the ComObject's
    /// [`OpenRequest`](crate::connection::com_object::OpenRequest)): NEGOTIATE proves it. Without
    /// one the acceptor treats the claim as a new session. Has no effect
    /// once PRESENT was handled.
    pub fn with_secret(mut self, s: Option<PairSecret>) -> Self {
        if let Self::ExpectPresent { secret, .. } = &mut self {
            *secret = s;
        }
        self
    }

    /// Our session tag with the site (from the ComObject's
    /// [`OpenRequest`](crate::connection::com_object::OpenRequest); 0, the pair's first numbering,
    /// by default): NEGOTIATE carries it, and an answer that goes on with
    /// the session must name the same. Has no effect once PRESENT was
    /// handled.
    pub fn with_session(mut self, tag: SessionTag) -> Self {
        if let Self::ExpectPresent { session, .. } = &mut self {
            *session = tag;
        }
        self
    }

    /// Names this open attempt in NEGOTIATE. A driver that may open a
    /// channel to the same site more than once should number its attempts:
    /// the acceptor then recognises a channel left behind by an abandoned
    /// attempt (see [`Attempt`]). Has no effect once PRESENT was handled.
    pub fn with_attempt(mut self, a: Attempt) -> Self {
        if let Self::ExpectPresent { attempt, .. } = &mut self {
            *attempt = a;
        }
        self
    }

    /// Feeds received bytes. Returns `Ok(Some(opened))` when the channel is
    /// working, `Ok(None)` while more bytes are needed. NEGOTIATE is written to
    /// `output` when PRESENT arrives.
    pub fn handle_input(
        &mut self,
        input: &mut ByteBuffer,
        output: &mut ByteBuffer,
    ) -> Result<Option<Opened>, OpenError> {
        loop {
            match std::mem::replace(self, Self::Done) {
                Self::ExpectPresent {
                    local,
                    expected,
                    last_received,
                    last_generation,
                    attempt,
                    nonce,
                    secret,
                    session,
                    keys,
                    certificate,
                } => {
                    let Some((h, payload)) = read_frame(input, MAX_HANDSHAKE_PAYLOAD)
                        .map_err(|e| first_frame_error(e, &local.speaks))?
                    else {
                        *self = Self::ExpectPresent {
                            local,
                            expected,
                            last_received,
                            last_generation,
                            attempt,
                            nonce,
                            secret,
                            session,
                            keys,
                            certificate,
                        };
                        return Ok(None);
                    };
                    if h.kind != FrameKind::Present {
                        return Err(ProtocolError::Unexpected {
                            kind: h.kind,
                            state: "expecting PRESENT",
                        }
                        .into());
                    }
                    let present: Present = decode("PRESENT", &payload)?;
                    // The highest version both speak, the capabilities both
                    // have; none in common is a permanent failure (and
                    // nothing is sent: the acceptor allocated nothing).
                    let agreed = local.speaks.agree(&Speaks {
                        versions: present.versions,
                        caps: present.caps,
                    })?;
                    if present.site == local.site {
                        return Err(OpenError::SelfConnection(present.site));
                    }
                    certificate.check(present.site)?;
                    if let Some(e) = expected {
                        if e != present.site {
                            return Err(OpenError::WrongIdentity {
                                expected: e,
                                got: present.site,
                            });
                        }
                    }
                    let hs = HandshakeNonces {
                        acceptor: present.site,
                        acceptor_nonce: present.nonce,
                        initiator: local.site,
                        initiator_nonce: nonce,
                    };
                    let mut proposed = Negotiate {
                        version: agreed.version,
                        caps: agreed.caps,
                        site: local.site,
                        listen: local.listen,
                        buffer_size: local.buffer_size,
                        max_message: local.max_message,
                        last_received,
                        last_generation,
                        attempt,
                        nonce,
                        proof: secret.map(|s| hs.proof(&s)),
                        cookie: None,
                        session,
                    };
                    // The initiator proves first, over everything said so far.
                    let transcript = (!keys.is_open())
                        .then(|| cookie::Transcript::new(&payload).with_negotiate(&proposed));
                    if let Some(t) = &transcript {
                        proposed.cookie = cookie::initiator_proof(&keys, t);
                    }
                    if !write_control(output, FrameKind::Negotiate, &proposed) {
                        return Err(OpenError::LocalConfig(
                            "NEGOTIATE does not fit the handshake payload limit or the output \
                             ring; check LocalInfo::validate"
                                .into(),
                        ));
                    }
                    *self = Self::ExpectAnswer {
                        present,
                        proposed,
                        keys,
                        transcript,
                        wait: None,
                    };
                }
                Self::ExpectAnswer {
                    present,
                    proposed,
                    keys,
                    transcript,
                    wait,
                } => {
                    let Some((h, payload)) =
                        read_frame(input, MAX_HANDSHAKE_PAYLOAD).map_err(OpenError::from_frame)?
                    else {
                        *self = Self::ExpectAnswer {
                            present,
                            proposed,
                            keys,
                            transcript,
                            wait,
                        };
                        return Ok(None);
                    };
                    if h.kind == FrameKind::Wait {
                        // In the acceptor's line: only if both
                        // sides agreed to the line; the answer still comes.
                        let wait = Some(read_wait(&proposed, &payload)?);
                        *self = Self::ExpectAnswer {
                            present,
                            proposed,
                            keys,
                            transcript,
                            wait,
                        };
                        continue;
                    }
                    if h.kind != FrameKind::NegotiateAns {
                        return Err(ProtocolError::Unexpected {
                            kind: h.kind,
                            state: "expecting NEGOTIATE_ANS",
                        }
                        .into());
                    }
                    return match decode::<NegotiateAns>("NEGOTIATE_ANS", &payload)? {
                        NegotiateAns::Refuse(RefuseReason::Unauthenticated) => {
                            Err(OpenError::AuthenticationFailed(AuthFailure::Refused))
                        }
                        NegotiateAns::Refuse(r) => {
                            *self = Self::Refused { site: present.site };
                            Err(OpenError::Refused(r))
                        }
                        NegotiateAns::Accept {
                            buffer_size,
                            max_message,
                            last_received,
                            generation,
                            fresh,
                            rekey,
                            cookie,
                            session,
                        } => {
                            // The acceptor proves the cookie we proved, over
                            // the same transcript (open: none either way).
                            match &transcript {
                                Some(t) => cookie::check_acceptor(&keys, t, cookie.as_ref()),
                                None if cookie.is_some() => Err(AuthFailure::NotHeld),
                                None => Ok(()),
                            }
                            .map_err(OpenError::AuthenticationFailed)?;
                            // A fresh acceptor has received nothing.
                            if fresh && last_received != 0 {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: format!(
                                        "fresh acceptor claims to have received {last_received}"
                                    ),
                                }
                                .into());
                            }
                            // An acceptor that goes on with our session
                            // numbers in it: a tag of its own would mean the
                            // two sides number differently.
                            if !fresh && session != proposed.session {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: format!(
                                        "resumes session {session:#x}, ours is {:#x}",
                                        proposed.session
                                    ),
                                }
                                .into());
                            }
                            // "the acceptor may lower it, never raise it"
                            if buffer_size > proposed.buffer_size || buffer_size < MIN_BUFFER {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: format!(
                                        "buffer size {buffer_size} outside {MIN_BUFFER}..={}",
                                        proposed.buffer_size
                                    ),
                                }
                                .into());
                            }
                            // A claim without proof agrees a new secret.
                            if !rekey && proposed.proof.is_none() {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: "accepted without a proof of continuity, and no \
                                             secret agreed"
                                        .into(),
                                }
                                .into());
                            }
                            // An honest acceptor answers max(its last, ours) + 1
                            // when it resumes our session (after ours), its own
                            // count + 1 when it starts one; never beyond
                            // MAX_GENERATION.
                            let lowest = if fresh {
                                1
                            } else {
                                proposed.last_generation.saturating_add(1)
                            };
                            if generation < lowest || generation > MAX_GENERATION {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: format!(
                                        "generation {generation} not in {lowest}..={MAX_GENERATION}"
                                    ),
                                }
                                .into());
                            }
                            let pair_secret = rekey.then(|| {
                                HandshakeNonces {
                                    acceptor: present.site,
                                    acceptor_nonce: present.nonce,
                                    initiator: proposed.site,
                                    initiator_nonce: proposed.nonce,
                                }
                                .pair_secret()
                            });
                            Ok(Some(Opened {
                                present,
                                buffer_size,
                                peer_max_message: max_message,
                                peer_last_received: last_received,
                                generation,
                                peer_fresh: fresh,
                                pair_secret,
                                session,
                                agreed: Agreed {
                                    version: proposed.version,
                                    caps: proposed.caps,
                                },
                            }))
                        }
                    };
                }
                Self::Done => return Ok(None),
                refused @ Self::Refused { .. } => {
                    *self = refused;
                    return Ok(None);
                }
            }
        }
    }
}

/// A `WAIT` frame's payload, checked: the line must have been agreed in
/// NEGOTIATE, and a place in line counts from 1.
fn read_wait(proposed: &Negotiate, payload: &[u8]) -> Result<Wait, OpenError> {
    if !proposed.caps.contains(Capabilities::LINE) {
        return Err(ProtocolError::Unexpected {
            kind: FrameKind::Wait,
            state: "WAIT: the waiting line was not agreed on this channel",
        }
        .into());
    }
    let w: Wait = decode("WAIT", payload)?;
    if w.position == 0 {
        return Err(ProtocolError::Malformed {
            what: "WAIT",
            reason: "position 0 (a place in line counts from 1)".into(),
        }
        .into());
    }
    Ok(w)
}

impl OpenError {
    fn from_frame(e: FrameError) -> Self {
        Self::Protocol(e.into())
    }
}
