//! When a runtime thread that has run out of work polls its sockets
//! without blocking instead of going to sleep, and for how long.
//!
//! On a virtual machine whose idle cores halt, a thread that blocks in
//! `epoll_wait` and is woken a few microseconds later by a peer's reply
//! pays the wake of a halted core: an inter-processor interrupt, an exit
//! to the hypervisor and back, measured at 30–70 µs a round trip on this
//! project's machines against 6–12 µs when neither end sleeps. A thread
//! that keeps polling (a zero-timeout `epoll_wait`) for a short while after
//! its last I/O sees the reply arrive without ever sleeping.
//!
//! Polling burns the core, so the window adapts to the gaps the thread
//! actually sees, as Linux's `haltpoll` governor does for a guest's idle
//! loop:
//!
//! * an idle gap that ends within the window costs nothing more: the spin
//!   caught it;
//! * a gap that ends after the window but within [`SpinConfig::max`] would
//!   have been caught by a longer spin: the window grows (to
//!   [`SpinConfig::grow_start`] from zero, else times
//!   [`SpinConfig::grow`]), up to `max`;
//! * a gap longer than `max` is one no spin should cover: the window
//!   shrinks (divided by [`SpinConfig::shrink`]; below `grow_start` it is
//!   zero, and a thread with a zero window blocks at once).
//!
//! A thread whose gaps are all long (an idle node, heartbeats a second
//! apart, requests a millisecond apart) has a zero window after a few gaps
//! and never spins; a thread in a conversation of short gaps spins at most
//! `max` per gap. The driver also gives its core away on every empty poll
//! (`sched_yield`), so a spinning thread never holds a core another thread
//! is waiting for.
//!
//! Time is an argument: nothing here reads a clock.

use std::time::{Duration, Instant};

/// How a thread's spin window adapts. `Default` is the setting every
/// sitenet runtime thread uses unless told otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinConfig {
    /// The longest a thread polls after its last I/O before it blocks,
    /// and the longest gap the window grows to cover. Zero turns spinning
    /// off. Default 100 µs: longer than a loopback or same-rack round trip
    /// through a peer that answers at once, far shorter than a timer tick.
    pub max: Duration,
    /// The window a zero window grows to when a gap shows spinning would
    /// have paid; below it, a shrinking window drops to zero. Default
    /// 10 µs.
    pub grow_start: Duration,
    /// The factor a window grows by when a gap shows it too short.
    /// Default 2.
    pub grow: u32,
    /// The divisor a window shrinks by after a gap longer than `max`.
    /// Default 2.
    pub shrink: u32,
}

impl Default for SpinConfig {
    fn default() -> Self {
        Self {
            max: Duration::from_micros(100),
            grow_start: Duration::from_micros(10),
            grow: 2,
            shrink: 2,
        }
    }
}

impl SpinConfig {
    /// No spinning: a thread blocks as soon as it has nothing to do.
    pub const OFF: Self = Self {
        max: Duration::ZERO,
        grow_start: Duration::ZERO,
        grow: 2,
        shrink: 2,
    };

    /// The default adaptation with `max` as the longest spin (zero: off).
    /// `grow_start` is kept at or below `max`.
    pub fn with_max(max: Duration) -> Self {
        let d = Self::default();
        Self {
            max,
            grow_start: d.grow_start.min(max),
            ..d
        }
    }
}

/// One thread's spin window and where its current idle gap began.
#[derive(Debug, Clone)]
pub struct IdleSpin {
    cfg: SpinConfig,
    window: Duration,
    /// When the thread last had I/O; the idle gap runs from here.
    idle_since: Option<Instant>,
    /// The thread's I/O count when last seen.
    seen: u64,
}

/// What a thread that has run out of work does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleStep {
    /// Poll again without blocking (and give the core away meanwhile if
    /// another thread wants it).
    Poll,
    /// Block until an event: the window is spent, or zero.
    Block,
}

impl IdleSpin {
    /// A thread's spin state, its window closed until a gap shows spinning
    /// would pay.
    pub fn new(cfg: SpinConfig) -> Self {
        Self {
            cfg,
            window: Duration::ZERO,
            idle_since: None,
            seen: 0,
        }
    }

    /// The current window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The thread has no work at `now`; `io` is its count of socket reads
    /// and writes that moved bytes. I/O since the last call starts a new
    /// gap (the spin caught it, or the thread was busy); otherwise the
    /// thread polls until the gap has lasted the window.
    pub fn idle(&mut self, now: Instant, io: u64) -> IdleStep {
        if io != self.seen || self.idle_since.is_none() {
            self.seen = io;
            self.idle_since = Some(now);
        }
        let since = self.idle_since.expect("set above");
        if now.saturating_duration_since(since) < self.window {
            IdleStep::Poll
        } else {
            IdleStep::Block
        }
    }

    /// The thread's I/O resumed at `now` (count `io`) after it blocked:
    /// the gap since its last I/O tells whether the window should grow or
    /// shrink. A wake with no new I/O (a timer, a message from another
    /// thread) leaves the window as it is.
    pub fn woke(&mut self, now: Instant, io: u64) {
        if io == self.seen {
            return;
        }
        self.seen = io;
        let Some(since) = self.idle_since.replace(now) else {
            return;
        };
        let gap = now.saturating_duration_since(since);
        if gap <= self.window {
            return;
        }
        if gap <= self.cfg.max {
            self.window = if self.window.is_zero() {
                self.cfg.grow_start
            } else {
                self.window.saturating_mul(self.cfg.grow.max(1))
            }
            .min(self.cfg.max);
        } else {
            self.window /= self.cfg.shrink.max(1);
            if self.window < self.cfg.grow_start {
                self.window = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Drives `spin` through one idle gap of `gap` that ends with I/O:
    /// polls every microsecond while told to, then blocks until the gap
    /// ends. Returns how long it polled.
    fn gap(spin: &mut IdleSpin, t: &mut Instant, io: &mut u64, gap: Duration) -> Duration {
        let start = *t;
        let end = start + gap;
        let mut polled = Duration::ZERO;
        while *t < end {
            match spin.idle(*t, *io) {
                IdleStep::Poll => {
                    *t += US;
                    polled += US;
                }
                IdleStep::Block => {
                    *t = end;
                    *io += 1;
                    spin.woke(*t, *io);
                    return polled;
                }
            }
        }
        *io += 1; // caught by the spin
        polled
    }

    #[test]
    fn a_new_thread_blocks_at_once() {
        let mut s = IdleSpin::new(SpinConfig::default());
        assert_eq!(s.idle(Instant::now(), 0), IdleStep::Block);
    }

    #[test]
    fn short_gaps_grow_the_window_until_the_spin_catches_them() {
        let mut s = IdleSpin::new(SpinConfig::default());
        let (mut t, mut io) = (Instant::now(), 0);
        let mut polled = Vec::new();
        for _ in 0..8 {
            polled.push(gap(&mut s, &mut t, &mut io, 25 * US));
        }
        // 0, 10, 20 µs windows miss a 25 µs gap; 40 µs catches it, and
        // from then on every gap is caught after 25 µs of polling.
        assert_eq!(&polled[..3], &[Duration::ZERO, 10 * US, 20 * US]);
        assert!(polled[3..].iter().all(|p| *p == 25 * US), "{polled:?}");
        assert_eq!(s.window(), 40 * US);
    }

    #[test]
    fn gaps_longer_than_max_shrink_the_window_to_zero() {
        let mut s = IdleSpin::new(SpinConfig::default());
        let (mut t, mut io) = (Instant::now(), 0);
        for _ in 0..8 {
            gap(&mut s, &mut t, &mut io, 90 * US);
        }
        assert_eq!(s.window(), 100 * US, "grows to max");
        let mut polled = Vec::new();
        for _ in 0..6 {
            polled.push(gap(&mut s, &mut t, &mut io, Duration::from_millis(5)));
        }
        assert_eq!(s.window(), Duration::ZERO);
        // Spent: 100 + 50 + 25 + 12 µs (12.5 rounded to the poll step),
        // then nothing.
        assert_eq!(polled.iter().sum::<Duration>(), 188 * US, "{polled:?}");
        assert_eq!(polled[4..], [Duration::ZERO, Duration::ZERO]);
    }

    #[test]
    fn the_spin_never_exceeds_max_per_gap() {
        let cfg = SpinConfig::default();
        let mut s = IdleSpin::new(cfg);
        let (mut t, mut io) = (Instant::now(), 0);
        // Gaps of every length, repeated: no gap is polled longer than max.
        for round in 0..20u32 {
            for g in [1u32, 9, 11, 50, 99, 100, 101, 150, 1000, 40_000] {
                let p = gap(&mut s, &mut t, &mut io, US * (g + round));
                assert!(p <= cfg.max, "polled {p:?} in a gap of {g} µs");
            }
        }
    }

    #[test]
    fn a_wake_without_io_keeps_the_window_and_the_gap() {
        let mut s = IdleSpin::new(SpinConfig::default());
        let (mut t, mut io) = (Instant::now(), 0);
        for _ in 0..4 {
            gap(&mut s, &mut t, &mut io, 30 * US);
        }
        let w = s.window();
        assert!(w > Duration::ZERO);
        // The thread goes idle, spends its window and blocks; a timer
        // wakes it long after its last I/O: no I/O, so neither a grow nor
        // a shrink, and the gap still runs from the last I/O (the thread
        // blocks at once: the window is spent).
        assert_eq!(s.idle(t, io), IdleStep::Poll);
        t += Duration::from_secs(1);
        assert_eq!(s.idle(t, io), IdleStep::Block);
        s.woke(t, io);
        assert_eq!(s.window(), w);
        assert_eq!(s.idle(t, io), IdleStep::Block);
    }

    #[test]
    fn busy_io_restarts_the_gap() {
        let mut s = IdleSpin::new(SpinConfig::default());
        let (mut t, mut io) = (Instant::now(), 0);
        for _ in 0..4 {
            gap(&mut s, &mut t, &mut io, 30 * US);
        }
        let w = s.window();
        // I/O keeps coming while polling: the thread polls on, each new
        // count starting a new gap.
        for _ in 0..1000 {
            assert_eq!(s.idle(t, io), IdleStep::Poll);
            t += w / 2;
            io += 1;
        }
    }

    #[test]
    fn off_never_polls() {
        let mut s = IdleSpin::new(SpinConfig::OFF);
        let (mut t, mut io) = (Instant::now(), 0);
        for g in [1, 5, 20, 80, 500] {
            assert_eq!(gap(&mut s, &mut t, &mut io, US * g), Duration::ZERO);
        }
        assert_eq!(SpinConfig::with_max(Duration::ZERO), SpinConfig::OFF);
    }
}
