//! The ComObject: one actor per remote site.
//!
//! It owns the site's [`Session`] (queues, numbering, ledger, reassembly — all
//! protocol decisions live there) and at most one live channel (the channel
//! driver: the socket and its two ByteBuffers). It only drives: on every event
//! it feeds input to the session, delivers complete messages to handlers,
//! flushes the session's frames to the socket, and re-arms one timer to the
//! next deadline — in that order, in [`ComObject::drive`].
//!
//! Reads and writes are two independent readiness futures spawned in the
//! actor's context (never `ctx.wait`), so a channel keeps reading while its
//! socket is not writable: two nodes pushing big messages at each other
//! cannot deadlock.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::fut;
use actix::prelude::*;
use rand::Rng;

use sitenet_protocols::handshake::write_answer;
use sitenet_protocols::{
    decide, Attempt, ByteBuffer, ChannelParams, ClosePhase, CloseReason, Decision, Initiator,
    LinkView, Negotiate, NegotiateAns, OpenError, Opened, OutMessage, ProtocolError, RefuseReason,
    Session, SessionEvent, SessionStats,
};
use sitenet_transport::Channel;

use crate::channel_io::{connect_and_open, flush_and_close, OpenFailure, RawChannel};
use crate::error::SiteFailure;
use crate::handlers::dispatch;
use crate::metrics::Counters;
use crate::node::{FaultReport, NodeInner};
use crate::site::{FaultState, HandedBack, SiteEntry};

/// Reads per readiness event before yielding to other actors on the thread
/// (a flooding peer cannot monopolise the runtime).
const READS_PER_TURN: usize = 16;

/// Wakes the ComObject: its outbox went from empty to non-empty.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Wake;

/// An accepted channel whose initiator identified itself as this site.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Adopt {
    pub(crate) raw: RawChannel,
    pub(crate) neg: Negotiate,
}

/// Stop: the node is shutting down.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

/// Kill: fail the site permanently on purpose.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Kill;

/// Close the channel with CLOSE_HARD (the fd-slot controller's preemption,
/// and tests). The site reconnects when it needs to; nothing is lost.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CloseHard;

/// Test hook: block the actor (and its thread) until released.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HoldBusy {
    pub(crate) release: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    pub(crate) started: std::sync::mpsc::Sender<()>,
}

/// The live channel (the TransObject driver state).
struct Live {
    id: u64,
    ch: Rc<Channel>,
    inb: ByteBuffer,
    outb: ByteBuffer,
    read: Option<SpawnHandle>,
    write: Option<SpawnHandle>,
    peer: String,
}

/// Which readiness of the live channel a spawned future waits for.
#[derive(Debug, Clone, Copy)]
enum Readiness {
    Read,
    Write,
}

impl Live {
    fn slot(&mut self, which: Readiness) -> &mut Option<SpawnHandle> {
        match which {
            Readiness::Read => &mut self.read,
            Readiness::Write => &mut self.write,
        }
    }
}

/// Why a channel ended.
#[derive(Debug, thiserror::Error)]
enum Lost {
    #[error("i/o error: {0}")]
    Io(io::Error),
    #[error("closed by the peer")]
    Eof,
    #[error("peer broke the protocol: {0}")]
    Protocol(ProtocolError),
    #[error("nothing heard for the silence timeout")]
    Silent,
}

/// Opener ids: unique in the process, so unique per node incarnation; 0 is
/// reserved for "unknown".
static NEXT_OPENER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(crate) struct ComObject {
    node: Arc<NodeInner>,
    entry: Arc<SiteEntry>,
    session: Session,
    live: Option<Live>,
    chan_seq: u64,
    opening: Option<(u64, SpawnHandle)>,
    /// This ComObject's opener id, sent with `attempt_seq` in each NEGOTIATE.
    opener: u64,
    attempt_seq: u64,
    /// The peer's attempt that opened the working channel, if it was
    /// accepted here (the link decision needs it).
    working_from: Option<Attempt>,
    backoff: Duration,
    reconnect_at: Option<Instant>,
    timer: Option<(Instant, SpawnHandle)>,
    scratch: Vec<OutMessage>,
    failed: bool,
    reported: SessionStats,
    /// Last time an application message was sent or delivered.
    idle_since: Instant,
    /// When the peer last rejected our weak close.
    weak_rejected_at: Option<Instant>,
    /// Since when the site is temporarily failed.
    temp_since: Option<Instant>,
    /// A held ack's transmit is scheduled for the next turn.
    ack_deferred: bool,
}

impl Actor for ComObject {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        tracing::debug!(site = ?self.entry.id.get(), "ComObject stopped");
    }
}

impl ComObject {
    pub(crate) fn new(node: Arc<NodeInner>, entry: Arc<SiteEntry>) -> Self {
        let session = Session::new(node.cfg.session(), node.budget.clone());
        let backoff = node.cfg.reconnect_min;
        Self {
            node,
            entry,
            session,
            live: None,
            chan_seq: 0,
            opening: None,
            opener: NEXT_OPENER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            attempt_seq: 0,
            working_from: None,
            backoff,
            reconnect_at: None,
            timer: None,
            scratch: Vec::new(),
            failed: false,
            reported: SessionStats::default(),
            idle_since: Instant::now(),
            weak_rejected_at: None,
            temp_since: None,
            ack_deferred: false,
        }
    }

    /// The address this site is contacted at, for reports ("" if none).
    fn address_string(&self) -> String {
        self.entry
            .address
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }

    /// Records a fault of this site in the node's fault history.
    fn report_fault(&self, peer: String, reason: String, permanent: bool) {
        self.node.record_fault(FaultReport {
            site: self.entry.id.get().copied(),
            peer,
            reason,
            permanent,
        });
    }

    fn set_fault(&mut self, state: FaultState, reason: &str) {
        if state == FaultState::TempFailed && self.temp_since.is_none() {
            self.temp_since = Some(Instant::now());
        }
        if state == FaultState::Ok {
            self.temp_since = None;
        }
        if self.entry.set_fault(state, reason) {
            tracing::info!(site = ?self.entry.id.get(), ?state, %reason, "fault state");
            let c = &self.node.counters;
            match state {
                FaultState::TempFailed => Counters::add(&c.temp_failures, 1),
                FaultState::PermFailed => Counters::add(&c.perm_failures, 1),
                FaultState::Ok => {}
            }
            self.node.changed.notify_waiters();
        }
    }

    /// Acts on what the session asks for.
    fn process_events(&mut self, ctx: &mut Context<Self>) {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                SessionEvent::CloseChannel(reason) => {
                    // Whatever the session still has for the peer (answers,
                    // acks) is written if the socket takes it now.
                    self.flush(ctx);
                    self.close_channel(reason, ctx)
                }
                SessionEvent::WeakCloseRejected => {
                    tracing::debug!(site = ?self.entry.id.get(), "peer still needs the channel; weak close rejected");
                    Counters::add(&self.node.counters.weak_closes_rejected, 1);
                    self.node.changed.notify_waiters();
                    self.weak_rejected_at = Some(Instant::now());
                }
                SessionEvent::PeerClearedReference => {
                    tracing::debug!(site = ?self.entry.id.get(), "peer cleared its reference")
                }
                SessionEvent::Silent => self.lose_channel(Lost::Silent, ctx),
            }
        }
    }

    /// An orderly end of the channel (close protocol): not a failure.
    fn close_channel(&mut self, reason: CloseReason, ctx: &mut Context<Self>) {
        if self.live.is_none() {
            return;
        }
        // Counted before the channel goes, so whoever is woken by the close
        // sees it.
        Counters::add(&self.node.counters.orderly_closes, 1);
        let peer = self.drop_live(ctx).expect("checked above");
        tracing::debug!(site = ?self.entry.id.get(), %peer, ?reason, "channel closed by the close protocol");
        match reason {
            CloseReason::WeakDone | CloseReason::PeerWeak | CloseReason::HardDone => {}
            CloseReason::PeerHard => {
                // The peer is short of resources and will call back; only if
                // it does not do we reconnect, later.
                self.reconnect_at =
                    Some(Instant::now() + self.node.cfg.reopen_after_peer_hard_close);
            }
            CloseReason::Timeout => self.schedule_reconnect(),
        }
        self.drive(ctx);
    }

    /// Moves what `SiteRef`s queued into the session.
    fn take_outbox(&mut self, on_wake: bool) {
        let mut batch = std::mem::take(&mut self.scratch);
        if on_wake {
            self.entry.outbox.drain_on_wake(&mut batch);
        } else {
            self.entry.outbox.drain(&mut batch);
        }
        for m in batch.drain(..) {
            if self.failed {
                self.entry.outbox.release(m.wire_len());
                continue;
            }
            if let Err(refused) = self.session.queue(m) {
                let (e, m) = *refused;
                // The peer's limit became known after the message was queued.
                tracing::warn!(site = ?self.entry.id.get(), error = %e, "message refused after queuing");
                self.entry.outbox.release(m.wire_len());
                Counters::add(&self.node.counters.unhandled, 1);
            }
        }
        self.scratch = batch;
    }

    fn has_need(&self) -> bool {
        self.session.pending_messages() > 0
    }

    fn has_refs(&self) -> bool {
        self.entry.refs.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// When the linger rule would allow a weak close, if it applies at all.
    fn linger_deadline(&self) -> Option<Instant> {
        if self.has_refs()
            || self.has_need()
            || !self.session.is_working()
            || self.session.close_phase() != ClosePhase::Open
        {
            return None;
        }
        // Idle for the linger time, and no weak close rejected within it.
        let linger = self.node.cfg.linger;
        let idle = self.idle_since + linger;
        Some(self.weak_rejected_at.map_or(idle, |t| idle.max(t + linger)))
    }

    /// The one place that reacts to anything: queue, open if needed, flush,
    /// account, re-arm the timer.
    fn drive(&mut self, ctx: &mut Context<Self>) {
        self.take_outbox(false);
        if !self.failed
            && !self.session.is_working()
            && self.opening.is_none()
            && self.reconnect_at.is_none()
            && self.has_need()
        {
            self.start_open(ctx);
        }
        self.flush(ctx);
        self.account();
        self.rearm_timer(ctx);
    }

    fn account(&mut self) {
        let (freed, bytes) = self.session.take_freed();
        if freed > 0 {
            self.idle_since = Instant::now();
        }
        self.entry.outbox.release(bytes);
        if bytes > 0 {
            self.node.acked.notify_waiters();
        }
        let s = self.session.stats();
        let c = &self.node.counters;
        Counters::add(&c.messages_sent, s.sent - self.reported.sent);
        Counters::add(
            &c.messages_retransmitted,
            s.retransmitted - self.reported.retransmitted,
        );
        Counters::add(&c.duplicates, s.duplicates - self.reported.duplicates);
        if s.delivered != self.reported.delivered || s.sent != self.reported.sent {
            self.idle_since = Instant::now();
            // Once per batch (a read, a flush), not per message: whoever
            // waits on the node's metrics re-checks.
            self.node.changed.notify_waiters();
        }
        self.reported = s;
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let result = {
            let Some(live) = self.live.as_mut() else {
                return;
            };
            loop {
                self.session.poll_transmit(now, &mut live.outb);
                if live.outb.is_empty() {
                    break Ok(());
                }
                let (a, b) = live.outb.chunks();
                match live.ch.try_write2(a, b) {
                    Ok(0) => break Err(Lost::Io(io::ErrorKind::WriteZero.into())),
                    Ok(n) => {
                        Counters::add(&self.node.counters.writes, 1);
                        live.outb.consume(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                    Err(e) => break Err(Lost::Io(e)),
                }
            }
        };
        match result {
            Err(lost) => self.lose_channel(lost, ctx),
            Ok(()) => {
                let pending = self.live.as_ref().is_some_and(|l| !l.outb.is_empty());
                if pending {
                    self.arm_write(ctx);
                }
            }
        }
    }

    fn arm_write(&mut self, ctx: &mut Context<Self>) {
        self.arm(Readiness::Write, ctx);
    }

    fn arm_read(&mut self, ctx: &mut Context<Self>) {
        self.arm(Readiness::Read, ctx);
    }

    /// Spawns (once) the future that waits for the live channel to become
    /// readable or writable; a stale future (of a channel since replaced)
    /// finds another channel id and does nothing.
    fn arm(&mut self, which: Readiness, ctx: &mut Context<Self>) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if live.slot(which).is_some() {
            return;
        }
        let ch = live.ch.clone();
        let id = live.id;
        let ready = async move {
            match which {
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
                (Err(e), _) => act.lose_channel(Lost::Io(e), ctx),
            }
        }));
        *live.slot(which) = Some(h);
    }

    /// Reads large chunks and decodes every complete frame after each read,
    /// calling handlers directly.
    fn on_readable(&mut self, ctx: &mut Context<Self>) {
        self.session.set_local_need(self.has_refs());
        let outcome = self.read_and_process();
        let id = self.live.as_ref().map(|l| l.id);
        self.process_events(ctx);
        if self.live.as_ref().map(|l| l.id) != id {
            return; // the events closed the channel
        }
        match outcome {
            Ok(()) => {
                self.arm_read(ctx);
                // A reply queued by a handler or a task woken by these
                // messages can carry the ack: hold a threshold ack until the
                // next turn of the event loop.
                self.session.hold_acks(true);
                self.drive(ctx);
                self.session.hold_acks(false);
                self.defer_ack(ctx);
            }
            Err(lost) => self.lose_channel(lost, ctx),
        }
    }

    /// Transmits a held ack one event-loop turn later, unless data queued
    /// meanwhile carried it (see `Session::hold_acks`).
    fn defer_ack(&mut self, ctx: &mut Context<Self>) {
        if self.ack_deferred || !self.session.ack_waiting() {
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

    fn read_and_process(&mut self) -> Result<(), Lost> {
        let node = self.node.clone();
        let entry = self.entry.clone();
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        // Bytes left over from the handshake come first.
        let mut deliver = |m| dispatch(&node, &entry, m);
        self.session
            .handle_input(Instant::now(), &mut live.inb, &mut deliver)
            .map_err(Lost::Protocol)?;
        for _ in 0..READS_PER_TURN {
            let spare = live.inb.spare_mut();
            if spare.is_empty() {
                break;
            }
            match live.ch.try_read(spare) {
                Ok(0) => return Err(Lost::Eof),
                Ok(n) => {
                    Counters::add(&node.counters.reads, 1);
                    live.inb.commit(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(Lost::Io(e)),
            }
            self.session
                .handle_input(Instant::now(), &mut live.inb, &mut deliver)
                .map_err(Lost::Protocol)?;
        }
        Ok(())
    }

    fn attach(&mut self, raw: RawChannel, ctx: &mut Context<Self>) {
        self.chan_seq += 1;
        let peer = raw.ch.peer();
        let buffers = (raw.inb.capacity() + raw.outb.capacity()) as u64;
        Counters::add(&self.node.counters.channel_buffer_bytes, buffers);
        tracing::debug!(site = ?self.entry.id.get(), %peer, generation = ?self.session.channel().map(|c| c.generation), "channel working");
        self.live = Some(Live {
            id: self.chan_seq,
            ch: Rc::new(raw.ch),
            inb: raw.inb,
            outb: raw.outb,
            read: None,
            write: None,
            peer,
        });
        self.backoff = self.node.cfg.reconnect_min;
        self.reconnect_at = None;
        self.idle_since = Instant::now();
        Counters::add(&self.node.counters.channels_opened, 1);
        self.node.changed.notify_waiters();
        self.set_fault(FaultState::Ok, "channel working");
        self.node.acked.notify_waiters();
        self.on_readable(ctx);
    }

    fn drop_live(&mut self, ctx: &mut Context<Self>) -> Option<String> {
        let live = self.live.take()?;
        let buffers = (live.inb.capacity() + live.outb.capacity()) as u64;
        self.node
            .counters
            .channel_buffer_bytes
            .fetch_sub(buffers, std::sync::atomic::Ordering::Relaxed);
        for h in [live.read, live.write].into_iter().flatten() {
            ctx.cancel_future(h);
        }
        self.session.channel_down();
        Counters::add(&self.node.counters.channels_closed, 1);
        self.node.changed.notify_waiters();
        Some(live.peer)
    }

    fn lose_channel(&mut self, why: Lost, ctx: &mut Context<Self>) {
        let Some(peer) = self.live.as_ref().map(|l| l.peer.clone()) else {
            return;
        };
        // A channel ending while the close protocol runs is its expected end:
        // the peer closes after we granted its close, and may close first
        // after granting ours.
        if matches!(why, Lost::Eof | Lost::Io(_)) {
            let reason = match self.session.close_phase() {
                ClosePhase::PeerClosing { hard: true, .. } => Some(CloseReason::PeerHard),
                ClosePhase::PeerClosing { hard: false, .. } => Some(CloseReason::PeerWeak),
                ClosePhase::ClosingHard { .. } => Some(CloseReason::HardDone),
                ClosePhase::ClosingWeak { .. } | ClosePhase::Done => Some(CloseReason::WeakDone),
                ClosePhase::Open => None,
            };
            if let Some(reason) = reason {
                return self.close_channel(reason, ctx);
            }
        }
        match &why {
            Lost::Protocol(e) => {
                Counters::add(&self.node.counters.protocol_errors, 1);
                tracing::warn!(site = ?self.entry.id.get(), %peer, error = %e, "closing channel: peer broke the protocol");
                self.report_fault(peer.clone(), e.to_string(), false);
            }
            Lost::Io(_) | Lost::Eof | Lost::Silent => {
                tracing::info!(site = ?self.entry.id.get(), %peer, reason = %why, "channel lost")
            }
        }
        // Closed only after the fault is on record.
        self.drop_live(ctx);
        self.set_fault(FaultState::TempFailed, &why.to_string());
        self.schedule_reconnect();
        self.drive(ctx);
    }

    fn schedule_reconnect(&mut self) {
        if self.failed || self.entry.address.is_none() || self.node.is_shut_down() {
            return;
        }
        let jitter = rand::thread_rng().gen_range(0.8..1.2);
        let delay = self.backoff.mul_f64(jitter);
        self.backoff = (self.backoff * 2).min(self.node.cfg.reconnect_max);
        self.reconnect_at = Some(Instant::now() + delay);
    }

    fn start_open(&mut self, ctx: &mut Context<Self>) {
        let Some(addr) = self.entry.address.clone() else {
            return;
        };
        if self.node.is_shut_down() {
            return;
        }
        self.attempt_seq += 1;
        let attempt = self.attempt_seq;
        let cfg = &self.node.cfg;
        let hs = Initiator::new(
            self.node.local_info(),
            self.entry.id.get().copied(),
            self.session.last_received(),
            self.session.last_generation(),
        )
        .with_attempt(Attempt {
            opener: self.opener,
            seq: attempt,
        });
        let f = connect_and_open(
            addr,
            cfg.fault_injector.clone(),
            cfg.buffer_size,
            hs,
            cfg.connect_timeout,
            cfg.handshake_timeout,
        );
        let h = ctx.spawn(
            fut::wrap_future::<_, Self>(f)
                .map(move |res, act, ctx| act.on_opened(attempt, res, ctx)),
        );
        self.opening = Some((attempt, h));
    }

    fn on_opened(
        &mut self,
        attempt: u64,
        res: Result<(RawChannel, Opened), (OpenFailure, Option<sitenet_protocols::SiteId>)>,
        ctx: &mut Context<Self>,
    ) {
        if self.opening.as_ref().map(|o| o.0) != Some(attempt) {
            return; // abandoned: another channel won
        }
        self.opening = None;
        match res {
            Ok((raw, opened)) => {
                if self.session.is_working() || self.failed {
                    tracing::warn!(site = ?self.entry.id.get(), "open finished while already working; dropping the new channel");
                    return;
                }
                if let Err(other) = self.node.bind_site_id(&self.entry, opened.present.site) {
                    self.merge_into(other, ctx);
                    return;
                }
                self.node.learn_listen(&self.entry, &opened.present.listen);
                let params = ChannelParams {
                    buffer_size: opened.buffer_size,
                    peer_max_message: opened.peer_max_message,
                    peer_last_received: opened.peer_last_received,
                    generation: opened.generation,
                };
                self.start_session(raw, params, None, ctx);
            }
            Err((e, presented)) => {
                // The peer said who it is before the open failed: if it is a
                // site known under another entry (contacted here by an alias
                // address), this entry merges into that one.
                if let Some(id) = presented.filter(|_| e.permanent().is_none()) {
                    if let Err(other) = self.node.bind_site_id(&self.entry, id) {
                        self.merge_into(other, ctx);
                        return;
                    }
                }
                if let Some(perm) = e.permanent() {
                    // `fail` logs and reports it.
                    self.fail(SiteFailure::Open(perm.clone()), ctx);
                    return;
                }
                if let OpenFailure::Open(OpenError::Protocol(p)) = &e {
                    Counters::add(&self.node.counters.protocol_errors, 1);
                    self.report_fault(self.address_string(), p.to_string(), false);
                }
                tracing::debug!(address = ?self.entry.address.as_ref().map(ToString::to_string), error = %e, "open failed; will retry");
                if !matches!(e, OpenFailure::Open(OpenError::Refused(_))) {
                    self.set_fault(FaultState::TempFailed, &e.to_string());
                }
                self.schedule_reconnect();
                self.drive(ctx);
            }
        }
    }

    /// Starts the session on a channel that just opened; `from` is the
    /// peer's attempt if the channel was accepted here.
    fn start_session(
        &mut self,
        raw: RawChannel,
        params: ChannelParams,
        from: Option<Attempt>,
        ctx: &mut Context<Self>,
    ) {
        if let Err(e) = self.session.channel_up(params) {
            Counters::add(&self.node.counters.protocol_errors, 1);
            tracing::warn!(site = ?self.entry.id.get(), error = %e, "refusing channel");
            self.schedule_reconnect();
            return;
        }
        self.working_from = from;
        self.entry.peer_max.store(
            params.peer_max_message,
            std::sync::atomic::Ordering::Release,
        );
        self.attach(raw, ctx);
    }

    /// This entry was contacted under an address the peer did not list, and
    /// the peer is already known under its id: hand every never-sent message
    /// to that entry and let `SiteRef`s follow it.
    fn merge_into(&mut self, other: Arc<SiteEntry>, ctx: &mut Context<Self>) {
        tracing::debug!(site = ?other.id.get(), "address belongs to a known site; merging");
        let _ = self.entry.redirect.set(other.clone());
        self.take_outbox(false);
        let (not_sent, maybe) = self.session.take_all();
        debug_assert!(
            maybe.is_empty(),
            "an unidentified site has nothing unacknowledged"
        );
        for m in not_sent {
            let n = m.wire_len();
            self.entry.outbox.release(n);
            // Already accepted under this entry's bound: it must not be lost,
            // so it is moved even if the other entry is at its bound.
            other.outbox.force_reserve(n);
            if other.outbox.push(m) {
                other.wake(&self.node.counters);
            }
        }
        ctx.stop();
    }

    fn give_up_deadline(&self) -> Option<Instant> {
        Some(self.temp_since? + self.node.cfg.give_up_after?)
    }

    /// Keeps one timer armed at or before the next deadline. A timer that
    /// fires early is harmless (`on_timer` finds nothing due and re-arms), so
    /// the timer is replaced only when a deadline moves earlier: the
    /// heartbeat deadline moves later on every frame sent, and re-creating
    /// the timer for each would cost more than the frame.
    fn rearm_timer(&mut self, ctx: &mut Context<Self>) {
        if self.failed {
            return;
        }
        let next = [
            self.session.poll_timeout(),
            self.reconnect_at,
            self.linger_deadline(),
            self.give_up_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(at) = next else { return };
        if self.timer.as_ref().is_some_and(|t| t.0 <= at) {
            return;
        }
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let d = at.saturating_duration_since(Instant::now());
        let h = ctx.run_later(d, |act, ctx| {
            act.timer = None;
            act.on_timer(ctx);
        });
        self.timer = Some((at, h));
    }

    fn on_timer(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        if self.give_up_deadline().is_some_and(|t| t <= now) {
            let limit = self
                .node
                .cfg
                .give_up_after
                .expect("deadline implies a limit");
            return self.fail(SiteFailure::GaveUp(limit), ctx);
        }
        self.session.handle_timeout(now);
        self.process_events(ctx);
        if self.linger_deadline().is_some_and(|t| t <= now) && self.session.begin_close_weak(now) {
            tracing::debug!(site = ?self.entry.id.get(), "no references and idle: closing weakly");
            Counters::add(&self.node.counters.weak_closes_started, 1);
        }
        if self.reconnect_at.is_some_and(|t| t <= now) {
            self.reconnect_at = None;
            if !self.session.is_working() && self.opening.is_none() && self.has_need() {
                self.start_open(ctx);
            }
        }
        self.drive(ctx);
    }

    fn fail(&mut self, why: SiteFailure, ctx: &mut Context<Self>) {
        if self.failed {
            return;
        }
        self.failed = true;
        if let Some((_, h)) = self.opening.take() {
            ctx.cancel_future(h);
        }
        self.drop_live(ctx);
        self.reconnect_at = None;
        self.take_outbox(false);
        let (not_sent, maybe) = self.session.take_all();
        let mut back = HandedBack::default();
        for m in not_sent {
            self.entry.outbox.release(m.wire_len());
            back.not_sent.push(m);
        }
        for (_, m) in maybe {
            self.entry.outbox.release(m.wire_len());
            back.maybe_delivered.push(m);
        }
        let reason = why.to_string();
        tracing::warn!(site = ?self.entry.id.get(), %reason, not_sent = back.not_sent.len(), maybe_delivered = back.maybe_delivered.len(), "site failed permanently");
        self.report_fault(self.address_string(), reason.clone(), true);
        *self.entry.failed.lock() = Some((reason.clone(), back));
        self.entry
            .has_failed
            .store(true, std::sync::atomic::Ordering::Release);
        self.set_fault(FaultState::PermFailed, &reason);
        self.entry.outbox.notify_all();
        self.node.fail_requests(self.entry.key, &reason);
        self.node.acked.notify_waiters();
    }

    fn link_view(&self) -> LinkView {
        LinkView {
            local: self.node.id,
            working: self.session.channel().map(|c| c.generation),
            working_from: self.session.channel().and(self.working_from),
            last_generation: self.session.last_generation(),
            opening: self.opening.is_some(),
            closing: self.failed || self.node.is_shut_down(),
        }
    }

    fn refuse(&self, mut raw: RawChannel, reason: RefuseReason, ctx: &mut Context<Self>) {
        write_answer(&mut raw.outb, &NegotiateAns::Refuse(reason));
        let limit = self.node.cfg.handshake_timeout;
        ctx.spawn(fut::wrap_future(flush_and_close(raw, limit)));
    }
}

impl Handler<Wake> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.take_outbox(true);
        self.drive(ctx);
    }
}

impl Handler<Adopt> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: Adopt, ctx: &mut Context<Self>) {
        let Adopt { mut raw, neg } = msg;
        if self.entry.id.get() != Some(&neg.site) {
            // Routed here by a listen address; the id must agree.
            if let Err(other) = self.node.bind_site_id(&self.entry, neg.site) {
                if let Some(a) = other.addr.get() {
                    a.do_send(Adopt { raw, neg });
                }
                return;
            }
        }
        match decide(self.link_view(), &neg) {
            Decision::Refuse(reason) => {
                tracing::debug!(site = %neg.site, ?reason, "refusing accepted channel");
                self.refuse(raw, reason, ctx);
            }
            Decision::Accept {
                generation,
                replaces_working,
                abandon_opening,
            } => {
                if abandon_opening {
                    if let Some((_, h)) = self.opening.take() {
                        ctx.cancel_future(h);
                    }
                }
                if replaces_working {
                    if let Some(peer) = self.drop_live(ctx) {
                        tracing::info!(site = %neg.site, %peer, "peer lost the working channel; adopting its new one");
                    }
                }
                let buffer_size = self.node.cfg.buffer_size.min(neg.buffer_size);
                let ans = NegotiateAns::Accept {
                    buffer_size,
                    max_message: self.node.cfg.max_message_size,
                    last_received: self.session.last_received(),
                    generation,
                };
                write_answer(&mut raw.outb, &ans);
                self.node.learn_listen(&self.entry, &neg.listen);
                let params = ChannelParams {
                    buffer_size,
                    peer_max_message: neg.max_message,
                    peer_last_received: neg.last_received,
                    generation,
                };
                self.start_session(raw, params, Some(neg.attempt), ctx);
            }
        }
    }
}

impl Handler<Stop> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        // A final ack and whatever can be written now; the socket closes
        // with the actor.
        self.session.ack_now();
        self.flush(ctx);
        self.drop_live(ctx);
        ctx.stop();
    }
}

impl Handler<Kill> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Kill, ctx: &mut Context<Self>) {
        // CLOSE_HARD if a channel exists (written now if the socket takes
        // it), then the site fails at once.
        if self.session.begin_close_hard(Instant::now()) {
            self.flush(ctx);
        }
        self.fail(SiteFailure::Killed, ctx);
    }
}

impl Handler<CloseHard> for ComObject {
    type Result = ();

    fn handle(&mut self, _: CloseHard, ctx: &mut Context<Self>) {
        if self.session.begin_close_hard(Instant::now()) {
            Counters::add(&self.node.counters.hard_closes_started, 1);
            self.drive(ctx);
        }
    }
}

impl Handler<HoldBusy> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: HoldBusy, _ctx: &mut Context<Self>) {
        let _ = msg.started.send(());
        if let Some(rx) = msg.release.lock().take() {
            let _ = rx.recv();
        }
    }
}
