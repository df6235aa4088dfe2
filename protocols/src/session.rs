//! [`Session`]: the protocol state of one remote site, independent of any
//! channel — the ComObject's brain.
//!
//! It owns the per-level queues, the scheduler, each lane's marshaler place,
//! the unacknowledged [`Ledger`], message numbering, reassembly and the
//! acknowledgement rules. It survives channels: when a channel is lost the
//! runtime calls [`Session::channel_down`], and when a new one opens
//! [`Session::channel_up`] with the peer's last-received number, after which
//! the unacknowledged messages are resent first, in number order, under their
//! original numbers.
//!
//! # Call-order contract (sans-IO, like quinn-proto)
//!
//! The driver (an actor) owns the socket and the two [`ByteBuffer`]s and
//! repeats, in this order, whenever anything happens:
//!
//! 1. feed input: after reading from the socket into the input buffer, call
//!    [`handle_input`](Session::handle_input), which consumes every complete
//!    frame and calls `deliver` for each complete message, in order;
//! 2. feed time: if the deadline from [`poll_timeout`](Session::poll_timeout)
//!    has passed, call [`handle_timeout`](Session::handle_timeout);
//! 3. flush: call [`poll_transmit`](Session::poll_transmit) to fill the output
//!    buffer, write it to the socket, repeat while both make progress;
//! 4. re-arm one timer to [`poll_timeout`](Session::poll_timeout);
//! 5. collect acknowledged bytes with [`take_freed`](Session::take_freed).
//!
//! No method reads a clock: time is always an argument.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::byte_buffer::ByteBuffer;
use crate::error::{ProtocolError, SendError};
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use crate::ledger::Ledger;
use crate::marshal::InProgress;
use crate::message::{InMessage, OutMessage, PRELUDE_LEN};
use crate::priority::Priority;
use crate::reassembly::{Reassembly, ReassemblyBudget};
use crate::scheduler::{Scheduler, SchedulerConfig};

/// Tunables of a session (DESIGN.md "Defaults").
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Largest incoming message accepted (prelude, header and body).
    pub max_message: u64,
    /// Send an explicit ack once this many bytes were received unacknowledged.
    pub ack_bytes: u64,
    /// … or this many messages …
    pub ack_messages: u32,
    /// … or this long after the first unacknowledged message.
    pub ack_delay: Duration,
    /// Lane weights and level-1 promotion.
    pub scheduler: SchedulerConfig,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_message: 256 * 1024 * 1024,
            ack_bytes: 64 * 1024,
            ack_messages: 100,
            ack_delay: Duration::from_millis(20),
            scheduler: SchedulerConfig::default(),
        }
    }
}

/// What the open protocol settled for a new channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelParams {
    /// Negotiated ByteBuffer size: frames are at most this (and 64 KiB).
    pub buffer_size: u32,
    /// Largest message the peer accepts.
    pub peer_max_message: u64,
    /// Last message number the peer received from us.
    pub peer_last_received: u64,
    /// The channel's generation.
    pub generation: u64,
}

/// Counters of one session (for metrics and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Messages completely sent for the first time.
    pub sent: u64,
    /// Messages resent after a reconnect.
    pub retransmitted: u64,
    /// Messages delivered to the handler.
    pub delivered: u64,
    /// Messages received again after delivery, and discarded.
    pub duplicates: u64,
    /// Frames written.
    pub frames_out: u64,
    /// Explicit ack frames written.
    pub acks_out: u64,
    /// Frames consumed.
    pub frames_in: u64,
}

/// The state of one remote site. See the module documentation.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    budget: ReassemblyBudget,
    /// Queued, never sent, per level (index = level - 1).
    queues: [VecDeque<OutMessage>; 4],
    /// The partly sent message of each lane (at most one per lane).
    current: [Option<InProgress>; 4],
    /// Unacknowledged messages to resend before any new traffic, in number order.
    resend: VecDeque<(u64, OutMessage)>,
    /// The resent message being marshaled.
    resend_current: Option<InProgress>,
    sched: Scheduler,
    /// Highest number assigned (numbers start at 1).
    last_sent: u64,
    ledger: Ledger,
    /// Highest number received and delivered.
    last_received: u64,
    /// Ack value last carried by a frame we wrote.
    ack_sent: u64,
    since_ack_messages: u32,
    since_ack_bytes: u64,
    ack_deadline: Option<Instant>,
    reassembly: [Option<Reassembly>; 4],
    /// Parameters of the working channel, if any.
    channel: Option<ChannelParams>,
    /// Highest generation seen working.
    last_generation: u64,
    peer_max_message: Option<u64>,
    freed: (u64, u64),
    queued_bytes: u64,
    stats: SessionStats,
}

impl Session {
    /// A session with no channel yet.
    pub fn new(cfg: SessionConfig, budget: ReassemblyBudget) -> Self {
        Self {
            sched: Scheduler::new(cfg.scheduler.clone()),
            cfg,
            budget,
            queues: Default::default(),
            current: Default::default(),
            resend: VecDeque::new(),
            resend_current: None,
            last_sent: 0,
            ledger: Ledger::default(),
            last_received: 0,
            ack_sent: 0,
            since_ack_messages: 0,
            since_ack_bytes: 0,
            ack_deadline: None,
            reassembly: Default::default(),
            channel: None,
            last_generation: 0,
            peer_max_message: None,
            freed: (0, 0),
            queued_bytes: 0,
            stats: SessionStats::default(),
        }
    }

    /// Queues a message. Fails if it exceeds what the peer accepts (known
    /// once a channel has worked): such a message would be refused for ever.
    pub fn queue(&mut self, msg: OutMessage) -> Result<(), (SendError, OutMessage)> {
        if let Some(max) = self.peer_max_message {
            if msg.wire_len() > max {
                return Err((SendError::TooLarge { size: msg.wire_len(), max }, msg));
            }
        }
        self.queued_bytes += msg.wire_len();
        self.queues[msg.priority.index()].push_back(msg);
        Ok(())
    }

    /// True if a channel is working.
    pub fn is_working(&self) -> bool {
        self.channel.is_some()
    }

    /// The working channel's parameters.
    pub fn channel(&self) -> Option<&ChannelParams> {
        self.channel.as_ref()
    }

    /// Highest generation seen working (for NEGOTIATE and the link decision).
    pub fn last_generation(&self) -> u64 {
        self.last_generation
    }

    /// Highest message number received (for NEGOTIATE / NEGOTIATE_ANS).
    pub fn last_received(&self) -> u64 {
        self.last_received
    }

    /// Highest message number assigned.
    pub fn last_sent(&self) -> u64 {
        self.last_sent
    }

    /// Largest message the peer accepts, once known.
    pub fn peer_max_message(&self) -> Option<u64> {
        self.peer_max_message
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// Messages held: queued, partly sent, or awaiting acknowledgement.
    pub fn pending_messages(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum::<usize>()
            + self.current.iter().filter(|c| c.is_some()).count()
            + self.ledger.len()
    }

    /// Messages completely sent and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.ledger.len()
    }

    /// Takes the (message count, bytes) acknowledged since the last call.
    pub fn take_freed(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.freed)
    }

    /// A new channel is working. Frees what the peer says it received, and
    /// schedules everything else in the ledger for resending, first and in
    /// number order.
    pub fn channel_up(&mut self, params: ChannelParams) -> Result<(), ProtocolError> {
        if params.peer_last_received > self.last_sent {
            return Err(ProtocolError::AckBeyondSent { ack: params.peer_last_received, sent: self.last_sent });
        }
        self.channel_down();
        self.apply_ack(params.peer_last_received);
        self.resend = self.ledger.iter().cloned().collect();
        self.last_generation = self.last_generation.max(params.generation);
        self.peer_max_message = Some(params.peer_max_message);
        self.channel = Some(params);
        // The peer learned our last_received in the handshake.
        self.ack_sent = self.last_received;
        self.since_ack_bytes = 0;
        self.since_ack_messages = 0;
        self.ack_deadline = None;
        Ok(())
    }

    /// The channel is gone. Partly sent messages restart from their first
    /// fragment on the next channel; partly received ones are discarded.
    pub fn channel_down(&mut self) {
        self.channel = None;
        for c in self.current.iter_mut().flatten() {
            c.rewind();
        }
        self.resend.clear();
        self.resend_current = None;
        self.reassembly = Default::default();
        self.ack_deadline = None;
    }

    fn max_payload(&self) -> usize {
        let buf = self.channel.map_or(MAX_FRAME_LEN, |c| c.buffer_size as usize);
        buf.min(MAX_FRAME_LEN) - HEADER_LEN
    }

    fn apply_ack(&mut self, ack: u64) {
        let (n, bytes) = self.ledger.ack(ack);
        self.freed.0 += n as u64;
        self.freed.1 += bytes;
    }

    /// Consumes every complete frame in `input`, calling `deliver` for each
    /// complete new message, in order. The ack advances only after `deliver`
    /// returns. An error means the peer broke the protocol: close the channel.
    pub fn handle_input(
        &mut self,
        now: Instant,
        input: &mut ByteBuffer,
        deliver: &mut dyn FnMut(InMessage),
    ) -> Result<(), ProtocolError> {
        let max_payload = self.max_payload();
        let mut hb = [0u8; HEADER_LEN];
        while input.peek(0, &mut hb) {
            let h = FrameHeader::decode(&hb, max_payload)?;
            // The ack is processed as soon as the header is there.
            if h.ack > self.last_sent {
                return Err(ProtocolError::AckBeyondSent { ack: h.ack, sent: self.last_sent });
            }
            self.apply_ack(h.ack);
            let len = HEADER_LEN + h.payload_len as usize;
            if input.len() < len {
                break;
            }
            match h.kind {
                FrameKind::Data => {
                    let (a, b) = input.slices(HEADER_LEN, h.payload_len as usize);
                    self.on_data(now, &h, a, b, deliver)?;
                }
                FrameKind::Ack | FrameKind::Heartbeat => {}
                kind => return Err(ProtocolError::Unexpected { kind, state: "working" }),
            }
            self.stats.frames_in += 1;
            input.consume(len);
        }
        Ok(())
    }

    fn on_data(
        &mut self,
        now: Instant,
        h: &FrameHeader,
        a: &[u8],
        b: &[u8],
        deliver: &mut dyn FnMut(InMessage),
    ) -> Result<(), ProtocolError> {
        let lane = h.lane;
        let idx = lane as usize - 1;
        if h.is_first() {
            if self.reassembly[idx].is_some() {
                return Err(ProtocolError::FragmentSequence { lane, reason: "new message while one is incomplete" });
            }
            let mut prelude = [0u8; PRELUDE_LEN];
            if a.len() + b.len() < PRELUDE_LEN {
                return Err(ProtocolError::FragmentSequence { lane, reason: "first fragment shorter than the message prelude" });
            }
            let k = a.len().min(PRELUDE_LEN);
            prelude[..k].copy_from_slice(&a[..k]);
            prelude[k..].copy_from_slice(&b[..PRELUDE_LEN - k]);
            let mut r = Reassembly::start(lane, &prelude, self.cfg.max_message, &self.budget)?;
            r.extend(lane, &a[k..])?;
            r.extend(lane, &b[PRELUDE_LEN - k..])?;
            self.reassembly[idx] = Some(r);
        } else {
            let r = self.reassembly[idx]
                .as_mut()
                .ok_or(ProtocolError::FragmentSequence { lane, reason: "continuation without a first fragment" })?;
            if h.frag_offset != r.received() {
                return Err(ProtocolError::FragmentOffset { lane, got: h.frag_offset, expected: r.received() });
            }
            r.extend(lane, a)?;
            r.extend(lane, b)?;
        }
        if !h.is_last() {
            return Ok(());
        }
        let r = self.reassembly[idx].take().expect("set above");
        if !r.is_complete() {
            return Err(ProtocolError::MessageLength { lane, got: r.received(), announced: r.prelude().total_len() });
        }
        let size = r.received();
        let n = h.msg_number;
        if n <= self.last_received {
            // Exactly once: a message delivered before is dropped and counted.
            self.stats.duplicates += 1;
            return Ok(());
        }
        if n != self.last_received + 1 {
            return Err(ProtocolError::NumberGap { last: self.last_received, got: n });
        }
        let (prelude, header, body) = r.finish();
        deliver(InMessage {
            priority: Priority::from_lane(lane).expect("validated lane"),
            number: n,
            prelude,
            header,
            body,
        });
        self.last_received = n;
        self.stats.delivered += 1;
        self.since_ack_messages += 1;
        self.since_ack_bytes += size;
        if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.cfg.ack_delay);
        }
        Ok(())
    }

    fn ack_due(&self, now: Instant) -> bool {
        self.last_received > self.ack_sent
            && (self.since_ack_messages >= self.cfg.ack_messages
                || self.since_ack_bytes >= self.cfg.ack_bytes
                || self.ack_deadline.is_some_and(|d| now >= d))
    }

    fn note_ack_carried(&mut self) {
        self.ack_sent = self.last_received;
        self.since_ack_bytes = 0;
        self.since_ack_messages = 0;
        self.ack_deadline = None;
        self.stats.frames_out += 1;
    }

    /// True if a frame is waiting to be written (data, or a due ack).
    pub fn wants_to_send(&self, now: Instant) -> bool {
        self.is_working()
            && (self.resend_current.is_some()
                || !self.resend.is_empty()
                || self.current.iter().any(Option::is_some)
                || self.queues.iter().any(|q| !q.is_empty())
                || self.ack_due(now))
    }

    /// Fills `out` with as many frames as fit (a no-op without a working
    /// channel). Returns the bytes written.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut ByteBuffer) -> usize {
        if !self.is_working() {
            return 0;
        }
        let start = out.len();
        let max_payload = self.max_payload();
        loop {
            let ack = self.last_received;
            // Resent messages go first, in number order, before any new traffic.
            if self.resend_current.is_none() {
                if let Some((n, m)) = self.resend.pop_front() {
                    self.resend_current = Some(InProgress::new(m, Some(n)));
                }
            }
            if let Some(ip) = self.resend_current.as_mut() {
                let Some(w) = ip.write_frame(out, max_payload, ack, || unreachable!("resends keep their number")) else {
                    break;
                };
                self.note_ack_carried();
                if w.done {
                    self.resend_current = None;
                    self.stats.retransmitted += 1;
                }
                continue;
            }
            let ready = std::array::from_fn(|i| self.current[i].is_some() || !self.queues[i].is_empty());
            let Some(p) = self.sched.pick(ready, now) else {
                break;
            };
            let i = p.index();
            if self.current[i].is_none() {
                let m = self.queues[i].pop_front().expect("lane is ready");
                self.current[i] = Some(InProgress::new(m, None));
            }
            let ip = self.current[i].as_mut().expect("set above");
            let last_sent = &mut self.last_sent;
            let Some(w) = ip.write_frame(out, max_payload, ack, || {
                *last_sent += 1;
                *last_sent
            }) else {
                break;
            };
            self.sched.charge(p, w.frame_len, w.done, now);
            self.note_ack_carried();
            if w.done {
                let ip = self.current[i].take().expect("in progress");
                let n = ip.number.expect("numbered on its last fragment");
                self.queued_bytes -= ip.msg.wire_len();
                self.ledger.record(n, ip.msg);
                self.stats.sent += 1;
            }
        }
        if self.ack_due(now) && out.free() >= HEADER_LEN {
            let mut hb = [0u8; HEADER_LEN];
            FrameHeader::control(FrameKind::Ack, 0, self.last_received).encode(&mut hb);
            out.push(&hb);
            self.note_ack_carried();
            self.stats.acks_out += 1;
        }
        out.len() - start
    }

    /// Writes a heartbeat frame (it also carries the current ack).
    pub fn write_heartbeat(&mut self, out: &mut ByteBuffer) -> bool {
        if out.free() < HEADER_LEN {
            return false;
        }
        let mut hb = [0u8; HEADER_LEN];
        FrameHeader::control(FrameKind::Heartbeat, 0, self.last_received).encode(&mut hb);
        out.push(&hb);
        self.note_ack_carried();
        true
    }

    /// Advances timers to `now` (the delayed ack becomes due: the next
    /// [`poll_transmit`](Self::poll_transmit) writes it).
    pub fn handle_timeout(&mut self, _now: Instant) {}

    /// The next instant at which [`handle_timeout`](Self::handle_timeout) must
    /// be called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_working() && self.last_received > self.ack_sent {
            self.ack_deadline
        } else {
            None
        }
    }

    /// Bytes queued and not yet completely sent.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Takes every message out (the site failed for good): `not_sent` were
    /// never completely sent, `maybe_delivered` were sent and not acknowledged.
    pub fn take_all(&mut self) -> (Vec<OutMessage>, Vec<(u64, OutMessage)>) {
        let mut not_sent = Vec::new();
        for i in 0..4 {
            if let Some(ip) = self.current[i].take() {
                not_sent.push(ip.msg);
            }
            not_sent.extend(self.queues[i].drain(..));
        }
        self.queued_bytes = 0;
        self.resend.clear();
        self.resend_current = None;
        (not_sent, self.ledger.drain())
    }
}
