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
    node.handlers.insert(
        StatsQuery::ID,
        erase(|ctx, _: StatsQuery| {
            let json = serde_json::to_string(&ctx.node().stats()).expect("stats serialise");
            if let Err(e) = ctx.reply(&StatsReply { json }) {
                tracing::debug!(error = %e, "stats reply not sent");
            }
        }),
    )?;
    node.handlers.insert(
        Echo::ID,
        erase(|ctx, m: Echo| {
            let body = vec![ctx.body().clone()];
            if let Err(e) = ctx.reply_with(&EchoReply { seq: m.seq }, body) {
                tracing::debug!(error = %e, "echo reply not sent");
            }
        }),
    )
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

/// Highest sequence number the sink tracks (a bitset of 16 MiB at most, so a
/// peer cannot make it allocate without limit).
const SINK_MAX_SEQ: u64 = 1 << 27;

/// What the sink knows of one stream.
#[derive(Debug, Default)]
pub(crate) struct SinkStream {
    seen: Vec<u64>,
    /// One past the highest sequence number received.
    high: u64,
    verdict: SinkVerdict,
}

impl SinkStream {
    pub(crate) fn record(&mut self, seq: u64) {
        if seq >= SINK_MAX_SEQ {
            self.verdict.out_of_order += 1;
            return;
        }
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        if self.seen[w] & (1 << b) != 0 {
            self.verdict.duplicates += 1;
            return;
        }
        self.seen[w] |= 1 << b;
        self.verdict.delivered += 1;
        if seq + 1 < self.high {
            self.verdict.out_of_order += 1;
        }
        self.high = self.high.max(seq + 1);
    }

    pub(crate) fn verdict(&self, expected: u64) -> SinkVerdict {
        let below = (0..expected.min(SINK_MAX_SEQ))
            .filter(|s| {
                self.seen
                    .get((s / 64) as usize)
                    .is_some_and(|w| w & (1 << (s % 64)) != 0)
            })
            .count() as u64;
        SinkVerdict {
            missing: expected - below,
            ..self.verdict
        }
    }
}

/// The sink's streams by (sender site, stream id), and how many each sender
/// has open. Looked up once per message, so hashed with foldhash (seeded per
/// map: peers choose the keys).
#[derive(Debug, Default)]
pub(crate) struct SinkTable {
    streams: std::collections::HashMap<(u128, u64), SinkStream, foldhash::fast::RandomState>,
    per_sender: std::collections::HashMap<u128, usize, foldhash::fast::RandomState>,
}

impl SinkTable {
    /// Records `seq` of `stream` from `sender`; false if the stream is new
    /// and the sender already has `cap` streams open (refused).
    fn record(&mut self, sender: u128, stream: u64, seq: u64, cap: usize) -> bool {
        if let Some(s) = self.streams.get_mut(&(sender, stream)) {
            s.record(seq);
            return true;
        }
        let open = self.per_sender.entry(sender).or_default();
        if *open >= cap {
            return false;
        }
        *open += 1;
        let mut s = SinkStream::default();
        s.record(seq);
        self.streams.insert((sender, stream), s);
        true
    }

    /// The verdict on `stream` of `expected` messages; the stream is freed.
    fn finish(&mut self, sender: u128, stream: u64, expected: u64, cap: usize) -> SinkVerdict {
        match self.streams.remove(&(sender, stream)) {
            Some(s) => {
                if let Some(open) = self.per_sender.get_mut(&sender) {
                    *open -= 1;
                    if *open == 0 {
                        self.per_sender.remove(&sender);
                    }
                }
                s.verdict(expected)
            }
            None => SinkVerdict {
                missing: expected,
                refused: self.per_sender.get(&sender).is_some_and(|&n| n >= cap),
                ..SinkVerdict::default()
            },
        }
    }
}

/// The node's sink.
pub(crate) type Sinks = parking_lot::Mutex<SinkTable>;

fn sender_key(ctx: &crate::handlers::Ctx<'_>) -> u128 {
    ctx.sender_id()
        .map(|i| i.0)
        .unwrap_or(u128::MAX - ctx.from.key as u128)
}

pub(crate) fn register_sink(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    node.handlers.insert(
        SinkData::ID,
        erase(|ctx, m: SinkData| {
            let cap = ctx.node.cfg.sink_streams_per_sender;
            let sender = sender_key(ctx);
            if !ctx.node.sinks.lock().record(sender, m.stream, m.seq, cap) {
                crate::metrics::Counters::add(&ctx.node.counters.sink_refused, 1);
                tracing::debug!(
                    stream = m.stream,
                    cap,
                    "sink stream refused: too many open for this sender"
                );
            }
        }),
    )?;
    node.handlers.insert(
        SinkQuery::ID,
        erase(|ctx, q: SinkQuery| {
            let cap = ctx.node.cfg.sink_streams_per_sender;
            let v = ctx
                .node
                .sinks
                .lock()
                .finish(sender_key(ctx), q.stream, q.expected, cap);
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

    /// Issue 6: a peer chose sink stream ids (16 MiB each, never freed). A
    /// sender has at most `cap` streams open; asking a verdict frees one.
    #[test]
    fn a_sender_has_a_bounded_number_of_streams_and_a_verdict_frees_one() {
        let mut t = SinkTable::default();
        for stream in 0..4 {
            assert!(t.record(7, stream, 0, 4));
        }
        assert!(!t.record(7, 99, 0, 4), "a fifth stream is refused");
        assert!(t.record(8, 99, 0, 4), "another sender is unaffected");
        let v = t.finish(7, 99, 1, 4);
        assert!(v.refused);
        assert_eq!(v.missing, 1);
        let v = t.finish(7, 0, 1, 4);
        assert_eq!((v.delivered, v.refused), (1, false));
        assert!(t.record(7, 99, 0, 4), "the freed slot is usable");
        assert_eq!(t.streams.len(), 5);
    }

    #[test]
    fn huge_sequence_numbers_do_not_allocate() {
        let mut s = SinkStream::default();
        s.record(u64::MAX);
        assert!(s.seen.is_empty());
        assert_eq!(s.verdict(0).out_of_order, 1);
    }
}
