//! Rate-limited logging of what peers cause: the driver of
//! `sitenet_protocols::node::log_limit` (the rule lives there). Every line a peer
//! can make the node write goes through [`PeerLogs`]: a few per peer per
//! window, at most `NODE_LINES_PER_WINDOW` per window for all peers
//! together, and one summary line per window counting what was dropped by
//! [`LogKind`] (also counted in `Metrics::logs_suppressed`). A site's lines
//! are keyed by its entry ([`LogKey`]: the entry is a layer above, so it
//! says its key; this file imports no entry).

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use sitenet_protocols::node::log_limit::{LogVerdict, NodeLogs, Summary};
use tokio::sync::Notify;

use crate::metrics::Counters;

/// What names a site's log budget: its entry, implemented where the entry
/// is defined (`site_entry.rs`), so this leaf does not import it. Keys
/// must not have the top bit set (that is a handshake's source).
pub(crate) trait LogKey {
    /// The key of this site's budget (stable while the entry lives).
    fn log_key(&self) -> u64;
}

/// What a line a peer caused says: the summary of dropped lines counts
/// them by kind, so a reader knows what was hidden.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// A site failed permanently (`report::log_failure`).
    SiteFailed,
    /// A site left in order.
    SiteLeft,
    /// A site's fault state changed.
    FaultState,
    /// A message was handed back to its sender.
    HandedBack,
    /// A claim on a site's id was refused.
    ClaimRefused,
    /// A peer broke the protocol.
    ProtocolBroken,
    /// A non-member was refused in its handshake.
    Refused,
    /// An accepted channel closed during its handshake.
    HandshakeFailed,
    /// Accepting a connection failed.
    AcceptFailed,
    /// TLS could not be started on an accepted channel.
    TlsStart,
    /// A reply came from a site the request was not sent to.
    MisdirectedReply,
    /// A message was not handled (malformed, refused, no room).
    Unhandled,
    /// A handler panicked on a peer's message.
    HandlerPanicked,
}

impl LogKind {
    /// How the summary line names the kind.
    fn name(self) -> &'static str {
        match self {
            Self::SiteFailed => "site failed permanently",
            Self::SiteLeft => "site left",
            Self::FaultState => "fault state",
            Self::HandedBack => "message handed back",
            Self::ClaimRefused => "claim refused",
            Self::ProtocolBroken => "peer broke the protocol",
            Self::Refused => "connection refused",
            Self::HandshakeFailed => "handshake failed",
            Self::AcceptFailed => "accept failed",
            Self::TlsStart => "cannot start TLS",
            Self::MisdirectedReply => "misdirected reply",
            Self::Unhandled => "message not handled",
            Self::HandlerPanicked => "handler panicked",
        }
    }
}

/// The node's log budgets (per peer and node-wide). Cloned cheaply: the
/// summary timer holds a clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerLogs {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    limits: Mutex<NodeLogs<u64, LogKind>>,
    /// A summary became due later than the timer knows (the first line
    /// dropped since the last one).
    changed: Notify,
}

/// The budget key of the lines about no one peer (accept failures): the
/// top bit set, as a source's, and never a hashed source in practice.
const NODE_KEY: u64 = u64::MAX;

impl PeerLogs {
    /// Whether a line of kind `kind` about the site of `entry` may be
    /// written: `Some(n)` if so (`n` lines about it were suppressed before
    /// this one), `None` if it is suppressed (counted in
    /// `counters.logs_suppressed`).
    pub(crate) fn site(
        &self,
        entry: &impl LogKey,
        kind: LogKind,
        counters: &Counters,
    ) -> Option<u64> {
        self.check(entry.log_key(), kind, counters)
    }

    /// The same, for a connection not yet bound to a site (in its
    /// handshake): keyed by its source as the admission rules count one
    /// (`sitenet_protocols::slots::admission::Source`: an IPv6 address by its /64;
    /// `None`: Unix socket or in-process channels, which share one budget).
    pub(crate) fn address(
        &self,
        ip: Option<std::net::IpAddr>,
        kind: LogKind,
        counters: &Counters,
    ) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        sitenet_protocols::slots::admission::Source::of(ip).hash(&mut h);
        // The top bit set: never an entry's address (user-space pointers).
        self.check(h.finish() | 1 << 63, kind, counters)
    }

    /// The same, for a line about no one peer (the accept loop's errors).
    pub(crate) fn node(&self, kind: LogKind, counters: &Counters) -> Option<u64> {
        self.check(NODE_KEY, kind, counters)
    }

    fn check(&self, key: u64, kind: LogKind, counters: &Counters) -> Option<u64> {
        let (checked, armed) = {
            let mut l = self.shared.limits.lock();
            let before = l.poll_timeout();
            let c = l.check(key, kind, Instant::now());
            (c, before.is_none() && l.poll_timeout().is_some())
        };
        if let Some(s) = checked.summary {
            write_summary(&s);
        }
        if armed {
            self.shared.changed.notify_one();
        }
        match checked.verdict {
            LogVerdict::Log { suppressed } => Some(suppressed),
            LogVerdict::Suppress => {
                Counters::add(&counters.logs_suppressed, 1);
                None
            }
        }
    }

    /// Writes the summary of dropped lines when it is due and no line came
    /// to carry it; runs until `stop` completes (the node stops).
    pub(crate) async fn summaries(self, stop: impl std::future::Future<Output = ()>) {
        let shared = &self.shared;
        let timer = async {
            loop {
                // Created before the due time is read: a drop after the
                // read is kept (notify_one stores it) and ends the wait.
                let changed = shared.changed.notified();
                let due = shared.limits.lock().poll_timeout();
                match due {
                    None => changed.await,
                    Some(at) => {
                        actix_rt::time::sleep_until(tokio::time::Instant::from_std(at)).await
                    }
                }
                let summary = shared.limits.lock().take_summary(Instant::now());
                if let Some(s) = summary {
                    write_summary(&s);
                }
            }
        };
        tokio::select! {
            _ = stop => {}
            _ = timer => {}
        }
    }
}

/// The summary line: how many lines peers caused were dropped, by kind.
fn write_summary(s: &Summary<LogKind>) {
    let kinds = s
        .by_kind
        .iter()
        .map(|(k, n)| format!("{}: {n}", k.name()))
        .collect::<Vec<_>>()
        .join(", ");
    tracing::warn!(
        suppressed = s.total,
        %kinds,
        "log lines suppressed (peers caused more than the node logs per window)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sitenet_protocols::node::log_limit::LINES_PER_WINDOW;

    /// A connection in its handshake logs under its source as the
    /// admission rules count it: an IPv6 peer by its /64 (one host holds
    /// the whole prefix), so it gets no fresh budget of lines per address
    /// it connects from.
    #[test]
    fn an_ipv6_prefix_is_one_source_of_log_lines() {
        let logs = PeerLogs::default();
        let counters = Counters::default();
        let at = |i: u16| Some(std::net::IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, i]));
        let refused = LogKind::Refused;
        for i in 0..LINES_PER_WINDOW as u16 {
            assert!(logs.address(at(i), refused, &counters).is_some());
        }
        assert_eq!(
            logs.address(at(999), refused, &counters),
            None,
            "another address of the same /64 has no budget of its own"
        );
        let elsewhere = Some(std::net::IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]));
        assert!(logs.address(elsewhere, refused, &counters).is_some());
    }
}
