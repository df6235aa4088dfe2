//! The event queue: a calendar of 128-bit keys (the time in nanoseconds
//! in the high 64 bits), popped in the keys' order.
//!
//! Why not a heap: a large run keeps some 15,000 events scheduled and pops
//! one per event; a heap's sift walks a dozen levels of that array, each a
//! likely cache miss, and was a tenth of the simulator's time. Nearly every
//! event is scheduled less than a few seconds ahead (latencies, heartbeats,
//! ticks, acknowledgement delays), so the queue keeps a ring of buckets one
//! `2^20` ns (about a millisecond) wide: a push is an append to its bucket,
//! and only the bucket whose time has come is sorted, a few dozen keys.
//! Keys further ahead than the ring wait in a heap and move into the ring
//! as its window reaches them. Keys are unique (they carry the scheduling
//! order), so the order popped is exactly the keys' order, as with a heap:
//! the run, and its digest, are the same.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// log2 of a bucket's width in nanoseconds.
const WIDTH_BITS: u32 = 20;
/// Buckets in the ring (about 8.6 s of simulated time).
const BUCKETS: usize = 1 << 13;

/// A min-queue of unique `u128` keys whose high 64 bits are a time.
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// The keys of the current bucket and earlier ones (every key below
    /// `horizon`), sorted largest first: the next is the last.
    near: Vec<u128>,
    /// Keys from `horizon` up to a ring's width after it, by bucket.
    ring: Vec<Vec<u128>>,
    /// Keys in `ring`.
    in_ring: usize,
    /// Keys a ring's width or more after `horizon`.
    far: BinaryHeap<Reverse<u128>>,
    /// The bucket number (time >> WIDTH_BITS) of the first bucket not in
    /// `near`: `near` holds every key of earlier buckets.
    horizon: u64,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self {
            near: Vec::new(),
            ring: (0..BUCKETS).map(|_| Vec::new()).collect(),
            in_ring: 0,
            far: BinaryHeap::new(),
            horizon: 0,
        }
    }
}

/// The bucket number of `key`.
fn bucket(key: u128) -> u64 {
    ((key >> 64) as u64) >> WIDTH_BITS
}

impl EventQueue {
    /// The smallest key.
    pub(crate) fn peek(&mut self) -> Option<u128> {
        if self.near.is_empty() {
            self.advance();
        }
        self.near.last().copied()
    }

    /// Keys held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.near.len() + self.in_ring + self.far.len()
    }

    /// Adds `key`.
    pub(crate) fn push(&mut self, key: u128) {
        let b = bucket(key);
        if b < self.horizon {
            // Sorted largest first: its place is after every larger key.
            let at = self.near.partition_point(|k| *k > key);
            self.near.insert(at, key);
        } else if b - self.horizon < BUCKETS as u64 {
            self.ring[b as usize % BUCKETS].push(key);
            self.in_ring += 1;
        } else {
            self.far.push(Reverse(key));
        }
    }

    /// Takes the smallest key.
    pub(crate) fn pop(&mut self) -> Option<u128> {
        if self.near.is_empty() {
            self.advance();
        }
        self.near.pop()
    }

    /// Moves the next bucket that holds a key into `near` (which is
    /// empty), taking keys from `far` into the ring as its window moves.
    fn advance(&mut self) {
        while self.near.is_empty() {
            if self.in_ring == 0 {
                // Nothing within the ring: jump to the first far key.
                let Some(&Reverse(first)) = self.far.peek() else {
                    return;
                };
                self.horizon = self.horizon.max(bucket(first));
            }
            // The ring's window now ends one bucket later: far keys that
            // fall in it join it.
            let end = self.horizon + BUCKETS as u64;
            while let Some(&Reverse(k)) = self.far.peek() {
                if bucket(k) >= end {
                    break;
                }
                self.far.pop();
                self.ring[bucket(k) as usize % BUCKETS].push(k);
                self.in_ring += 1;
            }
            let slot = self.horizon as usize % BUCKETS;
            self.horizon += 1;
            if !self.ring[slot].is_empty() {
                std::mem::swap(&mut self.near, &mut self.ring[slot]);
                self.in_ring -= self.near.len();
                self.near.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Runs `ops` (a key's time, or a pop) against a binary heap.
    fn same_as_a_heap(ops: Vec<Option<u64>>) -> Result<(), TestCaseError> {
        let mut q = EventQueue::default();
        let mut model = BinaryHeap::new();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                // Unique keys, as the simulator's are: time, then order.
                Some(t) => {
                    let key = u128::from(t) << 64 | i as u128;
                    q.push(key);
                    model.push(Reverse(key));
                }
                None => prop_assert_eq!(q.pop(), model.pop().map(|Reverse(k)| k)),
            }
            prop_assert_eq!(q.peek(), model.peek().map(|Reverse(k)| *k));
            prop_assert_eq!(q.len(), model.len());
        }
        while let Some(Reverse(k)) = model.pop() {
            prop_assert_eq!(q.pop(), Some(k));
        }
        prop_assert_eq!(q.pop(), None);
        Ok(())
    }

    proptest! {
        /// Times over 30 s, in and beyond the ring, and keys pushed
        /// before the last one popped (an event at the current time):
        /// popped as a heap pops them.
        #[test]
        fn pops_in_the_order_a_binary_heap_does_across_the_ring(ops in prop::collection::vec(prop::option::of(0u64..30_000_000_000), 0..400)) {
            same_as_a_heap(ops)?;
        }

        /// A virtual clock: each push at most `ahead` after the last key
        /// popped, as the simulator schedules.
        #[test]
        fn pops_in_order_when_keys_follow_the_clock(steps in prop::collection::vec((any::<bool>(), 0u64..20_000_000_000), 0..600)) {
            let mut q = EventQueue::default();
            let mut model = BinaryHeap::new();
            let mut now = 0u64;
            for (i, (push, ahead)) in steps.into_iter().enumerate() {
                if push {
                    let key = u128::from(now + ahead) << 64 | i as u128;
                    q.push(key);
                    model.push(Reverse(key));
                } else {
                    let got = q.pop();
                    prop_assert_eq!(got, model.pop().map(|Reverse(k)| k));
                    if let Some(k) = got {
                        now = (k >> 64) as u64;
                    }
                }
            }
            while let Some(Reverse(k)) = model.pop() {
                prop_assert_eq!(q.pop(), Some(k));
            }
        }

        /// Any mix of pushes and pops gives what a binary heap gives.
        #[test]
        fn pops_in_the_order_a_binary_heap_does(ops in prop::collection::vec(prop::option::of(any::<u16>().prop_map(u64::from)), 0..400)) {
            same_as_a_heap(ops)?;
        }
    }
}
