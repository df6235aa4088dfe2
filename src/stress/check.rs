//! The server side of a stress run: every message carries its client, its
//! priority and its number in that (client, priority) stream, and the
//! checker counts what arrives — in order, duplicated, reordered — so that
//! nothing lost or delivered twice can hide.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::Message;

/// One numbered message of a stress stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressData {
    /// The client that sent it.
    pub client: u32,
    /// Its priority level (1 to 4): the stream it belongs to.
    pub level: u8,
    /// Its number in that stream, from 0.
    pub seq: u64,
}
impl Message for StressData {
    const ID: u32 = 0x5354_5201;
}

/// A round-trip probe (answered by [`StressPong`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressPing {
    /// The client asking.
    pub client: u32,
}
impl Message for StressPing {
    const ID: u32 = 0x5354_5202;
}

/// The answer to a [`StressPing`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressPong;
impl Message for StressPong {
    const ID: u32 = 0x5354_5203;
}

/// What the server saw, stream by stream.
#[derive(Debug, Default)]
pub struct Checker {
    /// (client, level) → next expected number.
    next: Mutex<HashMap<(u32, u8), u64>>,
    /// Messages delivered (each counted once, whatever its order).
    pub delivered: AtomicU64,
    /// Messages delivered again.
    pub duplicated: AtomicU64,
    /// Messages that overtook an earlier one of their stream.
    pub reordered: AtomicU64,
    /// Body bytes received.
    pub bytes: AtomicU64,
}

impl Checker {
    /// Messages delivered in order per client `0..clients` (a client that
    /// got nothing through counts as 0): the fairness index's input.
    pub fn per_client(&self, clients: usize) -> Vec<u64> {
        let mut out = vec![0; clients];
        for (&(client, _level), &n) in self.next.lock().iter() {
            if let Some(c) = out.get_mut(client as usize) {
                *c += n;
            }
        }
        out
    }

    /// Records one message of `body_len` bytes.
    pub fn record(&self, m: &StressData, body_len: usize) {
        self.bytes.fetch_add(body_len as u64, Ordering::Relaxed);
        let mut next = self.next.lock();
        let n = next.entry((m.client, m.level)).or_insert(0);
        if m.seq == *n {
            *n += 1;
            self.delivered.fetch_add(1, Ordering::Relaxed);
        } else if m.seq < *n {
            self.duplicated.fetch_add(1, Ordering::Relaxed);
        } else {
            // A gap: what was skipped counts as lost unless it comes later
            // (then it is counted as duplicated — either way, a failure).
            *n = m.seq + 1;
            self.reordered.fetch_add(1, Ordering::Relaxed);
            self.delivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_duplicates_and_gaps_are_told_apart() {
        let c = Checker::default();
        let m = |seq| StressData {
            client: 1,
            level: 3,
            seq,
        };
        for seq in [0, 1, 1, 3, 2] {
            c.record(&m(seq), 10);
        }
        // Another stream numbers independently.
        c.record(
            &StressData {
                client: 2,
                level: 3,
                seq: 0,
            },
            0,
        );
        assert_eq!(c.delivered.load(Ordering::Relaxed), 4);
        assert_eq!(c.duplicated.load(Ordering::Relaxed), 2);
        assert_eq!(c.reordered.load(Ordering::Relaxed), 1);
        assert_eq!(c.bytes.load(Ordering::Relaxed), 50);
    }
}
