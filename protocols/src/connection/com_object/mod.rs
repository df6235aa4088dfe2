//! [`ComObject`]: the connection logic of one remote site as a sans-IO state
//! machine — when to open a channel and how long to back off, which channel
//! to keep, when to close weakly, when to give up, how a channel's end maps
//! to a close reason, and what is handed back to the user. It owns the
//! site's [`Session`] (queues, numbering, acknowledgements, the close
//! protocol), which survives channels.
//!
//! The runtime's actor only drives it; nothing here reads a clock or a
//! random source: time is an argument and the backoff jitter comes from a
//! seeded RNG, so every decision is testable deterministically.
//!
//! # States
//!
//! Named after what each waits for ([`ComState`]); the close phases are the
//! session's ([`ClosePhase`](crate::connection::session::ClosePhase)):
//!
//! ```text
//!                 need                 slot_granted            open_succeeded
//!   Closed ───────────────> WaitingForSlot ────────> Opening ───────────────> Working
//!     ^  ^                                              │ open_failed            │ │ │
//!     │  │ backoff timer                                v                        │ │ │
//!     │  └──────────────────────────────────────────  Backoff <── channel_lost ──┘ │ │
//!     │                                                 ^                          │ │
//!     │     CLOSE_WEAK/HARD done, peer's weak close     │ close timeout            │ │
//!     ├─────────────────────────────────────────────────┼──────────────────────────┘ │
//!     │                  reopen timer                   │         peer's CLOSE_HARD   │
//!     └──────────────── WaitingForCallback <────────────┴─────────────────────────────┘
//!
//!   accepted (NEGOTIATE from the peer, link::decide says accept): any state but Failed → Working
//!   kill, give-up timer, permanent open failure: any state → Failed
//! ```
//!
//! The anonymous phase of an accepted channel (before its NEGOTIATE names
//! the site) is the [`Acceptor`](crate::connection::handshake::Acceptor) handshake machine: a
//! channel reaches a ComObject only once the site is known.
//!
//! # Call-order contract
//!
//! The driver owns the channel (the TransObject: socket and two
//! ByteBuffers) and an open attempt in progress. Whenever anything happens
//! it calls the matching input method (`queue`, `handle_input`,
//! `slot_granted`, `open_succeeded`, `open_failed`, `accepted`,
//! `channel_lost`, `handle_timeout`, …), then, in this order:
//!
//! 1. acts on every [`poll_action`](ComObject::poll_action) (open, close a
//!    channel, report faults, hand messages back); for an orderly or final
//!    end of a channel it first writes what
//!    [`poll_transmit`](ComObject::poll_transmit) still has for it (answers,
//!    a CLOSE_HARD, a final ack), closes it, and then calls
//!    [`channel_closed`](ComObject::channel_closed);
//! 2. flushes [`poll_transmit`](ComObject::poll_transmit) into the output
//!    ring and the ring into the socket;
//! 3. re-arms its one timer to [`poll_timeout`](ComObject::poll_timeout).
//!
//! [`turn`] writes that order down once, with the steps around it (the
//! outbox taken in, acknowledgements accounted for, parking); both the
//! runtime's actor and the simulator drive their machines through it.
//!
//! A deadline returned by `poll_timeout` is consumed when it fires:
//! `handle_timeout` never leaves the same past deadline behind.

mod close;
mod config;
mod data;
mod faults;
mod inputs;
mod open;
mod park;
mod queries;
pub mod turn;
mod types;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::coverage;
use crate::base::site::SiteId;
use crate::base::timer::{ComTimers, Timer};
use crate::connection::address_book::AddressBook;
use crate::connection::handshake::{Attempt, Continuity};
use crate::connection::link::{Decision, LinkView};
use crate::connection::reassembly::ReassemblyBudget;
use crate::connection::session::{Session, SessionEvent};
use crate::slots::admission::Source;

pub use config::ComConfig;
pub use park::Parked;
pub use types::{
    AcceptOutcome, Action, ChannelEnd, ChannelId, ComState, ComStats, FaultState, Loss,
    OpenFailure, OpenRequest, SiteFailure,
};

/// Why a site with messages owed to it and no channel is temporarily
/// failed when this node cannot call it (it connected to us, and named no
/// address we can reach): only its calling back moves them.
pub const OWED_UNREACHABLE: &str =
    "messages are owed to the site, and no channel or address reaches it";

/// Where the ComObject stands (the states other than the session's close
/// phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    WaitingForSlot,
    Opening {
        attempt: u64,
    },
    Working {
        id: ChannelId,
        from: Option<Attempt>,
    },
    WaitingForCallback,
    /// Our open attempt `attempt` waits in the peer's line (it answered
    /// NEGOTIATE with WAIT, its slots being full): the peer calls back by
    /// answering; the `ReconnectBackoff` timer is the give-up deadline.
    InLine {
        attempt: u64,
        /// When the peer first told it to wait.
        since: Instant,
    },
    Backoff,
    Failed,
}

/// The connection logic of one remote site. See the module documentation.
#[derive(Debug)]
pub struct ComObject {
    /// Shared by the node's ComObjects (an idle site should not carry its
    /// own copy).
    cfg: Arc<ComConfig>,
    session: Session,
    phase: Phase,
    timers: ComTimers,
    /// The backoff jitter's state (seeded; see `schedule_backoff`).
    jitter_state: u64,
    /// Where the peer can be called (empty: it only connects to us), and
    /// which address the next open attempt uses.
    book: AddressBook,
    /// The secret of the session with the peer and whether the peer has
    /// shown it holds it (boxed: 8 bytes for a site that never worked).
    /// A NEGOTIATE resuming the session must prove it (see
    /// [`continuity`](crate::connection::handshake::continuity)).
    continuity: Option<Box<Continuity>>,
    /// This ComObject's opener id, and the number of its last attempt.
    opener: u64,
    attempt_seq: u64,
    channel_seq: u64,
    /// The channel the session is up on: the working one, or one whose
    /// orderly end the driver has not yet confirmed (`channel_closed`):
    /// its `ChannelId`, or 0 for none (ids count from 1).
    session_channel: u64,
    backoff: Duration,
    fault: FaultState,
    /// The site is up as the driver announced it ([`Action::Up`]): a
    /// channel worked, and no temporary failure since.
    up: bool,
    /// Whether the local side holds references to the peer.
    has_refs: bool,
    /// The working channel was let in from the peer's waiting line: others
    /// wait for its slot, so with no references and nothing
    /// pending it closes weakly at once instead of after the linger time.
    via_line: bool,
    /// Connections of the peer waiting in this node's line (one, or two
    /// while a newer replaces an older): the site is calling us, so
    /// it is neither given up nor forgotten meanwhile.
    peer_in_line: u8,
    /// Our attempts that left the peer's line in a row to give their slot
    /// back ([`leave_peer_line`](Self::leave_peer_line)), since a channel
    /// last worked: each doubles how long the next waits before its slot
    /// may be taken (`ChannelReport::line_yields`).
    line_yields: u8,
    /// The peer said (CLEAR_REFERENCE) that it holds no reference to us,
    /// and has not used the channel since: with none on our side either,
    /// neither needs the channel, and the linger rule does not wait.
    peer_cleared: bool,
    /// Requests sent to the peer still await their replies: a channel is
    /// needed to receive them, even with nothing left to send.
    awaiting_replies: bool,
    /// The peer closed our channel hard (it was short of slots) and may
    /// hold messages for us; if it does not call back, we reopen while we
    /// reference it — it may be unable to call us (we do not listen).
    owed_reopen: bool,
    /// The give-up timer runs for `unreachable_give_up` (the site could
    /// not be called back when it failed), not for `give_up_after`.
    give_up_unreachable: bool,
    /// Last time an application message was sent, delivered or acknowledged.
    idle_since: Instant,
    /// When the peer last rejected our weak close.
    weak_rejected_at: Option<Instant>,
    /// The latest time any input told us (for transitions whose input
    /// carries no time, such as a message being queued).
    clock: Instant,
    /// Since when nothing ties the site to this node (no references,
    /// nothing pending, no channel): the reclaim rule's clock.
    unneeded_since: Option<Instant>,
    /// No new channel is accepted or opened (the node shuts down).
    closing: bool,
    actions: VecDeque<Action>,
    stats: Option<Box<ComStats>>,
    /// Session counters (sent, delivered) at the last activity check.
    seen: (u32, u32),
}

impl ComObject {
    /// A ComObject for a remote site, with no channel yet. `book` holds
    /// the addresses it can be called at (empty: it only connects to us;
    /// handshakes add the addresses the peer lists); `opener` must be unique among
    /// this node's ComObjects for the same peer (it names our open attempts);
    /// `seed` seeds the backoff jitter.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: impl Into<Arc<ComConfig>>,
        budget: ReassemblyBudget,
        local: SiteId,
        book: AddressBook,
        opener: u64,
        seed: u64,
        now: Instant,
    ) -> Self {
        let mut cfg = ComConfig::bounded(cfg.into());
        if cfg.local != local {
            // A node shares one configuration with its id in it; anything
            // else (tests of several sites) gets its own copy.
            Arc::make_mut(&mut cfg).local = local;
        }
        Self {
            session: Session::new(cfg.session.clone(), budget),
            backoff: cfg.reconnect_min,
            cfg,
            phase: Phase::Closed,
            timers: ComTimers::default(),
            jitter_state: seed,
            book,
            continuity: None,
            opener,
            attempt_seq: 0,
            channel_seq: 0,
            session_channel: 0,
            fault: FaultState::Ok,
            up: false,
            has_refs: true,
            via_line: false,
            peer_in_line: 0,
            line_yields: 0,
            peer_cleared: false,
            awaiting_replies: false,
            owed_reopen: false,
            give_up_unreachable: false,
            idle_since: now,
            weak_rejected_at: None,
            clock: now,
            unneeded_since: None,
            closing: false,
            actions: VecDeque::new(),
            stats: None,
            seen: (0, 0),
        }
    }

    /// Replaces the link decision (tests that show a broken rule is caught).
    #[doc(hidden)]
    pub fn with_decide(
        mut self,
        f: fn(LinkView, &crate::connection::handshake::Negotiate) -> Decision,
    ) -> Self {
        Arc::make_mut(&mut self.cfg).decide = f;
        self
    }

    /// Sets the pair's secret whatever the ComObject holds (tests that put
    /// two sites in a state reached before the scenario they model).
    #[doc(hidden)]
    pub fn prime_continuity(&mut self, c: Continuity) {
        self.continuity = Some(Box::new(c));
    }

    /// Sets the session's tag whatever it is (tests that put two sites in
    /// one numbering reached before the scenario they model; see
    /// [`SessionTag`](crate::connection::handshake::SessionTag)).
    #[doc(hidden)]
    pub fn prime_session(&mut self, tag: crate::connection::handshake::SessionTag) {
        self.session.set_tag(tag);
    }

    /// Numbers this ComObject's open attempts from `seq` (tests that put
    /// older attempts of the same opener in flight before it starts).
    #[doc(hidden)]
    pub fn with_first_attempt(mut self, seq: u64) -> Self {
        self.attempt_seq = seq.saturating_sub(1);
        self
    }

    /// Gives back the room an idle site does not need (the action queue's
    /// capacity, once it is empty). A driver calls it when the channel is
    /// gone; the queue grows again on demand.
    pub fn shed(&mut self) {
        if self.actions.is_empty() {
            self.actions = VecDeque::new();
        }
    }

    /// The counters, allocated at the first count (a site that never did
    /// anything holds no room for them).
    fn count(&mut self) -> &mut ComStats {
        self.stats.get_or_insert_with(Box::default)
    }

    /// The secret of the session with the peer, if one started (see
    /// [`continuity`](crate::connection::handshake::continuity)): what the driver keeps
    /// when it forgets the site, to prove the pair if the site comes back.
    pub fn continuity(&self) -> Option<Continuity> {
        self.continuity.as_deref().copied()
    }

    /// A secret this node kept from an earlier session with the site (its
    /// entry was forgotten since): the next NEGOTIATE proves it, and a
    /// claim on the site must. Ignored once the ComObject holds one.
    pub fn recall(&mut self, c: Continuity) {
        if self.continuity.is_none() {
            self.continuity = Some(Box::new(c));
        }
    }

    /// The channel being attached comes from `source` (its peer's
    /// address): the pair's secret is charged to it if this node keeps the
    /// secret after forgetting the site ([`PairMemory`](crate::connection::handshake::PairMemory)).
    /// Called by the driver as it attaches a working channel.
    pub fn channel_from(&mut self, source: Source) {
        if let Some(c) = self.continuity.as_deref_mut() {
            c.source = source;
        }
    }

    /// The peer showed it holds the session's secret (see
    /// [`Continuity::confirmed`]).
    fn confirm_continuity(&mut self) {
        if let Some(c) = self.continuity.as_deref_mut() {
            c.confirmed = true;
        }
    }

    /// The peer sent something on the working channel after its handshake:
    /// it read our answer, so it holds the secret the answer agreed.
    fn peer_read_answer(&mut self) {
        self.confirm_continuity();
    }

    /// True if the site should have a channel: it has need of one, or the
    /// peer closed ours hard, we still reference it, and it cannot call us
    /// back (see `owed_reopen` and `ComConfig::callable`).
    fn wants_channel(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::ReopenWithoutNeed) {
            return self.has_need() || (self.owed_reopen && self.has_refs);
        }
        self.has_need() || (self.owed_reopen && self.has_refs && !self.cfg.callable)
    }

    /// What [`set_awaiting_replies`](Self::set_awaiting_replies) last said.
    pub fn awaiting_replies(&self) -> bool {
        self.awaiting_replies
    }

    /// Tells whether requests sent to the peer still await replies (they
    /// need a channel to arrive on: a site waiting for a reply reconnects
    /// after a lost channel even with nothing to send).
    pub fn set_awaiting_replies(&mut self, awaiting: bool) {
        if self.awaiting_replies != awaiting {
            self.awaiting_replies = awaiting;
            self.update();
        }
    }

    // ------------------------------------------------------------------
    // Time
    // ------------------------------------------------------------------

    /// The next instant at which [`handle_timeout`](Self::handle_timeout)
    /// must be called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Failed {
            // Only the reclaim rule still applies.
            return self.timers.get(Timer::Reclaim);
        }
        [self.timers.next_deadline(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances to `now`: fires every expired timer once.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        for t in self.timers.expire(now) {
            if self.phase == Phase::Failed && t != Timer::Reclaim {
                continue;
            }
            match t {
                Timer::GiveUp => {
                    if let Some(why) = self.give_up_expired(now) {
                        self.fail(why, now);
                        return;
                    }
                }
                Timer::ReconnectBackoff => match self.phase {
                    Phase::Backoff | Phase::WaitingForCallback => self.phase = Phase::Closed,
                    Phase::InLine { .. } => self.line_given_up(now),
                    _ => {}
                },
                Timer::Linger => self.linger_expired(now),
                Timer::Reclaim => self.reclaim_expired(now),
                other => debug_assert!(false, "timer {} is not the ComObject's", other.name()),
            }
        }
        if self.phase == Phase::Failed {
            return self.update();
        }
        self.session.handle_timeout(now);
        self.process_session_events(now);
        self.update();
    }

    // ------------------------------------------------------------------
    // Actions
    // ------------------------------------------------------------------

    /// The next thing the driver must do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        let a = self.actions.pop_front()?;
        coverage::hit(a.point());
        Some(a)
    }

    // ------------------------------------------------------------------
    // Internals shared by the submodules
    // ------------------------------------------------------------------

    /// A site waiting for a peer that closed hard to call back, with
    /// nothing of its own to send until now, got something to send: the
    /// peer calls back only for messages of its own, so the wait ends (see
    /// `close_done`). Called when messages are queued to an empty queue
    /// while waiting only: one that waits with messages already (the
    /// channel moved none of them) keeps waiting.
    fn need_ends_callback_wait(&mut self) {
        self.timers.stop(Timer::ReconnectBackoff);
        self.phase = Phase::Closed;
    }

    /// Re-evaluates what to do next after any input: open if there is need,
    /// keep the linger and reclaim timers.
    fn update(&mut self) {
        if self.session.has_refused() {
            self.take_refused();
        }
        // The common case, on every batch sent or received: the site is
        // referenced and not waiting to open, and neither the linger nor the
        // reclaim clock runs (both need no references), so nothing can
        // change. Said once here instead of recomputing it all.
        if self.has_refs
            && self.phase != Phase::Closed
            && self.unneeded_since.is_none()
            && !self.timers.is_set(Timer::Linger)
        {
            return;
        }
        self.update_reclaim();
        if self.phase == Phase::Failed {
            return;
        }
        if self.phase == Phase::Closed && self.wants_channel() && !self.closing {
            if self.book.can_open() {
                self.phase = Phase::WaitingForSlot;
                self.actions.push_back(Action::RequestSlot);
            } else if self.book.is_once() {
                // Named on a peer's word at no address this node can try:
                // its one attempt is over before it starts.
                return self.fail(SiteFailure::NotReached, self.clock);
            } else if self.has_messages_to_send() {
                // Messages are owed to a site this node cannot call: only
                // the site calling back carries them. It is unreachable
                // until it does — also after a channel that ended in
                // order (replies queued during a weak close stay for the
                // next channel) — and is given up after the unreachable
                // give-up, what it was owed handed back. Left Ok, no
                // deadline would ever release them.
                self.set_fault(FaultState::TempFailed, OWED_UNREACHABLE.into(), self.clock);
            }
        }
        self.update_linger();
    }

    /// Hands back queued messages the session found the peer can never take.
    fn take_refused(&mut self) {
        for (error, message) in self.session.take_refused() {
            self.count().handed_back += 1;
            self.actions.push_back(Action::HandBack { error, message });
        }
    }

    /// Moves the machine's notion of the latest time forward.
    fn tick(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
    }

    /// Notes sends and deliveries (the linger rule's idle clock; its timer
    /// is lazy, see `update_linger`, so nothing else is re-evaluated).
    fn note_activity(&mut self, now: Instant) {
        self.tick(now);
        let s = self.session.stats_ref();
        // Compared for a change only: the low 32 bits tell.
        let seen = (s.sent as u32, s.delivered as u32);
        if seen != self.seen {
            // A message from the peer means it uses the channel again.
            if seen.1 != self.seen.1 {
                self.peer_cleared = false;
            }
            self.idle_since = now;
            self.seen = seen;
        }
    }

    fn process_session_events(&mut self, now: Instant) {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                SessionEvent::CloseChannel(reason) => self.close_done(reason, now),
                SessionEvent::WeakCloseRejected => {
                    self.count().weak_closes_rejected += 1;
                    self.weak_rejected_at = Some(now);
                    self.update();
                }
                SessionEvent::PeerClearedReference => {
                    tracing::debug!("peer cleared its reference");
                    self.peer_cleared = true;
                    self.update();
                }
                SessionEvent::Silent => {
                    if let Some(id) = self.working_channel() {
                        self.channel_lost(id, Loss::Silent, now);
                    }
                }
                SessionEvent::Stalled(e) => {
                    if let Some(id) = self.working_channel() {
                        self.channel_lost(id, Loss::Protocol(e), now);
                    }
                }
                SessionEvent::BudgetContention => {
                    if let Some(id) = self.working_channel() {
                        self.channel_lost(id, Loss::BudgetContention, now);
                    }
                }
                // The site will not come back under this id: fail it now,
                // handing back what it never acknowledged, rather than
                // reconnect for ever.
                SessionEvent::PeerLeaving => return self.fail(SiteFailure::ShutDown, now),
            }
        }
    }

    fn link_view(&self) -> LinkView {
        let (working, working_from) = match self.phase {
            Phase::Working { from, .. } => (self.session.channel().map(|c| c.generation), from),
            _ => (None, None),
        };
        LinkView {
            local: self.cfg.local,
            working,
            working_from,
            last_generation: self.session.last_generation(),
            // An attempt waiting in the peer's line is still ours in
            // flight: a crossing channel is a simultaneous connect.
            opening: self.opening().is_some(),
            closing: self.closing || self.phase == Phase::Failed,
        }
    }

    fn next_channel_id(&mut self) -> ChannelId {
        self.channel_seq += 1;
        ChannelId(self.channel_seq)
    }
}

#[cfg(test)]
mod tests;
