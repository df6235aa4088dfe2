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
//! peers shares one overflow budget instead of growing the table.
//!
//! A budget per peer does not bound what many peers cause together: 15,703
//! throw-away sites, each failing once, wrote 15,703 warnings. [`NodeLogs`]
//! adds a budget for the whole node ([`NODE_LINES_PER_WINDOW`] per
//! [`WINDOW`]) on top of each peer's, and counts what either drops by kind
//! (what the line would have said). A summary of those counts is due one
//! window after the first line it covers was dropped; it is handed to the
//! next line checked from then on, allowed or not, or taken by a timer
//! ([`NodeLogs::poll_timeout`], [`NodeLogs::take_summary`]), so a node
//! writes at most [`NODE_LINES_PER_WINDOW`] lines and one summary per
//! window about its peers, however many there are. Time is an argument:
//! nothing here reads a clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Lines one peer may cause per window.
pub const LINES_PER_WINDOW: u32 = 5;
/// The length of a window.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Peers tracked one by one; beyond them, peers share one budget.
pub const MAX_PEERS: usize = 1024;
/// Lines all peers together may cause per window (see [`NodeLogs`]).
pub const NODE_LINES_PER_WINDOW: u32 = 20;

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

/// What [`NodeLogs`] dropped since its last summary, by kind: a summary
/// line says it, so nothing is hidden, only counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary<K> {
    /// Lines dropped per kind, in the order each kind was first dropped.
    pub by_kind: Vec<(K, u64)>,
    /// Their sum.
    pub total: u64,
}

/// What [`NodeLogs::check`] decided: whether to write the line, and a
/// summary of dropped lines to write first if one is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked<K> {
    /// The line's verdict (with [`LogVerdict::Log`], how many lines about
    /// the same peer its own budget dropped before it).
    pub verdict: LogVerdict,
    /// A summary due now: write it whatever the verdict.
    pub summary: Option<Summary<K>>,
}

/// The log budgets of a node: one per peer ([`LogLimits`]) and one for the
/// node as a whole, with the counts of dropped lines by kind `K` for the
/// periodic summary (see the module documentation).
#[derive(Debug)]
pub struct NodeLogs<P, K> {
    peers: LogLimits<P>,
    window_start: Option<Instant>,
    lines: u32,
    dropped: Vec<(K, u64)>,
    /// When the summary of `dropped` is due (one window after the first
    /// line it counts was dropped).
    summary_due: Option<Instant>,
}

impl<P, K> Default for NodeLogs<P, K> {
    fn default() -> Self {
        Self {
            peers: LogLimits::default(),
            window_start: None,
            lines: 0,
            dropped: Vec::new(),
            summary_due: None,
        }
    }
}

impl<P: Hash + Eq, K: Copy + Eq> NodeLogs<P, K> {
    /// Charges one line of kind `kind` about `peer` at `now`: written only
    /// if both the node's budget and the peer's have room (a line the
    /// node's budget drops costs the peer nothing, and a flood of new
    /// peers then adds nothing to the table of peers).
    pub fn check(&mut self, peer: P, kind: K, now: Instant) -> Checked<K> {
        if self
            .window_start
            .is_none_or(|s| now.saturating_duration_since(s) >= WINDOW)
        {
            self.window_start = Some(now);
            self.lines = 0;
        }
        let verdict = if self.lines >= NODE_LINES_PER_WINDOW {
            LogVerdict::Suppress
        } else {
            self.peers.check(peer, now)
        };
        match verdict {
            LogVerdict::Log { .. } => self.lines += 1,
            LogVerdict::Suppress => self.count(kind, now),
        }
        Checked {
            verdict,
            summary: self.take_summary(now),
        }
    }

    fn count(&mut self, kind: K, now: Instant) {
        match self.dropped.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((kind, 1)),
        }
        self.summary_due.get_or_insert(now + WINDOW);
    }

    /// When the next summary is due, if lines were dropped since the last
    /// one: a timer calls [`take_summary`](Self::take_summary) then, in
    /// case no line comes to carry it.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.summary_due
    }

    /// The summary of the lines dropped since the last one, if it is due
    /// at `now` (the counts start again).
    pub fn take_summary(&mut self, now: Instant) -> Option<Summary<K>> {
        if self.summary_due.is_none_or(|due| now < due) {
            return None;
        }
        self.summary_due = None;
        let by_kind = std::mem::take(&mut self.dropped);
        let total = by_kind.iter().map(|(_, n)| n).sum();
        Some(Summary { by_kind, total })
    }

    /// Peers tracked one by one.
    pub fn peers(&self) -> usize {
        self.peers.len()
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

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Failed,
        Refused,
    }

    /// Every line from a new peer: the node writes its budget per window
    /// whatever the number of peers, and one summary per window counts the
    /// rest by kind, due a window after the first line dropped.
    #[test]
    fn many_new_peers_share_the_nodes_budget_and_are_summarised() {
        let t0 = Instant::now();
        let mut logs = NodeLogs::default();
        let mut written = 0;
        let mut summaries = Vec::new();
        // 100,000 peers over 30 s (one every 0.3 ms), each failing once;
        // every tenth is refused instead.
        for p in 0..100_000u32 {
            let now = t0 + Duration::from_micros(300 * u64::from(p));
            let kind = if p % 10 == 0 {
                Kind::Refused
            } else {
                Kind::Failed
            };
            let c = logs.check(p, kind, now);
            if matches!(c.verdict, LogVerdict::Log { .. }) {
                written += 1;
            }
            summaries.extend(c.summary.map(|s| (now, s)));
        }
        // Three windows: at most the node's budget in each.
        assert!(written <= 3 * NODE_LINES_PER_WINDOW, "{written}");
        assert!(written >= NODE_LINES_PER_WINDOW, "{written}");
        // A summary per window after the first, each a window after the
        // first line it counts was dropped.
        assert_eq!(summaries.len(), 2, "{summaries:?}");
        let (at, first) = &summaries[0];
        assert!(*at >= t0 + WINDOW && *at < t0 + WINDOW + Duration::from_millis(10));
        // Counted by kind: nine failures to a refusal.
        let of = |k| first.by_kind.iter().find(|e| e.0 == k).map_or(0, |e| e.1);
        assert!(of(Kind::Failed) > 8 * of(Kind::Refused), "{first:?}");
        assert!(of(Kind::Refused) > 0, "{first:?}");
        assert_eq!(first.total, first.by_kind.iter().map(|k| k.1).sum::<u64>());
        // Nothing dropped is lost: written + summarised + still counted.
        let counted: u64 = summaries.iter().map(|(_, s)| s.total).sum();
        let pending = logs.poll_timeout().expect("the last window's drops");
        let last = logs.take_summary(pending).expect("due then");
        assert_eq!(u64::from(written) + counted + last.total, 100_000);
        // The table of peers did not grow with the flood.
        assert!(logs.peers() <= NODE_LINES_PER_WINDOW as usize * 3);
    }

    /// A summary not carried by a line is taken by the timer at the time
    /// `poll_timeout` names, not before; then none is due.
    #[test]
    fn a_summary_is_due_one_window_after_the_first_drop() {
        let t0 = Instant::now();
        let mut logs = NodeLogs::default();
        assert_eq!(logs.poll_timeout(), None);
        for i in 0..LINES_PER_WINDOW {
            let c = logs.check(1u32, Kind::Failed, t0);
            assert_eq!(c.verdict, LogVerdict::Log { suppressed: 0 }, "{i}");
        }
        // The peer's own budget drops the next: counted for the summary.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            logs.check(1u32, Kind::Failed, t1).verdict,
            LogVerdict::Suppress
        );
        assert_eq!(logs.poll_timeout(), Some(t1 + WINDOW));
        assert_eq!(
            logs.take_summary(t1 + WINDOW - Duration::from_millis(1)),
            None
        );
        // Another peer's line before it is due carries no summary.
        let c = logs.check(2u32, Kind::Refused, t1);
        assert_eq!(
            (c.verdict, c.summary),
            (LogVerdict::Log { suppressed: 0 }, None)
        );
        assert_eq!(
            logs.take_summary(t1 + WINDOW),
            Some(Summary {
                by_kind: vec![(Kind::Failed, 1)],
                total: 1
            })
        );
        assert_eq!(logs.poll_timeout(), None);
        assert_eq!(logs.take_summary(t1 + WINDOW * 10), None);
        // The peer's next line says what its own budget dropped.
        assert_eq!(
            logs.check(1u32, Kind::Failed, t1 + WINDOW).verdict,
            LogVerdict::Log { suppressed: 1 }
        );
    }
}
