//! What goes in and out of a [`ComObject`](super::ComObject): its actions,
//! the causes it is told about, and its counters.

use crate::base::coverage::Point;
use std::time::Duration;

pub use crate::connection::error::OpenFailure;
use crate::connection::error::{OpenError, ProtocolError, Refusal};
use crate::connection::handshake::{Attempt, NegotiateAns, PairSecret, RefuseReason};
use crate::connection::session::CloseReason;
use crate::wire::message::OutMessage;

/// Identifies one channel the ComObject worked with, so that the driver's
/// report about an old channel (an EOF still on its way after a
/// replacement) is recognised and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u64);

/// A site's fault state, as the user's monitors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FaultState {
    /// Reachable (or not yet tried).
    Ok,
    /// The channel was lost or cannot be opened; sitenet keeps retrying and
    /// nothing is lost.
    TempFailed,
    /// Gone for good (new incarnation, version mismatch, killed, gave up):
    /// unacknowledged messages were handed back.
    PermFailed,
}

/// Why a site failed permanently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SiteFailure {
    /// The open protocol said so (version mismatch, wrong identity).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Killed on purpose.
    #[error("killed by the local node")]
    Killed,
    /// The site said it shuts down for good (its node's graceful
    /// shutdown): it will not come back under this id.
    #[error("the site shut down")]
    ShutDown,
    /// Temporarily failed for longer than the give-up timeout.
    #[error("temporarily failed for longer than the give-up timeout ({0:?})")]
    GaveUp(Duration),
    /// The channel was lost and the site cannot be called back (it named
    /// no address this node can reach), and it did not come back within
    /// the unreachable give-up time (`ComConfig::unreachable_give_up`).
    #[error("lost, cannot be called back (no address to reach it at), and not back within {0:?}")]
    Unreachable(Duration),
    /// The site refused our channel as
    /// [`Closing`](crate::connection::refusal::RefuseReason::Closing): it
    /// declared this site permanently failed (and refuses it for as long as
    /// its node keeps that entry) or it shuts down. Either way it takes no
    /// channel from us, so what we hold for it is handed back rather than
    /// kept for calls it refuses.
    #[error("the site refuses every channel from this site ({0:?}): it gave this site up, or it shuts down")]
    Refused(crate::connection::refusal::RefuseReason),
    /// Named by a peer (a forwarded request's origin) and not reached at
    /// any address it was named at, each tried once
    /// ([`AddressBook::claimed_once`](crate::connection::address_book::AddressBook::claimed_once)):
    /// an unreachable or bogus origin costs one bounded attempt.
    #[error("named by a peer and not reached at any address it was named at (each tried once)")]
    NotReached,
}

/// Why a working channel ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Loss {
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(String),
    /// The peer closed its end.
    #[error("closed by the peer")]
    Eof,
    /// The peer broke the protocol (found by the session while reading).
    #[error("peer broke the protocol: {0}")]
    Protocol(ProtocolError),
    /// Nothing was heard for the silence timeout.
    #[error("nothing heard for the silence timeout")]
    Silent,
    /// The channel held more than its fair share of the reassembly budget
    /// while blocked for the reassembly idle time; it gives way so other
    /// peers progress (the peer resends its partial messages).
    #[error("gave way in a contention for the reassembly budget")]
    BudgetContention,
}

/// How the driver must end a channel (see [`Action::CloseChannel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelEnd {
    /// The close protocol finished: write what the session has left for the
    /// peer if the socket takes it now, then close.
    Orderly(CloseReason),
    /// The channel failed (EOF, i/o error, silence, protocol error): close.
    Lost,
    /// The peer opened a new channel that replaces this one: close.
    Replaced,
    /// The site failed permanently or the node shuts down: write what the
    /// session has left (a CLOSE_HARD, a final ack) if the socket takes it
    /// now, then close.
    Final,
}

/// What the ComObject asks its driver to do, in order (see
/// [`ComObject::poll_action`](super::ComObject::poll_action)).
#[derive(Debug)]
pub enum Action {
    /// The site needs a channel: ask the slot controller, and call
    /// [`slot_granted`](super::ComObject::slot_granted) when a slot is free.
    /// (Without a controller, grant it at once.)
    RequestSlot,
    /// The site no longer waits for the slot it asked for (a channel from
    /// the peer came first, or the site failed or shuts down): leave the
    /// slot controller's line. A grant that raced with this is given back.
    CancelSlot,
    /// Connect to the peer and run the initiator's open protocol with these
    /// values; report with `open_succeeded` or `open_failed`.
    Open(OpenRequest),
    /// Abandon the open attempt in progress (another channel won); no report
    /// is expected for it any more.
    AbandonOpen,
    /// Close channel `id` as `end` says.
    CloseChannel {
        /// The channel.
        id: ChannelId,
        /// How.
        end: ChannelEnd,
    },
    /// The site is up: a channel to it works, for the first time for
    /// this ComObject or the first time since a temporary failure (a
    /// channel closed while idle or preempted is no failure: the next one
    /// announces nothing). The driver tells whoever watches the node.
    Up,
    /// The site's fault state changed.
    Fault {
        /// The new state.
        state: FaultState,
        /// Why.
        reason: String,
    },
    /// A fault to put on record (a peer broke the protocol); the site's
    /// state is reported separately.
    ReportFault {
        /// What went wrong.
        reason: String,
    },
    /// A channel claiming this site was refused: its NEGOTIATE did not
    /// prove the pair's continuity ([`RefuseReason::Unproven`]). Put on
    /// record against the channel's peer; the site is not at fault and
    /// nothing of its session changed.
    ClaimRefused {
        /// Why.
        reason: String,
    },
    /// A message that can never be sent to this site, handed back to the
    /// user with the reason (for example larger than the peer's maximum,
    /// learned after it was queued). It was never sent.
    HandBack {
        /// Why.
        error: Refusal,
        /// The message.
        message: OutMessage,
    },
    /// Nothing ties the site to this node any more: no references, nothing
    /// queued or unacknowledged, no channel, for the linger time. The driver
    /// forgets it — removes its entry from the site table and stops —
    /// unless, checked atomically with the table, a reference or an accepted
    /// channel for it appeared meanwhile; then it carries on, and the
    /// machine asks again after another linger time. A peer that later
    /// contacts a forgotten site finds a fresh session (see
    /// `Session::forget_peer`).
    Reclaim,
    /// The site's id is proven: a channel to it works for the first time
    /// (our open found it at an address, or it opened one to us). If a
    /// peer's words made the entry, its claim ends here
    /// ([`Claims::release`](crate::node::claims::Claims::release)): it is an
    /// ordinary site now. Given once per ComObject.
    Proven,
    /// The site failed permanently. Nothing is silently dropped: `not_sent`
    /// were never completely sent (never delivered), `maybe_delivered` were
    /// sent and never acknowledged.
    Failed {
        /// Why.
        failure: SiteFailure,
        /// Never delivered: safe to send elsewhere.
        not_sent: Vec<OutMessage>,
        /// Sent, not acknowledged.
        maybe_delivered: Vec<OutMessage>,
    },
}

impl Action {
    /// The decision point this action is (what coverage counts).
    pub(super) fn point(&self) -> Point {
        match self {
            Action::RequestSlot => Point::ActRequestSlot,
            Action::CancelSlot => Point::ActCancelSlot,
            Action::Open(_) => Point::ActOpen,
            Action::AbandonOpen => Point::ActAbandonOpen,
            Action::CloseChannel { end, .. } => match end {
                ChannelEnd::Orderly(_) => Point::ActCloseOrderly,
                ChannelEnd::Lost => Point::ActCloseLost,
                ChannelEnd::Replaced => Point::ActCloseReplaced,
                ChannelEnd::Final => Point::ActCloseFinal,
            },
            Action::Up => Point::ActUp,
            Action::Fault { .. } => Point::ActFault,
            Action::ReportFault { .. } => Point::ActReportFault,
            Action::ClaimRefused { .. } => Point::ActClaimRefused,
            Action::HandBack { .. } => Point::ActHandBack,
            Action::Reclaim => Point::ActReclaim,
            Action::Proven => Point::ActProven,
            Action::Failed { .. } => Point::ActFailed,
        }
    }
}

/// What the initiator's handshake must propose (NEGOTIATE's variable part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// Where to connect: the best address not yet tried in this round
    /// (see [`AddressBook`](crate::connection::address_book::AddressBook)).
    pub address: String,
    /// Names this attempt (opener and sequence number).
    pub attempt: Attempt,
    /// The last message number received from the peer.
    pub last_received: u64,
    /// The generation of the last channel seen working with the peer.
    pub last_generation: u64,
    /// The secret of the session with the peer, if any: NEGOTIATE proves
    /// it (see [`continuity`](crate::connection::handshake::continuity)).
    pub secret: Option<PairSecret>,
    /// The numbering the session is in, sent in NEGOTIATE (see
    /// [`SessionTag`](crate::connection::handshake::SessionTag)).
    pub session: crate::connection::handshake::SessionTag,
}

/// The answer to a NEGOTIATE that reached this ComObject.
#[derive(Debug)]
pub enum AcceptOutcome {
    /// Refuse the channel with this answer (written to the channel, then it
    /// is closed).
    Refuse(RefuseReason),
    /// Work on it: write `answer`, then hand the channel to the driver as
    /// channel `id`.
    Accept {
        /// The channel's id.
        id: ChannelId,
        /// NEGOTIATE_ANS to write.
        answer: NegotiateAns,
    },
    /// The NEGOTIATE contradicts the session (it claims to have received
    /// messages never sent): close the channel without an answer and report
    /// the fault.
    Protocol(ProtocolError),
    /// This site failed for good (it left in order, was given up or
    /// killed), and the claimant's verified certificate names it: the site
    /// restarted (a node takes its id from its certificate, so a restart
    /// keeps the id). This machine's session is over and stays failed for
    /// whoever holds it; the driver retires the entry from the site table
    /// and routes the channel to a new entry for the site, whose machine
    /// then decides on it as on any first contact.
    Restarted,
}

/// Counters of one ComObject (monotonic; the driver reports differences).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComStats {
    /// Weak closes started (no references, idle for the linger time).
    pub weak_closes_started: u64,
    /// Weak closes the peer rejected.
    pub weak_closes_rejected: u64,
    /// Hard closes started (preemption, kill).
    pub hard_closes_started: u64,
    /// Channels ended by the close protocol.
    pub orderly_closes: u64,
    /// Channels closed because the peer broke the protocol (handshake
    /// included).
    pub protocol_errors: u64,
    /// Open attempts started.
    pub opens: u64,
    /// Failed open attempts followed at once by one at the site's next
    /// address (see [`AddressBook`](crate::connection::address_book::AddressBook)).
    pub fallbacks: u64,
    /// Transitions into the temporarily failed state.
    pub temp_failures: u64,
    /// Messages handed back as never sendable.
    pub handed_back: u64,
    /// Channels claiming this site refused for want of a proof of the
    /// pair's continuity.
    pub unproven_claims_refused: u64,
    /// Open attempts the peer told to wait in its line.
    pub line_waits: u64,
    /// Waits in the peer's line given up at the deadline.
    pub line_give_ups: u64,
}

/// The user-visible state of a ComObject, named after what it waits for
/// (the design's states, docs/architecture.md; see the module documentation for the diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComState {
    /// No channel and no need for one.
    Closed,
    /// Needs a channel; waits for a slot from the slot controller.
    WaitingForSlot,
    /// Our open protocol runs (connect, PRESENT, NEGOTIATE, answer).
    Opening,
    /// A channel works.
    Working,
    /// We sent CLOSE_WEAK and wait for the peer's answer.
    ClosingWeak,
    /// We sent CLOSE_HARD and wait for the peer's accept.
    ClosingHard,
    /// We granted the peer's close and wait for it to disconnect.
    WaitingForDisconnect,
    /// The peer closed hard (it is short of resources) and will call back;
    /// we wait for it before reconnecting ourselves. Also: our open attempt
    /// waits in the peer's line, and the peer lets it in when a slot frees
    /// — with a give-up deadline, after which we retry.
    WaitingForCallback,
    /// A channel was lost or an open failed; we wait for the backoff.
    Backoff,
    /// Failed permanently (or merged into another entry): does nothing more.
    Failed,
}
