//! Errors of the protocol core, grouped by who caused them (as h2 does).
//!
//! * [`FrameError`] (a header that cannot be valid, decided by the wire layer
//!   and re-exported here) and [`ProtocolError`]: the **peer** broke the protocol. The
//!   channel is closed with a logged reason and a fault report; the node and
//!   every other site keep working.
//! * [`OpenError`]: the open protocol ended without a channel — some outcomes
//!   (version mismatch, unexpected identity) are permanent failures of the site.
//! * [`Refusal`]: the **local user** asked for something impossible; nothing
//!   is sent on the wire.

use thiserror::Error;

use crate::base::site::SiteId;
pub use crate::wire::frame::FrameError;

/// The peer violated the protocol on a working or opening channel. Each of
/// these closes that channel (never the process).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The frame header was invalid.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// A frame kind that is not allowed in the channel's current state.
    #[error("unexpected {kind:?} frame while {state}")]
    Unexpected {
        /// What arrived.
        kind: crate::wire::frame::FrameKind,
        /// What the channel was waiting for.
        state: &'static str,
    },
    /// A handshake payload that does not decode.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// Decoder's explanation.
        reason: String,
    },
    /// A continuation fragment with no message started on its lane, or a new
    /// message while one is still incomplete on that lane.
    #[error("fragment out of sequence on lane {lane}: {reason}")]
    FragmentSequence {
        /// Lane of the offending frame.
        lane: u8,
        /// What was wrong.
        reason: &'static str,
    },
    /// The announced message size exceeds the local maximum.
    #[error("incoming message of {size} bytes exceeds the maximum message size {max}")]
    MessageTooLarge {
        /// Announced size.
        size: u64,
        /// Local maximum.
        max: u64,
    },
    /// Accepting the message would exceed the node's reassembly budget.
    #[error("reassembly budget exhausted: {needed} bytes needed, {available} available")]
    ReassemblyBudget {
        /// Bytes the message needs.
        needed: u64,
        /// Bytes left in the budget.
        available: u64,
    },
    /// A message's bytes disagree with its announced size.
    #[error("message on lane {lane} has {got} bytes but announced {announced}")]
    MessageLength {
        /// Lane.
        lane: u8,
        /// Bytes received.
        got: u64,
        /// Bytes announced in its prelude.
        announced: u64,
    },
    /// Message numbers must increase by exactly one; a gap means lost data.
    #[error("message number {got} after {last}: gap in the sequence")]
    NumberGap {
        /// Last number received.
        last: u64,
        /// Number that arrived.
        got: u64,
    },
    /// The peer acknowledged a message that was never sent.
    #[error("peer acknowledged message {ack}, but only {sent} were sent")]
    AckBeyondSent {
        /// Acknowledged number.
        ack: u64,
        /// Highest number sent.
        sent: u64,
    },
    /// A partly received message got no fragment for the reassembly idle
    /// time: the peer holds reassembly budget without using it.
    #[error("a partly received message made no progress for {idle:?}")]
    ReassemblyStalled {
        /// The reassembly idle time.
        idle: std::time::Duration,
    },
    /// A fragment offset that does not match the bytes received so far.
    #[error("fragment offset {got} on lane {lane}, expected {expected}")]
    FragmentOffset {
        /// Lane.
        lane: u8,
        /// Offset carried.
        got: u64,
        /// Offset expected.
        expected: u64,
    },
}

/// Why an open protocol (handshake) did not produce a working channel.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The two nodes share no protocol version: a permanent failure. Upgrade
    /// the older node (a node speaks a range of versions, so nodes one
    /// version apart still agree).
    #[error(
        "peer speaks protocol version {peer}, this node speaks {local}: no version in common; \
         upgrade the older node"
    )]
    VersionMismatch {
        /// The versions this node speaks.
        local: crate::wire::version::VersionRange,
        /// The versions the peer speaks (or the one it chose, or the format
        /// byte of its first frame).
        peer: crate::wire::version::VersionRange,
    },
    /// The peer presented an identity other than the expected one: a permanent
    /// failure of the expected site (a restarted process is a new site).
    #[error("expected site {expected}, the peer presented itself as {got}")]
    WrongIdentity {
        /// The id the `SiteRef` held.
        expected: SiteId,
        /// The id the peer presented.
        got: SiteId,
    },
    /// The peer presented this node's own id.
    #[error("the peer presented this node's own site id {0}: a connection to self")]
    SelfConnection(SiteId),
    /// The acceptor refused the channel (the reason says why). Not a
    /// permanent error of the handshake: after a lost tie or a stale
    /// channel another channel wins, and an unproven claim is retried; the
    /// ComObject fails the site on a refusal as
    /// [`Closing`](crate::connection::refusal::RefuseReason::Closing) only
    /// (the peer gave this site up, or it shuts down).
    #[error("the acceptor refused the channel: {0:?}")]
    Refused(crate::connection::refusal::RefuseReason),
    /// The peer broke the protocol during the handshake.
    #[error("protocol violation during the handshake: {0}")]
    Protocol(#[from] ProtocolError),
    /// The handshake did not finish in time.
    #[error("the handshake did not finish within the handshake timeout")]
    Timeout,
    /// This node's own handshake frame cannot be written: its listen list
    /// does not fit the handshake payload limit. A configuration error
    /// (`LocalInfo::validate` reports it when the node starts).
    #[error("this node's handshake does not fit: {0}")]
    LocalConfig(String),
    /// The peer is not a member: it proved no cookie, a wrong
    /// one, or refused this node's. A permanent failure.
    #[error("authentication failed: {0}")]
    AuthenticationFailed(crate::connection::refusal::AuthFailure),
    /// TLS: the peer claimed a site its certificate does not
    /// name, or proved no certificate to a node that requires one. A
    /// permanent failure.
    #[error(
        "the peer claimed site {claimed}, but {}",
        match certified {
            Some(c) => format!("its certificate names site {c}"),
            None => "it proved no certificate (this node speaks only TLS: use tls: addresses)".into(),
        }
    )]
    NotCertified {
        /// The site the peer claimed.
        claimed: SiteId,
        /// The site its verified certificate names, if any.
        certified: Option<SiteId>,
    },
    /// TLS refused the peer or its records (a certificate from another CA,
    /// an expired one, one that names no site; or not TLS at all). A
    /// permanent failure: check the certificates and the address.
    #[error("TLS refused the channel: {0}")]
    Tls(String),
}

impl OpenError {
    /// True if this outcome means the site is gone for good (the user is told,
    /// and queued messages are handed back), not just that this attempt failed.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::VersionMismatch { .. }
                | Self::WrongIdentity { .. }
                | Self::SelfConnection(_)
                | Self::AuthenticationFailed(_)
                | Self::NotCertified { .. }
                | Self::Tls(_)
        )
    }
}

/// Why the protocol core refused a message the local user asked to send,
/// or handed one back: too large for the peer, the site failed, the peer
/// forgot the session. Named apart from the runtime's
/// [`SendError`](../../sitenet_runtime/enum.SendError.html) (what a
/// caller of `send` is told) so that a program using both crates has one
/// `SendError` (it was also called `SendError` up to wire version 6).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// The message is larger than the peer (or this node) accepts; sending it
    /// would fail for ever, so it is refused up front.
    #[error("message of {size} bytes exceeds the maximum message size {max}; split it or raise max_message_size on both nodes")]
    TooLarge {
        /// Encoded size.
        size: u64,
        /// Maximum.
        max: u64,
    },
    /// Lane out of range.
    #[error("priority {0} is not an application priority (1 to 4)")]
    BadPriority(u8),
    /// The site failed permanently before the message could be queued; it
    /// is handed back with the messages the failure returned (`not_sent`).
    #[error("the site failed permanently; the message was never sent")]
    SiteFailed,
    /// The peer forgot this node's session (it reclaimed the site's entry
    /// after the linger time, having nothing of its own pending) before
    /// acknowledging message `number`. The message may or may not have been
    /// delivered; it is not resent, because the peer can no longer tell a
    /// resend from a new message — exactly once is never traded for
    /// at-least-once.
    #[error("the peer forgot the session before acknowledging message {number}; it may or may not have been delivered")]
    PeerForgot {
        /// The message's number in the forgotten session.
        number: u64,
    },
}

/// What a message handed back to its sender may have come to: the two
/// lists a permanent failure returns (`not_sent`, `maybe_delivered`), and
/// the two errors a tracked send fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandedBack {
    /// It never left: sending it again cannot deliver it twice.
    NotSent,
    /// It may have been delivered: sending it again could deliver it twice.
    MaybeDelivered,
}

impl Refusal {
    /// What the message it hands back may have come to: only a message the
    /// peer forgot before acknowledging it may have been delivered; every
    /// other refusal comes before the message was sent.
    ///
    /// ```
    /// use sitenet_protocols::connection::error::HandedBack;
    /// use sitenet_protocols::Refusal;
    ///
    /// assert_eq!(Refusal::SiteFailed.handed_back(), HandedBack::NotSent);
    /// assert_eq!(Refusal::PeerForgot { number: 3 }.handed_back(), HandedBack::MaybeDelivered);
    /// ```
    pub fn handed_back(&self) -> HandedBack {
        match self {
            Self::PeerForgot { .. } => HandedBack::MaybeDelivered,
            Self::TooLarge { .. } | Self::BadPriority(_) | Self::SiteFailed => HandedBack::NotSent,
        }
    }
}

/// Why an open attempt failed, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenFailure {
    /// The transport could not connect, or failed during the handshake (the
    /// message says which). Retried after the backoff.
    #[error("{0}")]
    Transport(String),
    /// The open protocol failed: refused (not a fault), a protocol error, a
    /// timeout, or a permanent failure (version, identity).
    #[error(transparent)]
    Open(#[from] OpenError),
}
