//! The session's configuration, events, channel parameters and counters.

use std::sync::Arc;
use std::time::Duration;

use crate::connection::error::ProtocolError;
use crate::connection::scheduler::SchedulerConfig;
use crate::wire::version::Capabilities;

use super::CloseReason;

/// Tunables of a session (docs/architecture.md, "The design": defaults).
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
    /// A partly received message that gets no fragment for this long is
    /// abandoned and its channel closed (its budget goes back to the
    /// others); a session that holds reassembly budget and is blocked this
    /// long gives way unless it is the oldest holder.
    pub reassembly_idle: Duration,
    /// While another session waits for reassembly budget, the oldest
    /// holder keeps its place only if it receives at least this many bytes
    /// per second (after half a `reassembly_idle` of grace); otherwise it
    /// gives way (see `reassembly/budget.rs`). 0: no such deadline.
    pub reassembly_min_rate: u64,
    /// Paced deliveries, for a driver that follows the pause contract
    /// ([`Session::input_paused`](crate::connection::session::Session::input_paused)): the
    /// handler time one turn of a channel's input may take before the
    /// driver returns to its event loop (other channels on its thread run)
    /// and feeds the rest later. Deliveries pause about every half of the
    /// shorter of this and the ack delay, so acknowledgements and
    /// heartbeats go out between handler calls (`session/pace.rs`). `None`
    /// (the default): every call delivers all the input it can.
    pub turn_budget: Option<Duration>,
}

impl SessionConfig {
    /// `cfg`, with every wait at most [`MAX_WAIT`](crate::base::timer::MAX_WAIT)
    /// and the heartbeat's period at least
    /// [`MIN_PERIOD`](crate::base::timer::MIN_PERIOD) (a copy only if one was
    /// out of its range): `Duration::MAX` given for "never" made a deadline
    /// past what the clock holds, and the session panicked where it set its
    /// timer; a zero heartbeat interval made a heartbeat due at every turn
    /// of the driver, at one instant.
    pub(crate) fn bounded(cfg: Arc<SessionConfig>) -> Arc<SessionConfig> {
        // Plain data: the copy is on the stack, and kept only if it changed.
        let mut c = (*cfg).clone();
        if c.bound_waits() {
            Arc::new(c)
        } else {
            cfg
        }
    }

    /// True if no wait is out of its range (see [`bounded`](Self::bounded)).
    pub(crate) fn within_bounds(&self) -> bool {
        !self.clone().bound_waits()
    }

    /// Bounds every wait to [`MAX_WAIT`](crate::base::timer::MAX_WAIT), and the
    /// heartbeat's period from below; true if one was out of its range.
    fn bound_waits(&mut self) -> bool {
        let period = crate::base::timer::at_least_min_period([&mut self.heartbeat_interval]);
        let waits = crate::base::timer::bound([
            &mut self.ack_delay,
            &mut self.heartbeat_interval,
            &mut self.silence_timeout,
            &mut self.close_timeout,
            &mut self.reassembly_idle,
            &mut self.scheduler.promote_after,
        ]);
        let turn = self
            .turn_budget
            .as_mut()
            .is_some_and(|d| crate::base::timer::bound([d]));
        waits | turn | period
    }

    /// How long a slice of deliveries should take (see `pace.rs`), if
    /// deliveries are paced.
    pub(crate) fn pace_target(&self) -> Option<Duration> {
        Some(self.turn_budget?.min(self.ack_delay) / 2)
    }
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
            reassembly_idle: Duration::from_secs(30),
            reassembly_min_rate: 1 << 20,
            turn_budget: None,
        }
    }
}

/// Something the driver must act on (see [`Session::poll_event`](crate::connection::session::Session::poll_event)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// Close the channel now.
    CloseChannel(CloseReason),
    /// The peer rejected our weak close: it still needs the channel. Do not
    /// try again for a while.
    WeakCloseRejected,
    /// The peer told us it holds no more references to us.
    PeerClearedReference,
    /// The peer's site shuts down for good (a LEAVING frame): fail it now.
    PeerLeaving,
    /// Nothing was heard for the silence timeout: presume the channel dead.
    Silent,
    /// A partly received message got no fragment for the reassembly idle
    /// time: the peer broke the protocol; close the channel.
    Stalled(ProtocolError),
    /// This session held reassembly budget while blocked for the reassembly
    /// idle time and is not the oldest holder, or it is the oldest holder
    /// and received less than `reassembly_min_rate` while another session
    /// waited for budget: it gives way — close the channel (not a fault;
    /// the peer resends its partial messages from the start).
    BudgetContention,
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
    /// The capabilities both ends agreed in the handshake: the session
    /// uses no feature outside them, and refuses a frame that needs one
    /// ([`crate::wire::version`]).
    pub caps: Capabilities,
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
    /// Frames written that carry application messages (DATA and PACKED;
    /// resends included): what a communication pattern costs on the wire,
    /// acknowledgements and heartbeats aside.
    pub data_frames_out: u64,
    /// Explicit ack frames written.
    pub acks_out: u64,
    /// Heartbeat frames written.
    pub heartbeats_out: u64,
    /// Frames consumed.
    pub frames_in: u64,
    /// Times the peer turned out to have forgotten this session (its
    /// numbering started again; see `Session::forget_peer`).
    pub peer_forgot: u64,
    /// Unacknowledged messages handed back because the peer forgot the
    /// session (maybe delivered).
    pub forgotten_unacked: u64,
    /// Messages completely sent for the first time, by level (index =
    /// level - 1).
    pub sent_by_level: [u64; 4],
    /// Frame bytes written for application messages, by level (resends
    /// included: what the level cost on the wire).
    pub bytes_by_level: [u64; 4],
    /// Messages delivered, by level.
    pub delivered_by_level: [u64; 4],
}

impl SessionStats {
    /// All counters zero (what a session that never talked reports).
    pub const ZERO: SessionStats = SessionStats {
        sent: 0,
        retransmitted: 0,
        delivered: 0,
        duplicates: 0,
        frames_out: 0,
        data_frames_out: 0,
        acks_out: 0,
        heartbeats_out: 0,
        frames_in: 0,
        peer_forgot: 0,
        forgotten_unacked: 0,
        sent_by_level: [0; 4],
        bytes_by_level: [0; 4],
        delivered_by_level: [0; 4],
    };

    /// How much this node has served the site: the messages exchanged
    /// with it (sent once, delivered). The waiting line's
    /// [`Admission::Share`](crate::slots::Admission::Share) lets the least
    /// served in first, so the work done is shared, not only the slot time.
    pub fn served(&self) -> u64 {
        self.sent.saturating_add(self.delivered)
    }
}
