//! The working channel's data path: input, transmits, and what the peer
//! acknowledged.

use std::time::Instant;

use super::{ChannelId, ComObject, Loss};
use crate::connection::deliver::Deliver;
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::message::InMessage;

impl ComObject {
    /// Consumes every complete frame of channel `id` in `input`, calling
    /// `deliver` for each complete new message. Returns false if the channel
    /// ended (the peer broke the protocol, or the close protocol finished):
    /// stop reading it and act on [`poll_action`](Self::poll_action).
    pub fn handle_input(
        &mut self,
        id: ChannelId,
        now: Instant,
        input: &mut ByteBuffer,
        deliver: &mut dyn FnMut(InMessage),
    ) -> bool {
        self.handle_input_with(id, now, input, &mut &mut *deliver)
    }

    /// [`handle_input`](Self::handle_input) with a [`Deliver`] that may
    /// stream messages (see `deliver.rs`).
    pub fn handle_input_with(
        &mut self,
        id: ChannelId,
        now: Instant,
        input: &mut ByteBuffer,
        deliver: &mut dyn Deliver,
    ) -> bool {
        if self.working_channel() != Some(id) {
            return false;
        }
        if !input.is_empty() {
            // Anything from the initiator after the handshake: it read our
            // answer, so it holds the secret the answer agreed.
            self.peer_read_answer();
        }
        let r = self.session.handle_input_with(now, input, deliver);
        self.note_activity(now);
        match r {
            Err(e) => self.channel_lost(id, Loss::Protocol(e), now),
            Ok(()) => self.process_session_events(now),
        }
        self.working_channel() == Some(id)
    }

    /// Zero-copy receive: where the working channel's next bytes go instead
    /// of the input ring (see [`Session::direct_input`](crate::connection::session::Session::direct_input)).
    pub fn direct_input(&mut self) -> Option<&mut [u8]> {
        self.session.direct_input()
    }

    /// `n` bytes were read into [`direct_input`](Self::direct_input)'s slice.
    pub fn direct_commit(&mut self, n: usize) {
        if n > 0 {
            self.peer_read_answer();
        }
        self.session.direct_commit(n);
    }

    /// The `corr` of the tracked messages the peer acknowledged since the
    /// last call (see [`Session::take_delivered`](crate::connection::session::Session::take_delivered)).
    pub fn take_delivered(&mut self) -> Vec<u64> {
        self.session.take_delivered()
    }

    /// Tells `deliver` of the streamed messages a lost channel interrupted
    /// (see [`Session::report_interrupted`](crate::connection::session::Session::report_interrupted)).
    pub fn report_interrupted(&mut self, deliver: &mut dyn Deliver) {
        self.session.report_interrupted(deliver);
    }

    /// Fills `out` with frames for the working channel (a no-op without
    /// one). Returns the bytes written.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut ByteBuffer) -> usize {
        let n = self.session.poll_transmit(now, out);
        self.note_activity(now);
        n
    }

    /// True if a frame is waiting to be written.
    pub fn wants_to_send(&self, now: Instant) -> bool {
        self.session.wants_to_send(now)
    }

    /// True if the last input left a frame unconsumed because the
    /// reassembly budget is short: stop reading the channel until the
    /// budget's release hook fires, then feed input again.
    pub fn input_blocked(&self) -> bool {
        self.session.input_blocked()
    }

    /// True if the last input stopped after a slice of deliveries with
    /// input left (see [`Session::input_paused`](crate::connection::session::Session::input_paused)).
    pub fn input_paused(&self) -> bool {
        self.session.input_paused()
    }

    /// A turn of the driver's event loop begins (see
    /// [`Session::begin_turn`](crate::connection::session::Session::begin_turn)).
    pub fn begin_turn(&mut self, now: Instant) {
        self.session.begin_turn(now);
    }

    /// True if the turn's handler time is used up (see
    /// [`Session::turn_spent`](crate::connection::session::Session::turn_spent)).
    pub fn turn_spent(&mut self, now: Instant) -> bool {
        self.session.turn_spent(now)
    }

    /// True if a standalone ack is waiting, held or not.
    pub fn ack_waiting(&self) -> bool {
        self.session.ack_waiting()
    }

    /// Takes what was acknowledged since the last call: messages, bytes,
    /// and footprints per class (what the output bound gives back).
    pub fn take_freed(&mut self, now: Instant) -> crate::connection::output_share::Freed {
        self.tick(now);
        let freed = self.session.take_freed();
        if freed.messages > 0 {
            self.idle_since = now;
            // Only the need going away changes what happens next.
            if !self.has_need() {
                self.update();
            }
        }
        freed
    }

    /// True if the working channel's rings may shrink to the minimum now:
    /// no application message sent, delivered or acknowledged for
    /// `ring_idle`, and nothing queued, partly sent or unacknowledged. The
    /// driver grows them back as soon as traffic needs them.
    pub fn rings_idle(&self, now: Instant) -> bool {
        self.working_channel().is_some()
            && self.session.pending_messages() == 0
            && now.saturating_duration_since(self.idle_since) >= self.cfg.ring_idle
    }
}
