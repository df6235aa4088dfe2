//! The sending half of a session: the per-level queues, each lane's
//! marshaler place, the scheduler, numbering, the unacknowledged ledger and
//! the resend after a reconnect.
//!
//! Numbers are assigned when a message's last fragment is written and never
//! reassigned; `acked` is the highest number the peer acknowledged (its
//! view, carried in every frame header it writes). After a reconnect the
//! unacknowledged messages are resent first, in number order; a message the
//! peer acknowledges while that resend runs is skipped, not resent.

use std::collections::VecDeque;
use std::time::Instant;

use crate::byte_buffer::ByteBuffer;
use crate::error::{ProtocolError, SendError};
use crate::lane_slots::LaneSlots;
use crate::ledger::Ledger;
use crate::marshal::InProgress;
use crate::message::OutMessage;
use crate::scheduler::{Scheduler, SchedulerConfig};

use super::SessionStats;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Sender {
    /// Queued, never sent, per level (index = level - 1).
    queues: [VecDeque<OutMessage>; 4],
    /// The partly sent message of each lane (at most one per lane).
    current: LaneSlots<InProgress>,
    /// Unacknowledged messages to resend before any new traffic, in number order.
    resend: VecDeque<(u64, OutMessage)>,
    /// The resent message being marshaled.
    resend_current: Option<Box<InProgress>>,
    sched: Scheduler,
    /// Highest number assigned (numbers start at 1).
    pub(crate) last_sent: u64,
    /// Highest number the peer acknowledged.
    acked: u64,
    ledger: Ledger,
    /// (messages, bytes) acknowledged since `take_freed`.
    freed: (u64, u64),
    queued_bytes: u64,
    pub(crate) peer_max_message: Option<u64>,
    /// Queued messages the peer can never take (see `take_refused`).
    refused: Vec<(SendError, OutMessage)>,
}

impl Sender {
    pub(crate) fn new(sched: SchedulerConfig) -> Self {
        Self {
            queues: Default::default(),
            current: Default::default(),
            resend: VecDeque::new(),
            resend_current: None,
            sched: Scheduler::new(sched),
            last_sent: 0,
            acked: 0,
            ledger: Ledger::default(),
            freed: (0, 0),
            queued_bytes: 0,
            peer_max_message: None,
            refused: Vec::new(),
        }
    }

    /// Queues a message, or hands it back if the peer can never take it.
    pub(crate) fn queue(&mut self, msg: OutMessage) -> Result<(), Box<(SendError, OutMessage)>> {
        if let Some(max) = self.peer_max_message {
            if msg.wire_len() > max {
                let e = SendError::TooLarge {
                    size: msg.wire_len(),
                    max,
                };
                return Err(Box::new((e, msg)));
            }
        }
        self.queued_bytes += msg.wire_len();
        self.queues[msg.priority.index()].push_back(msg);
        Ok(())
    }

    /// True if application data waits to be written.
    pub(crate) fn has_data(&self) -> bool {
        self.resend_current.is_some()
            || !self.resend.is_empty()
            || !self.current.is_empty()
            || self.queues.iter().any(|q| !q.is_empty())
    }

    /// Applies the peer's acknowledgement `ack` (checked against what was
    /// sent).
    pub(crate) fn apply_ack(&mut self, ack: u64) -> Result<(), ProtocolError> {
        if ack > self.last_sent {
            return Err(ProtocolError::AckBeyondSent {
                ack,
                sent: self.last_sent,
            });
        }
        if ack > self.acked {
            self.acked = ack;
            let (n, bytes) = self.ledger.ack(ack);
            self.freed.0 += n as u64;
            self.freed.1 += bytes;
        }
        Ok(())
    }

    /// Writes the next data frame (resends first, then the scheduler's
    /// pick), carrying `ack`; false if there is nothing to send or no room.
    pub(crate) fn write_one_data_frame(
        &mut self,
        now: Instant,
        out: &mut ByteBuffer,
        max_payload: usize,
        ack: u64,
        stats: &mut SessionStats,
    ) -> bool {
        // Resent messages go first, in number order, before any new traffic;
        // those the peer acknowledged meanwhile are not resent.
        loop {
            if let Some(ip) = &self.resend_current {
                // Not started yet, and acknowledged meanwhile: drop it.
                if ip.is_fresh() && ip.number.is_some_and(|n| n <= self.acked) {
                    self.resend_current = None;
                    continue;
                }
                break;
            }
            match self.resend.pop_front() {
                Some((n, _)) if n <= self.acked => continue,
                Some((n, m)) => self.resend_current = Some(Box::new(InProgress::new(m, Some(n)))),
                None => break,
            }
        }
        if let Some(ip) = self.resend_current.as_mut() {
            let Some(w) = ip.write_frame(out, max_payload, ack, || {
                unreachable!("resends keep their number")
            }) else {
                return false;
            };
            stats.bytes_by_level[ip.msg.priority.index()] += w.frame_len as u64;
            if w.done {
                self.resend_current = None;
                stats.retransmitted += 1;
            }
            return true;
        }
        let ready = std::array::from_fn(|i| self.current.is_some(i) || !self.queues[i].is_empty());
        let Some(p) = self.sched.pick(ready, now) else {
            return false;
        };
        let i = p.index();
        let queue = &mut self.queues[i];
        let ip = self.current.get_or_insert_with(i, || {
            InProgress::new(queue.pop_front().expect("lane is ready"), None)
        });
        let last_sent = &mut self.last_sent;
        let Some(w) = ip.write_frame(out, max_payload, ack, || {
            *last_sent += 1;
            *last_sent
        }) else {
            return false;
        };
        self.sched.charge(p, w.frame_len, w.done, now);
        stats.bytes_by_level[i] += w.frame_len as u64;
        if w.done {
            let ip = self.current.take(i).expect("in progress");
            let n = ip.number.expect("numbered on its last fragment");
            self.queued_bytes -= ip.msg.wire_len();
            self.ledger.record(n, ip.msg);
            stats.sent += 1;
            stats.sent_by_level[i] += 1;
        }
        true
    }

    /// A new channel: the peer received up to `peer_last_received` and takes
    /// messages of at most `peer_max_message`. Everything else in the ledger
    /// is resent first, in number order.
    pub(crate) fn channel_up(
        &mut self,
        peer_last_received: u64,
        peer_max_message: u64,
    ) -> Result<(), ProtocolError> {
        self.apply_ack(peer_last_received)?;
        self.resend = self.ledger.iter().cloned().collect();
        self.resend_current = None;
        self.peer_max_message = Some(peer_max_message);
        self.refuse_oversized(peer_max_message);
        Ok(())
    }

    /// The peer forgot the session: numbering starts again from 1, and
    /// every unacknowledged message is handed back as maybe delivered
    /// (`SendError::PeerForgot`) instead of resent. Partly sent messages
    /// have no number yet and simply go out on the next channel. Returns how
    /// many were handed back.
    pub(crate) fn forget_peer(&mut self) -> usize {
        self.resend.clear();
        self.resend_current = None;
        let lost = self.ledger.drain();
        let n = lost.len();
        for (number, m) in lost {
            self.refused.push((SendError::PeerForgot { number }, m));
        }
        self.last_sent = 0;
        self.acked = 0;
        n
    }

    /// The channel is gone: partly sent messages restart from their first
    /// fragment on the next one.
    pub(crate) fn channel_down(&mut self) {
        for c in self.current.iter_mut() {
            c.rewind();
        }
        // No channel: a site with nothing partly sent gives its lane slots
        // back (an idle site stays small).
        self.current.shed();
        self.resend = VecDeque::new();
        self.resend_current = None;
    }

    /// Removes the queued (and partly sent, so unnumbered) messages larger
    /// than the peer accepts: queued before its maximum was known, they
    /// would be refused for ever.
    fn refuse_oversized(&mut self, max: u64) {
        for i in 0..4 {
            if self
                .current
                .get(i)
                .is_some_and(|ip| ip.msg.wire_len() > max)
            {
                let ip = self.current.take(i).expect("checked");
                self.refuse(ip.msg, max);
            }
            if self.queues[i].iter().any(|m| m.wire_len() > max) {
                let q = std::mem::take(&mut self.queues[i]);
                for m in q {
                    if m.wire_len() > max {
                        self.refuse(m, max);
                    } else {
                        self.queues[i].push_back(m);
                    }
                }
            }
        }
    }

    fn refuse(&mut self, m: OutMessage, max: u64) {
        self.queued_bytes -= m.wire_len();
        let e = SendError::TooLarge {
            size: m.wire_len(),
            max,
        };
        self.refused.push((e, m));
    }

    /// A message is partly sent (some of its frames are out).
    pub(crate) fn partly_sent(&self) -> bool {
        self.current
            .iter()
            .chain(self.resend_current.as_deref())
            .any(|ip| !ip.is_fresh())
    }

    pub(crate) fn has_refused(&self) -> bool {
        !self.refused.is_empty()
    }

    pub(crate) fn take_refused(&mut self) -> Vec<(SendError, OutMessage)> {
        std::mem::take(&mut self.refused)
    }

    pub(crate) fn take_freed(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.freed)
    }

    pub(crate) fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Messages held: queued, partly sent, or awaiting acknowledgement.
    pub(crate) fn pending_messages(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum::<usize>()
            + self.current.count()
            + self.ledger.len()
    }

    pub(crate) fn unacked(&self) -> usize {
        self.ledger.len()
    }

    /// Takes every message out (the site failed for good): never completely
    /// sent, and sent but not acknowledged.
    pub(crate) fn take_all(&mut self) -> (Vec<OutMessage>, Vec<(u64, OutMessage)>) {
        let mut not_sent = Vec::new();
        for i in 0..4 {
            if let Some(ip) = self.current.take(i) {
                not_sent.push(ip.msg);
            }
            not_sent.extend(self.queues[i].drain(..));
        }
        self.queued_bytes = 0;
        self.current.shed();
        self.resend.clear();
        self.resend_current = None;
        (not_sent, self.ledger.drain())
    }
}
