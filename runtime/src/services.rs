//! sitenet's own services, on reserved type ids: echo (for `sitenet ping`),
//! the sequence-checking sink (for `sitenet send`) and the node's stats
//! (for `sitenet stats`). Opt-in
//! (`NodeConfig::builtin_services`): a node answers only the types its user
//! registers unless asked to serve these. The sink bounds what one sender
//! can make it hold (`NodeConfig::sink_streams_per_sender`) and frees a
//! stream when its verdict is asked.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::NodeError;
use crate::handlers::erase;
use crate::message::{Message, RESERVED_IDS};
use crate::node::NodeInner;
use crate::site_entry::SiteEntry;

/// Echo request: the reply carries the same sequence number and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Echo {
    /// Caller's sequence number, returned unchanged.
    pub seq: u64,
}

impl Message for Echo {
    const ID: u32 = RESERVED_IDS + 1;
}

/// The echo reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoReply {
    /// The request's sequence number.
    pub seq: u64,
}

impl Message for EchoReply {
    const ID: u32 = RESERVED_IDS + 2;
}

/// Asks a node for its [`NodeStats`](crate::NodeStats) (`sitenet stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsQuery;

impl Message for StatsQuery {
    const ID: u32 = RESERVED_IDS + 6;
}

/// The answer to [`StatsQuery`]: the stats as JSON text (the serialisation
/// of [`NodeStats`](crate::NodeStats)), so a newer node's extra fields reach
/// an older client intact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsReply {
    /// `NodeStats` as JSON.
    pub json: String,
}

impl Message for StatsReply {
    const ID: u32 = RESERVED_IDS + 7;
}

pub(crate) fn register(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    register_sink(node)?;
    node.handlers().insert(
        StatsQuery::ID,
        erase(|ctx, _: StatsQuery| {
            if !stats_allowed(ctx) {
                crate::metrics::Counters::add(&ctx.node.counters().stats_refused, 1);
                // A forwarded request's origin is not answered: it is only
                // a claim, and answering it would dial where the peer says.
                if ctx.origin.is_none() {
                    ctx.fail_request(
                        "stats are served only over loopback (NodeConfig::stats_from_anywhere)"
                            .into(),
                    );
                }
                return;
            }
            let json = serde_json::to_string(&ctx.node().stats()).expect("stats serialise");
            if let Err(e) = ctx.reply(&StatsReply { json }) {
                tracing::debug!(error = %e, "stats reply not sent");
            }
        }),
    )?;
    node.handlers().insert(
        Echo::ID,
        erase(|ctx, m: Echo| {
            let opts = crate::SendOptions::new().body(ctx.body().clone());
            if let Err(e) = ctx.reply_with(&EchoReply { seq: m.seq }, opts) {
                tracing::debug!(error = %e, "echo reply not sent");
            }
        }),
    )
}

/// Whether the stats (which name every connected site's id and
/// addresses) may go to the sender: only over a loopback channel —
/// loopback TCP, a Unix socket, an in-process pipe — unless
/// `NodeConfig::stats_from_anywhere`, and never to a forwarded request's
/// origin, which is only a claim.
fn stats_allowed(ctx: &crate::handlers::Ctx<'_>) -> bool {
    if ctx.node.identity().cfg().stats_from_anywhere {
        return true;
    }
    if ctx.origin.is_some() {
        return false;
    }
    let stats = ctx.from.stats().lock();
    stats
        .as_ref()
        .and_then(|s| s.channel.as_deref())
        .is_some_and(same_host)
}

/// True if a channel's peer (`tcp:IP:PORT`, `unix:…`, `mem:…`) is on this
/// host.
fn same_host(peer: &str) -> bool {
    match crate::channel_io::peer_ip(peer) {
        Some(ip) => ip.is_loopback(),
        None => peer.starts_with("unix:") || peer.starts_with("mem:"),
    }
}

/// A numbered message of a stream, checked by the sink service (`sitenet
/// send`). The body is payload only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkData {
    /// The sender's stream id (several streams per sender are told apart).
    pub stream: u64,
    /// Sequence number within the stream, from 0.
    pub seq: u64,
}

impl Message for SinkData {
    const ID: u32 = RESERVED_IDS + 3;
}

/// Asks the sink for its verdict on a stream of `expected` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkQuery {
    /// The stream.
    pub stream: u64,
    /// How many messages were sent (0..expected).
    pub expected: u64,
}

impl Message for SinkQuery {
    const ID: u32 = RESERVED_IDS + 4;
}

/// The sink's verdict on one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkVerdict {
    /// Distinct sequence numbers received.
    pub delivered: u64,
    /// Sequence numbers received more than once.
    pub duplicates: u64,
    /// Messages that arrived after a later one of the same stream.
    pub out_of_order: u64,
    /// Expected sequence numbers never received.
    pub missing: u64,
    /// The sink refused the stream: its sender had the maximum number of
    /// streams open (`NodeConfig::sink_streams_per_sender`). Absent in a
    /// verdict from an earlier build.
    #[serde(default)]
    pub refused: bool,
}

impl Message for SinkVerdict {
    const ID: u32 = RESERVED_IDS + 5;
}

/// Most sequence numbers one stream may hold beyond its contiguous prefix
/// (received ahead of a gap). An honest stream arrives in order (one
/// priority is FIFO, across reconnects), so this fills only with a peer's
/// invented numbers: one beyond it is counted out of order and not kept.
/// A stream costs O(what it received), at most this many entries.
pub(crate) const SINK_MAX_AHEAD: usize = 64 * 1024;

/// What the sink knows of one stream: every number below `prefix` arrived,
/// and `ahead` holds those received above it. Memory and the verdict's
/// cost are O(received), whatever numbers the peer picks (a bitset sized
/// by the highest number let one message pin 16 MiB, and one verdict scan
/// 2^27 bits on the I/O thread).
#[derive(Debug, Default)]
pub(crate) struct SinkStream {
    prefix: u64,
    ahead: std::collections::BTreeSet<u64>,
    /// One past the highest sequence number received.
    high: u64,
    verdict: SinkVerdict,
}

impl SinkStream {
    pub(crate) fn record(&mut self, seq: u64) {
        if seq < self.prefix || self.ahead.contains(&seq) {
            self.verdict.duplicates += 1;
            return;
        }
        if seq == self.prefix {
            self.prefix += 1;
            while self.ahead.first() == Some(&self.prefix) {
                self.ahead.pop_first();
                self.prefix += 1;
            }
        } else if self.ahead.len() < SINK_MAX_AHEAD {
            self.ahead.insert(seq);
        } else {
            self.verdict.out_of_order += 1;
            return;
        }
        self.verdict.delivered += 1;
        if seq.saturating_add(1) < self.high {
            self.verdict.out_of_order += 1;
        }
        self.high = self.high.max(seq.saturating_add(1));
    }

    /// The verdict on a stream of `expected` messages: O(received).
    pub(crate) fn verdict(&self, expected: u64) -> SinkVerdict {
        let below =
            self.prefix.min(expected) + self.ahead.range(self.prefix..expected).count() as u64;
        SinkVerdict {
            missing: expected - below,
            ..self.verdict
        }
    }

    /// Entries kept beyond the contiguous prefix (what the stream costs).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.ahead.len()
    }
}

/// One sender's open streams. A sender is the site whose channel delivered
/// the message (its entry), never an id the message names: a forwarded
/// request's origin is only a claim. `entry` tells a live sender from a
/// freed entry whose address was reused.
#[derive(Debug)]
struct Sender {
    entry: std::sync::Weak<SiteEntry>,
    open: usize,
}

/// The sink's streams by (sender, stream id), and how many each sender has
/// open. Looked up once per message, so hashed with foldhash (seeded per
/// map: peers choose the stream ids). A sender whose entry was reclaimed
/// loses its streams at the next sweep, so the table holds at most `cap`
/// streams per live site.
#[derive(Debug, Default)]
pub(crate) struct SinkTable {
    streams: std::collections::HashMap<(usize, u64), SinkStream, foldhash::fast::RandomState>,
    per_sender: std::collections::HashMap<usize, Sender, foldhash::fast::RandomState>,
    /// `per_sender.len()` after the last sweep: the next sweep runs when
    /// the table has doubled, so sweeping costs O(1) per new sender.
    swept_at: usize,
}

impl SinkTable {
    /// Records `seq` of `stream` from `sender`; false if the stream is new
    /// and the sender already has `cap` streams open (refused).
    fn record(&mut self, sender: &Arc<SiteEntry>, stream: u64, seq: u64, cap: usize) -> bool {
        let key = self.sender_key(sender);
        if let Some(s) = self.streams.get_mut(&(key, stream)) {
            s.record(seq);
            return true;
        }
        let open = &mut self
            .per_sender
            .get_mut(&key)
            .expect("sender_key made it")
            .open;
        if *open >= cap {
            return false;
        }
        *open += 1;
        let mut s = SinkStream::default();
        s.record(seq);
        self.streams.insert((key, stream), s);
        true
    }

    /// The sender's key, its record made (or remade, if the entry that had
    /// this address is gone) if needed.
    fn sender_key(&mut self, sender: &Arc<SiteEntry>) -> usize {
        let key = Arc::as_ptr(sender) as usize;
        let live = self
            .per_sender
            .get(&key)
            .is_some_and(|s| s.entry.strong_count() > 0);
        if !live {
            self.forget(key);
            self.sweep();
            self.per_sender.insert(
                key,
                Sender {
                    entry: Arc::downgrade(sender),
                    open: 0,
                },
            );
        }
        key
    }

    /// Drops the streams of senders whose entry is gone, once the table has
    /// doubled since the last sweep.
    fn sweep(&mut self) {
        if self.per_sender.len() < 2 * self.swept_at.max(16) {
            return;
        }
        let dead: Vec<usize> = self
            .per_sender
            .iter()
            .filter(|(_, s)| s.entry.strong_count() == 0)
            .map(|(&k, _)| k)
            .collect();
        for k in dead {
            self.forget(k);
        }
        self.swept_at = self.per_sender.len();
    }

    fn forget(&mut self, key: usize) {
        if self.per_sender.remove(&key).is_some_and(|s| s.open > 0) {
            self.streams.retain(|&(k, _), _| k != key);
        }
    }

    /// The verdict on `stream` of `expected` messages; the stream is freed.
    fn finish(
        &mut self,
        sender: &Arc<SiteEntry>,
        stream: u64,
        expected: u64,
        cap: usize,
    ) -> SinkVerdict {
        let key = self.sender_key(sender);
        match self.streams.remove(&(key, stream)) {
            Some(s) => {
                if let Some(r) = self.per_sender.get_mut(&key) {
                    r.open -= 1;
                }
                s.verdict(expected)
            }
            None => SinkVerdict {
                missing: expected,
                refused: self.per_sender.get(&key).is_some_and(|r| r.open >= cap),
                ..SinkVerdict::default()
            },
        }
    }
}

/// The sink serves what a site sends it over its own channel: a forwarded
/// request naming an origin is refused (counted), or a stranger could
/// fill another site's streams in its name.
fn forwarded(ctx: &crate::handlers::Ctx<'_>) -> bool {
    if ctx.origin.is_some() {
        crate::metrics::Counters::add(&ctx.node.counters().sink_refused, 1);
        return true;
    }
    false
}

/// Registers the sink's two handlers. The node's sink table is theirs
/// alone (both hold it), not the node's: the node is a layer below the
/// services (docs/architecture.md, "The runtime's layers").
pub(crate) fn register_sink(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    let sinks = Arc::new(parking_lot::Mutex::new(SinkTable::default()));
    let data_sinks = sinks.clone();
    node.handlers().insert(
        SinkData::ID,
        erase(move |ctx, m: SinkData| {
            if forwarded(ctx) {
                return;
            }
            let cap = ctx.node.identity().cfg().sink_streams_per_sender;
            if !data_sinks.lock().record(ctx.from, m.stream, m.seq, cap) {
                crate::metrics::Counters::add(&ctx.node.counters().sink_refused, 1);
                tracing::debug!(
                    stream = m.stream,
                    cap,
                    "sink stream refused: too many open for this sender"
                );
            }
        }),
    )?;
    node.handlers().insert(
        SinkQuery::ID,
        erase(move |ctx, q: SinkQuery| {
            if forwarded(ctx) {
                return;
            }
            let cap = ctx.node.identity().cfg().sink_streams_per_sender;
            let v = sinks.lock().finish(ctx.from, q.stream, q.expected, cap);
            if let Err(e) = ctx.reply(&v) {
                tracing::debug!(error = %e, "sink verdict not sent");
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_stream_is_clean() {
        let mut s = SinkStream::default();
        for i in 0..1000 {
            s.record(i);
        }
        assert_eq!(
            s.verdict(1000),
            SinkVerdict {
                delivered: 1000,
                duplicates: 0,
                out_of_order: 0,
                missing: 0,
                refused: false,
            }
        );
    }

    #[test]
    fn permuted_stream_reports_non_zero_counts() {
        let mut s = SinkStream::default();
        for i in [0, 2, 1, 3, 3, 5] {
            s.record(i);
        }
        let v = s.verdict(7);
        assert_eq!(v.delivered, 5);
        assert_eq!(v.duplicates, 1);
        assert_eq!(v.out_of_order, 1, "1 arrived after 2");
        assert_eq!(v.missing, 2, "4 and 6 never came");
    }

    fn entry() -> Arc<SiteEntry> {
        Arc::new(SiteEntry::new(
            0,
            None,
            crate::outbox::OutputBound::alone(1 << 20),
        ))
    }

    /// Sink stream ids are a peer's choice, so a sender has at most `cap`
    /// streams open (or it could open any number, 16 MiB each, never
    /// freed); asking a verdict frees one.
    #[test]
    fn a_sender_has_a_bounded_number_of_streams_and_a_verdict_frees_one() {
        let mut t = SinkTable::default();
        let (seven, eight) = (entry(), entry());
        for stream in 0..4 {
            assert!(t.record(&seven, stream, 0, 4));
        }
        assert!(!t.record(&seven, 99, 0, 4), "a fifth stream is refused");
        assert!(t.record(&eight, 99, 0, 4), "another sender is unaffected");
        let v = t.finish(&seven, 99, 1, 4);
        assert!(v.refused);
        assert_eq!(v.missing, 1);
        let v = t.finish(&seven, 0, 1, 4);
        assert_eq!((v.delivered, v.refused), (1, false));
        assert!(t.record(&seven, 99, 0, 4), "the freed slot is usable");
        assert_eq!(t.streams.len(), 5);
    }

    /// A stream keeps what it received, and far-ahead numbers beyond a
    /// bound are not kept at all: one `SinkData` with `seq = 2^27 - 1`
    /// pins no 16 MiB bitset, and a verdict scans no 2^27 bits.
    #[test]
    fn a_far_sequence_number_pins_no_memory_and_the_verdict_is_cheap() {
        let mut s = SinkStream::default();
        s.record((1 << 27) - 1);
        s.record(u64::MAX);
        assert_eq!(s.kept(), 2, "two numbers received, two kept");
        for seq in 0..(SINK_MAX_AHEAD as u64 + 10) {
            s.record(u64::MAX - 1 - seq);
        }
        assert_eq!(s.kept(), SINK_MAX_AHEAD, "what lies ahead is bounded");
        let v = s.verdict(1 << 27);
        assert_eq!(v.missing, (1 << 27) - 1);
        // A verdict over all of u64 costs what was received, not 2^64.
        let v = s.verdict(u64::MAX);
        assert_eq!(v.delivered, SINK_MAX_AHEAD as u64);
    }

    /// The sink is keyed by the entry that delivered, not by the id a peer
    /// names, and a reclaimed entry's streams go with it.
    #[test]
    fn streams_of_a_gone_sender_are_swept() {
        let mut t = SinkTable::default();
        for _ in 0..100 {
            let e = entry();
            assert!(t.record(&e, 1, 0, 4));
            assert!(t.record(&e, 2, 0, 4));
        }
        assert!(
            t.per_sender.len() <= 64,
            "dead senders swept: {}",
            t.per_sender.len()
        );
        assert_eq!(t.streams.len(), 2 * t.per_sender.len());
    }

    #[test]
    fn only_channels_from_this_host_are_the_same_host() {
        for p in [
            "tcp:127.0.0.1:5000",
            "tcp:[::1]:5000",
            "unix:(client)",
            "mem:(client 3)",
        ] {
            assert!(same_host(p), "{p}");
        }
        for p in [
            "tcp:10.1.2.3:5000",
            "tcp:[2001:db8::1]:7",
            "tcp:?",
            "",
            "udp:127.0.0.1:1",
        ] {
            assert!(!same_host(p), "{p}");
        }
    }

    #[test]
    fn gaps_filled_later_join_the_prefix() {
        let mut s = SinkStream::default();
        for i in [3, 1, 2, 0, 4] {
            s.record(i);
        }
        assert_eq!(s.kept(), 0);
        let v = s.verdict(5);
        assert_eq!((v.delivered, v.missing, v.duplicates), (5, 0, 0));
    }
}
