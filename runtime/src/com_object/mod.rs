//! The ComObject actor: one per remote site. It drives a
//! [`sitenet_protocols::ComObject`] — where every decision about the site's
//! channels is made — and owns what that machine cannot: at most one live
//! [`TransObject`] (socket and rings), the open attempt in progress, and one
//! timer.
//!
//! On every event it feeds the input to the machine, then in
//! [`ComObject::drive`]: acts on the machine's actions, flushes its frames
//! to the socket, reports counters, and re-arms the timer to the machine's
//! next deadline — in that order, in one function.
//!
//! Reads and writes are two independent readiness futures spawned in the
//! actor's context (never `ctx.wait`), so a channel keeps reading while its
//! socket is not writable: two nodes pushing big messages at each other
//! cannot deadlock. Both are bounded per turn (reads by count, writes by
//! bytes), so one fast peer cannot stall every other actor on the thread.

mod actions;
mod host;
mod inbox;
mod io;
mod messages;
mod open;
mod report;
mod slot;

pub use host::FaultReport;
pub(crate) use host::{ComHost, NodeShared};
pub(crate) use inbox::Inbox;
use io::Live;
pub(crate) use messages::{Adopt, Kill, Learn, PeerInLine, Poke, Preempt, SlotGranted, Stop, Wake};
#[cfg(feature = "test-hooks")]
pub(crate) use messages::{ChannelLease, CloseHard, HoldBusy};
pub(crate) use open::AbandonDial;
use open::Slot;
use report::Reported;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;

use sitenet_protocols::connection::com_object::turn;
use sitenet_protocols::{AddressBook, ComObject as ComLogic, OutMessage};

use crate::metrics::Counters;
use crate::peer_logs::LogKind;
use crate::site_entry::SiteEntry;

/// Reads per readiness event before yielding to other actors on the thread
/// (a flooding peer cannot monopolise the runtime). Small, so a message
/// from the user (an urgent one behind a big transfer) is taken from the
/// outbox within a fraction of a millisecond: `hol_64_behind_64m` in
/// `sitenet bench` went from about 1 ms to 0.5 ms with 4 reads and 256 KiB
/// per turn (was 16 and 1 MiB), bulk throughput unchanged.
pub(super) const READS_PER_TURN: usize = 4;

/// Bytes written per turn before yielding to other actors on the thread (a
/// fast peer taking a 256 MiB message cannot stall every node on it).
pub(super) const WRITE_BYTES_PER_TURN: usize = 256 << 10;

/// How often a ComObject tells the slot controller what its channel does.
pub(super) const SLOT_REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Opener ids: unique in the process, so unique per node incarnation; 0 is
/// reserved for "unknown".
static NEXT_OPENER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// An open attempt in progress: its number, its future (which holds the
/// slot lease), and what the slot controller is told of it (an attempt
/// waiting in the peer's line may be taken back).
pub(super) struct Opening {
    attempt: u64,
    handle: SpawnHandle,
    /// The attempt's slot lease, if it took one.
    lease: Option<sitenet_transport::LeaseId>,
    slot_info: Arc<sitenet_transport::SlotInfo>,
}

pub(crate) struct ComObject {
    node: Arc<dyn ComHost>,
    entry: Arc<SiteEntry>,
    com: ComLogic,
    /// The working channel (boxed: an idle site has none, and thousands of
    /// idle sites should not each carry its room).
    live: Option<Box<Live>>,
    /// The open attempt in progress.
    opening: Option<Opening>,
    timer: Option<(Instant, SpawnHandle)>,
    /// The counters last added to the node's metrics (only those;
    /// allocated when the first one moves).
    reported: Option<Box<Reported>>,
    /// A held ack's transmit is scheduled for the next turn.
    ack_deferred: bool,
    /// The channel went: give spare room back after acting.
    shed_pending: bool,
    /// The machine announced the site up ([`Action::Up`]): the channel
    /// being attached is announced with its transport.
    up_pending: bool,
    /// A write turn ran out of budget; the next is scheduled.
    write_deferred: bool,
    /// Set when this entry turned out to be another entry's site: the actor
    /// stays alive and forwards what still reaches it there. A counted
    /// reference: `SiteRef`s to this entry follow the redirect, so the other
    /// entry is not reclaimed while this one is referenced.
    merged: Option<Box<dyn std::any::Any + Send>>,
    /// Where the site stands with the slot controller.
    slot: Slot,
    /// When `slot_info` and the site's stats may be written next (an
    /// instant compared on every event: cheaper than a duration).
    report_next: Option<Instant>,
    /// A report was skipped within the interval: it is due at
    /// `report_next` (the one timer is armed to it).
    report_pending: bool,
    /// Channels that came up for this site.
    channels_opened: u32,
    /// Channels closed because the slot controller preempted them.
    preempted: u32,
    /// The slot this actor gave up on its own (`give_way_if_due`): the
    /// preemption that may follow for it is expected, not stale.
    gave_way: Option<sitenet_transport::LeaseId>,
    /// Where delivered messages go (it holds the streamed messages being
    /// received, by lane).
    inbox: Box<dyn Inbox>,
}

impl Actor for ComObject {
    type Context = Context<Self>;

    /// Reclaimable from the moment it exists: a ComObject
    /// started for a site nobody then uses (a `SiteRef` decoded and
    /// dropped, a forwarded origin whose handler does not answer,
    /// `prepare`) learns now whether references are held, and asks to be
    /// woken when the last one goes; with none, the reclaim rule's clock
    /// starts at once. Nothing else runs: an idle site publishes nothing.
    fn started(&mut self, ctx: &mut Self::Context) {
        let now = Instant::now();
        self.sync_refs();
        self.act(ctx);
        self.rearm_timer(ctx, now);
        self.watch_unref(ctx, now);
        // Started with nothing to do (`SiteRef::prepare`), or for a
        // message it then finds it has no need of: it parks.
        self.park_if_idle(ctx, now);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // Nothing more comes on the streams still open.
        self.inbox.abort_all();
        tracing::debug!(site = ?self.entry.id(), "ComObject stopped");
    }
}

impl ComObject {
    pub(crate) fn new(node: Arc<dyn ComHost>, entry: Arc<SiteEntry>, book: AddressBook) -> Self {
        let com = ComLogic::new(
            node.com_cfg().clone(),
            node.budget().clone(),
            node.identity().id(),
            book,
            NEXT_OPENER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            rand::random(),
            Instant::now(),
        );
        Self::with_machine(node, entry, com)
    }

    /// The actor driving `com`, the machine of `entry`'s site.
    fn with_machine(node: Arc<dyn ComHost>, entry: Arc<SiteEntry>, com: ComLogic) -> Self {
        let inbox = node.clone().inbox(entry.clone());
        Self {
            node,
            entry,
            com,
            live: None,
            opening: None,
            timer: None,
            reported: None,
            ack_deferred: false,
            shed_pending: false,
            up_pending: false,
            write_deferred: false,
            merged: None,
            slot: Slot::None,
            report_next: None,
            report_pending: false,
            channels_opened: 0,
            preempted: 0,
            gave_way: None,
            inbox,
        }
    }

    /// The address this site is contacted at next, for reports ("" if
    /// none).
    pub(super) fn address_string(&self) -> String {
        self.com
            .addresses()
            .current()
            .map(str::to_owned)
            .unwrap_or_default()
    }

    pub(super) fn peer_string(&self) -> String {
        self.live
            .as_ref()
            .map(|l| l.t.peer().to_string())
            .unwrap_or_else(|| self.address_string())
    }

    pub(super) fn has_refs(&self) -> bool {
        self.entry.holds().has_refs()
    }

    /// Tells the machine whether `SiteRef`s are held and whether replies
    /// are awaited, if that changed (the clock is read only then: this runs
    /// on every event).
    pub(super) fn sync_refs(&mut self) {
        let refs = self.has_refs();
        if refs != self.com.has_refs() {
            self.com.set_has_refs(refs, Instant::now());
        }
        let awaiting = self.entry.holds().pending_requests() > 0;
        if awaiting != self.com.awaiting_replies() {
            self.com.set_awaiting_replies(awaiting);
        }
    }

    /// Moves what `SiteRef`s queued into the machine. A message it refuses
    /// (the site failed meanwhile) joins what the failure handed back.
    pub(super) fn take_outbox(&mut self, on_wake: bool) {
        // The working channel lends its batch buffer (reused: no
        // allocation per batch); without a channel a fresh one serves.
        let mut batch = self
            .live
            .as_mut()
            .map(|l| std::mem::take(&mut l.batch))
            .unwrap_or_default();
        if on_wake {
            self.entry.outbox().drain_on_wake(&mut batch);
        } else {
            self.entry.outbox().drain(&mut batch);
        }
        let mut refused = Vec::new();
        self.com.queue_all(&mut batch, |e, m| refused.push((e, m)));
        if !refused.is_empty() {
            for (e, m) in refused {
                self.hand_back(e, m);
            }
        }
        if let Some(l) = self.live.as_mut() {
            l.batch = batch;
        }
    }

    /// A message that can never be sent to this site goes back to the user.
    pub(super) fn hand_back(&mut self, e: sitenet_protocols::Refusal, m: OutMessage) {
        // The footprint is released only once the message is on record
        // (below): a user who sees `pending_bytes() == 0` then finds every
        // message in `failure()` or `take_refused()`. Released first, a
        // reader could come in between and miss one (seen once in
        // tests/hostile/peers.rs::messages_queued_as_a_site_is_given_up_are_in_not_sent
        // under load).
        let (class, footprint) = (m.share_class(), m.footprint());
        Counters::add(&self.node.counters().handed_back, 1);
        self.node.deliveries().fail(&m, || {
            let reason = e.to_string();
            match e.handed_back() {
                sitenet_protocols::connection::error::HandedBack::MaybeDelivered => {
                    crate::error::DeliveryError::MaybeDelivered { reason }
                }
                sitenet_protocols::connection::error::HandedBack::NotSent => {
                    crate::error::DeliveryError::NotSent { reason }
                }
            }
        });
        let mut tell = false;
        {
            let mut handed = self.entry.handed().lock();
            let handed = handed.get_or_insert_with(Box::default);
            if let Some((_, back)) = &mut handed.failed {
                // The site failed between the sender's check and the queue.
                back.not_sent.push(m);
            } else {
                let kind = LogKind::HandedBack;
                if let Some(suppressed) =
                    self.node
                        .peer_logs()
                        .site(&self.entry, kind, self.node.counters())
                {
                    tracing::warn!(site = ?self.entry.id(), error = %e, suppressed, "message handed back");
                }
                tell = !handed.told;
                handed.told = true;
                handed.refused.push((e, m));
            }
        }
        self.entry.outbox().release(class, footprint);
        if tell {
            // Once until someone takes (`take_refused`), out of the lock.
            self.publish(|site, address| crate::NodeEvent::HandedBack { site, address });
        }
    }

    /// The one place that reacts to anything: one turn of the machine, in
    /// the order `sitenet_protocols`' `turn` keeps (queue, act, flush,
    /// account, re-arm the timer, park).
    pub(super) fn drive(&mut self, ctx: &mut Context<Self>) {
        // One clock read for the whole turn (it takes microseconds): each
        // read costs as much as a small step of the protocol.
        let now = Instant::now();
        turn::turn(&mut Turn {
            actor: self,
            ctx,
            now,
        });
    }

    /// While the last reference going would start a rule (the reclaim
    /// rule, or the weak close of a channel let in from a line:
    /// `ComObject::wake_when_unreferenced`), asks to be woken when it goes,
    /// then re-reads the count: a reference dropped in between is seen by
    /// one side or the other (both use `SeqCst`), so the rule never waits
    /// for a wake that does not come.
    fn watch_unref(&mut self, ctx: &mut Context<Self>, now: Instant) {
        let watch = self.com.wake_when_unreferenced();
        self.entry.liveness().set_poke_on_unref(watch);
        if watch && self.entry.holds().refs() == 0 {
            self.com.set_has_refs(false, now);
            self.rearm_timer(ctx, now);
        }
    }

    /// The machine's reclaim rule fired: forget the site if the node's
    /// table agrees nothing refers to it (checked under its lock), and stop.
    fn reclaim(&mut self, ctx: &mut Context<Self>) {
        if !self.node.reclaim(&self.entry) {
            tracing::debug!(site = ?self.entry.id(), "not reclaimed: referenced again");
            return;
        }
        tracing::debug!(site = ?self.entry.id(), "site reclaimed");
        {
            // Nothing runs the entry any more: a message sent through a
            // handle that kept it is dropped, a send fails.
            let mut slot = self.entry.actor().lock();
            slot.state = crate::site_entry::ActorState::Reclaimed;
            slot.held = None;
            self.entry.liveness().set_reclaimed();
        }
        // The pair's secret outlives the entry: coming back, this node
        // still proves the pair to a peer that kept its own entry.
        if let (Some(id), Some(c)) = (self.entry.id(), self.com.continuity()) {
            self.node.security().remember_pair(id, c);
        }
        Counters::add(&self.node.counters().sites_reclaimed, 1);
        self.node.signals().changed();
        // Dropping the reference to the entry this one merged into lets
        // that one be reclaimed in turn.
        self.merged = None;
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        ctx.stop();
    }

    /// Hands the machine the pair's secret this node kept when it forgot an
    /// earlier entry of the site, if the site's id is known (the machine
    /// ignores it once it holds one). Before every decision that uses it:
    /// an open's NEGOTIATE, a claim's judgement.
    pub(super) fn recall_pair(&mut self) {
        if let Some(id) = self.entry.id() {
            if let Some(c) = self.node.security().recall_pair(id) {
                self.com.recall(c);
            }
        }
    }

    /// Keeps one timer armed at or before the next deadline. A timer that
    /// fires early is harmless (`on_timer` finds nothing due and re-arms), so
    /// the timer is replaced only when a deadline moves earlier: the
    /// heartbeat deadline moves later on every frame sent, and re-creating
    /// the timer for each would cost more than the frame.
    pub(super) fn rearm_timer(&mut self, ctx: &mut Context<Self>, now: Instant) {
        let report_due = self.report_next.filter(|_| self.report_pending);
        let Some(at) = [self.com.poll_timeout(), report_due]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        if self.timer.as_ref().is_some_and(|t| t.0 <= at) {
            return;
        }
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let d = at.saturating_duration_since(now);
        let h = ctx.run_later(d, |act, ctx| {
            act.timer = None;
            let now = Instant::now();
            let in_line = act.com.in_line();
            act.com.handle_timeout(now);
            if in_line && !act.com.in_line() && !act.com.is_failed() {
                // The wait in the peer's line reached its give-up deadline.
                Counters::add(&act.node.counters().line_give_ups, 1);
            }
            // An idle channel is driven only by its timer (heartbeats): the
            // place to give its ring memory back, off the per-event path.
            act.shrink_idle_rings(now);
            act.drive(ctx);
        });
        self.timer = Some((at, h));
    }
}

/// One turn of a ComObject actor: the steps `turn::turn` orders, each the
/// actor's method of the same purpose, at one clock reading.
struct Turn<'a> {
    actor: &'a mut ComObject,
    ctx: &'a mut Context<ComObject>,
    now: Instant,
}

impl turn::TurnSteps for Turn<'_> {
    fn take_inputs(&mut self) {
        self.actor.take_outbox(false);
        self.actor.sync_refs();
    }

    fn act(&mut self) {
        self.actor.act(self.ctx);
    }

    fn give_way(&mut self) {
        self.actor.give_way_if_due(self.now);
    }

    fn flush(&mut self) {
        self.actor.flush(self.ctx, self.now);
    }

    fn account(&mut self) {
        self.actor.account(self.now);
    }

    fn rearm(&mut self) {
        self.actor.rearm_timer(self.ctx, self.now);
    }

    fn watch_references(&mut self) {
        self.actor.watch_unref(self.ctx, self.now);
    }

    fn park_if_idle(&mut self) {
        self.actor.park_if_idle(self.ctx, self.now);
    }
}
