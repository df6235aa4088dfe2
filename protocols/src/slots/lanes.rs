//! Lanes: the threads the slot holders' channels run on, and
//! the rule that keeps the holders spread over them.
//!
//! A process serves its channels on several threads, and a channel's work
//! stays on the one thread its owner runs on. The slots decide which
//! channels work; if the holders pile up on one thread, the others idle
//! however many peers wait. Under [`Admission::Share`](super::Admission::Share)
//! they do pile up on their own: a turn ends after a given amount of work,
//! so each thread gives slots back at the rate it works, whatever number
//! of holders it runs — the number of holders per thread is then a random
//! walk with nothing pulling it back. In a two-thread run of 200
//! in-process clients on 30 slots, a thread held none of them for 0.4 s at
//! a time, one time in five seconds.
//!
//! The rule: a slot that frees goes to the least served peer in line (as
//! before) unless another lane with peers in line runs fewer working
//! holders than that peer's lane; the slot then goes to the least served
//! peer of the least loaded such lane. A peer passed over this way is
//! still let in first once it has waited `max_wait` (the line's head
//! rule), so nobody waits without a bound. Holders and peers whose lane
//! is unknown (`None`: a channel whose owner's thread is not known yet)
//! count for no lane and are never passed over.
//!
//! A lane is an opaque number the driver gives: the same number for
//! channels whose work runs on the same thread.

use std::collections::BTreeMap;

/// Working holders (not giving way) per lane.
#[derive(Debug, Default)]
pub(super) struct LaneLoad {
    holders: BTreeMap<u32, usize>,
}

impl LaneLoad {
    /// One more working holder on `lane`.
    pub(super) fn add(&mut self, lane: Option<u32>) {
        if let Some(l) = lane {
            *self.holders.entry(l).or_default() += 1;
        }
    }

    /// One working holder fewer on `lane` (it gave way, or its slot is
    /// free).
    pub(super) fn sub(&mut self, lane: Option<u32>) {
        let Some(l) = lane else { return };
        if let Some(n) = self.holders.get_mut(&l) {
            *n -= 1;
            if *n == 0 {
                self.holders.remove(&l);
            }
        }
    }

    /// How many lanes have working holders.
    pub(super) fn lanes(&self) -> usize {
        self.holders.len()
    }

    /// Working holders on `lane`.
    pub(super) fn load(&self, lane: u32) -> usize {
        self.holders.get(&lane).copied().unwrap_or(0)
    }

    /// The lane to serve instead of `lane`, among `waiting` (the lanes
    /// with peers in line): the least loaded (the lowest number on a tie),
    /// if it runs fewer working holders than `lane`.
    pub(super) fn lighter(&self, lane: u32, waiting: impl Iterator<Item = u32>) -> Option<u32> {
        let here = self.load(lane);
        waiting
            .map(|l| (self.load(l), l))
            .min()
            .filter(|&(load, _)| load < here)
            .map(|(_, l)| l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_lane_and_ignores_unknown_lanes() {
        let mut l = LaneLoad::default();
        l.add(Some(1));
        l.add(Some(1));
        l.add(None);
        l.add(Some(2));
        assert_eq!((l.load(1), l.load(2), l.load(3)), (2, 1, 0));
        l.sub(Some(1));
        l.sub(None);
        l.sub(Some(2));
        l.sub(Some(2)); // more than it had: stays at 0
        assert_eq!((l.load(1), l.load(2)), (1, 0));
        assert!(!l.holders.contains_key(&2), "an empty lane is forgotten");
    }

    #[test]
    fn a_lighter_lane_is_one_with_strictly_fewer_holders() {
        let mut l = LaneLoad::default();
        for _ in 0..3 {
            l.add(Some(0));
        }
        l.add(Some(1));
        l.add(Some(1));
        // Lane 2 runs nothing: the lightest.
        assert_eq!(l.lighter(0, [1, 2].into_iter()), Some(2));
        assert_eq!(l.lighter(0, [1].into_iter()), Some(1));
        // Equal loads: no reason to pass anyone over.
        l.add(Some(1));
        assert_eq!(l.lighter(0, [1].into_iter()), None);
        // Nobody else waits.
        assert_eq!(l.lighter(0, std::iter::empty()), None);
        // A tie among lighter lanes goes to the lowest number.
        assert_eq!(l.lighter(1, [3, 2].into_iter()), Some(2));
    }
}
