//! The node's output bound and each site's fair share of it,
//! and each class's share of a site's bound (the four priority levels and
//! the node's own messages). The rules the runtime's outboxes apply, here
//! so that they are tested on their own and a simulator applies the same.
//!
//! Every site's output counts against the node's bound, a hard ceiling.
//! Below half of it anyone may add; past half, a site may add only while
//! it would hold at most a quarter of the bound divided among the sites
//! holding output. So one site that never reads takes at most half the
//! node, and a few such sites cannot starve the rest.
//!
//! ```
//! use sitenet_protocols::connection::output_share::admits;
//!
//! let bound = 1000;
//! // Below half: anyone, whatever it holds.
//! assert!(admits(bound, 400, 4, 390, 10));
//! // Past half: only within the share (1000 / (4 × 2) = 125).
//! assert!(admits(bound, 600, 2, 100, 20));
//! assert!(!admits(bound, 600, 2, 200, 20));
//! // Never past the bound.
//! assert!(!admits(bound, 1001, 100, 0, 1));
//! ```

/// Whether a site that holds `site_before` bytes may add `n`, bringing the
/// node's total to `total_after`, while `holders` sites (itself included)
/// hold output, under the node's `bound`.
pub fn admits(bound: u64, total_after: u64, holders: usize, site_before: u64, n: u64) -> bool {
    let share = bound / (4 * holders.max(1) as u64);
    let fair = site_before.saturating_add(n) <= share;
    total_after <= bound && (fair || total_after <= bound / 2)
}

pub use crate::base::class::{class_of, CLASSES, RESERVED_TYPE_IDS, SYSTEM_CLASS};

/// The room kept for each class of a site whose bound is `bound`: a
/// twentieth of it. The other three quarters are shared by all classes,
/// so one class alone may hold four fifths of the bound.
pub fn class_reserve(bound: u64) -> u64 {
    bound / (4 * CLASSES as u64)
}

/// Whether a site holding `held` bytes per class may add `n` bytes of
/// `class`, under its `bound`. Each class has a share of its own, so a
/// level-1 backlog cannot refuse a level-4 send, nor user data the node's
/// own answers.
///
/// Each class has its reserve ([`class_reserve`]): within it a class is
/// always admitted, whatever the others hold. Beyond their reserves the
/// classes share the rest of the bound, so the site never holds more than
/// its bound through this rule. A message always fits an empty site (the
/// bound is at least twice the largest message), so the site then holds
/// at most one message past its bound, plus the reserves of the others.
///
/// ```
/// use sitenet_protocols::connection::output_share::{admits_class, CLASSES, SYSTEM_CLASS};
///
/// let bound = 1000; // reserves of 50 each, 750 shared
/// // Level 1 (class 0) has filled its reserve and the whole shared part...
/// let held = [800, 0, 0, 0, 0];
/// assert!(!admits_class(bound, &held, 0, 1));
/// // ...yet a high-priority send (class 3) and the node's own answer
/// // still fit, in their reserves.
/// assert!(admits_class(bound, &held, 3, 50));
/// assert!(admits_class(bound, &held, SYSTEM_CLASS, 50));
/// assert!(!admits_class(bound, &held, 3, 51));
/// // Anything fits an empty site.
/// assert!(admits_class(bound, &[0; CLASSES], 2, 5000));
/// ```
pub fn admits_class(bound: u64, held: &[u64; CLASSES], class: usize, n: u64) -> bool {
    let reserve = class_reserve(bound);
    if held[class].saturating_add(n) <= reserve || held.iter().all(|&h| h == 0) {
        return true;
    }
    let shared = bound - reserve * CLASSES as u64;
    let mut over: u64 = 0;
    for (c, &h) in held.iter().enumerate() {
        let h = if c == class { h.saturating_add(n) } else { h };
        over = over.saturating_add(h.saturating_sub(reserve));
    }
    over <= shared
}

/// What acknowledgements freed since the owner last asked: messages, wire
/// bytes, and footprints ([`OutMessage::footprint`](crate::wire::message::OutMessage::footprint))
/// per class, which the sender's byte bound gives back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freed {
    /// Messages freed.
    pub messages: u64,
    /// Their bytes on the wire.
    pub bytes: u64,
    /// Their footprints, per class ([`class_of`]).
    pub by_class: [u64; CLASSES],
}

impl Freed {
    /// Counts `m` as freed.
    pub fn add(&mut self, m: &crate::wire::message::OutMessage) {
        self.messages += 1;
        self.bytes += m.wire_len();
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::FreedInLowestClass) {
            self.by_class[0] += m.footprint();
            return;
        }
        self.by_class[m.share_class()] += m.footprint();
    }

    /// Adds `other` to this.
    pub fn merge(&mut self, other: Freed) {
        self.messages += other.messages;
        self.bytes += other.bytes;
        for (a, b) in self.by_class.iter_mut().zip(other.by_class) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Admitting only what the class rule allows, from an empty site:
        /// the site never holds more than its bound plus one message past
        /// it, and a class within its reserve is never refused.
        #[test]
        fn the_class_rule(
            bound in 100u64..1 << 30,
            sends in proptest::collection::vec((0usize..CLASSES, 1u64..1 << 20, any::<bool>()), 1..200),
        ) {
            let mut held = [0u64; CLASSES];
            let mut biggest = 0;
            for (class, n, release) in sends {
                let n = n % bound.max(2) + 1;
                let total: u64 = held.iter().sum();
                let ok = admits_class(bound, &held, class, n);
                if held[class] + n <= class_reserve(bound) {
                    prop_assert!(ok, "a class within its reserve was refused");
                }
                if ok {
                    if total == 0 {
                        biggest = n;
                    }
                    held[class] += n;
                }
                let total: u64 = held.iter().sum();
                prop_assert!(
                    total <= bound.max(biggest + class_reserve(bound) * CLASSES as u64),
                    "held {total} of {bound}"
                );
                if release {
                    held[class] /= 2;
                }
            }
        }
    }

    /// The case the class reserves exist for: a level-1 backlog fills what
    /// it may, and a level-4 send and a system answer still fit.
    #[test]
    fn a_low_backlog_never_refuses_a_high_send_or_a_system_answer() {
        let bound = 512 << 20;
        let mut held = [0u64; CLASSES];
        while admits_class(bound, &held, 0, 64 << 10) {
            held[0] += 64 << 10;
        }
        assert!(held[0] >= bound * 3 / 4, "level 1 keeps the shared part");
        assert!(held[0] <= bound - 4 * class_reserve(bound));
        assert!(admits_class(bound, &held, 3, 1 << 20));
        assert!(admits_class(bound, &held, SYSTEM_CLASS, 1 << 20));
    }

    proptest! {
        /// The bound is a hard ceiling; below half nothing else is asked;
        /// past half exactly the share decides.
        #[test]
        fn the_share_rule(
            bound in 1u64..1 << 40,
            total in 0u64..1 << 41,
            holders in 1usize..10_000,
            site in 0u64..1 << 40,
            n in 0u64..1 << 30,
        ) {
            let ok = admits(bound, total, holders, site, n);
            if total > bound {
                prop_assert!(!ok);
            } else if total <= bound / 2 {
                prop_assert!(ok);
            } else {
                prop_assert_eq!(ok, site + n <= bound / (4 * holders as u64));
            }
        }
    }

    /// One site that never reads fills at most half the node: past half,
    /// its share (a quarter of the bound, alone) is already spent.
    #[test]
    fn one_site_that_never_reads_takes_at_most_half() {
        let bound = 1 << 20;
        let mut held = 0;
        while admits(bound, held + 1024, 1, held, 1024) {
            held += 1024;
        }
        assert_eq!(held, bound / 2);
    }
}
