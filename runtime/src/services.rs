//! sitenet's own services, on reserved type ids: echo (for `sitenet ping`)
//! and the sequence-checking sink (for `sitenet send`).

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

pub(crate) fn register(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    register_sink(node)?;
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

/// Streams by (sender site, stream id). Looked up once per message, so hashed
/// with foldhash (seeded per map: peers choose the keys).
pub(crate) type Sinks = parking_lot::Mutex<
    std::collections::HashMap<(u128, u64), SinkStream, foldhash::fast::RandomState>,
>;

fn sender_key(ctx: &crate::handlers::Ctx<'_>) -> u128 {
    ctx.sender_id()
        .map(|i| i.0)
        .unwrap_or(u128::MAX - ctx.from.key as u128)
}

pub(crate) fn register_sink(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    node.handlers.insert(
        SinkData::ID,
        erase(|ctx, m: SinkData| {
            let key = (sender_key(ctx), m.stream);
            ctx.node.sinks.lock().entry(key).or_default().record(m.seq);
        }),
    )?;
    node.handlers.insert(
        SinkQuery::ID,
        erase(|ctx, q: SinkQuery| {
            let key = (sender_key(ctx), q.stream);
            let v = ctx
                .node
                .sinks
                .lock()
                .get(&key)
                .map(|s| s.verdict(q.expected))
                .unwrap_or(SinkVerdict {
                    missing: q.expected,
                    ..SinkVerdict::default()
                });
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
                missing: 0
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

    #[test]
    fn huge_sequence_numbers_do_not_allocate() {
        let mut s = SinkStream::default();
        s.record(u64::MAX);
        assert!(s.seen.is_empty());
        assert_eq!(s.verdict(0).out_of_order, 1);
    }
}
