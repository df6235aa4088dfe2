//! The checkers' record of every application message: who sent it to
//! whom, at which priority and place in its stream, and what became of it.
//! Each delivery and hand-back is checked as it happens; [`Oracle::finish`]
//! checks that nothing is left unaccounted for once the run has settled.

use std::collections::{BTreeMap, BTreeSet};

use crate::site::SiteId;

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Delivered,
    /// Handed back as never delivered.
    NotSent,
    /// Handed back as maybe delivered (and not seen delivered).
    Maybe,
    /// Delivered, then handed back as maybe delivered (its ack was lost).
    DeliveredMaybe,
}

#[derive(Debug)]
struct Record {
    from: SiteId,
    to: SiteId,
    priority: u8,
    seq: u64,
    /// The body's hash, checked on delivery.
    hash: u64,
    fate: Fate,
}

/// FNV-1a: enough to tell a corrupted body from the one sent.
fn hash(body: &[u8]) -> u64 {
    body.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One sender's messages to one site at one priority, in sending order.
#[derive(Debug, Default)]
struct Stream {
    ids: Vec<u64>,
    last_delivered: u64,
}

/// The record of every application message.
#[derive(Debug, Default)]
pub(super) struct Oracle {
    msgs: Vec<Record>,
    streams: BTreeMap<(SiteId, SiteId, u8), Stream>,
    /// Incarnations that crashed: their unacknowledged messages are lost
    /// with them (at most once), and messages to them must be handed back.
    crashed: BTreeSet<SiteId>,
    pub(super) delivered: u64,
    pub(super) handed_back: u64,
}

impl Oracle {
    /// A message about to be queued; returns its id.
    pub(super) fn sent(&mut self, from: SiteId, to: SiteId, priority: u8, body: &[u8]) -> u64 {
        let id = self.msgs.len() as u64;
        let s = self.streams.entry((from, to, priority)).or_default();
        s.ids.push(id);
        self.msgs.push(Record {
            from,
            to,
            priority,
            seq: s.ids.len() as u64,
            hash: hash(body),
            fate: Fate::Pending,
        });
        id
    }

    pub(super) fn messages(&self) -> u64 {
        self.msgs.len() as u64
    }

    pub(super) fn crashed(&mut self, site: SiteId) {
        self.crashed.insert(site);
    }

    /// Message `id` was delivered at `at`, on the channel from `from`.
    pub(super) fn deliver(
        &mut self,
        id: u64,
        at: SiteId,
        from: SiteId,
        body: &[u8],
    ) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("{at} received message {id}, which was never sent"));
        };
        if r.hash != hash(body) {
            return Err(format!(
                "message {id} from {} arrived with a body it was not sent with",
                r.from
            ));
        }
        if r.to != at || r.from != from {
            return Err(format!(
                "message {id} from {} to {} was delivered at {at} as coming from {from}",
                r.from, r.to
            ));
        }
        match r.fate {
            Fate::Pending => r.fate = Fate::Delivered,
            Fate::Maybe => r.fate = Fate::DeliveredMaybe,
            Fate::Delivered | Fate::DeliveredMaybe => {
                return Err(format!(
                    "message {id} ({} → {}, priority {}, #{}) delivered twice",
                    r.from, r.to, r.priority, r.seq
                ))
            }
            Fate::NotSent => {
                return Err(format!(
                    "message {id} ({} → {}) delivered after it was handed back as never delivered",
                    r.from, r.to
                ))
            }
        }
        let (key, seq) = ((r.from, r.to, r.priority), r.seq);
        self.delivered += 1;
        let s = self
            .streams
            .get_mut(&key)
            .expect("every message has a stream");
        if seq <= s.last_delivered {
            return Err(format!(
                "FIFO broken from {} to {} at priority {}: #{seq} delivered after #{}",
                key.0, key.1, key.2, s.last_delivered
            ));
        }
        // A gap is allowed only over messages already handed back.
        for skipped in s.last_delivered + 1..seq {
            let sid = s.ids[skipped as usize - 1];
            if !matches!(self.msgs[sid as usize].fate, Fate::NotSent | Fate::Maybe) {
                return Err(format!(
                    "FIFO broken from {} to {} at priority {}: #{seq} delivered before #{skipped}, \
                     which was neither delivered nor handed back",
                    key.0, key.1, key.2
                ));
            }
        }
        s.last_delivered = seq;
        Ok(())
    }

    /// Message `id` was handed back to its sender.
    pub(super) fn hand_back(&mut self, id: u64, maybe_delivered: bool) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("message {id} handed back but never sent"));
        };
        self.handed_back += 1;
        r.fate = match (r.fate, maybe_delivered) {
            (Fate::Pending, false) => Fate::NotSent,
            (Fate::Pending, true) => Fate::Maybe,
            (Fate::Delivered, true) => Fate::DeliveredMaybe,
            (Fate::Delivered, false) => {
                return Err(format!(
                    "message {id} ({} → {}) handed back as never delivered, but it was delivered",
                    r.from, r.to
                ))
            }
            (_, _) => {
                return Err(format!(
                    "message {id} ({} → {}) handed back twice",
                    r.from, r.to
                ))
            }
        };
        Ok(())
    }

    /// After the run settled: every message of a sender still up was
    /// delivered or handed back.
    pub(super) fn finish(&self) -> Result<(), String> {
        for (id, r) in self.msgs.iter().enumerate() {
            if r.fate == Fate::Pending && !self.crashed.contains(&r.from) {
                return Err(format!(
                    "message {id} ({} → {}, priority {}, #{}) neither delivered nor handed back \
                     after the run settled",
                    r.from, r.to, r.priority, r.seq
                ));
            }
        }
        Ok(())
    }
}
