//! Rate-limited logging of a peer's bad input: the driver of
//! `sitenet_protocols::log_limit` (the rule lives there). A site's lines
//! are keyed by its entry.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use sitenet_protocols::log_limit::{LogLimits, LogVerdict};

use crate::metrics::Counters;
use crate::site_entry::SiteEntry;

/// The node's per-peer log budgets.
#[derive(Debug, Default)]
pub(crate) struct PeerLogs {
    limits: Mutex<LogLimits<u64>>,
}

impl PeerLogs {
    /// Whether a line about the site of `entry` may be written: `Some(n)`
    /// if so (`n` lines about it were suppressed before this one), `None`
    /// if it is suppressed (counted in `counters.logs_suppressed`).
    pub(crate) fn site(&self, entry: &Arc<SiteEntry>, counters: &Counters) -> Option<u64> {
        self.check(Arc::as_ptr(entry) as usize as u64, counters)
    }

    /// The same, for a connection not yet bound to a site (in its
    /// handshake): keyed by its source address (`None`: Unix socket or
    /// in-process channels, which share one budget).
    pub(crate) fn address(&self, ip: Option<std::net::IpAddr>, counters: &Counters) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ip.hash(&mut h);
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
