//! The receiving half of a session: each lane's partly received message,
//! numbering and duplicate detection, and the session's part of the node's
//! reassembly budget.
//!
//! The receiver accepts message `n = last_received + 1`, drops `n <=
//! last_received` as a duplicate (counted), and treats a gap as a protocol
//! error. A fragment whose bytes cannot be given budget now is left in the
//! ring (`Blocked`): the session stops consuming input until budget is
//! released, and the peer is slowed down, never failed.

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::frame::FrameHeader;
use crate::lane_slots::LaneSlots;
use crate::message::{InMessage, Prelude};
use crate::packed::Entries;
use crate::priority::Priority;
use crate::reassembly::{
    first_content_len, first_prelude, split_whole, Blocked, BudgetShare, Reassembly,
    ReassemblyBudget,
};

use bytes::BytesMut;

use super::ack::AckPolicy;
use super::SessionStats;

/// What one data frame did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    /// Consumed; `progress` if it added to a partly received message.
    Consumed {
        /// A partial message grew (or started).
        progress: bool,
    },
    /// Not consumed: no budget for its bytes now.
    Blocked(Blocked),
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Receiver {
    /// Highest number received and delivered.
    pub(crate) last_received: u64,
    reassembly: LaneSlots<Reassembly>,
    share: BudgetShare,
}

impl Receiver {
    pub(crate) fn new(budget: &ReassemblyBudget) -> Self {
        Self {
            last_received: 0,
            reassembly: Default::default(),
            share: budget.share(),
        }
    }

    /// True if a message is partly received on some lane.
    pub(crate) fn has_partial(&self) -> bool {
        !self.reassembly.is_empty()
    }

    /// Budget bytes this session holds.
    pub(crate) fn held(&self) -> u64 {
        self.share.held()
    }

    /// True if this session is the budget's oldest holder (it never gives
    /// way in a contention).
    pub(crate) fn is_oldest_holder(&self) -> bool {
        self.share.is_oldest()
    }

    /// Drops every partly received message (the channel is gone: their
    /// senders restart them from the first fragment) and gives their budget
    /// back.
    pub(crate) fn abandon_partials(&mut self) {
        for i in 0..4 {
            if let Some(r) = self.reassembly.take(i) {
                self.share.give_back(r.reserved());
            }
        }
        self.reassembly.shed();
    }

    /// Handles one data frame whose payload is split in `a` and `b`.
    #[allow(clippy::too_many_arguments)] // one frame's whole context
    pub(crate) fn on_data(
        &mut self,
        h: &FrameHeader,
        (a, b): (&[u8], &[u8]),
        deliver: &mut dyn FnMut(InMessage),
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
        max_message: u64,
        arena: &mut BytesMut,
    ) -> Result<DataOutcome, ProtocolError> {
        let lane = h.lane;
        let idx = lane as usize - 1;
        let len = (a.len() + b.len()) as u64;
        if h.is_first() {
            if self.reassembly.is_some(idx) {
                return Err(ProtocolError::FragmentSequence {
                    lane,
                    reason: "new message while one is incomplete",
                });
            }
            if h.is_last() {
                // The common case for small messages: whole in one frame,
                // copied straight out of the ring; no budget involved.
                let parts = split_whole(lane, a, b, max_message, arena)?;
                let size = parts.0.total_len();
                self.deliver_numbered(lane, h.msg_number, size, deliver, ack, stats, |n| {
                    in_message(lane, n, parts)
                })?;
                return Ok(DataOutcome::Consumed { progress: false });
            }
            // Checked before any budget is taken or anything allocated.
            first_prelude(lane, a, b, max_message)?;
            let content = first_content_len(len as usize);
            if let Err(blocked) = self.share.try_take(content) {
                return Ok(DataOutcome::Blocked(blocked));
            }
            match Reassembly::start(lane, a, b, max_message) {
                Ok(r) => self.reassembly.set(idx, r),
                Err(e) => {
                    self.share.give_back(content);
                    return Err(e);
                }
            }
        } else {
            let r = self
                .reassembly
                .get_mut(idx)
                .ok_or(ProtocolError::FragmentSequence {
                    lane,
                    reason: "continuation without a first fragment",
                })?;
            if h.frag_offset != r.received() {
                return Err(ProtocolError::FragmentOffset {
                    lane,
                    got: h.frag_offset,
                    expected: r.received(),
                });
            }
            r.check_room(lane, len)?;
            if let Err(blocked) = self.share.try_take(len) {
                return Ok(DataOutcome::Blocked(blocked));
            }
            r.extend(lane, a)?;
            r.extend(lane, b)?;
        }
        if !h.is_last() {
            return Ok(DataOutcome::Consumed { progress: true });
        }
        let r = self.reassembly.take(idx).expect("set above");
        self.share.give_back(r.reserved());
        if !r.is_complete() {
            return Err(ProtocolError::MessageLength {
                lane,
                got: r.received(),
                announced: r.prelude().total_len(),
            });
        }
        let size = r.received();
        self.deliver_numbered(lane, h.msg_number, size, deliver, ack, stats, |n| {
            in_message(lane, n, r.finish())
        })?;
        Ok(DataOutcome::Consumed { progress: true })
    }

    /// Handles one packed frame (whole messages of lane `h.lane`, numbered
    /// from `h.msg_number`): each is delivered, or dropped as a duplicate,
    /// as if it had come alone. Like a new message in a `DATA` frame, it may
    /// not overtake a partly received message of its lane.
    #[allow(clippy::too_many_arguments)] // one frame's whole context
    pub(crate) fn on_packed(
        &mut self,
        h: &FrameHeader,
        payload: (&[u8], &[u8]),
        deliver: &mut dyn FnMut(InMessage),
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
        max_message: u64,
        arena: &mut BytesMut,
    ) -> Result<(), ProtocolError> {
        let lane = h.lane;
        if self.reassembly.is_some(lane as usize - 1) {
            return Err(ProtocolError::FragmentSequence {
                lane,
                reason: "packed messages while one is incomplete",
            });
        }
        let mut entries = Entries::new(lane, payload, max_message);
        // `None` once the numbers ran past u64::MAX: a further entry is a gap.
        let mut next = Some(h.msg_number);
        while let Some(e) = entries.next_entry(arena) {
            let e = e?;
            let n = next.ok_or(ProtocolError::NumberGap {
                last: self.last_received,
                got: u64::MAX,
            })?;
            let size = e.prelude.total_len();
            self.deliver_numbered(lane, n, size, deliver, ack, stats, |n| {
                in_message(lane, n, (e.prelude, e.header, e.body))
            })?;
            next = n.checked_add(1);
        }
        Ok(())
    }

    /// Delivers message `n` of `lane` (`size` wire bytes, built by `make`
    /// only if it is new), or drops and counts a duplicate; a gap in the
    /// numbers is a protocol error.
    #[allow(clippy::too_many_arguments)] // one message's whole context
    fn deliver_numbered(
        &mut self,
        lane: u8,
        n: u64,
        size: u64,
        deliver: &mut dyn FnMut(InMessage),
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
        make: impl FnOnce(u64) -> InMessage,
    ) -> Result<(), ProtocolError> {
        if n <= self.last_received {
            // Exactly once: a message delivered before is dropped and counted.
            stats.duplicates += 1;
            return Ok(());
        }
        if n != self.last_received + 1 {
            return Err(ProtocolError::NumberGap {
                last: self.last_received,
                got: n,
            });
        }
        deliver(make(n));
        // The ack advances only after the handler returned.
        self.last_received = n;
        stats.delivered += 1;
        stats.delivered_by_level[lane as usize - 1] += 1;
        ack.on_delivered(size);
        Ok(())
    }
}

/// A received message, numbered `n`, from its lane and its parts.
fn in_message(lane: u8, n: u64, (prelude, header, body): (Prelude, Bytes, Bytes)) -> InMessage {
    InMessage {
        priority: Priority::from_lane(lane).expect("validated lane"),
        number: n,
        prelude,
        header,
        body,
    }
}
