//! The event queue: a four-ary min-heap of 128-bit keys.
//!
//! Why not `BinaryHeap`: a large run keeps some 15,000 events scheduled
//! and pops one per event, and a binary heap's fourteen levels each cost a
//! cache miss — a tenth of the simulator's time went to one comparison in
//! its sift. Four children of 16 bytes share one cache line, so a four-ary
//! heap goes half as deep for the same misses per level. Keys are unique
//! (they carry the scheduling order), so the order popped is exactly the
//! keys' order, as with any correct heap.

/// Children per node.
const D: usize = 4;

/// A min-heap of unique `u128` keys.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    keys: Vec<u128>,
}

impl EventQueue {
    /// The smallest key.
    pub(super) fn peek(&self) -> Option<u128> {
        self.keys.first().copied()
    }

    /// Keys held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Adds `key`.
    pub(super) fn push(&mut self, key: u128) {
        let mut i = self.keys.len();
        self.keys.push(key);
        while i > 0 {
            let parent = (i - 1) / D;
            if self.keys[parent] <= key {
                break;
            }
            self.keys[i] = self.keys[parent];
            i = parent;
        }
        self.keys[i] = key;
    }

    /// Takes the smallest key.
    pub(super) fn pop(&mut self) -> Option<u128> {
        let last = self.keys.pop()?;
        let Some(&top) = self.keys.first() else {
            return Some(last);
        };
        // Sift `last` down from the root.
        let n = self.keys.len();
        let mut i = 0;
        loop {
            let first = D * i + 1;
            if first >= n {
                break;
            }
            let end = (first + D).min(n);
            let mut min = first;
            for c in first + 1..end {
                if self.keys[c] < self.keys[min] {
                    min = c;
                }
            }
            if self.keys[min] >= last {
                break;
            }
            self.keys[i] = self.keys[min];
            i = min;
        }
        self.keys[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any mix of pushes and pops gives what a binary heap gives.
        #[test]
        fn pops_in_the_order_a_binary_heap_does(ops in prop::collection::vec(prop::option::of(any::<u16>()), 0..400)) {
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
        }
    }
}
