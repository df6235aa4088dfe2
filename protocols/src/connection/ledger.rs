//! The unacknowledged ledger: messages completely sent and not yet
//! acknowledged, in number order.
//!
//! Rule (fixing Mozart's W0 off-by-one): an ack value `a` frees exactly the
//! messages numbered `<= a`; a repeated ack frees nothing more. What remains is
//! resent, in number order, after a reconnect, and is handed back as
//! `maybe_delivered` if the site fails for good.

use std::collections::VecDeque;

use crate::connection::output_share::Freed;
use crate::wire::message::OutMessage;

/// Messages awaiting acknowledgement, ascending by number.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: VecDeque<(u64, OutMessage)>,
    bytes: u64,
}

impl Ledger {
    /// Records a message that has just been completely sent as `number`.
    /// Numbers must be recorded in increasing order.
    pub fn record(&mut self, number: u64, msg: OutMessage) {
        debug_assert!(self.entries.back().is_none_or(|(n, _)| *n < number));
        self.bytes += msg.wire_len();
        self.entries.push_back((number, msg));
    }

    /// Frees every message numbered `<= ack`; returns what was freed (the
    /// byte bound on output is given that much back, per class). The
    /// `corr` of each freed message that is [`tracked`](crate::wire::message::OutMessage::tracked)
    /// is appended to `delivered`: the peer has it.
    pub fn ack(&mut self, ack: u64, delivered: &mut Vec<u64>) -> Freed {
        let mut freed = Freed::default();
        while let Some((num, _)) = self.entries.front() {
            if *num > ack {
                break;
            }
            let (_, m) = self.entries.pop_front().expect("front exists");
            freed.add(&m);
            if m.tracked {
                delivered.push(m.corr);
            }
        }
        self.bytes -= freed.bytes;
        freed
    }

    /// Number of messages held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if every sent message was acknowledged.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Iterates the held messages in number order.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, OutMessage)> {
        self.entries.iter()
    }

    /// Takes every held message out, in number order (the site failed for
    /// good: these are `maybe_delivered`).
    pub fn drain(&mut self) -> Vec<(u64, OutMessage)> {
        self.bytes = 0;
        self.entries.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::priority::Priority;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn msg() -> OutMessage {
        OutMessage::new(
            Priority::Medium,
            1,
            Bytes::new(),
            vec![Bytes::from_static(b"x")],
        )
    }

    /// Acks `ack`, ignoring which tracked messages it delivered.
    fn ack(l: &mut Ledger, ack: u64) -> (usize, u64) {
        let f = l.ack(ack, &mut Vec::new());
        (f.messages as usize, f.bytes)
    }

    #[test]
    fn an_ack_reports_exactly_the_tracked_messages_it_frees() {
        let mut l = Ledger::default();
        for n in 1..=6 {
            let mut m = msg();
            m.corr = 100 + n;
            m.tracked = n % 2 == 0;
            l.record(n, m);
        }
        let mut delivered = Vec::new();
        l.ack(3, &mut delivered);
        assert_eq!(delivered, [102]);
        l.ack(3, &mut delivered);
        assert_eq!(delivered, [102], "a repeated ack reports nothing more");
        l.ack(6, &mut delivered);
        assert_eq!(delivered, [102, 104, 106]);
    }

    #[test]
    fn repeated_ack_frees_nothing_more() {
        let mut l = Ledger::default();
        for n in 1..=5 {
            l.record(n, msg());
        }
        assert_eq!(ack(&mut l, 2).0, 2);
        // Mozart's msgAcked freed one more entry on every call: not here.
        assert_eq!(ack(&mut l, 2).0, 0);
        assert_eq!(ack(&mut l, 2).0, 0);
        assert_eq!(l.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(ack(&mut l, 1).0, 0, "an older ack frees nothing");
        assert_eq!(ack(&mut l, 5).0, 3);
        assert!(l.is_empty());
        assert_eq!(l.bytes(), 0);
    }

    proptest! {
        /// Against a model: after any sequence of records and acks, the ledger
        /// holds exactly the recorded numbers greater than the highest ack.
        #[test]
        fn frees_exactly_up_to_the_ack(ops in prop::collection::vec((any::<bool>(), 0u64..50), 0..300)) {
            let mut l = Ledger::default();
            let mut model = std::collections::BTreeSet::new();
            let mut next = 1;
            for (rec, a) in ops {
                if rec {
                    l.record(next, msg());
                    model.insert(next);
                    next += 1;
                } else {
                    let before = model.len();
                    model.retain(|n| *n > a);
                    prop_assert_eq!(ack(&mut l, a).0, before - model.len());
                }
                prop_assert_eq!(l.iter().map(|(n, _)| *n).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(l.bytes(), model.len() as u64 * msg().wire_len());
            }
        }
    }
}
