//! The open protocol, per channel: PRESENT from the acceptor, NEGOTIATE from
//! the initiator, an answer (NEGOTIATE_ANS) from the acceptor.
//!
//! ```text
//!  initiator                                  acceptor (anonymous until step 2)
//!  ExpectPresent   <──────── PRESENT ───────  (sent on accept)
//!    check version, identity
//!  ExpectAnswer    ──────── NEGOTIATE ──────> ExpectNegotiate
//!                                               check version; the site's ComObject
//!                                               decides (see [`crate::link`])
//!  Done            <────── NEGOTIATE_ANS ───  Done (accept) / closed (refuse)
//! ```
//!
//! Both machines consume exactly their own frames from the input buffer; any
//! bytes after the last handshake frame belong to the session. Every wait is
//! bounded by the handshake timeout, which the driver enforces (the deadline
//! is given by [`HANDSHAKE_TIMEOUT`] unless configured).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::byte_buffer::ByteBuffer;
use crate::error::{FrameError, OpenError, ProtocolError};
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN, PROTOCOL_VERSION};
use crate::site::SiteId;

/// Default bound on the whole open protocol.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handshake payloads are small; a larger one is refused before allocating.
pub const MAX_HANDSHAKE_PAYLOAD: usize = 4000;

/// The smallest ByteBuffer a channel may negotiate.
pub const MIN_BUFFER: u32 = 4 * 1024;

/// Longest listen-address list carried (bounds the handshake size).
pub const MAX_LISTEN: usize = 16;

/// Highest channel generation (2^63 - 1). A site pair counts its channels
/// from 1; honest peers never come near this, so a NEGOTIATE claiming a last
/// generation at or beyond it is malformed, and an answer beyond it is
/// refused: no arithmetic on a peer's generation can overflow, and no peer
/// can push a pair to a generation that has no successor.
pub const MAX_GENERATION: u64 = u64::MAX / 2;

/// The acceptor's presentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Present {
    /// Protocol version spoken.
    pub version: u8,
    /// The acceptor's site id (its incarnation).
    pub site: SiteId,
    /// Addresses the acceptor listens on.
    pub listen: Vec<String>,
}

/// The initiator's identity and proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Negotiate {
    /// Protocol version spoken.
    pub version: u8,
    /// The initiator's site id.
    pub site: SiteId,
    /// Addresses the initiator listens on (empty for a client-only node).
    pub listen: Vec<String>,
    /// Proposed ByteBuffer size; the acceptor may lower it, never raise it.
    pub buffer_size: u32,
    /// Largest message the initiator accepts.
    pub max_message: u64,
    /// Last message number the initiator received from the acceptor.
    pub last_received: u64,
    /// Generation of the last channel the initiator saw working with the
    /// acceptor (0: never).
    pub last_generation: u64,
    /// Which open attempt this is. A newer attempt from the same opener
    /// proves that the opener abandoned every older one, so the acceptor can
    /// drop a channel it accepted from an older attempt (see
    /// [`crate::link`]). Absent on the wire (an earlier build) it decodes as
    /// [`Attempt::UNKNOWN`], and only generations decide.
    #[serde(default)]
    pub attempt: Attempt,
}

/// Names one open attempt: the opener (one per remote site an initiating
/// node contacts) and the attempt's number among that opener's attempts.
///
/// An opener runs one attempt at a time and numbers them upwards, so a
/// NEGOTIATE from attempt `n` tells the acceptor that attempts `< n` of the
/// same opener are over — even one whose NEGOTIATE the acceptor accepted
/// after the opener had already closed that channel. Without this, such a
/// stale NEGOTIATE looks live and the pair can lose a backoff round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attempt {
    /// The opener, unique within the initiating node's incarnation; 0 means
    /// unknown.
    pub opener: u64,
    /// The attempt's number, increasing with each attempt of the opener.
    pub seq: u64,
}

impl Attempt {
    /// No attempt information (a peer that does not send it).
    pub const UNKNOWN: Attempt = Attempt { opener: 0, seq: 0 };

    /// True if `self` is a later attempt of the same (known) opener as
    /// `older`: the opener has then given up on `older`.
    pub fn supersedes(&self, older: &Attempt) -> bool {
        self.opener != 0 && self.opener == older.opener && self.seq > older.seq
    }
}

/// Why an acceptor refused a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefuseReason {
    /// Simultaneous connect: the other channel (initiated by the smaller site
    /// id) is kept.
    LostTie,
    /// The acceptor has a working channel that the initiator has not seen lost.
    Stale,
    /// The acceptor's site has been declared permanently failed or is
    /// shutting down.
    Closing,
}

/// The acceptor's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NegotiateAns {
    /// The channel is working with these parameters.
    Accept {
        /// Settled buffer size (≤ the proposal, ≥ [`MIN_BUFFER`]).
        buffer_size: u32,
        /// Largest message the acceptor accepts.
        max_message: u64,
        /// Last message number the acceptor received from the initiator.
        last_received: u64,
        /// Generation number of this channel.
        generation: u64,
        /// The acceptor has no session state for the initiator: it has
        /// never worked with it, or it forgot it (it reclaimed the site's
        /// entry after the linger time). An initiator that remembers a
        /// session then starts its numbering afresh and hands back what was
        /// unacknowledged (see `Session::forget_peer`). Absent on the wire
        /// (an earlier build) it decodes as `false`.
        #[serde(default)]
        fresh: bool,
    },
    /// The channel is refused.
    Refuse(RefuseReason),
}

/// Encodes a control frame with an rmp-serde payload into `out`.
pub fn write_control<T: Serialize>(out: &mut ByteBuffer, kind: FrameKind, body: &T) -> bool {
    let payload = rmp_serde::to_vec(body).expect("handshake messages always serialise");
    // The peer refuses a larger handshake frame: never write one.
    if payload.len() > MAX_HANDSHAKE_PAYLOAD || out.free() < HEADER_LEN + payload.len() {
        return false;
    }
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(kind, payload.len() as u32, 0).encode(&mut hb);
    out.push(&hb);
    out.push(&payload);
    true
}

/// Reads one whole frame of at most `max_payload` bytes from `input`, if one
/// is there: `Ok(None)` means "need more bytes".
pub fn read_frame(
    input: &mut ByteBuffer,
    max_payload: usize,
) -> Result<Option<(FrameHeader, Vec<u8>)>, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    if !input.peek(0, &mut hb) {
        return Ok(None);
    }
    let h = FrameHeader::decode(&hb, max_payload)?;
    let mut payload = vec![0u8; h.payload_len as usize];
    if !input.peek(HEADER_LEN, &mut payload) {
        return Ok(None);
    }
    input.consume(HEADER_LEN + payload.len());
    Ok(Some((h, payload)))
}

fn decode<T: for<'de> Deserialize<'de>>(
    what: &'static str,
    payload: &[u8],
) -> Result<T, ProtocolError> {
    rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Malformed {
        what,
        reason: e.to_string(),
    })
}

/// Maps a header error in the first frame to a version mismatch if that is
/// what it is: a peer of another version fails the open protocol permanently.
fn first_frame_error(e: FrameError) -> OpenError {
    match e {
        FrameError::Version(v) => OpenError::VersionMismatch {
            local: PROTOCOL_VERSION,
            peer: v,
        },
        e => OpenError::Protocol(e.into()),
    }
}

/// What this side says about itself in a handshake.
#[derive(Debug, Clone)]
pub struct LocalInfo {
    /// This node's site id.
    pub site: SiteId,
    /// Addresses it listens on.
    pub listen: Vec<String>,
    /// Its ByteBuffer size (the proposal, or the acceptor's ceiling).
    pub buffer_size: u32,
    /// Largest message it accepts.
    pub max_message: u64,
}

impl LocalInfo {
    /// Checks that this node's own PRESENT and NEGOTIATE fit the handshake
    /// payload limit (at most [`MAX_LISTEN`] listen addresses, and short
    /// enough), with the largest numbers NEGOTIATE can carry. A node calls
    /// it when it starts: a list that does not fit would make every
    /// handshake fail.
    pub fn validate(&self) -> Result<(), OpenError> {
        if self.listen.len() > MAX_LISTEN {
            return Err(OpenError::LocalConfig(format!(
                "{} listen addresses, at most {MAX_LISTEN}; listen on fewer addresses",
                self.listen.len()
            )));
        }
        let worst = Negotiate {
            version: PROTOCOL_VERSION,
            site: self.site,
            listen: self.listen.clone(),
            buffer_size: u32::MAX,
            max_message: u64::MAX,
            last_received: u64::MAX,
            last_generation: u64::MAX,
            attempt: Attempt {
                opener: u64::MAX,
                seq: u64::MAX,
            },
        };
        let len = rmp_serde::to_vec(&worst)
            .expect("handshake messages always serialise")
            .len();
        if len > MAX_HANDSHAKE_PAYLOAD {
            return Err(OpenError::LocalConfig(format!(
                "the listen addresses take {len} bytes of NEGOTIATE, more than the \
                 {MAX_HANDSHAKE_PAYLOAD}-byte handshake limit; listen on fewer or shorter addresses"
            )));
        }
        Ok(())
    }
}

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
    },
    /// NEGOTIATE sent; waiting for the answer.
    ExpectAnswer {
        /// The acceptor's presentation.
        present: Present,
        /// What we proposed.
        proposed: Negotiate,
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

    /// Starts an open as initiator.
    pub fn new(
        local: LocalInfo,
        expected: Option<SiteId>,
        last_received: u64,
        last_generation: u64,
    ) -> Self {
        Self::ExpectPresent {
            local,
            expected,
            last_received,
            last_generation,
            attempt: Attempt::UNKNOWN,
        }
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
                } => {
                    let Some((h, payload)) =
                        read_frame(input, MAX_HANDSHAKE_PAYLOAD).map_err(first_frame_error)?
                    else {
                        *self = Self::ExpectPresent {
                            local,
                            expected,
                            last_received,
                            last_generation,
                            attempt,
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
                    if present.version != PROTOCOL_VERSION {
                        return Err(OpenError::VersionMismatch {
                            local: PROTOCOL_VERSION,
                            peer: present.version,
                        });
                    }
                    if present.site == local.site {
                        return Err(OpenError::SelfConnection(present.site));
                    }
                    if let Some(e) = expected {
                        if e != present.site {
                            return Err(OpenError::WrongIdentity {
                                expected: e,
                                got: present.site,
                            });
                        }
                    }
                    let proposed = Negotiate {
                        version: PROTOCOL_VERSION,
                        site: local.site,
                        listen: local.listen,
                        buffer_size: local.buffer_size,
                        max_message: local.max_message,
                        last_received,
                        last_generation,
                        attempt,
                    };
                    if !write_control(output, FrameKind::Negotiate, &proposed) {
                        return Err(OpenError::LocalConfig(
                            "NEGOTIATE does not fit the handshake payload limit or the output \
                             ring; check LocalInfo::validate"
                                .into(),
                        ));
                    }
                    *self = Self::ExpectAnswer { present, proposed };
                }
                Self::ExpectAnswer { present, proposed } => {
                    let Some((h, payload)) =
                        read_frame(input, MAX_HANDSHAKE_PAYLOAD).map_err(OpenError::from_frame)?
                    else {
                        *self = Self::ExpectAnswer { present, proposed };
                        return Ok(None);
                    };
                    if h.kind != FrameKind::NegotiateAns {
                        return Err(ProtocolError::Unexpected {
                            kind: h.kind,
                            state: "expecting NEGOTIATE_ANS",
                        }
                        .into());
                    }
                    return match decode::<NegotiateAns>("NEGOTIATE_ANS", &payload)? {
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
                        } => {
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
                            // An honest acceptor answers max(its last, ours) + 1:
                            // after ours, and never beyond MAX_GENERATION.
                            if generation <= proposed.last_generation || generation > MAX_GENERATION
                            {
                                return Err(ProtocolError::Malformed {
                                    what: "NEGOTIATE_ANS",
                                    reason: format!(
                                        "generation {generation} not in {}..={MAX_GENERATION}",
                                        proposed.last_generation.saturating_add(1)
                                    ),
                                }
                                .into());
                            }
                            Ok(Some(Opened {
                                present,
                                buffer_size,
                                peer_max_message: max_message,
                                peer_last_received: last_received,
                                generation,
                                peer_fresh: fresh,
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

impl OpenError {
    fn from_frame(e: FrameError) -> Self {
        Self::Protocol(e.into())
    }
}

/// The acceptor's side of the open protocol, up to NEGOTIATE. The decision
/// and the answer belong to the site's ComObject ([`crate::link`]).
#[derive(Debug)]
pub struct Acceptor {
    local_site: SiteId,
    done: bool,
    /// PRESENT could not be written (this node's listen list does not fit).
    unwritable: bool,
}

impl Acceptor {
    /// Starts an accepted channel: writes PRESENT to `output`.
    pub fn new(local: &LocalInfo, output: &mut ByteBuffer) -> Self {
        let present = Present {
            version: PROTOCOL_VERSION,
            site: local.site,
            listen: local.listen.clone(),
        };
        // If PRESENT cannot be written, the first call to `handle_input`
        // says so (`LocalInfo::validate` catches it when the node starts).
        let unwritable = !write_control(output, FrameKind::Present, &present);
        Self {
            local_site: local.site,
            done: false,
            unwritable,
        }
    }

    /// Feeds received bytes; `Ok(Some(negotiate))` once NEGOTIATE arrived and
    /// is valid.
    pub fn handle_input(&mut self, input: &mut ByteBuffer) -> Result<Option<Negotiate>, OpenError> {
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
        let Some((h, payload)) =
            read_frame(input, MAX_HANDSHAKE_PAYLOAD).map_err(first_frame_error)?
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
        if n.version != PROTOCOL_VERSION {
            return Err(OpenError::VersionMismatch {
                local: PROTOCOL_VERSION,
                peer: n.version,
            });
        }
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
        Ok(Some(n))
    }
}

/// Writes the acceptor's answer.
pub fn write_answer(output: &mut ByteBuffer, ans: &NegotiateAns) -> bool {
    write_control(output, FrameKind::NegotiateAns, ans)
}
