//! How often a node may log about one peer's bad input.
//!
//! A peer that sends malformed messages must not be able to turn its bytes
//! into the node's disk: one warning line per malformed message made 53 MiB
//! received into 534 MiB of stderr. Each peer gets [`LINES_PER_WINDOW`]
//! lines per [`WINDOW`]; past that its lines are counted, not written, and
//! the first line allowed after the window says how many were suppressed,
//! so nothing is hidden, only summarised.
//!
//! [`LogLimits`] keeps the state of at most [`MAX_PEERS`] peers: a flood of
//! peers shares one overflow budget instead of growing the table. Time is
//! an argument: nothing here reads a clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Lines one peer may cause per window.
pub const LINES_PER_WINDOW: u32 = 5;
/// The length of a window.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Peers tracked one by one; beyond them, peers share one budget.
pub const MAX_PEERS: usize = 1024;

/// One peer's budget of log lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogLimit {
    window_start: Option<Instant>,
    lines: u32,
    suppressed: u64,
}

/// What a caller about to log should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVerdict {
    /// Write the line; `suppressed` lines of this peer were dropped before
    /// it (say so in the line).
    Log {
        /// Lines dropped since the last one written.
        suppressed: u64,
    },
    /// Drop the line (it is counted, and reported with the next one written).
    Suppress,
}

impl LogLimit {
    /// Charges one line at `now`.
    pub fn check(&mut self, now: Instant) -> LogVerdict {
        let fresh = self
            .window_start
            .is_none_or(|s| now.saturating_duration_since(s) >= WINDOW);
        if fresh {
            self.window_start = Some(now);
            self.lines = 0;
        }
        if self.lines < LINES_PER_WINDOW {
            self.lines += 1;
            LogVerdict::Log {
                suppressed: std::mem::take(&mut self.suppressed),
            }
        } else {
            self.suppressed += 1;
            LogVerdict::Suppress
        }
    }

    fn idle(&self, now: Instant) -> bool {
        self.suppressed == 0
            && self
                .window_start
                .is_none_or(|s| now.saturating_duration_since(s) >= WINDOW)
    }
}

/// The budgets of many peers, keyed by whatever names a peer to the caller
/// (a site entry, a source address).
#[derive(Debug)]
pub struct LogLimits<K> {
    peers: HashMap<K, LogLimit>,
    overflow: LogLimit,
    /// A full table is swept for idle peers at most once a window, so a
    /// flood of new peers costs O(1) per line, not a scan each.
    next_sweep: Option<Instant>,
}

impl<K> Default for LogLimits<K> {
    fn default() -> Self {
        Self {
            peers: HashMap::new(),
            overflow: LogLimit::default(),
            next_sweep: None,
        }
    }
}

impl<K: Hash + Eq> LogLimits<K> {
    /// Charges one line about `peer` at `now`.
    pub fn check(&mut self, peer: K, now: Instant) -> LogVerdict {
        if self.peers.len() >= MAX_PEERS && !self.peers.contains_key(&peer) {
            if self.next_sweep.is_none_or(|t| now >= t) {
                self.peers.retain(|_, l| !l.idle(now));
                self.next_sweep = Some(now + WINDOW);
            }
            if self.peers.len() >= MAX_PEERS {
                return self.overflow.check(now);
            }
        }
        self.peers.entry(peer).or_default().check(now)
    }

    /// Peers tracked one by one.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// True if no peer is tracked.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_a_few_lines_per_window_then_a_summary() {
        let t0 = Instant::now();
        let mut l = LogLimit::default();
        for _ in 0..LINES_PER_WINDOW {
            assert_eq!(l.check(t0), LogVerdict::Log { suppressed: 0 });
        }
        for i in 0..1000 {
            assert_eq!(l.check(t0 + Duration::from_millis(i)), LogVerdict::Suppress);
        }
        assert_eq!(l.check(t0 + WINDOW), LogVerdict::Log { suppressed: 1000 });
        assert_eq!(l.check(t0 + WINDOW), LogVerdict::Log { suppressed: 0 });
    }

    #[test]
    fn peers_have_budgets_of_their_own() {
        let t0 = Instant::now();
        let mut ls = LogLimits::default();
        for _ in 0..100 {
            ls.check(1u32, t0);
        }
        assert_eq!(ls.check(2u32, t0), LogVerdict::Log { suppressed: 0 });
    }

    /// A million lines from a million peers in one window: the table stays
    /// bounded and at most `(MAX_PEERS + 1) * LINES_PER_WINDOW` are written.
    #[test]
    fn a_flood_of_peers_shares_one_budget_and_the_table_is_bounded() {
        let t0 = Instant::now();
        let mut ls = LogLimits::default();
        let written = (0..1_000_000u32)
            .filter(|&p| matches!(ls.check(p, t0), LogVerdict::Log { .. }))
            .count();
        assert!(ls.len() <= MAX_PEERS);
        assert!(
            written <= (MAX_PEERS + 1) * LINES_PER_WINDOW as usize,
            "{written}"
        );
        // Once the window passed, idle peers make room for new ones.
        assert_eq!(
            ls.check(2_000_000, t0 + WINDOW),
            LogVerdict::Log { suppressed: 0 }
        );
    }
}
