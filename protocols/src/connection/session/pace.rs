//! Pacing the deliveries of one turn of input, so that a busy node does
//! not look dead: a handler that takes a millisecond per message must not
//! hold back the acknowledgements and heartbeats the ack policy and the
//! heartbeat interval say are due, and one site's handler work must not
//! hold its event-loop thread for ever.
//!
//! Handlers run inside [`Session::handle_input`](crate::connection::session::Session::handle_input),
//! which reads no clock. So the session delivers in *slices*: after a
//! slice's worth of units (a data frame, or one message of a packed frame)
//! it stops consuming input — the rest stays in the ring, a packed frame
//! remembering how many of its messages were delivered — and says so
//! ([`Session::input_paused`](crate::connection::session::Session::input_paused)). The driver
//! then reads its clock, feeds due timers (`handle_timeout`: the ack delay,
//! the heartbeat), writes what became due, asks
//! [`turn_spent`](crate::connection::session::Session::turn_spent) whether the turn's handler
//! time is used up (then it returns to its event loop and comes back for
//! the rest), and feeds input again.
//!
//! The slice is learned from the time the driver passes: it is sized so a
//! slice takes about half the shorter of the ack delay and the turn budget
//! (never more than [`MAX_SLICE`] units, never fewer than one). Fast
//! handlers therefore cost one pause per [`MAX_SLICE`] units (no clock read
//! or write per message); a 1 ms handler pauses every few messages, a 20 ms
//! one after each.

use std::time::{Duration, Instant};

/// Most units delivered between two pauses: with handlers that suddenly
/// turn slow, at most this many run before the driver looks at its clock.
pub const MAX_SLICE: u32 = 64;

/// The first slice of a channel, before any handler was timed (it
/// doubles per pause while handlers are fast).
const FIRST_SLICE: u32 = 1;

/// See the module documentation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    /// Units of the current slice.
    slice: u32,
    /// Units left in the current slice.
    left: u32,
    /// When the current slice began (the time of the input call that began
    /// it).
    slice_start: Option<Instant>,
    /// When the current turn began, if one is running.
    turn_start: Option<Instant>,
    /// The last input call stopped at a slice's end with input left.
    pub(super) paused: bool,
    /// Messages of the packed frame at the front of the input already
    /// delivered (the frame stays in the ring until all are).
    pub(super) packed_done: u32,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            slice: FIRST_SLICE,
            left: u32::MAX,
            slice_start: None,
            turn_start: None,
            paused: false,
            packed_done: 0,
        }
    }
}

impl Pace {
    /// A paced input call at `now`: it delivers a slice. After a pause,
    /// the slice that ended is timed and the next one sized so it takes
    /// about `target`.
    pub(super) fn begin_call(&mut self, now: Instant, target: Duration) {
        self.turn_start.get_or_insert(now);
        if self.paused {
            self.paused = false;
            if let Some(start) = self.slice_start {
                let done = self.slice - self.left;
                let took = now.saturating_duration_since(start);
                self.slice = next_slice(self.slice, done, took, target);
            }
        }
        self.left = self.slice;
        self.slice_start = Some(now);
    }

    /// An input call of an unpaced session: it delivers all it can.
    pub(super) fn unpaced(&mut self) {
        self.left = u32::MAX;
    }

    /// A new turn of the driver begins at `now`.
    pub(super) fn begin_turn(&mut self, now: Instant) {
        self.turn_start = Some(now);
    }

    /// True if the slice has no unit left: stop consuming input.
    pub(super) fn spent(&self) -> bool {
        self.left == 0
    }

    /// Units left in the slice.
    pub(super) fn left(&self) -> u32 {
        self.left
    }

    /// `n` units were delivered.
    pub(super) fn spend(&mut self, n: u32) {
        self.left = self.left.saturating_sub(n);
    }

    /// True (once, ending the turn) if the turn that began at its first
    /// input call has run for `budget` by `now`.
    pub(super) fn turn_spent(&mut self, now: Instant, budget: Duration) -> bool {
        let spent = self
            .turn_start
            .is_some_and(|t| now.saturating_duration_since(t) >= budget);
        if spent {
            self.turn_start = None;
        }
        spent
    }
}

/// The next slice after one of `slice` units of which `done` took `took`:
/// about `target`'s worth at that speed, at most double the last (a burst
/// of fast messages does not make the next slow ones run long), between 1
/// and [`MAX_SLICE`].
fn next_slice(slice: u32, done: u32, took: Duration, target: Duration) -> u32 {
    if done == 0 {
        return slice;
    }
    let per = took.as_nanos() / u128::from(done);
    let fit = target
        .as_nanos()
        .checked_div(per)
        .unwrap_or(u128::from(MAX_SLICE));
    (fit.min(u128::from(slice) * 2).min(u128::from(MAX_SLICE)) as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slice_follows_the_handlers_speed() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        // Fast handlers: doubling up to the maximum.
        assert_eq!(next_slice(8, 8, us(8), ms(5)), 16);
        assert_eq!(next_slice(64, 64, us(64), ms(5)), MAX_SLICE);
        // 1 ms each: five fit in 5 ms.
        assert_eq!(next_slice(64, 64, ms(64), ms(5)), 5);
        // 20 ms each: one at a time.
        assert_eq!(next_slice(5, 5, ms(100), ms(5)), 1);
        // Nothing done: unchanged.
        assert_eq!(next_slice(7, 0, ms(3), ms(5)), 7);
    }
}
