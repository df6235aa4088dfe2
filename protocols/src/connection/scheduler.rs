//! Lane scheduling: which priority level sends the next frame.
//!
//! Levels 4, 3 and 2 share the channel **by bytes sent**, in proportion to
//! their weights (a start-time fair queue: each lane's virtual time advances
//! by `bytes / weight`, and the ready lane with the smallest virtual time
//! sends next; ties go to the higher level). Level 1 is sent only when no
//! other level waits, except that once it has waited [`SchedulerConfig::promote_after`]
//! without being served it competes like level 2 until its current message
//! is complete — it cannot starve. Protocol frames (level 5) never pass
//! through here: the session sends them before any lane.
//!
//! The scheduler decides per frame, so a small high-priority message queued
//! while a huge low-priority one is being marshaled goes out after at most one
//! frame of the big one.

use std::time::{Duration, Instant};

use crate::base::priority::Priority;

/// Tunables of the scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Weights of levels 2, 3, 4 (index 0 = level 2). Bytes are shared in
    /// proportion: with 1:2:4, level 4 gets 4/7 of a saturated channel.
    pub weights: [u32; 3],
    /// How long level 1 may wait unserved before it is promoted.
    pub promote_after: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            weights: [1, 2, 4],
            promote_after: Duration::from_millis(100),
        }
    }
}

/// Scales virtual time so integer division keeps precision.
const VT_SCALE: u128 = 1 << 20;

/// Per-channel scheduler state. Survives reconnects with its session.
///
/// # Example
///
/// ```
/// use std::time::Instant;
///
/// use sitenet_protocols::connection::scheduler::{Scheduler, SchedulerConfig};
/// use sitenet_protocols::Priority;
///
/// let now = Instant::now();
/// let mut s = Scheduler::new(SchedulerConfig::default()); // levels 2, 3, 4 weigh 1:2:4
/// // Levels 2, 3 and 4 (`ready[level - 1]`) always have frames of 1000 bytes.
/// let ready = [false, true, true, true];
/// let mut frames = [0; 4];
/// for _ in 0..70 {
///     let level = s.pick(ready, now).expect("a lane is ready");
///     s.charge(level, 1000, false, now);
///     frames[level.index()] += 1;
/// }
/// assert_eq!(frames, [0, 10, 20, 40]); // the channel's bytes shared by weight
/// // Level 1 is sent only when nothing else waits (or after `promote_after`).
/// assert_eq!(s.pick([true, false, false, false], now), Some(Priority::Background));
/// ```
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    /// Virtual finish time of each lane (index = level - 1).
    vtime: [u128; 4],
    /// Virtual time of the last frame scheduled.
    vclock: u128,
    /// Whether each lane was ready at the previous decision (a lane that
    /// becomes ready starts at the current virtual clock: no saved credit).
    was_ready: [bool; 4],
    /// When level 1 became ready or was last served.
    bg_waiting_since: Option<Instant>,
    /// Level 1 is promoted until its current message completes.
    bg_promoted: bool,
    /// Virtual time per byte of each lane (`VT_SCALE / weight`), so charging
    /// a frame is a multiplication, not a 128-bit division.
    per_byte: [u128; 4],
}

impl Scheduler {
    /// A scheduler with the given weights. Zero weights are raised to 1.
    pub fn new(mut cfg: SchedulerConfig) -> Self {
        for w in &mut cfg.weights {
            *w = (*w).max(1);
        }
        // Promoted level 1 competes as level 2, so it shares level 2's weight.
        let w = |i: usize| cfg.weights[i.saturating_sub(1)] as u128;
        let per_byte = std::array::from_fn(|i| VT_SCALE / w(i));
        Self {
            cfg,
            vtime: [0; 4],
            vclock: 0,
            was_ready: [false; 4],
            bg_waiting_since: None,
            bg_promoted: false,
            per_byte,
        }
    }

    /// Picks the lane for the next frame among the ready ones
    /// (`ready[level - 1]`), or `None` if none is ready.
    pub fn pick(&mut self, ready: [bool; 4], now: Instant) -> Option<Priority> {
        // Lanes that just became ready start at the current clock.
        for (i, &r) in ready.iter().enumerate() {
            if r && !self.was_ready[i] {
                self.vtime[i] = self.vtime[i].max(self.vclock);
            }
            self.was_ready[i] = r;
        }
        if ready[0] {
            let since = *self.bg_waiting_since.get_or_insert(now);
            if !self.bg_promoted && now.saturating_duration_since(since) >= self.cfg.promote_after {
                self.bg_promoted = true;
                // Promoted level 1 competes from the current virtual clock,
                // like a lane that just became ready: its virtual time went
                // stale while it waited, and it would otherwise send alone
                // until it caught up (up to a promotion interval's worth of
                // the channel's bytes) while higher levels wait.
                self.vtime[0] = self.vtime[0].max(self.vclock);
            }
        } else {
            self.bg_waiting_since = None;
            self.bg_promoted = false;
        }
        let mut best: Option<usize> = None;
        for i in (1..4).rev() {
            if ready[i] && best.is_none_or(|b| self.vtime[i] < self.vtime[b]) {
                best = Some(i);
            }
        }
        if ready[0]
            && (best.is_none() || (self.bg_promoted && self.vtime[0] < self.vtime[best.unwrap()]))
        {
            best = Some(0);
        }
        let i = best?;
        self.vclock = self.vclock.max(self.vtime[i]);
        Priority::from_lane(i as u8 + 1)
    }

    /// Records that `bytes` were sent on `lane`; `message_done` if that frame
    /// completed a message.
    pub fn charge(&mut self, lane: Priority, bytes: usize, message_done: bool, now: Instant) {
        let i = lane.index();
        self.vtime[i] += (bytes as u128).max(1) * self.per_byte[i];
        if i == 0 {
            self.bg_waiting_since = Some(now);
            if message_done {
                self.bg_promoted = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(weights: [u32; 3], ready: [bool; 4], frames: usize, frame_len: usize) -> [usize; 4] {
        let mut s = Scheduler::new(SchedulerConfig {
            weights,
            promote_after: Duration::from_secs(3600),
        });
        let now = Instant::now();
        let mut sent = [0usize; 4];
        for _ in 0..frames {
            let p = s.pick(ready, now).unwrap();
            sent[p.index()] += frame_len;
            s.charge(p, frame_len, false, now);
        }
        sent
    }

    #[test]
    fn shares_bytes_by_weight() {
        let sent = run([1, 2, 4], [false, true, true, true], 7000, 1000);
        assert_eq!(sent[1], 1_000_000);
        assert_eq!(sent[2], 2_000_000);
        assert_eq!(sent[3], 4_000_000);
        assert_eq!(sent[0], 0);
    }

    #[test]
    fn background_waits_for_idle_then_is_promoted() {
        let mut s = Scheduler::new(SchedulerConfig {
            weights: [1, 2, 4],
            promote_after: Duration::from_millis(100),
        });
        let t0 = Instant::now();
        let ready = [true, false, false, true];
        // Before the promotion interval, level 1 never goes.
        for _ in 0..50 {
            let p = s.pick(ready, t0 + Duration::from_millis(10)).unwrap();
            assert_eq!(p, Priority::High);
            s.charge(p, 100, true, t0);
        }
        // After it, level 1 gets a share.
        let mut bg = 0;
        for _ in 0..50 {
            let p = s.pick(ready, t0 + Duration::from_millis(200)).unwrap();
            if p == Priority::Background {
                bg += 1;
            }
            s.charge(p, 100, false, t0 + Duration::from_millis(200));
        }
        assert!(bg > 0, "promoted background lane was never served");
        // Alone, level 1 is served at once.
        let mut s = Scheduler::new(SchedulerConfig::default());
        assert_eq!(
            s.pick([true, false, false, false], t0),
            Some(Priority::Background)
        );
        assert_eq!(s.pick([false; 4], t0), None);
    }

    #[test]
    fn a_newly_ready_lane_gets_no_saved_credit() {
        let mut s = Scheduler::new(SchedulerConfig {
            weights: [1, 1, 1],
            promote_after: Duration::from_secs(1),
        });
        let now = Instant::now();
        for _ in 0..100 {
            let p = s.pick([false, true, false, false], now).unwrap();
            s.charge(p, 1000, false, now);
        }
        // Level 3 arrives: the two then alternate, level 3 does not monopolise.
        let mut run3 = 0;
        for _ in 0..10 {
            let p = s.pick([false, true, true, false], now).unwrap();
            if p == Priority::Medium {
                run3 += 1
            }
            s.charge(p, 1000, false, now);
        }
        assert!((4..=6).contains(&run3), "level 3 took {run3} of 10 frames");
    }

    proptest! {
        /// Over any run with all of 2..=4 ready, each level's byte share stays
        /// within one frame per lane of its weighted share, and a ready lane is
        /// never starved.
        #[test]
        fn fair_within_a_frame(w in prop::array::uniform3(1u32..10), frames in 1usize..2000, len in 1usize..5000) {
            let sent = run(w, [false, true, true, true], frames, len);
            let total: usize = sent.iter().sum();
            let wsum: u32 = w.iter().sum();
            for i in 0..3 {
                let fair = total as f64 * w[i] as f64 / wsum as f64;
                prop_assert!((sent[i + 1] as f64 - fair).abs() <= 2.0 * len as f64 + 1.0,
                    "level {} sent {} fair {}", i + 2, sent[i + 1], fair);
            }
        }
    }
}
