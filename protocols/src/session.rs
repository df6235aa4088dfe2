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

use bytes::Bytes;

use crate::byte_buffer::ByteBuffer;
use crate::error::{ProtocolError, SendError};
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use crate::ledger::Ledger;
use crate::marshal::InProgress;
use crate::message::{InMessage, OutMessage, Prelude};
use crate::priority::Priority;
use crate::reassembly::{split_whole, Reassembly, ReassemblyBudget};
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
    /// Send a heartbeat when nothing was sent for this long.
    pub heartbeat_interval: Duration,
    /// Presume the channel dead when nothing was heard for this long.
    pub silence_timeout: Duration,
    /// Bound on every wait of the close protocol.
    pub close_timeout: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_message: 256 * 1024 * 1024,
            ack_bytes: 64 * 1024,
            ack_messages: 100,
            ack_delay: Duration::from_millis(20),
            scheduler: SchedulerConfig::default(),
            heartbeat_interval: Duration::from_secs(1),
            silence_timeout: Duration::from_secs(5),
            close_timeout: Duration::from_secs(5),
        }
    }
}

/// Where the working channel stands in the close protocol.
///
/// ```text
///            begin_close_weak           CLOSE_ACCEPT / crossing CLOSE_WEAK / CLOSE_HARD
///   Open ─────────────────────> ClosingWeak ───────────────> (CloseChannel event)
///     │  <──── CLOSE_REJECT ────────┘   └── timer ──────────> (CloseChannel event)
///     │      begin_close_hard           CLOSE_ACCEPT / crossing close / timer
///     ├───────────────────────> ClosingHard ───────────────> (CloseChannel event)
///     │  peer CLOSE_WEAK, no local need → answer CLOSE_ACCEPT
///     ├───────────────────────> PeerClosing ─ peer closes / timer ─> (CloseChannel event)
///     │  peer CLOSE_HARD → answer CLOSE_ACCEPT
///     └───────────────────────> PeerClosing
///        peer CLOSE_WEAK with local need → answer CLOSE_REJECT, stay Open
/// ```
///
/// In every state but `Open` no new application message is sent; acks,
/// heartbeats and close frames still are. Every wait ends by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosePhase {
    /// Working normally.
    Open,
    /// We sent CLOSE_WEAK; the peer may accept or reject.
    ClosingWeak {
        /// When we give up waiting.
        deadline: Instant,
    },
    /// We sent CLOSE_HARD; the peer must accept.
    ClosingHard {
        /// When we give up waiting.
        deadline: Instant,
    },
    /// We accepted the peer's close; it closes the channel.
    PeerClosing {
        /// The peer's close was hard (it will reconnect; we wait for it).
        hard: bool,
        /// When we close it ourselves.
        deadline: Instant,
    },
    /// The close protocol finished; the driver is closing the channel. No
    /// data goes out until the next channel.
    Done,
}

/// Why the session asks the driver to close the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Our weak close was accepted (or crossed the peer's): the channel is no
    /// longer needed. Reopen only when a need arises.
    WeakDone,
    /// Our hard close completed: reopen when resources allow.
    HardDone,
    /// The peer closed weakly and we accepted.
    PeerWeak,
    /// The peer closed hard (it was short of resources) and will reconnect;
    /// wait for it rather than reconnecting at once.
    PeerHard,
    /// A close-protocol wait ran out.
    Timeout,
}

/// Something the driver must act on (see [`Session::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// Close the channel now.
    CloseChannel(CloseReason),
    /// The peer rejected our weak close: it still needs the channel. Do not
    /// try again for a while.
    WeakCloseRejected,
    /// The peer told us it holds no more references to us.
    PeerClearedReference,
    /// Nothing was heard for the silence timeout: presume the channel dead.
    Silent,
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
    /// Heartbeat frames written.
    pub heartbeats_out: u64,
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
    close: ClosePhase,
    /// Close frames to send, before anything else.
    control: VecDeque<FrameKind>,
    events: VecDeque<SessionEvent>,
    /// Whether the local side still needs the channel (references held).
    local_need: bool,
    /// Last time a frame was written / read on the working channel (set on
    /// the first call after `channel_up`).
    last_tx: Option<Instant>,
    last_rx: Option<Instant>,
    ack_forced: bool,
    /// Standalone acks due only by count or bytes wait (see `hold_acks`).
    ack_hold: bool,
    /// Queued messages the peer can never take (see `take_refused`).
    refused: Vec<(SendError, OutMessage)>,
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
            close: ClosePhase::Open,
            control: VecDeque::new(),
            events: VecDeque::new(),
            local_need: true,
            last_tx: None,
            last_rx: None,
            ack_forced: false,
            ack_hold: false,
            refused: Vec::new(),
        }
    }

    /// Where the working channel stands in the close protocol.
    pub fn close_phase(&self) -> ClosePhase {
        self.close
    }

    /// Tells the session whether the local side still holds references to
    /// the peer (a weak close from the peer is then rejected).
    pub fn set_local_need(&mut self, need: bool) {
        self.local_need = need;
    }

    fn has_need(&self) -> bool {
        self.local_need || self.pending_messages() > 0
    }

    /// Starts a weak close ("no longer needed"). Refused (false) without a
    /// working channel, while another close runs, or while messages are
    /// queued or unacknowledged.
    pub fn begin_close_weak(&mut self, now: Instant) -> bool {
        if !self.is_working() || self.close != ClosePhase::Open || self.pending_messages() > 0 {
            return false;
        }
        self.control.push_back(FrameKind::ClearReference);
        self.control.push_back(FrameKind::CloseWeak);
        self.close = ClosePhase::ClosingWeak {
            deadline: now + self.cfg.close_timeout,
        };
        true
    }

    /// Starts a hard close ("resources are short"), which the peer must grant.
    /// Queued and unacknowledged messages stay for the next channel.
    pub fn begin_close_hard(&mut self, now: Instant) -> bool {
        // From working or a weak close only: a channel the peer is already
        // closing, or whose close is done, is going away anyway.
        if !self.is_working()
            || !matches!(
                self.close,
                ClosePhase::Open | ClosePhase::ClosingWeak { .. }
            )
        {
            return false;
        }
        self.control.push_back(FrameKind::CloseHard);
        self.close = ClosePhase::ClosingHard {
            deadline: now + self.cfg.close_timeout,
        };
        true
    }

    /// The next event for the driver, if any.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    fn on_close_frame(&mut self, now: Instant, kind: FrameKind) -> Result<(), ProtocolError> {
        let deadline = now + self.cfg.close_timeout;
        match (self.close, kind) {
            (_, FrameKind::ClearReference) => {
                self.events.push_back(SessionEvent::PeerClearedReference)
            }
            (ClosePhase::Open, FrameKind::CloseWeak) => {
                if self.has_need() {
                    self.control.push_back(FrameKind::CloseReject);
                } else {
                    self.control.push_back(FrameKind::CloseAccept);
                    self.close = ClosePhase::PeerClosing {
                        hard: false,
                        deadline,
                    };
                }
            }
            (ClosePhase::Open, FrameKind::CloseHard)
            | (ClosePhase::PeerClosing { hard: false, .. }, FrameKind::CloseHard) => {
                self.control.push_back(FrameKind::CloseAccept);
                self.close = ClosePhase::PeerClosing {
                    hard: true,
                    deadline,
                };
            }
            // Crossing weak closes count as an accept (Mozart's W4 left both
            // sides waiting for ever).
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseWeak | FrameKind::CloseAccept) => {
                self.finish_close(CloseReason::WeakDone)
            }
            // A hard close from the peer while we close weakly: grant it.
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseHard) => {
                self.finish_close(CloseReason::PeerHard)
            }
            (
                ClosePhase::ClosingHard { .. },
                FrameKind::CloseAccept | FrameKind::CloseHard | FrameKind::CloseWeak,
            ) => self.finish_close(CloseReason::HardDone),
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseReject) => {
                self.close = ClosePhase::Open;
                self.events.push_back(SessionEvent::WeakCloseRejected);
            }
            // The reject answers a weak close that a hard close superseded;
            // the hard close must still be granted.
            (ClosePhase::ClosingHard { .. }, FrameKind::CloseReject) => {}
            // Frames the peer sent before it saw our close ended.
            (ClosePhase::Done, _) => {}
            // The peer repeats a close we already accepted: nothing more to do.
            (ClosePhase::PeerClosing { .. }, FrameKind::CloseWeak | FrameKind::CloseHard) => {}
            (state, kind) => {
                return Err(ProtocolError::Unexpected {
                    kind,
                    state: close_state_name(state),
                });
            }
        }
        Ok(())
    }

    fn finish_close(&mut self, reason: CloseReason) {
        self.close = ClosePhase::Done;
        self.events.push_back(SessionEvent::CloseChannel(reason));
    }

    /// Queues a message. Fails if it exceeds what the peer accepts (known
    /// once a channel has worked): such a message would be refused for ever.
    /// On failure the message comes back with the reason (boxed: the error
    /// path is rare, and a large `Err` would slow every call).
    pub fn queue(&mut self, msg: OutMessage) -> Result<(), Box<(SendError, OutMessage)>> {
        if let Some(max) = self.peer_max_message {
            if msg.wire_len() > max {
                let e = SendError::TooLarge {
                    size: msg.wire_len(),
                    max,
                };
                return Err(Box::new((e, msg)));
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
            return Err(ProtocolError::AckBeyondSent {
                ack: params.peer_last_received,
                sent: self.last_sent,
            });
        }
        self.channel_down();
        self.apply_ack(params.peer_last_received);
        self.resend = self.ledger.iter().cloned().collect();
        self.last_generation = self.last_generation.max(params.generation);
        self.peer_max_message = Some(params.peer_max_message);
        self.refuse_oversized(params.peer_max_message);
        self.channel = Some(params);
        // The peer learned our last_received in the handshake.
        self.ack_sent = self.last_received;
        self.since_ack_bytes = 0;
        self.since_ack_messages = 0;
        self.ack_deadline = None;
        Ok(())
    }

    /// Removes the queued (and partly sent) messages larger than the peer
    /// accepts: queued before the peer's maximum was known, they would be
    /// refused by the peer for ever. [`take_refused`](Self::take_refused)
    /// hands them back.
    fn refuse_oversized(&mut self, max: u64) {
        for i in 0..4 {
            if self.current[i]
                .as_ref()
                .is_some_and(|ip| ip.msg.wire_len() > max)
            {
                let ip = self.current[i].take().expect("checked");
                self.refuse(ip.msg, max);
            }
            if self.queues[i].iter().any(|m| m.wire_len() > max) {
                let q = std::mem::take(&mut self.queues[i]);
                for m in q {
                    if m.wire_len() > max {
                        self.refuse(m, max);
                    } else {
                        self.queues[i].push_back(m);
                    }
                }
            }
        }
    }

    fn refuse(&mut self, m: OutMessage, max: u64) {
        self.queued_bytes -= m.wire_len();
        let e = SendError::TooLarge {
            size: m.wire_len(),
            max,
        };
        self.refused.push((e, m));
    }

    /// Takes the messages found unsendable (larger than the peer's maximum,
    /// learned after they were queued). They were never sent.
    pub fn take_refused(&mut self) -> Vec<(SendError, OutMessage)> {
        std::mem::take(&mut self.refused)
    }

    /// The channel is gone. Partly sent messages restart from their first
    /// fragment on the next channel; partly received ones are discarded.
    pub fn channel_down(&mut self) {
        self.channel = None;
        self.close = ClosePhase::Open;
        self.control.clear();
        self.last_tx = None;
        self.last_rx = None;
        for c in self.current.iter_mut().flatten() {
            c.rewind();
        }
        self.resend.clear();
        self.resend_current = None;
        self.reassembly = Default::default();
        self.ack_deadline = None;
    }

    fn max_payload(&self) -> usize {
        let buf = self
            .channel
            .map_or(MAX_FRAME_LEN, |c| c.buffer_size as usize);
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
        if !input.is_empty() {
            self.last_rx = Some(now);
        }
        while input.peek(0, &mut hb) {
            let h = FrameHeader::decode(&hb, max_payload)?;
            // The ack is processed as soon as the header is there.
            if h.ack > self.last_sent {
                return Err(ProtocolError::AckBeyondSent {
                    ack: h.ack,
                    sent: self.last_sent,
                });
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
                kind @ (FrameKind::CloseWeak
                | FrameKind::CloseHard
                | FrameKind::CloseAccept
                | FrameKind::CloseReject
                | FrameKind::ClearReference) => {
                    if h.payload_len != 0 {
                        return Err(ProtocolError::Malformed {
                            what: "close frame",
                            reason: "non-empty payload".into(),
                        });
                    }
                    self.on_close_frame(now, kind)?;
                }
                kind => {
                    return Err(ProtocolError::Unexpected {
                        kind,
                        state: "working",
                    })
                }
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
                return Err(ProtocolError::FragmentSequence {
                    lane,
                    reason: "new message while one is incomplete",
                });
            }
            if h.is_last() {
                // The common case for small messages: whole in one frame,
                // copied straight out of the ring.
                let parts = split_whole(lane, a, b, self.cfg.max_message)?;
                let size = parts.0.total_len();
                return self
                    .deliver_numbered(now, h, size, deliver, |n| in_message(lane, n, parts));
            }
            let r = Reassembly::start(lane, a, b, self.cfg.max_message, &self.budget)?;
            self.reassembly[idx] = Some(r);
        } else {
            let r = self.reassembly[idx]
                .as_mut()
                .ok_or(ProtocolError::FragmentSequence {
                    lane,
                    reason: "continuation without a first fragment",
                })?;
            if h.frag_offset != r.received() {
                return Err(ProtocolError::FragmentOffset {
                    lane,
                    got: h.frag_offset,
                    expected: r.received(),
                });
            }
            r.extend(lane, a)?;
            r.extend(lane, b)?;
        }
        if !h.is_last() {
            return Ok(());
        }
        let r = self.reassembly[idx].take().expect("set above");
        if !r.is_complete() {
            return Err(ProtocolError::MessageLength {
                lane,
                got: r.received(),
                announced: r.prelude().total_len(),
            });
        }
        let size = r.received();
        self.deliver_numbered(now, h, size, deliver, |n| in_message(lane, n, r.finish()))
    }

    /// Delivers the message that the frame `h` completed (`size` wire bytes,
    /// built by `make` only if it is new), or drops and counts a duplicate;
    /// a gap in the numbers is a protocol error.
    fn deliver_numbered(
        &mut self,
        now: Instant,
        h: &FrameHeader,
        size: u64,
        deliver: &mut dyn FnMut(InMessage),
        make: impl FnOnce(u64) -> InMessage,
    ) -> Result<(), ProtocolError> {
        let n = h.msg_number;
        if n <= self.last_received {
            // Exactly once: a message delivered before is dropped and counted.
            self.stats.duplicates += 1;
            return Ok(());
        }
        if n != self.last_received + 1 {
            return Err(ProtocolError::NumberGap {
                last: self.last_received,
                got: n,
            });
        }
        deliver(make(n));
        self.last_received = n;
        self.stats.delivered += 1;
        self.since_ack_messages += 1;
        self.since_ack_bytes += size;
        if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.cfg.ack_delay);
        }
        Ok(())
    }

    /// Makes an explicit ack due at once (before a graceful close, so the
    /// peer is not left waiting for acknowledgements it will never get).
    pub fn ack_now(&mut self) {
        self.ack_forced = true;
    }

    /// Holds back a standalone ACK frame that is due only because the
    /// message or byte threshold was reached, while `hold` is set; data
    /// frames still carry the ack. A driver that has just delivered messages
    /// holds acks for its first transmit, so that a reply its handlers or
    /// tasks queue next can carry the ack instead of a frame (and a wake-up of
    /// the peer) of its own; it releases the hold and transmits again one
    /// turn of its event loop later. A forced ack ([`ack_now`](Self::ack_now))
    /// and the ack delay are never held.
    pub fn hold_acks(&mut self, hold: bool) {
        self.ack_hold = hold;
    }

    /// True if a standalone ack is waiting, held or not.
    pub fn ack_waiting(&self) -> bool {
        self.last_received > self.ack_sent
            && (self.ack_forced
                || self.since_ack_messages >= self.cfg.ack_messages
                || self.since_ack_bytes >= self.cfg.ack_bytes)
    }

    fn ack_due(&self, now: Instant) -> bool {
        self.last_received > self.ack_sent
            && (self.ack_forced
                || (!self.ack_hold
                    && (self.since_ack_messages >= self.cfg.ack_messages
                        || self.since_ack_bytes >= self.cfg.ack_bytes))
                || self.ack_deadline.is_some_and(|d| now >= d))
    }

    fn note_ack_carried(&mut self) {
        self.ack_sent = self.last_received;
        self.ack_forced = false;
        self.since_ack_bytes = 0;
        self.since_ack_messages = 0;
        self.ack_deadline = None;
        self.stats.frames_out += 1;
    }

    /// True if a frame is waiting to be written (data, or a due ack).
    pub fn wants_to_send(&self, now: Instant) -> bool {
        if !self.is_working() {
            return false;
        }
        // While closing, only close frames and acks go out.
        let data = self.close == ClosePhase::Open
            && (self.resend_current.is_some()
                || !self.resend.is_empty()
                || self.current.iter().any(Option::is_some)
                || self.queues.iter().any(|q| !q.is_empty()));
        data || !self.control.is_empty() || self.ack_due(now)
    }

    /// Fills `out` with as many frames as fit (a no-op without a working
    /// channel). Returns the bytes written.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut ByteBuffer) -> usize {
        if !self.is_working() {
            return 0;
        }
        let start = out.len();
        let max_payload = self.max_payload();
        // Close frames first; they carry the current ack like any frame.
        while let Some(&kind) = self.control.front() {
            if out.free() < HEADER_LEN {
                break;
            }
            let mut hb = [0u8; HEADER_LEN];
            FrameHeader::control(kind, 0, self.last_received).encode(&mut hb);
            out.push(&hb);
            self.note_ack_carried();
            self.control.pop_front();
        }
        // While closing, no new application message goes out.
        let sending = self.close == ClosePhase::Open;
        while sending && self.write_one_data_frame(now, out, max_payload) {}
        if self.ack_due(now) && out.free() >= HEADER_LEN {
            let mut hb = [0u8; HEADER_LEN];
            FrameHeader::control(FrameKind::Ack, 0, self.last_received).encode(&mut hb);
            out.push(&hb);
            self.note_ack_carried();
            self.stats.acks_out += 1;
        }
        let written = out.len() - start;
        let last_tx = *self.last_tx.get_or_insert(now);
        if written > 0 {
            self.last_tx = Some(now);
        } else if now.saturating_duration_since(last_tx) >= self.cfg.heartbeat_interval
            && self.write_heartbeat(out)
        {
            self.last_tx = Some(now);
            self.stats.heartbeats_out += 1;
            return out.len() - start;
        }
        written
    }

    /// Writes a heartbeat frame (it also carries the current ack).
    fn write_heartbeat(&mut self, out: &mut ByteBuffer) -> bool {
        if out.free() < HEADER_LEN {
            return false;
        }
        let mut hb = [0u8; HEADER_LEN];
        FrameHeader::control(FrameKind::Heartbeat, 0, self.last_received).encode(&mut hb);
        out.push(&hb);
        self.note_ack_carried();
        true
    }

    /// Writes the next data frame (resends first, then the scheduler's pick);
    /// false if there is nothing to send or no room.
    fn write_one_data_frame(
        &mut self,
        now: Instant,
        out: &mut ByteBuffer,
        max_payload: usize,
    ) -> bool {
        let ack = self.last_received;
        // Resent messages go first, in number order, before any new traffic.
        if self.resend_current.is_none() {
            if let Some((n, m)) = self.resend.pop_front() {
                self.resend_current = Some(InProgress::new(m, Some(n)));
            }
        }
        if let Some(ip) = self.resend_current.as_mut() {
            let Some(w) = ip.write_frame(out, max_payload, ack, || {
                unreachable!("resends keep their number")
            }) else {
                return false;
            };
            self.note_ack_carried();
            if w.done {
                self.resend_current = None;
                self.stats.retransmitted += 1;
            }
            return true;
        }
        let ready =
            std::array::from_fn(|i| self.current[i].is_some() || !self.queues[i].is_empty());
        let Some(p) = self.sched.pick(ready, now) else {
            return false;
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
            return false;
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
        true
    }

    /// Advances timers to `now`. A delayed ack or a heartbeat becomes due
    /// (the next [`poll_transmit`](Self::poll_transmit) writes it); a close
    /// wait that ran out, or silence past the silence timeout, produces an
    /// event.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.is_working() {
            return;
        }
        match self.close {
            ClosePhase::ClosingWeak { deadline }
            | ClosePhase::ClosingHard { deadline }
            | ClosePhase::PeerClosing { deadline, .. }
                if now >= deadline =>
            {
                self.finish_close(CloseReason::Timeout);
                return;
            }
            _ => {}
        }
        let last_rx = *self.last_rx.get_or_insert(now);
        if now.saturating_duration_since(last_rx) >= self.cfg.silence_timeout
            && !self.events.contains(&SessionEvent::Silent)
        {
            self.events.push_back(SessionEvent::Silent);
        }
    }

    /// The next instant at which [`handle_timeout`](Self::handle_timeout) must
    /// be called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.is_working() {
            return None;
        }
        let ack = (self.last_received > self.ack_sent)
            .then_some(self.ack_deadline)
            .flatten();
        let close = match self.close {
            ClosePhase::Open | ClosePhase::Done => None,
            ClosePhase::ClosingWeak { deadline }
            | ClosePhase::ClosingHard { deadline }
            | ClosePhase::PeerClosing { deadline, .. } => Some(deadline),
        };
        let heartbeat = self.last_tx.map(|t| t + self.cfg.heartbeat_interval);
        let silence = self.last_rx.map(|t| t + self.cfg.silence_timeout);
        [ack, close, heartbeat, silence].into_iter().flatten().min()
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

fn close_state_name(p: ClosePhase) -> &'static str {
    match p {
        ClosePhase::Open => "working",
        ClosePhase::ClosingWeak { .. } => "closing weakly",
        ClosePhase::ClosingHard { .. } => "closing hard",
        ClosePhase::PeerClosing { .. } => "waiting for the peer to close",
        ClosePhase::Done => "closed",
    }
}

/// A received message, numbered `n`, from its lane and its parts.
fn in_message(lane: u8, n: u64, (prelude, header, body): (Prelude, Bytes, Bytes)) -> InMessage {
    InMessage {
        priority: Priority::from_lane(lane).expect("validated lane"),
        number: n,
        prelude,
        header,
        body,
    }
}
