//! The node's output bound and each site's fair share of it (issue 17;
//! the rule the runtime's outboxes apply with atomics, here so that it is
//! tested on its own and a simulator applies the same one).
//!
//! Every site's output counts against the node's bound, a hard ceiling.
//! Below half of it anyone may add; past half, a site may add only while
//! it would hold at most a quarter of the bound divided among the sites
//! holding output. So one site that never reads takes at most half the
//! node, and a few such sites cannot starve the rest.
//!
//! ```
//! use sitenet_protocols::output_share::admits;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
