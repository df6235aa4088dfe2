//! The open protocol's wire messages: PRESENT, NEGOTIATE and its attempt,
//! NEGOTIATE_ANS (encoded with rmp-serde; docs/protocol.md §4).

use serde::{Deserialize, Serialize};

use super::continuity::{Nonce, Proof};
use crate::base::site::SiteId;
pub use crate::connection::refusal::RefuseReason;
use crate::wire::version::{Capabilities, VersionRange};

/// The acceptor's presentation.
///
/// Handshake messages are encoded with named fields (version 7): a later
/// version may add fields, marked `#[serde(default)]`, which this build
/// skips when it reads them and a later build defaults when it reads this
/// one's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Present {
    /// Protocol versions the acceptor speaks.
    pub versions: VersionRange,
    /// Capabilities the acceptor has.
    pub caps: Capabilities,
    /// The acceptor's site id (its incarnation).
    pub site: SiteId,
    /// Addresses the acceptor listens on.
    pub listen: Vec<String>,
    /// This handshake's nonce from the acceptor, drawn for it: the
    /// initiator's proof is bound to it (and a first handshake's secret
    /// derives from it; see [`continuity`](super::continuity)).
    #[serde(with = "super::continuity::bytes16")]
    pub nonce: Nonce,
}

/// The initiator's identity and proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Negotiate {
    /// The version the initiator chose: the highest both speak.
    pub version: u8,
    /// The capabilities the initiator chose: those both have. Both ends
    /// use exactly these on the channel.
    pub caps: Capabilities,
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
    /// [`crate::connection::link`]). Absent on the wire (an earlier build) it decodes as
    /// [`Attempt::UNKNOWN`], and only generations decide.
    #[serde(default)]
    pub attempt: Attempt,
    /// This handshake's nonce from the initiator (see
    /// [`continuity`](super::continuity)).
    #[serde(with = "super::continuity::bytes16")]
    pub nonce: Nonce,
    /// Proof that the initiator holds the secret of its session with the
    /// acceptor, bound to both nonces; `None` if it has no session (or
    /// forgot it). An acceptor that holds a confirmed secret for the site
    /// refuses a claim without a valid proof
    /// ([`RefuseReason::Unproven`]).
    #[serde(with = "super::continuity::bytes16::option")]
    pub proof: Option<Proof>,
    /// Proof that the initiator holds a cookie (see
    /// [`cookie`](super::cookie)); `None` at the open level. An acceptor
    /// holding a cookie refuses a NEGOTIATE without a valid one
    /// ([`RefuseReason::Unauthenticated`]) before it allocates anything.
    pub cookie: Option<CookieProof>,
    /// The initiator's session tag: which numbering of the pair it is in
    /// (see [`SessionTag`]). The acceptor compares it with its own: two
    /// sides with different tags may number differently, so a claim whose
    /// tag differs starts a new session.
    #[serde(default)]
    pub session: SessionTag,
}

/// Names one numbering of a site pair, the same on both sides (wire
/// version 6).
///
/// Both sides start in the pair's first numbering, tag 0. A handshake
/// after which either side numbers afresh (a fresh answer to a side that
/// remembers a session, or an acceptor that restarts its own numbering)
/// names the new numbering after itself
/// ([`HandshakeNonces::session_tag`](super::HandshakeNonces::session_tag)):
/// the acceptor takes it when it answers, the initiator when it reads the
/// answer. So two sides hold the same tag exactly when they number in the
/// same session — which a generation cannot tell: two channels accepted
/// crosswise can share one (the simulator's open finding, seed 503948).
pub type SessionTag = u64;

/// Names one open attempt: the opener (one per remote site an initiating
/// node contacts) and the attempt's number among that opener's attempts.
///
/// An opener runs one attempt at a time and numbers them upwards, so a
/// NEGOTIATE from attempt `n` tells the acceptor that attempts `< n` of the
/// same opener are over — even one whose NEGOTIATE the acceptor accepted
/// after the opener had already closed that channel. Without this, such a
/// stale NEGOTIATE looks live and the pair can lose a backoff round.
///
/// # Example
///
/// ```
/// use sitenet_protocols::Attempt;
///
/// let first = Attempt { opener: 3, seq: 1 };
/// let second = Attempt { opener: 3, seq: 2 };
/// assert!(second.supersedes(&first)); // opener 3 gave up on its first attempt
/// assert!(!first.supersedes(&second));
/// assert!(!Attempt { opener: 4, seq: 9 }.supersedes(&first)); // another opener
/// assert!(!Attempt::UNKNOWN.supersedes(&first)); // an older build says nothing
/// ```
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

/// The acceptor's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NegotiateAns {
    /// The channel is working with these parameters.
    Accept {
        /// Settled buffer size (≤ the proposal, ≥ [`MIN_BUFFER`](super::MIN_BUFFER)).
        buffer_size: u32,
        /// Largest message the acceptor accepts.
        max_message: u64,
        /// Last message number the acceptor received from the initiator.
        last_received: u64,
        /// Generation number of this channel.
        generation: u64,
        /// The acceptor has no session state for the initiator: it has
        /// never worked with it, it forgot it (it reclaimed the site's
        /// entry after the linger time), or the claim did not prove the
        /// session (then it is a new one, and the acceptor's numbering
        /// restarted). An initiator that remembers a session then starts
        /// its numbering afresh and hands back what was unacknowledged (see
        /// `Session::forget_peer`). The generation is then the
        /// acceptor's own count, whatever the claim said.
        #[serde(default)]
        fresh: bool,
        /// The NEGOTIATE did not prove the pair's secret and the acceptor
        /// accepts it all the same (it holds no confirmed secret): both
        /// sides keep the secret this handshake agrees from now on (see
        /// [`continuity`](super::continuity)).
        rekey: bool,
        /// The acceptor's proof of the cookie the initiator proved (see
        /// [`cookie`](super::cookie)); `None` at the open level.
        cookie: Option<CookieProof>,
        /// The numbering both sides are in from this answer on (see
        /// [`SessionTag`]): the NEGOTIATE's own unless the answer is
        /// `fresh` (an initiator checks it).
        #[serde(default)]
        session: SessionTag,
    },
    /// The channel is refused.
    Refuse(RefuseReason),
}

impl NegotiateAns {
    /// The answer with the acceptor's cookie proof (from
    /// [`Acceptor::answer_proof`](super::Acceptor::answer_proof)) put in,
    /// if it accepts; a refusal carries none.
    pub fn with_cookie(mut self, proof: Option<CookieProof>) -> Self {
        if let Self::Accept { cookie, .. } = &mut self {
            *cookie = proof;
        }
        self
    }
}

/// The acceptor's "wait, I will let you in" (the `WAIT` frame, kind 13;
/// the [`LINE`](crate::wire::version::Capabilities::LINE) capability): its
/// channel slots are all in use, and instead of closing the connection it
/// keeps it, parked on its handshake rings, in a bounded first-come line.
/// When the initiator's turn comes the acceptor answers the NEGOTIATE as
/// usual: the answer is the grant. Until then the initiator waits in
/// `WaitingForCallback` (not in backoff), at most until its own give-up
/// time or `hold_ms`, whichever is shorter, and then retries normally.
///
/// ```
/// use sitenet_protocols::connection::handshake::{encode_control, Wait};
///
/// let w = Wait { position: 3, hold_ms: 30_000 };
/// let bytes = encode_control(&w);
/// // A map of two named fields: "position" 3, "hold_ms" 30000.
/// assert_eq!(bytes[0], 0x82);
/// assert_eq!(rmp_serde::from_slice::<Wait>(&bytes).unwrap(), w);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// The initiator's place in the line when this was written (1: the
    /// next to be let in). Information only: the line moves as slots free
    /// and as others leave it.
    pub position: u32,
    /// How long the acceptor keeps the connection in its line at most
    /// (milliseconds); past it, the acceptor closes it and the initiator
    /// retries after its backoff.
    pub hold_ms: u32,
}

/// A proof on the wire: which cookie, and the HMAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CookieProof {
    /// The cookie's key id.
    pub key_id: u64,
    /// HMAC-SHA256 of the cookie over the role label, the key id and the
    /// transcript.
    #[serde(with = "super::continuity::bytes16")]
    pub mac: [u8; 32],
}
