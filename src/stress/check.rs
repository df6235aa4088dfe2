//! The server side of a stress run: every message carries its client, its
//! priority and its number in that (client, priority) stream, and the
//! checker counts what arrives — in order, duplicated, reordered — so that
//! nothing lost or delivered twice can hide.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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

/// What the server saw, stream by stream: one record per client, each on
/// a cache line of its own, so that the server's sites on different
/// threads never contend for the checker (a lock and counters shared by
/// every delivery cost the two-thread run a fifth of its messages).
#[derive(Debug)]
pub struct Checker {
    clients: Box<[ClientCheck]>,
}

/// One client's streams and counters.
#[derive(Debug, Default)]
#[repr(align(128))]
struct ClientCheck {
    /// Level → next expected number.
    next: Mutex<[u64; 5]>,
    delivered: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    bytes: AtomicU64,
    /// The pool thread the client's loop runs on, plus one (0: not known).
    client_thread: AtomicUsize,
    /// The pool thread the server delivers its messages on (the server's
    /// site for it), plus one (0: not known).
    server_thread: AtomicUsize,
}

/// The checker's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Messages delivered (each counted once, whatever its order).
    pub delivered: u64,
    /// Messages delivered again.
    pub duplicated: u64,
    /// Messages that overtook an earlier one of their stream.
    pub reordered: u64,
    /// Body bytes received.
    pub bytes: u64,
}

impl Checker {
    /// A checker for clients `0..clients` (a message naming another client
    /// is counted as reordered: nothing of the run sends one).
    pub fn new(clients: usize) -> Self {
        Self {
            clients: (0..clients).map(|_| ClientCheck::default()).collect(),
        }
    }

    /// Messages delivered in order per client `0..clients` (a client that
    /// got nothing through counts as 0): the fairness index's input.
    pub fn per_client(&self) -> Vec<u64> {
        self.clients
            .iter()
            .map(|c| c.delivered.load(Ordering::Relaxed))
            .collect()
    }

    /// Notes the pool thread `thread` that `client`'s loop runs on.
    pub fn note_client_thread(&self, client: u32, thread: usize) {
        if let Some(c) = self.clients.get(client as usize) {
            c.client_thread.store(thread + 1, Ordering::Relaxed);
        }
    }

    /// Notes the pool thread `thread` that the server delivers `client`'s
    /// messages on, if not known yet (a site stays on its thread).
    pub fn note_server_thread(&self, client: u32, thread: usize) {
        if let Some(c) = self.clients.get(client as usize) {
            if c.server_thread.load(Ordering::Relaxed) == 0 {
                c.server_thread.store(thread + 1, Ordering::Relaxed);
            }
        }
    }

    /// Whether the server's thread for `client` is still to be noted.
    pub fn server_thread_unknown(&self, client: u32) -> bool {
        self.clients
            .get(client as usize)
            .is_some_and(|c| c.server_thread.load(Ordering::Relaxed) == 0)
    }

    /// Each client's (its loop's thread, the server's thread for it), as
    /// noted (`None`: not known).
    pub fn threads(&self) -> Vec<(Option<usize>, Option<usize>)> {
        let known = |a: &AtomicUsize| a.load(Ordering::Relaxed).checked_sub(1);
        self.clients
            .iter()
            .map(|c| (known(&c.client_thread), known(&c.server_thread)))
            .collect()
    }

    /// The totals over every client.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for c in self.clients.iter() {
            t.delivered += c.delivered.load(Ordering::Relaxed);
            t.duplicated += c.duplicated.load(Ordering::Relaxed);
            t.reordered += c.reordered.load(Ordering::Relaxed);
            t.bytes += c.bytes.load(Ordering::Relaxed);
        }
        t
    }

    /// Records one message of `body_len` bytes.
    pub fn record(&self, m: &StressData, body_len: usize) {
        let (Some(c), Some(level)) = (
            self.clients.get(m.client as usize),
            Some(usize::from(m.level)).filter(|&l| l < 5),
        ) else {
            // Not a stream of this run: never in order.
            if let Some(c) = self.clients.first() {
                c.reordered.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        c.bytes.fetch_add(body_len as u64, Ordering::Relaxed);
        let mut next = c.next.lock();
        let n = &mut next[level];
        if m.seq == *n {
            *n += 1;
            c.delivered.fetch_add(1, Ordering::Relaxed);
        } else if m.seq < *n {
            c.duplicated.fetch_add(1, Ordering::Relaxed);
        } else {
            // A gap: what was skipped counts as lost unless it comes later
            // (then it is counted as duplicated — either way, a failure).
            *n = m.seq + 1;
            c.reordered.fetch_add(1, Ordering::Relaxed);
            c.delivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_duplicates_and_gaps_are_told_apart() {
        let c = Checker::new(3);
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
        let t = c.totals();
        assert_eq!(
            (t.delivered, t.duplicated, t.reordered, t.bytes),
            (4, 2, 1, 50)
        );
        assert_eq!(c.per_client(), [0, 3, 1]);
        // A message of no stream of the run is never counted in order.
        c.record(
            &StressData {
                client: 9,
                level: 3,
                seq: 0,
            },
            0,
        );
        assert_eq!(c.totals().reordered, 2);
    }
}
