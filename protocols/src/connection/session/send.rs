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
use std::num::NonZeroU64;
use std::time::Instant;

use crate::base::coverage::{hit, Point};
use crate::base::priority::Priority;
use crate::connection::error::{ProtocolError, Refusal};
use crate::connection::lane_slots::LaneSlots;
use crate::connection::ledger::Ledger;
use crate::connection::output_share::Freed;
use crate::connection::packed;
use crate::connection::scheduler::{Scheduler, SchedulerConfig};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::wire::marshal::InProgress;
use crate::wire::message::OutMessage;

use super::SessionStats;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Sender {
    /// The partly sent message of each lane (at most one per lane).
    current: LaneSlots<InProgress>,
    /// Queues, resend, scheduler and ledger: allocated when the first
    /// message is queued and given back when the channel goes with nothing
    /// left in them, so a site without traffic holds only its numbering.
    traffic: Option<Box<Traffic>>,
    /// What acknowledgements freed, not yet taken, when the traffic that
    /// held it was dropped (boxed: rare, and every idle site would carry
    /// the room).
    freed_left: Option<Box<Freed>>,
    /// Highest number assigned (numbers start at 1).
    pub(crate) last_sent: u64,
    /// Highest number the peer acknowledged.
    pub(super) acked: u64,
    queued_bytes: u64,
    /// Largest message the peer takes, once a handshake told it (a peer
    /// claiming 0 takes nothing: 1 byte, below any message).
    pub(super) peer_max_message: Option<NonZeroU64>,
    /// The channel's ends agreed on `PACKED` frames
    /// ([`Capabilities::PACKED`](crate::wire::version::Capabilities::PACKED)):
    /// without it every message goes in `DATA` frames.
    pub(super) pack: bool,
}

/// What a [`Sender`] needs only while it has messages.
#[derive(Debug)]
struct Traffic {
    /// Queued, never sent, per level (index = level - 1).
    queues: [VecDeque<OutMessage>; 4],
    /// Unacknowledged messages to resend before any new traffic, in number order.
    resend: VecDeque<(u64, OutMessage)>,
    /// The resent message being marshaled.
    resend_current: Option<Box<InProgress>>,
    /// A new scheduler starts with no lane owed anything, which is what an
    /// idle sender's would say too: no credit is saved across idleness.
    sched: Scheduler,
    /// Sent and not yet acknowledged, in number order.
    ledger: Ledger,
    /// Queued messages the peer can never take (see `take_refused`).
    refused: Vec<(Refusal, OutMessage)>,
    /// The `corr` of tracked messages the peer acknowledged, not yet taken
    /// (see `take_delivered`).
    delivered: Vec<u64>,
    /// What acknowledgements freed since `take_freed` (here, not in the
    /// sender: an idle site carries no room for it).
    freed: Freed,
}

/// A new message, numbered `n`, was completely written (its last fragment,
/// or its packed entry): it leaves the queued bytes and awaits its
/// acknowledgement in the ledger.
fn sent(
    queued_bytes: &mut u64,
    ledger: &mut Ledger,
    stats: &mut SessionStats,
    n: u64,
    msg: OutMessage,
) {
    *queued_bytes -= msg.wire_len();
    stats.sent += 1;
    stats.sent_by_level[msg.priority.index()] += 1;
    ledger.record(n, msg);
}

impl Traffic {
    fn new(sched: &SchedulerConfig) -> Self {
        Self {
            queues: Default::default(),
            resend: VecDeque::new(),
            resend_current: None,
            sched: Scheduler::new(sched.clone()),
            ledger: Ledger::default(),
            refused: Vec::new(),
            delivered: Vec::new(),
            freed: Freed::default(),
        }
    }

    /// Holds nothing: no queued, resent, unacknowledged or refused message.
    fn is_empty(&self) -> bool {
        self.refused.is_empty()
            && self.delivered.is_empty()
            && self.resend_current.is_none()
            && self.resend.is_empty()
            && self.ledger.len() == 0
            && self.queues.iter().all(VecDeque::is_empty)
    }
}

impl Sender {
    pub(crate) fn new() -> Self {
        Self {
            current: Default::default(),
            traffic: None,
            freed_left: None,
            last_sent: 0,
            acked: 0,
            queued_bytes: 0,
            peer_max_message: None,
            pack: false,
        }
    }

    /// Queues a message, or hands it back if the peer can never take it.
    pub(crate) fn queue(
        &mut self,
        msg: OutMessage,
        sched: &SchedulerConfig,
    ) -> Result<(), Box<(Refusal, OutMessage)>> {
        if let Some(max) = self.peer_max_message.map(NonZeroU64::get) {
            if msg.wire_len() > max {
                let e = Refusal::TooLarge {
                    size: msg.wire_len(),
                    max,
                };
                return Err(Box::new((e, msg)));
            }
        }
        self.queued_bytes += msg.wire_len();
        let t = self
            .traffic
            .get_or_insert_with(|| Box::new(Traffic::new(sched)));
        t.queues[msg.priority.index()].push_back(msg);
        Ok(())
    }

    /// True if the sender holds only its numbering: no message at all
    /// (queued, partly sent, unacknowledged, refused), and nothing its
    /// acknowledgements freed or delivered that the driver has not taken.
    /// (Its traffic state may still be allocated, empty: a parked session
    /// drops it.)
    pub(crate) fn is_idle(&self) -> bool {
        self.current.is_empty()
            && self.queued_bytes == 0
            && self.freed_left.is_none()
            && self
                .traffic
                .as_deref()
                .is_none_or(|t| t.is_empty() && t.freed == Freed::default())
    }

    /// True if application data waits to be written.
    pub(crate) fn has_data(&self) -> bool {
        !self.current.is_empty()
            || self.traffic.as_ref().is_some_and(|t| {
                t.resend_current.is_some()
                    || !t.resend.is_empty()
                    || t.queues.iter().any(|q| !q.is_empty())
            })
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
            // Numbered messages are in the ledger until acknowledged, so a
            // sender without traffic has nothing unacknowledged.
            if let Some(t) = &mut self.traffic {
                let freed = t.ledger.ack(ack, &mut t.delivered);
                t.freed.merge(freed);
            }
        } else {
            #[cfg(feature = "planted-bugs")]
            if crate::base::planted::active(crate::base::planted::Bug::AckFreesOneMore) {
                // Planted: a repeated ack frees the next message too.
                if let Some(t) = &mut self.traffic {
                    let next = t.ledger.iter().next().map(|(n, _)| *n);
                    if let Some(next) = next {
                        let freed = t.ledger.ack(next, &mut t.delivered);
                        t.freed.merge(freed);
                    }
                }
            }
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
        let Some(t) = self.traffic.as_deref_mut() else {
            return false;
        };
        // Resent messages go first, in number order, before any new traffic;
        // those the peer acknowledged meanwhile are not resent.
        loop {
            if let Some(ip) = &t.resend_current {
                // Not started yet, and acknowledged meanwhile: drop it.
                if ip.is_fresh() && ip.number.is_some_and(|n| n <= self.acked) {
                    t.resend_current = None;
                    continue;
                }
                break;
            }
            match t.resend.pop_front() {
                Some((n, _)) if n <= self.acked => continue,
                Some((n, m)) => t.resend_current = Some(Box::new(InProgress::new(m, Some(n)))),
                None => break,
            }
        }
        if let Some(ip) = t.resend_current.as_mut() {
            let Some(w) = ip.write_frame(out, max_payload, ack, || {
                unreachable!("resends keep their number")
            }) else {
                return false;
            };
            stats.bytes_by_level[ip.msg.priority.index()] += w.frame_len as u64;
            if w.done {
                t.resend_current = None;
                stats.retransmitted += 1;
                hit(Point::SendRetransmit);
            }
            return true;
        }
        let ready = std::array::from_fn(|i| self.current.is_some(i) || !t.queues[i].is_empty());
        let Some(p) = t.sched.pick(ready, now) else {
            return false;
        };
        let i = p.index();
        if !self.current.is_some(i) {
            if let Some(written) = self.write_packed(i, now, out, max_payload, ack, stats) {
                return written;
            }
        }
        let t = self.traffic.as_deref_mut().expect("checked above");
        let queue = &mut t.queues[i];
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
        t.sched.charge(p, w.frame_len, w.done, now);
        stats.bytes_by_level[i] += w.frame_len as u64;
        if w.done {
            let ip = self.current.take(i).expect("in progress");
            let n = ip.number.expect("numbered on its last fragment");
            sent(&mut self.queued_bytes, &mut t.ledger, stats, n, ip.msg);
        }
        true
    }

    /// Writes the small whole messages at the front of level `i`'s queue
    /// into one `PACKED` frame (`packed.rs`), as many as fit, numbered one
    /// after the other. `None` if the front message is not packed (it goes
    /// alone in `DATA` frames: too large, or larger than this channel's
    /// frames); `Some(false)` if it is, but the buffer has no room for it
    /// now.
    fn write_packed(
        &mut self,
        i: usize,
        now: Instant,
        out: &mut ByteBuffer,
        max_payload: usize,
        ack: u64,
        stats: &mut SessionStats,
    ) -> Option<bool> {
        if !self.pack {
            return None;
        }
        let t = self.traffic.as_deref_mut()?;
        let queue = &t.queues[i];
        let first = packed::entry_len(queue.front()?)?;
        if first > max_payload {
            // It would never fit this channel's frames (a 4 KiB buffer
            // takes 4,064 payload bytes): DATA frames carry it.
            return None;
        }
        let room = out.free().saturating_sub(HEADER_LEN).min(max_payload);
        if first > room {
            return Some(false);
        }
        let (mut count, mut payload) = (1, first);
        for m in queue.iter().skip(1) {
            match packed::entry_len(m) {
                Some(len) if payload + len <= room => {
                    count += 1;
                    payload += len;
                }
                _ => break,
            }
        }
        let number = self.last_sent + 1;
        let p = Priority::from_lane(i as u8 + 1).expect("a level index");
        let mut hb = [0u8; HEADER_LEN];
        FrameHeader::whole(FrameKind::Packed, p.lane(), number, payload as u32, ack)
            .encode(&mut hb);
        out.push(&hb);
        for _ in 0..count {
            let m = t.queues[i].pop_front().expect("counted above");
            packed::write_entry(&m, out);
            self.last_sent += 1;
            sent(
                &mut self.queued_bytes,
                &mut t.ledger,
                stats,
                self.last_sent,
                m,
            );
        }
        let frame_len = HEADER_LEN + payload;
        t.sched.charge(p, frame_len, true, now);
        stats.bytes_by_level[i] += frame_len as u64;
        Some(true)
    }

    /// A new channel: the peer received up to `peer_last_received` and takes
    /// messages of at most `peer_max_message`, in packed frames if `pack`.
    /// Everything else in the ledger is resent first, in number order.
    pub(crate) fn channel_up(
        &mut self,
        peer_last_received: u64,
        peer_max_message: u64,
        pack: bool,
    ) -> Result<(), ProtocolError> {
        self.pack = pack;
        self.apply_ack(peer_last_received)?;
        if let Some(t) = &mut self.traffic {
            t.resend = t.ledger.iter().cloned().collect();
            t.resend_current = None;
            #[cfg(feature = "planted-bugs")]
            if crate::base::planted::active(crate::base::planted::Bug::ResendSkipsFirst) {
                t.resend.pop_front();
            }
        }
        self.peer_max_message = Some(NonZeroU64::new(peer_max_message).unwrap_or(NonZeroU64::MIN));
        self.refuse_oversized(peer_max_message);
        Ok(())
    }

    /// Planted bug: drops every unacknowledged message (see `planted`).
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn planted_drop_ledger(&mut self) {
        if let Some(t) = &mut self.traffic {
            t.ledger.drain();
            t.resend.clear();
            t.resend_current = None;
        }
    }

    /// The peer forgot the session: numbering starts again from 1, and
    /// every unacknowledged message is handed back as maybe delivered
    /// (`Refusal::PeerForgot`) instead of resent. Partly sent messages
    /// have no number yet and simply go out on the next channel. Returns how
    /// many were handed back.
    pub(crate) fn forget_peer(&mut self) -> usize {
        let mut n = 0;
        if let Some(t) = &mut self.traffic {
            t.resend.clear();
            t.resend_current = None;
            let lost = t.ledger.drain();
            n = lost.len();
            for (number, m) in lost {
                t.refused.push((Refusal::PeerForgot { number }, m));
            }
        }
        self.last_sent = 0;
        self.acked = 0;
        n
    }

    /// The channel is gone: partly sent messages restart from their first
    /// fragment on the next one. A sender left with no message at all
    /// gives its queues, scheduler and ledger back (an idle site stays
    /// small).
    pub(crate) fn channel_down(&mut self) {
        for c in self.current.iter_mut() {
            if c.started() {
                hit(Point::rewind_on(c.msg.priority));
            }
            #[cfg(feature = "planted-bugs")]
            if crate::base::planted::active(crate::base::planted::Bug::HalfSentNotRewound) {
                continue;
            }
            c.rewind();
        }
        // No channel: a site with nothing partly sent gives its lane slots
        // back.
        self.current.shed();
        if let Some(t) = &mut self.traffic {
            t.resend = VecDeque::new();
            t.resend_current = None;
            if t.is_empty() && self.current.is_empty() {
                self.drop_traffic();
            } else {
                // Kept for what is unacknowledged; empty queues keep no room.
                for q in &mut t.queues {
                    q.shrink_to_fit();
                }
            }
        }
    }

    /// Removes the queued (and partly sent, so unnumbered) messages larger
    /// than the peer accepts: queued before its maximum was known, they
    /// would be refused for ever.
    fn refuse_oversized(&mut self, max: u64) {
        let Some(t) = self.traffic.as_deref_mut() else {
            return;
        };
        let queued_bytes = &mut self.queued_bytes;
        let refused = &mut t.refused;
        let mut refuse = |m: OutMessage| {
            *queued_bytes -= m.wire_len();
            let e = Refusal::TooLarge {
                size: m.wire_len(),
                max,
            };
            refused.push((e, m));
        };
        for i in 0..4 {
            if self
                .current
                .get(i)
                .is_some_and(|ip| ip.msg.wire_len() > max)
            {
                let ip = self.current.take(i).expect("checked");
                refuse(ip.msg);
            }
            if t.queues[i].iter().any(|m| m.wire_len() > max) {
                let q = std::mem::take(&mut t.queues[i]);
                for m in q {
                    if m.wire_len() > max {
                        refuse(m);
                    } else {
                        t.queues[i].push_back(m);
                    }
                }
            }
        }
    }

    /// A message is partly sent (some of its frames are out).
    pub(crate) fn partly_sent(&self) -> bool {
        let resend = self
            .traffic
            .as_ref()
            .and_then(|t| t.resend_current.as_deref());
        self.current.iter().chain(resend).any(|ip| !ip.is_fresh())
    }

    pub(crate) fn has_refused(&self) -> bool {
        self.traffic.as_ref().is_some_and(|t| !t.refused.is_empty())
    }

    pub(crate) fn take_refused(&mut self) -> Vec<(Refusal, OutMessage)> {
        self.traffic
            .as_mut()
            .map(|t| std::mem::take(&mut t.refused))
            .unwrap_or_default()
    }

    /// Largest message the peer takes, once known.
    pub(crate) fn peer_max_message(&self) -> Option<u64> {
        self.peer_max_message.map(NonZeroU64::get)
    }

    /// The `corr` of the tracked messages acknowledged since the last call.
    pub(crate) fn take_delivered(&mut self) -> Vec<u64> {
        self.traffic
            .as_mut()
            .filter(|t| !t.delivered.is_empty())
            .map(|t| std::mem::take(&mut t.delivered))
            .unwrap_or_default()
    }

    pub(crate) fn take_freed(&mut self) -> Freed {
        let mut freed = self.freed_left.take().map(|b| *b).unwrap_or_default();
        if let Some(t) = &mut self.traffic {
            freed.merge(std::mem::take(&mut t.freed));
        }
        freed
    }

    /// Drops the traffic state (it holds no message), keeping what its
    /// acknowledgements freed for `take_freed`.
    fn drop_traffic(&mut self) {
        if let Some(t) = self.traffic.take() {
            if t.freed != Freed::default() {
                self.freed_left
                    .get_or_insert_with(Box::default)
                    .merge(t.freed);
            }
        }
    }

    pub(crate) fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Messages held: queued, partly sent, or awaiting acknowledgement.
    pub(crate) fn pending_messages(&self) -> usize {
        self.current.count()
            + self.traffic.as_ref().map_or(0, |t| {
                t.queues.iter().map(VecDeque::len).sum::<usize>() + t.ledger.len()
            })
    }

    pub(crate) fn unacked(&self) -> usize {
        self.traffic.as_ref().map_or(0, |t| t.ledger.len())
    }

    /// Our highest message number the peer acknowledged: numbers are
    /// given in order and the ledger holds every one not acknowledged.
    pub(crate) fn acked(&self) -> u64 {
        self.last_sent.saturating_sub(self.unacked() as u64)
    }

    /// Takes every message out (the site failed for good): never completely
    /// sent, and sent but not acknowledged.
    pub(crate) fn take_all(&mut self) -> (Vec<OutMessage>, Vec<(u64, OutMessage)>) {
        let mut not_sent = Vec::new();
        for i in 0..4 {
            if let Some(ip) = self.current.take(i) {
                not_sent.push(ip.msg);
            }
            if let Some(t) = &mut self.traffic {
                not_sent.extend(t.queues[i].drain(..));
            }
        }
        self.queued_bytes = 0;
        self.current.shed();
        let Some(t) = &mut self.traffic else {
            return (not_sent, Vec::new());
        };
        t.resend.clear();
        t.resend_current = None;
        let maybe_delivered = t.ledger.drain();
        // What was refused stays for `take_refused`.
        if t.is_empty() {
            self.drop_traffic();
        }
        (not_sent, maybe_delivered)
    }
}
