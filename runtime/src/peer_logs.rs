//! Rate-limited logging of a peer's bad input: the driver of
//! `sitenet_protocols::log_limit` (the rule lives there). A site's lines
//! are keyed by its entry ([`LogKey`]: the entry is a layer above, so it
//! says its key; this file imports no entry).

use std::time::Instant;

use parking_lot::Mutex;
use sitenet_protocols::log_limit::{LogLimits, LogVerdict};

use crate::metrics::Counters;

/// What names a site's log budget: its entry, implemented where the entry
/// is defined (`site_entry.rs`), so this leaf does not import it. Keys
/// must not have the top bit set (that is a handshake's source).
pub(crate) trait LogKey {
    /// The key of this site's budget (stable while the entry lives).
    fn log_key(&self) -> u64;
}

/// The node's per-peer log budgets.
#[derive(Debug, Default)]
pub(crate) struct PeerLogs {
    limits: Mutex<LogLimits<u64>>,
}

impl PeerLogs {
    /// Whether a line about the site of `entry` may be written: `Some(n)`
    /// if so (`n` lines about it were suppressed before this one), `None`
    /// if it is suppressed (counted in `counters.logs_suppressed`).
    pub(crate) fn site(&self, entry: &impl LogKey, counters: &Counters) -> Option<u64> {
        self.check(entry.log_key(), counters)
    }

    /// The same, for a connection not yet bound to a site (in its
    /// handshake): keyed by its source as the admission rules count one
    /// (`sitenet_protocols::admission::Source`: an IPv6 address by its /64;
    /// `None`: Unix socket or in-process channels, which share one budget).
    pub(crate) fn address(&self, ip: Option<std::net::IpAddr>, counters: &Counters) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        sitenet_protocols::admission::Source::of(ip).hash(&mut h);
        // The top bit set: never an entry's address (user-space pointers).
        self.check(h.finish() | 1 << 63, counters)
    }

    fn check(&self, key: u64, counters: &Counters) -> Option<u64> {
        match self.limits.lock().check(key, Instant::now()) {
            LogVerdict::Log { suppressed } => Some(suppressed),
            LogVerdict::Suppress => {
                Counters::add(&counters.logs_suppressed, 1);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sitenet_protocols::log_limit::LINES_PER_WINDOW;

    /// Issue 17: a connection in its handshake logged under its exact
    /// address, while the admission rules charge an IPv6 peer by its /64
    /// (one host holds the whole prefix): such a peer got a fresh budget
    /// of lines per address it connected from. The source is what the
    /// admission rules call one.
    #[test]
    fn regression_an_ipv6_prefix_is_one_source_of_log_lines() {
        let logs = PeerLogs::default();
        let counters = Counters::default();
        let at = |i: u16| Some(std::net::IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, i]));
        for i in 0..LINES_PER_WINDOW as u16 {
            assert!(logs.address(at(i), &counters).is_some());
        }
        assert_eq!(
            logs.address(at(999), &counters),
            None,
            "another address of the same /64 has no budget of its own"
        );
        let elsewhere = Some(std::net::IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]));
        assert!(logs.address(elsewhere, &counters).is_some());
    }
}
