//! The live channel's I/O: readiness futures, bounded read and write
//! turns, attaching and dropping the TransObject.

use std::time::Instant;

use actix::fut;
use actix::prelude::*;

use sitenet_protocols::connection::input_budget::RefusalBudget;
use sitenet_protocols::{ChannelId, Loss};

use super::{ComObject, READS_PER_TURN, WRITE_BYTES_PER_TURN};
use crate::metrics::Counters;
use crate::trans_object::{ReadStatus, TransObject};

/// The live channel: the TransObject and its readiness futures.
pub(super) struct Live {
    pub(super) id: ChannelId,
    pub(super) t: TransObject,
    /// What the slot controller's policy sees of this channel.
    pub(super) slot_info: std::sync::Arc<sitenet_transport::SlotInfo>,
    /// The buffer the outbox is drained into, kept for the next drain.
    pub(super) batch: Vec<sitenet_protocols::OutMessage>,
    pub(super) read: Option<SpawnHandle>,
    pub(super) write: Option<SpawnHandle>,
    /// What the peer's refused messages cost it: reading pauses while the
    /// bucket is in debt.
    pub(super) refusals: RefusalBudget,
}

/// How a read turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadTurn {
    /// Keep reading when the socket is readable.
    Up,
    /// Input waits for reassembly budget: stop reading until it is released.
    Blocked,
    /// The turn's handler time is spent (`Session::turn_spent`) with input
    /// left in the ring: let the thread's other work run, then go on.
    Yield,
    /// The peer's refused messages put its refusal budget in debt: read
    /// nothing more until this time.
    Paused(Instant),
    /// The channel ended.
    Ended,
}

/// Which readiness of the live channel a spawned future waits for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Readiness {
    Read,
    Write,
}

impl Live {
    pub(super) fn slot(&mut self, which: Readiness) -> &mut Option<SpawnHandle> {
        match which {
            Readiness::Read => &mut self.read,
            Readiness::Write => &mut self.write,
        }
    }
}

/// Accounts a change of a live channel's ring sizes in the node's gauge
/// (and its peak).
pub(super) fn ring_bytes_changed(node: &super::NodeShared, delta: i64) {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &node.counters();
    if delta > 0 {
        let now = c.channel_buffer_bytes.fetch_add(delta as u64, Relaxed) + delta as u64;
        c.channel_buffer_bytes_peak.fetch_max(now, Relaxed);
    } else if delta < 0 {
        c.channel_buffer_bytes.fetch_sub((-delta) as u64, Relaxed);
    }
}

/// What feeding the input ring did.
enum Fed {
    /// Everything it could take was taken (or it waits for budget).
    Done,
    /// The turn's handler time is spent; input is left.
    Yield,
    /// The channel ended.
    Ended,
}

/// Feeds the input ring of channel `id` to the machine (`now`: the time
/// of the last read). Whenever the session pauses between slices of
/// deliveries (`Session::input_paused`), the driver's part: read the clock,
/// fire the timers that are due — the ack delay, a heartbeat — and write
/// what they made due without waiting for the socket (reads are never held
/// behind writes), end the turn if its handler time is spent, or go on.
/// Fast handlers pause once per 64 messages and write nothing mid-turn.
fn feed(
    com: &mut sitenet_protocols::ComObject,
    t: &mut TransObject,
    deliver: &mut dyn sitenet_protocols::Deliver,
    id: ChannelId,
    mut now: Instant,
) -> Fed {
    loop {
        if !com.handle_input_with(id, now, &mut t.inb, deliver) {
            return Fed::Ended;
        }
        if !com.input_paused() {
            return Fed::Done;
        }
        now = Instant::now();
        if com.poll_timeout().is_some_and(|at| at <= now) {
            com.handle_timeout(now);
            com.poll_transmit(now, &mut t.outb);
            if t.out_pending() {
                if let Err(e) = t.write_some(WRITE_BYTES_PER_TURN) {
                    com.channel_lost(id, Loss::Io(e.to_string()), now);
                    return Fed::Ended;
                }
            }
        }
        if com.turn_spent(now) {
            return Fed::Yield;
        }
    }
}

/// Charges the messages the node refused while feeding a slice of input
/// (the thread's refusal count was `before` it) to the channel's refusal
/// budget; how the read turn ends, if it ends here.
fn charged(live: &mut Live, fed: Fed, before: u64) -> Option<ReadTurn> {
    let refused = crate::runtime::refused_here().wrapping_sub(before);
    let pause = match refused {
        0 => None,
        n => live.refusals.charge(n, Instant::now()),
    };
    match (fed, pause) {
        (Fed::Ended, _) => Some(ReadTurn::Ended),
        (_, Some(until)) => Some(ReadTurn::Paused(until)),
        (Fed::Yield, None) => Some(ReadTurn::Yield),
        (Fed::Done, None) => None,
    }
}

impl ComObject {
    /// Shrinks the live channel's rings to the minimum when the machine
    /// says the channel idles and both are empty.
    pub(super) fn shrink_idle_rings(&mut self, now: Instant) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let min = sitenet_protocols::connection::handshake::MIN_BUFFER as usize;
        if live.t.ring_bytes() > 2 * min as u64
            && live.t.inb.is_empty()
            && live.t.outb.is_empty()
            && self.com.rings_idle(now)
        {
            let delta = live.t.resize_in(min) + live.t.resize_out(min);
            ring_bytes_changed(&self.node, delta);
            tracing::debug!(site = ?self.entry.id(), "idle channel: rings shrunk");
        }
    }

    /// Writes the machine's frames to the live channel, at most `budget`
    /// bytes; a write error ends the channel.
    pub(super) fn write_turn(&mut self, budget: usize, now: Instant) -> Option<bool> {
        let live = self.live.as_mut()?;
        let full = self.node.identity().cfg().buffer_size as usize;
        if live.t.outb.capacity() < full && self.com.session().queued_bytes() > 0 {
            // Messages to send on a channel whose rings shrank while idle.
            ring_bytes_changed(&self.node, live.t.resize_out(full));
        }
        let mut written = 0;
        let result = loop {
            self.com.poll_transmit(now, &mut live.t.outb);
            if !live.t.out_pending() {
                break Ok(false);
            }
            match live.t.write_some(budget - written) {
                Ok(st) => {
                    Counters::add(&self.node.counters().writes, st.calls as u64);
                    written += st.written;
                    if st.blocked {
                        break Ok(true);
                    }
                    if written >= budget {
                        break Ok(live.t.out_pending() || self.com.wants_to_send(now));
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match result {
            Ok(more) => Some(more),
            Err(e) => {
                let id = live.id;
                self.com.channel_lost(id, Loss::Io(e.to_string()), now);
                None
            }
        }
    }

    pub(super) fn flush(&mut self, ctx: &mut Context<Self>, now: Instant) {
        if self.write_deferred {
            return;
        }
        let Some(more) = self.write_turn(WRITE_BYTES_PER_TURN, now) else {
            return;
        };
        let blocked = self.live.as_ref().is_some_and(|l| l.t.out_pending());
        if blocked {
            self.arm(Readiness::Write, ctx);
        } else if more {
            // Budget spent with more to send: yield, then continue.
            self.write_deferred = true;
            ctx.spawn(
                fut::wrap_future::<_, Self>(tokio::task::yield_now()).map(|(), act, ctx| {
                    act.write_deferred = false;
                    act.drive(ctx);
                }),
            );
        }
    }

    /// Spawns (once) the future that waits for the live channel to become
    /// readable or writable; a stale future (of a channel since replaced)
    /// finds another channel id and does nothing.
    pub(super) fn arm(&mut self, which: Readiness, ctx: &mut Context<Self>) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if live.slot(which).is_some() {
            return;
        }
        let ch = live.t.channel();
        let id = live.id;
        // TLS: decrypted input the ring had no room for is read on the
        // next turn, not when the socket next becomes readable.
        let buffered = live.t.input_buffered();
        let ready = async move {
            match which {
                Readiness::Read if buffered => {
                    tokio::task::yield_now().await;
                    Ok(())
                }
                Readiness::Read => ch.readable().await,
                Readiness::Write => ch.writable().await,
            }
        };
        let h = ctx.spawn(fut::wrap_future::<_, Self>(ready).map(move |r, act, ctx| {
            let Some(live) = act.live.as_mut().filter(|l| l.id == id) else {
                return;
            };
            *live.slot(which) = None;
            match (r, which) {
                (Ok(()), Readiness::Read) => act.on_readable(ctx),
                (Ok(()), Readiness::Write) => act.drive(ctx),
                (Err(e), _) => {
                    act.com
                        .channel_lost(id, Loss::Io(e.to_string()), Instant::now());
                    act.drive(ctx);
                }
            }
        }));
        *live.slot(which) = Some(h);
    }

    /// Reads large chunks and decodes every complete frame after each read,
    /// calling handlers directly.
    pub(super) fn on_readable(&mut self, ctx: &mut Context<Self>) {
        let Some(id) = self.live.as_ref().map(|l| l.id) else {
            return;
        };
        self.sync_refs();
        let epoch = self.node.budget().releases();
        // What is queued while this turn delivers (a handler's reply, above
        // all) is taken right after, in this turn: it needs no wake, which
        // would cost another turn of the actor for nothing.
        self.entry.outbox().hold_wakes();
        let turn = self.read_and_process(id);
        self.take_outbox(true);
        match turn {
            ReadTurn::Ended => return self.drive(ctx),
            ReadTurn::Up => self.arm(Readiness::Read, ctx),
            // Reading stops until the reassembly budget is given back.
            ReadTurn::Blocked => self.wait_for_budget(id, epoch, ctx),
            ReadTurn::Paused(until) => {
                tracing::debug!(
                    site = ?self.entry.id(),
                    refused = self.live.as_ref().map_or(0, |l| l.refusals.refused()),
                    pause = ?until.saturating_duration_since(Instant::now()),
                    "the peer's refused messages pause its input"
                );
                let resume = actix_rt::time::sleep_until(until.into());
                ctx.spawn(
                    fut::wrap_future::<_, Self>(resume).map(move |(), act, ctx| {
                        if act.live.as_ref().is_some_and(|l| l.id == id) {
                            act.on_readable(ctx);
                        }
                    }),
                );
            }
            // The rest of the input, once the thread's other work ran.
            ReadTurn::Yield => {
                ctx.spawn(fut::wrap_future::<_, Self>(tokio::task::yield_now()).map(
                    move |(), act, ctx| {
                        if act.live.as_ref().is_some_and(|l| l.id == id) {
                            act.on_readable(ctx);
                        }
                    },
                ));
            }
        }
        // A reply queued by a handler or a task woken by these messages can
        // carry the ack: hold a threshold ack until the next turn of the
        // event loop.
        self.com.hold_acks(true);
        self.drive(ctx);
        self.com.hold_acks(false);
        self.defer_ack(ctx);
    }

    /// Resumes reading channel `id` once the node's reassembly budget was
    /// given back since `epoch` (the release count when input blocked, so a
    /// release in between is not missed).
    fn wait_for_budget(&mut self, id: ChannelId, epoch: u64, ctx: &mut Context<Self>) {
        Counters::add(&self.node.counters().budget_pauses, 1);
        let node = self.node.clone();
        let released = async move {
            loop {
                let n = node.signals().when_budget_released();
                tokio::pin!(n);
                n.as_mut().enable();
                if node.budget().releases() != epoch {
                    return;
                }
                n.await;
            }
        };
        ctx.spawn(
            fut::wrap_future::<_, Self>(released).map(move |(), act, ctx| {
                if act.live.as_ref().is_some_and(|l| l.id == id) {
                    act.on_readable(ctx);
                }
            }),
        );
    }

    /// Transmits a held ack one event-loop turn later, unless data queued
    /// meanwhile carried it (see `Session::hold_acks`).
    pub(super) fn defer_ack(&mut self, ctx: &mut Context<Self>) {
        if self.ack_deferred || !self.com.ack_waiting() {
            return;
        }
        self.ack_deferred = true;
        ctx.spawn(
            fut::wrap_future::<_, Self>(tokio::task::yield_now()).map(|(), act, ctx| {
                act.ack_deferred = false;
                act.drive(ctx);
            }),
        );
    }

    /// Feeds what the ring holds, then reads and feeds up to
    /// [`READS_PER_TURN`] times.
    pub(super) fn read_and_process(&mut self, id: ChannelId) -> ReadTurn {
        let node = self.node.clone();
        let deliver = &mut *self.inbox;
        let Some(live) = self.live.as_mut() else {
            return ReadTurn::Ended;
        };
        let now = Instant::now();
        self.com.begin_turn(now);
        // Bytes left over from the handshake (or from a blocked, yielded
        // or paused turn) first.
        let refused = crate::runtime::refused_here();
        let fed = feed(&mut self.com, &mut live.t, deliver, id, now);
        if let Some(turn) = charged(live, fed, refused) {
            return turn;
        }
        for _ in 0..READS_PER_TURN {
            if self.com.input_blocked() {
                return ReadTurn::Blocked;
            }
            // A large fragment's rest goes straight into its message.
            let read = match self.com.direct_input() {
                Some(target) => live.t.read_into(target).inspect(|st| {
                    if let ReadStatus::Read(n) = *st {
                        self.com.direct_commit(n);
                    }
                }),
                None => live.t.read_once(),
            };
            let loss = match read {
                Ok(ReadStatus::Read(_)) => {
                    Counters::add(&node.counters().reads, 1);
                    None
                }
                Ok(ReadStatus::RingFull) => {
                    // A ring shrunk while the channel idled grows back
                    // (a frame may be larger than the small ring).
                    let full = node.identity().cfg().buffer_size as usize;
                    if live.t.inb.capacity() >= full {
                        break;
                    }
                    ring_bytes_changed(&node, live.t.resize_in(full));
                    None
                }
                Ok(ReadStatus::WouldBlock) => break,
                Ok(ReadStatus::Eof) => Some(Loss::Eof),
                Err(e) => Some(Loss::Io(e.to_string())),
            };
            if let Some(loss) = loss {
                self.com.channel_lost(id, loss, Instant::now());
                return ReadTurn::Ended;
            }
            let refused = crate::runtime::refused_here();
            let fed = feed(&mut self.com, &mut live.t, deliver, id, Instant::now());
            if let Some(turn) = charged(live, fed, refused) {
                return turn;
            }
        }
        if self.com.input_blocked() {
            ReadTurn::Blocked
        } else {
            ReadTurn::Up
        }
    }

    pub(super) fn attach(&mut self, id: ChannelId, t: TransObject, ctx: &mut Context<Self>) {
        let c = &self.node.counters();
        let now_held = c
            .channel_buffer_bytes
            .fetch_add(t.ring_bytes(), std::sync::atomic::Ordering::Relaxed)
            + t.ring_bytes();
        c.channel_buffer_bytes_peak
            .fetch_max(now_held, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(site = ?self.entry.id(), peer = %t.peer(), generation = ?self.com.session().channel().map(|c| c.generation), "channel working");
        if let Some(p) = self.com.session().peer_max_message() {
            self.entry.set_peer_max(p);
        }
        // The pair's secret is charged to the address this channel comes
        // from, should the node keep it after forgetting the site.
        let ip = crate::channel_io::peer_ip(t.peer());
        self.com
            .channel_from(sitenet_protocols::slots::admission::Source::of(ip));
        // A new channel: the next account reports its state.
        self.report_next = None;
        self.channels_opened = self.channels_opened.saturating_add(1);
        let slot_info = std::sync::Arc::<sitenet_transport::SlotInfo>::default();
        if let Some(lease) = &t.lease {
            lease.attach(slot_info.clone(), super::open::preempt_fn(ctx));
        }
        self.entry.liveness().set_connected(true);
        self.entry.liveness().set_contacted();
        if std::mem::take(&mut self.up_pending) {
            if let Some(site) = self.entry.id() {
                let transport = t.transport();
                self.publish(|_, address| crate::NodeEvent::SiteUp {
                    site,
                    address,
                    transport,
                });
            }
        }
        self.live = Some(Box::new(Live {
            id,
            t,
            slot_info,
            batch: Vec::new(),
            read: None,
            write: None,
            refusals: RefusalBudget::new(
                self.node.identity().cfg().refused_input_burst,
                self.node.identity().cfg().refused_input_rate,
                Instant::now(),
            ),
        }));
        Counters::add(&self.node.counters().channels_opened, 1);
        // The peer's addresses, learned in the handshake, are published
        // before its first message is handled (a handler that forwards a
        // request names the origin by them).
        self.publish_stats();
        self.node.signals().changed();
        self.node.signals().acked();
        self.on_readable(ctx);
    }

    pub(super) fn drop_live(&mut self, ctx: &mut Context<Self>) {
        drop(self.take_live(ctx));
    }

    /// Like [`drop_live`](Self::drop_live), but a channel that ends with a
    /// final frame is closed without losing it to a reset (see
    /// `TransObject::linger_close`), on the runtime rather than the actor,
    /// which may be stopping.
    pub(super) fn drop_live_after_final_frame(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.take_live(ctx) {
            actix_rt::spawn(t.linger_close(FINAL_LINGER));
        }
    }

    /// Takes the live channel out, with its accounting and readiness
    /// futures ended.
    fn take_live(&mut self, ctx: &mut Context<Self>) -> Option<TransObject> {
        let live = self.live.take()?;
        // Streams the lost channel interrupted are told now, not when
        // their message comes again.
        self.com.report_interrupted(&mut *self.inbox);
        self.shed_pending = true;
        self.entry.liveness().set_connected(false);
        self.node
            .counters()
            .channel_buffer_bytes
            .fetch_sub(live.t.ring_bytes(), std::sync::atomic::Ordering::Relaxed);
        for h in [live.read, live.write].into_iter().flatten() {
            ctx.cancel_future(h);
        }
        Counters::add(&self.node.counters().channels_closed, 1);
        self.node.signals().changed();
        Some(live.t)
    }
}

/// How long a channel closed after a final frame waits for its peer to
/// close (see `TransObject::linger_close`).
const FINAL_LINGER: std::time::Duration = std::time::Duration::from_secs(2);
