//! [`Session`]: the protocol state of one remote site, independent of any
//! channel. It composes the sending half (`send`: queues, scheduler,
//! numbering, ledger, resend), the receiving half (`receive`: lanes,
//! reassembly, dedupe, the reassembly budget), the ack policy (`ack`) and
//! the close protocol (`close`); `input` is the driver's input side
//! (frames, in-place reads, interrupted streams); what lives only with a working channel
//! (its parameters, ack policy, close state and the waits of its
//! [`TimerTable`](crate::base::timer::TimerTable)) is one `link`, boxed per channel.
//! The session survives channels: when a channel is lost the driver calls
//! [`Session::channel_down`], and when a new one opens
//! [`Session::channel_up`] with the peer's last-received number, after which
//! the unacknowledged messages are resent first, in number order, under
//! their original numbers.
//!
//! # Call-order contract (sans-IO, like quinn-proto)
//!
//! The driver owns the socket and the two [`ByteBuffer`]s and repeats, in
//! this order, whenever anything happens:
//!
//! 1. feed input: after reading from the socket into the input buffer, call
//!    [`handle_input`](Session::handle_input), which consumes every complete
//!    frame and calls `deliver` for each complete message, in order; if it
//!    leaves input unconsumed because the reassembly budget is short,
//!    [`input_blocked`](Session::input_blocked) says so: stop reading until
//!    the budget's release hook fires; a paced session (`turn_budget`) also
//!    stops after each slice of deliveries
//!    ([`input_paused`](Session::input_paused)): read the clock, feed time
//!    (2), write what became due (3), end the turn if
//!    [`turn_spent`](Session::turn_spent), and feed the rest (call
//!    [`begin_turn`](Session::begin_turn) when a turn of the event loop
//!    begins);
//! 2. feed time: if the deadline from [`poll_timeout`](Session::poll_timeout)
//!    has passed, call [`handle_timeout`](Session::handle_timeout);
//! 3. flush: call [`poll_transmit`](Session::poll_transmit) to fill the output
//!    buffer, write it to the socket, repeat while both make progress;
//! 4. re-arm one timer to [`poll_timeout`](Session::poll_timeout);
//! 5. collect acknowledged bytes with [`take_freed`](Session::take_freed)
//!    and events with [`poll_event`](Session::poll_event).
//!
//! No method reads a clock: time is always an argument. A deadline is
//! consumed when it fires, so `poll_timeout` never returns the same past
//! deadline twice: a heartbeat or ack that cannot be written because the
//! output is full stays due without a deadline, and is written by the next
//! `poll_transmit` that finds room.

mod ack;
mod close;
mod input;
mod link;
mod pace;
pub(crate) mod park;
mod queries;
mod receive;
mod send;
mod types;

use std::collections::VecDeque;

use std::time::Instant;

use crate::base::timer::Timer;
use crate::connection::error::{ProtocolError, Refusal};
use crate::connection::reassembly::ReassemblyBudget;
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use crate::wire::message::OutMessage;
use crate::wire::version::Capabilities;

pub use close::{ClosePhase, CloseReason};
pub use types::{ChannelParams, SessionConfig, SessionEvent, SessionStats};

use link::Link;
use receive::Receiver;
use send::Sender;

/// The driver's events: rare (closes, silence), so boxed when one happens
/// — a pointer in every idle session instead of an empty queue's 32 bytes.
#[allow(clippy::box_collection)]
type Events = Option<Box<VecDeque<SessionEvent>>>;

/// Queues an event for the driver.
fn push_event(events: &mut Events, e: SessionEvent) {
    events.get_or_insert_with(Box::default).push_back(e);
}

/// The state of one remote site. See the module documentation.
///
/// # Example
///
/// One turn of the driver's loop on each side, with a virtual clock: A sends,
/// B delivers, and B's delayed ack frees A's copy of the message.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use bytes::Bytes;
/// use sitenet_protocols::{
///     ByteBuffer, ChannelParams, OutMessage, Priority, ReassemblyBudget, Session, SessionConfig,
/// };
///
/// let t0 = Instant::now();
/// let cfg = SessionConfig { ack_delay: Duration::from_millis(20), ..SessionConfig::default() };
/// # let params = ChannelParams {
/// #     buffer_size: 65536, peer_max_message: 1 << 20, peer_last_received: 0, generation: 1,
/// #     caps: sitenet_protocols::Capabilities::ALL,
/// # };
/// let mut a = Session::new(cfg.clone(), ReassemblyBudget::new(1 << 20));
/// let mut b = Session::new(cfg, ReassemblyBudget::new(1 << 20));
/// a.channel_up(params, t0)?; // `params`: what the handshake settled
/// b.channel_up(params, t0)?;
/// let (mut a_to_b, mut b_to_a) = (ByteBuffer::new(65536), ByteBuffer::new(65536));
///
/// a.queue(OutMessage::new(Priority::Medium, 1, Bytes::new(), vec![Bytes::from("ping")]))
///     .unwrap();
/// a.poll_transmit(t0, &mut a_to_b);
/// b.handle_input(t0, &mut a_to_b, &mut |m| assert_eq!(m.body, "ping"))?;
/// assert_eq!((a.unacked(), b.last_received()), (1, 1));
///
/// // B acknowledges at the latest after the ack delay (no reply carried it).
/// let due = b.poll_timeout().expect("the ack delay is armed");
/// assert_eq!(due, t0 + Duration::from_millis(20));
/// b.handle_timeout(due);
/// b.poll_transmit(due, &mut b_to_a);
/// a.handle_input(due, &mut b_to_a, &mut |_| unreachable!("an ack only"))?;
/// assert_eq!(a.unacked(), 0);
/// assert_eq!(a.take_freed().messages, 1); // one message's bytes released
/// # Ok::<(), sitenet_protocols::ProtocolError>(())
/// ```
#[derive(Debug)]
pub struct Session {
    cfg: std::sync::Arc<SessionConfig>,
    send: Sender,
    recv: Receiver,
    /// The working channel's state, if a channel works (boxed: a site
    /// without a channel — thousands of them, idle — holds none of it).
    link: Option<Box<Link>>,
    /// Highest generation seen working.
    last_generation: u64,
    /// Which numbering of the pair this session is in (see
    /// [`SessionTag`](crate::connection::handshake::SessionTag)): 0, the first, until a
    /// handshake starts another.
    tag: crate::connection::handshake::SessionTag,
    /// Counters: allocated with the first channel or message (a site
    /// that never talked counts nothing and holds no room for it).
    stats: Option<Box<SessionStats>>,
    /// Events for the driver (rare: allocated when one happens).
    events: Events,
    /// Whether the local side still needs the channel (references held).
    local_need: bool,
    /// Threshold acks wait one driver turn (see `hold_acks`); kept here so
    /// a new channel starts with the driver's setting.
    ack_hold: bool,
    /// Bytes were read in place since the last input call.
    read_in_place: bool,
}

impl Session {
    /// A session with no channel yet.
    pub fn new(cfg: impl Into<std::sync::Arc<SessionConfig>>, budget: ReassemblyBudget) -> Self {
        let cfg = SessionConfig::bounded(cfg.into());
        Self {
            send: Sender::new(),
            recv: Receiver::new(&budget),
            cfg,
            link: None,
            last_generation: 0,
            tag: 0,
            stats: None,
            events: None,
            local_need: true,
            ack_hold: false,
            read_in_place: false,
        }
    }

    // ------------------------------------------------------------------
    // Channels
    // ------------------------------------------------------------------

    /// A new channel is working since `now`. Frees what the peer says it
    /// received, hands back queued messages larger than the peer accepts
    /// ([`take_refused`](Self::take_refused)), and schedules everything else
    /// in the ledger for resending, first and in number order. Silence and
    /// heartbeats are measured from `now`.
    ///
    /// # Example
    ///
    /// A message sent on a channel that was lost before it arrived is resent
    /// on the next one, under its original number:
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use bytes::Bytes;
    /// # use sitenet_protocols::*;
    /// # let now = Instant::now();
    /// # let mut a = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
    /// # let mut b = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
    /// # let mut wire = ByteBuffer::new(65536);
    /// let params = ChannelParams {
    ///     buffer_size: 65536,
    ///     peer_max_message: 1 << 20,
    ///     peer_last_received: 0,
    ///     generation: 1,
    ///     caps: Capabilities::ALL,
    /// };
    /// a.channel_up(params, now)?;
    /// b.channel_up(params, now)?;
    /// a.queue(OutMessage::new(Priority::High, 1, Bytes::new(), vec![Bytes::from("x")])).unwrap();
    /// a.poll_transmit(now, &mut wire);
    /// wire.clear(); // the bytes are lost with the channel
    /// a.channel_down();
    /// b.channel_down();
    ///
    /// // The next channel: each side learned in the handshake what the other received.
    /// let next = |peer: &Session| ChannelParams {
    ///     peer_last_received: peer.last_received(),
    ///     generation: 2,
    ///     ..params
    /// };
    /// let (for_a, for_b) = (next(&b), next(&a));
    /// a.channel_up(for_a, now)?;
    /// b.channel_up(for_b, now)?;
    /// a.poll_transmit(now, &mut wire);
    /// let mut numbers = Vec::new();
    /// b.handle_input(now, &mut wire, &mut |m| numbers.push(m.number))?;
    /// assert_eq!(numbers, [1]);
    /// assert_eq!(a.stats().retransmitted, 1);
    /// # Ok::<(), ProtocolError>(())
    /// ```
    pub fn channel_up(&mut self, params: ChannelParams, now: Instant) -> Result<(), ProtocolError> {
        if params.peer_last_received > self.send.last_sent {
            return Err(ProtocolError::AckBeyondSent {
                ack: params.peer_last_received,
                sent: self.send.last_sent,
            });
        }
        self.channel_down();
        self.send.channel_up(
            params.peer_last_received,
            params.peer_max_message,
            params.caps.contains(Capabilities::PACKED),
        )?;
        self.last_generation = self.last_generation.max(params.generation);
        // The peer learned our last_received in the handshake.
        let mut link = Box::new(Link::new(
            params,
            self.recv.last_received,
            self.ack_hold,
            &self.cfg,
            now,
        ));
        link.acked_at_up = self.send.acked();
        self.link = Some(link);
        Ok(())
    }

    /// The peer has no session state for us any more (its handshake said it
    /// is fresh, while we have worked with it before): it reclaimed our
    /// entry, which it does only with nothing of its own pending and no
    /// channel. Both sides then number from 1 again. What we sent and the
    /// peer never acknowledged is handed back as maybe delivered
    /// ([`take_refused`](Self::take_refused), `Refusal::PeerForgot`) — the
    /// peer can no longer recognise a resend, so resending could deliver it
    /// twice. Call it before [`channel_up`](Self::channel_up) of the channel
    /// that told us; without a channel only.
    pub fn forget_peer(&mut self) {
        debug_assert!(self.link.is_none(), "forget_peer on a working session");
        let handed_back = self.send.forget_peer();
        self.recv.last_received = 0;
        let stats = self.stats_mut();
        stats.peer_forgot += 1;
        stats.forgotten_unacked += handed_back as u64;
    }

    /// Planted bug: forgets every unacknowledged message (see `planted`).
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn planted_drop_ledger(&mut self) {
        self.send.planted_drop_ledger();
    }

    /// True if this session has never had a working channel: it holds no
    /// numbering a peer could depend on (a site's handshake tells the peer
    /// so, and a peer that remembers a session then calls
    /// [`forget_peer`](Self::forget_peer)).
    pub fn is_fresh(&self) -> bool {
        self.last_generation == 0
    }

    /// The channel is gone. Partly sent messages restart from their first
    /// fragment on the next channel; partly received ones are discarded
    /// (their budget is given back).
    pub fn channel_down(&mut self) {
        self.link = None;
        self.send.channel_down();
        self.recv.abandon_partials();
        // An idle site keeps no room for events it no longer expects.
        if self.events.as_ref().is_some_and(|e| e.is_empty()) {
            self.events = None;
        }
    }

    /// The node's reassembly budget this session takes from.
    pub fn budget(&self) -> &ReassemblyBudget {
        self.recv.budget()
    }

    /// True if a channel is working.
    pub fn is_working(&self) -> bool {
        self.link.is_some()
    }

    /// The working channel's parameters.
    pub fn channel(&self) -> Option<&ChannelParams> {
        self.link.as_ref().map(|l| &l.params)
    }

    fn max_payload(&self) -> usize {
        let buf = self
            .link
            .as_ref()
            .map_or(MAX_FRAME_LEN, |l| l.params.buffer_size as usize);
        buf.min(MAX_FRAME_LEN) - HEADER_LEN
    }

    // ------------------------------------------------------------------
    // Sending
    // ------------------------------------------------------------------

    /// Queues a message. Fails if it exceeds what the peer accepts (known
    /// once a channel has worked): such a message would be refused for ever.
    /// On failure the message comes back with the reason (boxed: the error
    /// path is rare, and a large `Err` would slow every call).
    pub fn queue(&mut self, msg: OutMessage) -> Result<(), Box<(Refusal, OutMessage)>> {
        self.send.queue(msg, &self.cfg.scheduler)
    }

    /// Takes the queued messages found unsendable when a channel came up
    /// (larger than the peer's maximum, learned after they were queued).
    /// They were never sent.
    pub fn take_refused(&mut self) -> Vec<(Refusal, OutMessage)> {
        self.send.take_refused()
    }

    /// True if a message is partly sent or partly received: closing the
    /// channel now wastes what has crossed (the slot controller's policy
    /// avoids preempting such a channel).
    pub fn mid_message(&self) -> bool {
        self.send.partly_sent() || self.recv.has_partial()
    }

    /// True if [`take_refused`](Self::take_refused) has something.
    pub fn has_refused(&self) -> bool {
        self.send.has_refused()
    }

    /// True if a frame is waiting to be written (data, or a due ack).
    pub fn wants_to_send(&self, _now: Instant) -> bool {
        let Some(l) = &self.link else {
            return false;
        };
        // While closing, only close frames and acks go out.
        let data = l.close.phase == ClosePhase::Open && self.send.has_data();
        data || !l.close.control.is_empty()
            || l.ack_due(self.recv.last_received, &self.cfg)
            || l.heartbeat_due
    }

    /// Fills `out` with as many frames as fit (a no-op without a working
    /// channel). Returns the bytes written.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut ByteBuffer) -> usize {
        let max_payload = self.max_payload();
        let Some(l) = self.link.as_deref_mut() else {
            return 0;
        };
        let last_received = self.recv.last_received;
        let stats = self.stats.get_or_insert_with(Box::default);
        let start = out.len();
        // Close frames first; they carry the current ack like any frame.
        while let Some(kind) = l.close.control.next() {
            if !l.write_control(kind, last_received, stats, out) {
                break;
            }
            l.close.control.clear(kind);
        }
        // While closing, no new application message goes out.
        if l.close.phase == ClosePhase::Open {
            while self.send.has_data()
                && self
                    .send
                    .write_one_data_frame(now, out, max_payload, last_received, stats)
            {
                stats.data_frames_out += 1;
                l.carried_ack(last_received, stats);
            }
        }
        if l.ack_due(last_received, &self.cfg)
            && l.write_control(FrameKind::Ack, last_received, stats, out)
        {
            stats.acks_out += 1;
        }
        let mut written = out.len() - start;
        if written == 0
            && l.heartbeat_due
            && l.write_control(FrameKind::Heartbeat, last_received, stats, out)
        {
            stats.heartbeats_out += 1;
            written = out.len() - start;
        }
        if written > 0 {
            l.heartbeat_due = false;
            l.timers
                .set(Timer::Heartbeat, now + self.cfg.heartbeat_interval);
        }
        written
    }

    // ------------------------------------------------------------------
    // Acknowledgements
    // ------------------------------------------------------------------

    /// Our site shuts down for good: a LEAVING frame is owed on the
    /// working channel (written with the final ack), so the peer fails us
    /// at once instead of reconnecting for ever. No effect without one.
    ///
    /// A peer that did not agree [`Capabilities::LEAVING`] cannot read the
    /// frame: it gets none, and sees the channel close as after a crash.
    pub fn leave(&mut self) {
        if let Some(l) = &mut self.link {
            if l.params.caps.contains(Capabilities::LEAVING) {
                l.close.control.set(FrameKind::Leaving);
            }
        }
    }

    /// Makes an explicit ack due at once (before a graceful close, so the
    /// peer is not left waiting for acknowledgements it will never get).
    pub fn ack_now(&mut self) {
        if let Some(l) = &mut self.link {
            l.ack.force();
        }
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
        if let Some(l) = &mut self.link {
            l.ack.hold = hold;
        }
    }

    /// True if a standalone ack is waiting, held or not.
    pub fn ack_waiting(&self) -> bool {
        self.link.as_ref().is_some_and(|l| {
            l.ack.waiting(
                self.recv.last_received,
                self.cfg.ack_messages,
                self.cfg.ack_bytes,
            )
        })
    }

    /// The `corr` of the [`tracked`](crate::wire::message::OutMessage::tracked) messages the peer
    /// acknowledged since the last call, in number order: their delivery
    /// futures complete. (A tracked message that never will is handed back
    /// with the rest, by `take_refused` or `take_all`.)
    pub fn take_delivered(&mut self) -> Vec<u64> {
        self.send.take_delivered()
    }

    /// Takes what was acknowledged since the last call: messages, bytes,
    /// and footprints per class (what the output bound gives back).
    pub fn take_freed(&mut self) -> crate::connection::output_share::Freed {
        self.send.take_freed()
    }

    // ------------------------------------------------------------------
    // Time and events
    // ------------------------------------------------------------------

    /// Advances timers to `now`, consuming each expired one: a delayed ack
    /// or a heartbeat becomes due (the next
    /// [`poll_transmit`](Self::poll_transmit) writes it); a close wait that
    /// ran out, silence past the silence timeout, or a stalled partial
    /// message produces an event.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(l) = self.link.as_deref_mut() else {
            return;
        };
        // A close wait that ran out ends the channel: nothing else about it
        // matters any more (its silence, its partial messages).
        if l.timers.take_expired(Timer::Close, now) && l.close.phase.deadline().is_some() {
            self.finish_close(CloseReason::Timeout);
        }
        let Some(l) = self.link.as_deref_mut() else {
            return;
        };
        let closed = l.close.phase == ClosePhase::Done;
        for t in l.timers.expire(now) {
            match t {
                Timer::AckDelay => l.ack.delay_expired(),
                Timer::Heartbeat => l.heartbeat_due = true,
                Timer::Close => {}
                Timer::Silence | Timer::ReassemblyIdle if closed => {}
                Timer::Silence => push_event(&mut self.events, SessionEvent::Silent),
                Timer::ReassemblyIdle => {
                    let stalled = now >= l.last_bytes + self.cfg.reassembly_idle;
                    if l.blocked.is_some() || (l.rate_deadline.is_some() && !stalled) {
                        // A blocked holder, or an oldest holder too slow
                        // while others wait: it gives way (not a fault).
                        l.rate_deadline = None;
                        push_event(&mut self.events, SessionEvent::BudgetContention);
                    } else if self.recv.has_partial() {
                        push_event(
                            &mut self.events,
                            SessionEvent::Stalled(ProtocolError::ReassemblyStalled {
                                idle: self.cfg.reassembly_idle,
                            }),
                        );
                    }
                }
                other => debug_assert!(false, "timer {} is not the session's", other.name()),
            }
        }
    }

    /// The next instant at which [`handle_timeout`](Self::handle_timeout) must
    /// be called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.link.as_ref()?.timers.next_deadline()
    }

    /// The next event for the driver, if any.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.as_mut()?.pop_front()
    }

    fn stats_mut(&mut self) -> &mut SessionStats {
        self.stats.get_or_insert_with(Box::default)
    }

    /// Takes every message out (the site failed for good): `not_sent` were
    /// never completely sent, `maybe_delivered` were sent and not acknowledged.
    pub fn take_all(&mut self) -> (Vec<OutMessage>, Vec<(u64, OutMessage)>) {
        self.send.take_all()
    }
}
