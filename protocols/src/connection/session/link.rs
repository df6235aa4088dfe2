//! The session's state that lives only as long as one working channel
//! (a `Link`, boxed in the `Session` while a channel works): an idle site
//! holds none of it.

use std::time::Instant;

use bytes::BytesMut;

use super::ack::AckPolicy;
use super::close::CloseState;
use super::pace::Pace;
use super::{ChannelParams, SessionConfig, SessionStats};
use crate::base::timer::{SessionTimers, Timer};
use crate::connection::reassembly::Blocked;
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};

/// What lives only as long as one working channel: its parameters, the ack
/// policy, the close protocol and every session timer (all of them wait on
/// the channel). Created by `channel_up`, dropped by `channel_down`.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) params: ChannelParams,
    pub(super) ack: AckPolicy,
    pub(super) close: CloseState,
    pub(super) timers: SessionTimers,
    /// A heartbeat is due (its timer fired); written when there is room.
    pub(super) heartbeat_due: bool,
    /// Why input is not consumed now, if it is not.
    pub(super) blocked: Option<Blocked>,
    /// Where small messages received whole are copied (shared chunks: no
    /// allocation per message).
    pub(super) arena: BytesMut,
    /// When input last added bytes to a partly received message (or the
    /// channel came up): a partial message stalls `reassembly_idle` later.
    pub(super) last_bytes: Instant,
    /// The oldest budget holder's deadline while others wait for budget
    /// (see `reassembly/budget.rs`), if that rule applies now.
    pub(super) rate_deadline: Option<Instant>,
    /// Deliveries in slices, so acks and heartbeats go out between
    /// handler calls (see `pace.rs`).
    pub(super) pace: Pace,
    /// Our highest message number the peer had acknowledged when the
    /// channel came up (see `Session::acked_on_channel`).
    pub(super) acked_at_up: u64,
}

impl Link {
    /// The state of a channel that just came up: the peer learned our
    /// `last_received` in the handshake; the heartbeat and silence clocks
    /// start now.
    pub(super) fn new(
        params: ChannelParams,
        last_received: u64,
        ack_hold: bool,
        cfg: &SessionConfig,
        now: Instant,
    ) -> Self {
        let mut ack = AckPolicy::default();
        ack.reset(last_received);
        ack.hold = ack_hold;
        let mut timers = SessionTimers::default();
        timers.set(Timer::Heartbeat, now + cfg.heartbeat_interval);
        timers.set(Timer::Silence, now + cfg.silence_timeout);
        Self {
            params,
            ack,
            close: CloseState::default(),
            timers,
            heartbeat_due: false,
            blocked: None,
            arena: BytesMut::new(),
            last_bytes: now,
            rate_deadline: None,
            pace: Pace::default(),
            acked_at_up: 0,
        }
    }

    pub(super) fn ack_due(&self, last_received: u64, cfg: &SessionConfig) -> bool {
        self.ack.due(last_received, cfg.ack_messages, cfg.ack_bytes)
    }

    /// Writes a control frame of `kind` carrying the current ack, if it fits.
    pub(super) fn write_control(
        &mut self,
        kind: FrameKind,
        last_received: u64,
        stats: &mut SessionStats,
        out: &mut ByteBuffer,
    ) -> bool {
        if out.free() < HEADER_LEN {
            return false;
        }
        let mut hb = [0u8; HEADER_LEN];
        FrameHeader::control(kind, 0, last_received).encode(&mut hb);
        out.push(&hb);
        self.carried_ack(last_received, stats);
        true
    }

    /// A frame carrying our current ack was written.
    pub(super) fn carried_ack(&mut self, last_received: u64, stats: &mut SessionStats) {
        self.ack.carried(last_received);
        self.timers.stop(Timer::AckDelay);
        stats.frames_out += 1;
    }
}
