//! The receiving side of a [`Session`]'s driver contract: feeding input
//! (frames from the ring, or a large fragment read in place), the timers
//! input re-arms, and the streams a lost channel interrupted.

use std::time::Instant;

use crate::base::timer::Timer;
use crate::connection::deliver::Deliver;
use crate::connection::error::ProtocolError;
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::wire::message::InMessage;
use crate::wire::version::Capabilities;

use super::receive::DataOutcome;
use super::Session;
use super::{push_event, SessionEvent};

impl Session {
    /// Consumes every complete frame in `input`, calling `deliver` for each
    /// complete new message, in order. The ack advances only after `deliver`
    /// returns. An error means the peer broke the protocol: close the
    /// channel. A frame whose bytes get no reassembly budget now stays in
    /// `input` ([`input_blocked`](Self::input_blocked)).
    pub fn handle_input(
        &mut self,
        now: Instant,
        input: &mut ByteBuffer,
        deliver: &mut dyn FnMut(InMessage),
    ) -> Result<(), ProtocolError> {
        // A `&mut dyn FnMut` is itself a closure, so a `Deliver`.
        self.handle_input_with(now, input, &mut &mut *deliver)
    }

    /// [`handle_input`](Self::handle_input) with a [`Deliver`], which may
    /// stream messages (`deliver.rs`): streams interrupted by a lost
    /// channel are reported first.
    pub fn handle_input_with(
        &mut self,
        now: Instant,
        input: &mut ByteBuffer,
        deliver: &mut dyn Deliver,
    ) -> Result<(), ProtocolError> {
        self.recv.report_interrupted(deliver);
        let max_payload = self.max_payload();
        let Some(l) = self.link.as_deref_mut() else {
            // No channel: nothing can arrive (the driver reads only a
            // working channel); what is there stays unread.
            return Ok(());
        };
        let mut hb = [0u8; HEADER_LEN];
        let read_in_place = std::mem::take(&mut self.read_in_place);
        if !input.is_empty() || read_in_place {
            l.timers.set(Timer::Silence, now + self.cfg.silence_timeout);
        }
        l.blocked = None;
        match self.cfg.pace_target() {
            Some(target) => l.pace.begin_call(now, target),
            None => l.pace.unpaced(),
        }
        let taken = self.recv.taken;
        let result = (|| {
            // A fragment read in place (zero-copy receive) first: it came
            // before everything in the ring.
            // A driver that read into the ring anyway (in-place reads are
            // an optimisation, never required): its bytes go in place.
            self.recv.direct_from_ring(input);
            let l = self.link.as_deref_mut().expect("a working channel");
            let stats = self.stats.get_or_insert_with(Box::default);
            if let Some(done) = self.recv.finish_direct(deliver, &mut l.ack, stats) {
                done?;
                stats.frames_in += 1;
            }
            if self.recv.direct_pending() {
                // The ring held less than the fragment's rest: it is empty.
                return Ok(());
            }
            while input.peek(0, &mut hb) {
                let l = self.link.as_deref_mut().expect("a working channel");
                if l.pace.spent() {
                    // The slice is delivered: the driver looks at its clock
                    // (acks, heartbeats, the turn budget) before the rest.
                    l.pace.paused = true;
                    break;
                }
                let h = FrameHeader::decode(&hb, max_payload)?;
                // The ack is processed as soon as the header is there.
                self.send.apply_ack(h.ack)?;
                let len = HEADER_LEN + h.payload_len as usize;
                if input.len() < len {
                    // A large fragment's rest may be read straight into its
                    // message (see `direct_input`).
                    self.recv.adopt(&h, input);
                    break;
                }
                match h.kind {
                    FrameKind::Data => {
                        let (a, b) = input.slices(HEADER_LEN, h.payload_len as usize);
                        let l = self.link.as_deref_mut().expect("a working channel");
                        match self.recv.on_data(
                            &h,
                            (a, b),
                            deliver,
                            &mut l.ack,
                            self.stats.get_or_insert_with(Box::default),
                            self.cfg.max_message,
                            &mut l.arena,
                        )? {
                            DataOutcome::Consumed => l.pace.spend(1),
                            DataOutcome::Blocked(why) => {
                                l.blocked = Some(why);
                                break;
                            }
                        }
                    }
                    FrameKind::Packed => {
                        let l = self.link.as_deref_mut().expect("a working channel");
                        // Both ends use only what they agreed.
                        if !l.params.caps.contains(Capabilities::PACKED) {
                            return Err(ProtocolError::Unexpected {
                                kind: h.kind,
                                state: "PACKED frames were not agreed on this channel",
                            });
                        }
                        let payload = input.slices(HEADER_LEN, h.payload_len as usize);
                        let (done, finished) = self.recv.on_packed(
                            &h,
                            payload,
                            deliver,
                            &mut l.ack,
                            self.stats.get_or_insert_with(Box::default),
                            self.cfg.max_message,
                            &mut l.arena,
                            (l.pace.packed_done, l.pace.left()),
                        )?;
                        l.pace.spend(done);
                        if !finished {
                            // The rest of the frame after the pause.
                            l.pace.packed_done += done;
                            l.pace.paused = true;
                            break;
                        }
                        l.pace.packed_done = 0;
                    }
                    FrameKind::Ack | FrameKind::Heartbeat => {}
                    FrameKind::Leaving => {
                        let l = self.link.as_deref().expect("a working channel");
                        if !l.params.caps.contains(Capabilities::LEAVING) {
                            return Err(ProtocolError::Unexpected {
                                kind: h.kind,
                                state: "LEAVING was not agreed on this channel",
                            });
                        }
                        if h.payload_len != 0 {
                            return Err(ProtocolError::Malformed {
                                what: "LEAVING frame",
                                reason: "non-empty payload".into(),
                            });
                        }
                        // Its ack (in the header) counts; once: a peer
                        // repeating it holds nothing more.
                        let last = self.events.as_ref().and_then(|e| e.back());
                        if last != Some(&SessionEvent::PeerLeaving) {
                            push_event(&mut self.events, SessionEvent::PeerLeaving);
                        }
                    }
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
                self.stats_mut().frames_in += 1;
                input.consume(len);
            }
            Ok(())
        })();
        let bytes = self.recv.taken - taken;
        self.after_input(now, bytes);
        result
    }

    /// Re-arms the receive-side timers after input that added `bytes` to
    /// partly received messages (progress means bytes: an empty fragment
    /// moves no deadline). See `reassembly/budget.rs` for the rules.
    fn after_input(&mut self, now: Instant, bytes: u64) {
        let Some(l) = self.link.as_deref_mut() else {
            return;
        };
        if self.recv.last_received > l.ack.ack_sent {
            l.timers
                .set_if_unset(Timer::AckDelay, now + self.cfg.ack_delay);
        }
        if l.blocked.is_some() {
            // Paused, not silent: the peer's frames (its heartbeats too)
            // wait behind the one we may not read, so hearing nothing
            // says nothing about it. Silence is measured again from the
            // input call that resumes (our own heartbeats still go out, so
            // the peer does not take us for dead either).
            l.timers.stop(Timer::Silence);
        } else {
            self.recv.stop_waiting();
        }
        if bytes > 0 {
            l.last_bytes = now;
        }
        let stall = l.last_bytes + self.cfg.reassembly_idle;
        let partial = self.recv.has_partial();
        // While another session waits for budget, the oldest holder keeps
        // its place only at the minimum rate (unless it is itself blocked
        // by another holder, which gives way in its turn).
        let rated = partial
            && self.recv.held() > 0
            && self.cfg.reassembly_min_rate > 0
            && self.recv.others_waiting()
            && !(l.blocked.is_some() && self.recv.others_holding())
            && self.recv.is_oldest_holder();
        let was_rated = l.rate_deadline.is_some();
        if rated {
            // Half an idle time of grace: a trickler reaches its deadline
            // before a younger holder blocked behind it would give way.
            let grace = l.last_bytes + self.cfg.reassembly_idle / 2;
            let credit = credit(bytes, self.cfg.reassembly_min_rate);
            let d = l
                .rate_deadline
                .map_or(grace, |d| d.checked_add(credit).unwrap_or(stall).min(stall));
            l.rate_deadline = Some(d);
            l.timers.set(Timer::ReassemblyIdle, d);
            return;
        }
        l.rate_deadline = None;
        let idle = now + self.cfg.reassembly_idle;
        let t = &mut l.timers;
        match (partial, l.blocked) {
            (false, _) => t.stop(Timer::ReassemblyIdle),
            // The oldest holder waits for the others to give way; it never
            // does itself, so some message always completes.
            (true, Some(_)) if self.recv.is_oldest_holder() => t.stop(Timer::ReassemblyIdle),
            // Another holder, blocked: it gives way if that lasts.
            (true, Some(_)) => t.set_if_unset(Timer::ReassemblyIdle, idle),
            (true, None) if bytes > 0 || was_rated => t.set(Timer::ReassemblyIdle, stall),
            (true, None) => t.set_if_unset(Timer::ReassemblyIdle, stall),
        }
    }

    /// True if the last [`handle_input`](Self::handle_input) left a frame
    /// unconsumed because the reassembly budget is short: stop reading the
    /// channel until the budget's release hook fires, then feed input again.
    pub fn input_blocked(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.blocked.is_some())
    }

    /// True if the last [`handle_input`](Self::handle_input) stopped with
    /// input left because it delivered a slice's worth of messages (see
    /// `pace.rs`): read the clock, feed [`handle_timeout`](Self::handle_timeout)
    /// if a deadline passed, transmit what became due, ask
    /// [`turn_spent`](Self::turn_spent), then call `handle_input` again
    /// (at once, or after returning to the event loop).
    pub fn input_paused(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.pace.paused)
    }

    /// A turn of the driver's event loop begins at `now`: the handler time
    /// of its input is measured from here (see
    /// [`turn_spent`](Self::turn_spent)).
    pub fn begin_turn(&mut self, now: Instant) {
        if let Some(l) = self.link.as_deref_mut() {
            l.pace.begin_turn(now);
        }
    }

    /// True if the turn's handlers have used its time budget
    /// ([`SessionConfig::turn_budget`](crate::connection::session::SessionConfig)) by `now`: with
    /// input [paused](Self::input_paused), return to the event loop (other
    /// work on the thread runs) and feed the rest in a later turn. Ends the
    /// turn: the next input call begins another.
    pub fn turn_spent(&mut self, now: Instant) -> bool {
        let Some(budget) = self.cfg.turn_budget else {
            return false;
        };
        self.link
            .as_deref_mut()
            .is_some_and(|l| l.pace.turn_spent(now, budget))
    }

    /// Reassembly budget bytes this session holds.
    pub fn budget_held(&self) -> u64 {
        self.recv.held()
    }

    /// Zero-copy receive: where the driver reads the next bytes of the
    /// channel instead of the input ring, when a large fragment is being
    /// received (the rest of its payload goes straight into its message,
    /// with no copy through the ring). Read at most this slice, call
    /// [`direct_commit`](Self::direct_commit) with what was read, then
    /// [`handle_input`](Self::handle_input) as after any read. `None`: read
    /// into the ring as usual.
    pub fn direct_input(&mut self) -> Option<&mut [u8]> {
        self.link.as_ref()?;
        self.recv.direct_target()
    }

    /// `n` bytes were read into the slice [`direct_input`](Self::direct_input)
    /// gave.
    pub fn direct_commit(&mut self, n: usize) {
        if n > 0 {
            self.recv.direct_commit(n);
            self.read_in_place = true;
        }
    }

    /// Tells `deliver` of the streamed messages whose channel was lost
    /// ([`StreamAbort::ChannelLost`](crate::connection::deliver::StreamAbort)): call it after
    /// [`channel_down`](Self::channel_down), so a handler does not wait for
    /// the rest of a body that will come again from its start.
    pub fn report_interrupted(&mut self, deliver: &mut dyn Deliver) {
        self.recv.report_interrupted(deliver);
    }
}

/// The time `bytes` buy at `rate` bytes per second.
fn credit(bytes: u64, rate: u64) -> std::time::Duration {
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
    std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}
