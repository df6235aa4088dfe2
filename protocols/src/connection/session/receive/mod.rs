//! The receiving half of a session: each lane's partly received message,
//! numbering and duplicate detection, and the session's part of the node's
//! reassembly budget.
//!
//! The receiver accepts message `n = last_received + 1`, drops `n <=
//! last_received` as a duplicate (counted), and treats a gap as a protocol
//! error. A fragment whose bytes cannot be given budget now is left in the
//! ring (`Blocked`): the session stops consuming input until budget is
//! released, and the peer is slowed down, never failed.
//!
//! A message the driver streams (`deliver.rs`) is not reassembled: its
//! header is, and then each fragment's body bytes are handed over as they
//! arrive.

use bytes::Bytes;

use crate::base::priority::Priority;
use crate::connection::deliver::{Deliver, StreamAbort};
use crate::connection::error::ProtocolError;
use crate::connection::lane_slots::LaneSlots;
use crate::connection::packed::Entries;
use crate::connection::reassembly::{
    extract_bytes, first_content_len, first_prelude, split_whole, sub_slices, Blocked, BudgetShare,
    Reassembly, ReassemblyBudget,
};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::wire::message::{InMessage, Prelude, PRELUDE_LEN};

use bytes::BytesMut;

use super::ack::AckPolicy;
use super::SessionStats;

mod direct;

/// What one data frame did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    /// Consumed (the bytes it added to a partly received message, if any,
    /// are counted in `Receiver::taken`).
    Consumed,
    /// Not consumed: no budget for its bytes now.
    Blocked(Blocked),
}

/// A message partly received on one lane.
#[derive(Debug)]
enum Partial {
    /// Reassembled, delivered whole.
    Whole(Reassembly),
    /// Streamed to the driver as it arrives.
    Stream(Stream),
}

impl Partial {
    /// Wire bytes received so far, and the message's announced total.
    fn progress(&self) -> (u64, u64) {
        match self {
            Partial::Whole(r) => (r.received(), r.prelude().total_len()),
            Partial::Stream(st) => (st.received, st.prelude.total_len()),
        }
    }
}

/// A streamed message's state.
#[derive(Debug)]
struct Stream {
    lane: u8,
    prelude: Prelude,
    /// The typed header, until it is complete and handed over.
    header: Vec<u8>,
    started: bool,
    /// Wire bytes received (prelude included).
    received: u64,
    /// Budget taken for its header bytes.
    reserved: u64,
}

impl Stream {
    /// Header bytes still expected.
    fn header_missing(&self) -> usize {
        if self.started {
            0
        } else {
            self.prelude.header_len as usize - self.header.len()
        }
    }

    /// Body bytes handed over so far.
    fn body_received(&self) -> u64 {
        self.received
            .saturating_sub(PRELUDE_LEN as u64 + self.prelude.header_len as u64)
    }

    /// Takes in `len` payload bytes at `at` of `a`+`b`: header bytes are
    /// kept (and the header handed over once complete), body bytes handed
    /// over at once.
    #[allow(clippy::too_many_arguments)] // one fragment's whole context
    fn feed(
        &mut self,
        lane: Priority,
        (a, b): (&[u8], &[u8]),
        at: usize,
        len: usize,
        deliver: &mut dyn Deliver,
        arena: &mut BytesMut,
        share: &mut BudgetShare,
    ) {
        let to_header = self.header_missing().min(len);
        let (x, y) = sub_slices(a, b, at, to_header);
        self.header.extend_from_slice(x);
        self.header.extend_from_slice(y);
        self.received += to_header as u64;
        if !self.started && self.header.len() == self.prelude.header_len as usize {
            self.started = true;
            share.give_back(std::mem::take(&mut self.reserved));
            let header = Bytes::from(std::mem::take(&mut self.header));
            deliver.stream_start(lane, &self.prelude, header);
        }
        let body = len - to_header;
        if body > 0 {
            let offset = self.body_received();
            let data = extract_bytes(a, b, at + to_header, body, arena);
            self.received += body as u64;
            deliver.stream_chunk(lane, offset, data);
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Receiver {
    /// Highest number received and delivered.
    pub(crate) last_received: u64,
    reassembly: LaneSlots<Partial>,
    share: BudgetShare,
    /// Streams whose channel was lost, not yet told (see
    /// [`Receiver::report_interrupted`]): lane and body bytes handed over.
    interrupted: Vec<(Priority, u64)>,
    /// The fragment being read straight into its message, if one is (see
    /// [`Receiver::adopt`]): its header.
    direct: Option<FrameHeader>,
    /// Payload bytes of partly received messages taken in so far (ever):
    /// progress means bytes (an empty fragment adds none).
    pub(crate) taken: u64,
}

/// A fragment is read straight into its message, past the ring, when at
/// least this many of its payload bytes are still to come: below it, the
/// extra read call costs more than the copy it saves.
pub(crate) const DIRECT_MIN: usize = 8 * 1024;

impl Receiver {
    pub(crate) fn new(budget: &ReassemblyBudget) -> Self {
        Self {
            last_received: 0,
            reassembly: Default::default(),
            share: budget.share(),
            interrupted: Vec::new(),
            direct: None,
            taken: 0,
        }
    }

    /// True if the receiver holds only its numbering: no message partly
    /// received or read straight into place, no interrupted stream not yet
    /// reported, no reassembly budget held or waited for.
    pub(crate) fn is_idle(&self) -> bool {
        self.reassembly.is_empty()
            && self.interrupted.is_empty()
            && self.direct.is_none()
            && self.share.held() == 0
            && !self.share.is_waiting()
    }

    /// True if a message is partly received on some lane.
    pub(crate) fn has_partial(&self) -> bool {
        !self.reassembly.is_empty()
    }

    /// The node's reassembly budget.
    pub(crate) fn budget(&self) -> &ReassemblyBudget {
        self.share.budget()
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

    /// True if another session's input waits for the reassembly budget.
    pub(crate) fn others_waiting(&self) -> bool {
        self.share.others_waiting()
    }

    /// True if another session holds reassembly budget.
    pub(crate) fn others_holding(&self) -> bool {
        self.share.others_holding()
    }

    /// This session's input no longer waits for budget.
    pub(crate) fn stop_waiting(&mut self) {
        self.share.stop_waiting();
    }

    /// Drops every partly received message (the channel is gone: their
    /// senders restart them from the first fragment) and gives their budget
    /// back. Streams already started are told at the next
    /// [`report_interrupted`](Self::report_interrupted).
    pub(crate) fn abandon_partials(&mut self) {
        self.direct = None;
        self.share.stop_waiting();
        for i in 0..4 {
            match self.reassembly.take(i) {
                None => {}
                Some(Partial::Whole(r)) => self.share.give_back(r.reserved()),
                Some(Partial::Stream(st)) => self.interrupt(st),
            }
        }
        self.reassembly.shed();
    }

    /// A stream ends without its end (its channel is lost).
    fn interrupt(&mut self, st: Stream) {
        self.share.give_back(st.reserved);
        if st.started {
            let lane = Priority::from_lane(st.lane).expect("validated lane");
            self.interrupted.push((lane, st.body_received()));
        }
    }

    /// Tells `deliver` of the streams whose channel was lost.
    pub(crate) fn report_interrupted(&mut self, deliver: &mut dyn Deliver) {
        for (lane, received) in self.interrupted.drain(..) {
            deliver.stream_abort(lane, StreamAbort::ChannelLost { received });
        }
    }

    /// Handles one data frame whose payload is split in `a` and `b`.
    #[allow(clippy::too_many_arguments)] // one frame's whole context
    pub(crate) fn on_data(
        &mut self,
        h: &FrameHeader,
        (a, b): (&[u8], &[u8]),
        deliver: &mut dyn Deliver,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
        max_message: u64,
        arena: &mut BytesMut,
    ) -> Result<DataOutcome, ProtocolError> {
        let lane = h.lane;
        let priority = Priority::from_lane(lane).expect("validated lane");
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
                self.deliver_whole(lane, h.msg_number, size, || parts, deliver, ack, stats)?;
                return Ok(DataOutcome::Consumed);
            }
            // Checked before any budget is taken or anything allocated.
            let prelude = first_prelude(lane, a, b, max_message)?;
            if deliver.stream(priority, &prelude) {
                let total = prelude.total_len();
                if len > total {
                    return Err(ProtocolError::MessageLength {
                        lane,
                        got: len,
                        announced: total,
                    });
                }
                let header = (prelude.header_len as u64).min(first_content_len(len as usize));
                if let Err(blocked) = self.share.try_take(header) {
                    return Ok(DataOutcome::Blocked(blocked));
                }
                let mut st = Stream {
                    lane,
                    prelude,
                    header: Vec::with_capacity(header as usize),
                    started: false,
                    received: PRELUDE_LEN as u64,
                    reserved: header,
                };
                let body = (a, b);
                st.feed(
                    priority,
                    body,
                    PRELUDE_LEN,
                    len as usize - PRELUDE_LEN,
                    deliver,
                    arena,
                    &mut self.share,
                );
                self.reassembly.set(idx, Partial::Stream(st));
            } else {
                let content = first_content_len(len as usize);
                if let Err(blocked) = self.share.try_take(content) {
                    return Ok(DataOutcome::Blocked(blocked));
                }
                match Reassembly::start(lane, a, b, max_message) {
                    Ok(r) => self.reassembly.set(idx, Partial::Whole(r)),
                    Err(e) => {
                        self.share.give_back(content);
                        return Err(e);
                    }
                }
            }
        } else {
            let partial = self
                .reassembly
                .get_mut(idx)
                .ok_or(ProtocolError::FragmentSequence {
                    lane,
                    reason: "continuation without a first fragment",
                })?;
            let (received, total) = partial.progress();
            if h.frag_offset != received {
                return Err(ProtocolError::FragmentOffset {
                    lane,
                    got: h.frag_offset,
                    expected: received,
                });
            }
            if received + len > total {
                return Err(ProtocolError::MessageLength {
                    lane,
                    got: received + len,
                    announced: total,
                });
            }
            match partial {
                Partial::Whole(r) => {
                    if let Err(blocked) = self.share.try_take(len) {
                        return Ok(DataOutcome::Blocked(blocked));
                    }
                    r.extend(lane, a)?;
                    r.extend(lane, b)?;
                }
                Partial::Stream(st) => {
                    let header = st.header_missing().min(len as usize) as u64;
                    if let Err(blocked) = self.share.try_take(header) {
                        return Ok(DataOutcome::Blocked(blocked));
                    }
                    st.reserved += header;
                    st.feed(
                        priority,
                        (a, b),
                        0,
                        len as usize,
                        deliver,
                        arena,
                        &mut self.share,
                    );
                }
            }
        }
        self.taken += len;
        self.complete_fragment(h, deliver, ack, stats)
    }

    /// A fragment of a partly received message was taken in whole (from the
    /// ring, or read in place): the message is delivered if it was its last.
    fn complete_fragment(
        &mut self,
        h: &FrameHeader,
        deliver: &mut dyn Deliver,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
    ) -> Result<DataOutcome, ProtocolError> {
        if !h.is_last() {
            return Ok(DataOutcome::Consumed);
        }
        let lane = h.lane;
        let priority = Priority::from_lane(lane).expect("validated lane");
        let idx = lane as usize - 1;
        let (received, total) = self
            .reassembly
            .get(idx)
            .expect("a partial message")
            .progress();
        if received != total {
            // The channel closes on this error: the partial goes with it.
            return Err(ProtocolError::MessageLength {
                lane,
                got: received,
                announced: total,
            });
        }
        let n = h.msg_number;
        match self.reassembly.take(idx).expect("a partial message") {
            Partial::Whole(r) => {
                self.share.give_back(r.reserved());
                self.deliver_whole(lane, n, received, || r.finish(), deliver, ack, stats)?;
            }
            Partial::Stream(st) => {
                self.share.give_back(st.reserved);
                match self.check_number(n, stats) {
                    Ok(true) => {
                        deliver.stream_end(priority, n);
                        self.delivered(lane, n, received, ack, stats);
                    }
                    Ok(false) => deliver.stream_abort(priority, StreamAbort::Duplicate),
                    Err(e) => {
                        self.interrupt(st);
                        return Err(e);
                    }
                }
            }
        }
        Ok(DataOutcome::Consumed)
    }

    /// Handles one packed frame (whole messages of lane `h.lane`, numbered
    /// from `h.msg_number`): each is delivered, or dropped as a duplicate,
    /// as if it had come alone. Like a new message in a `DATA` frame, it may
    /// not overtake a partly received message of its lane. The first `skip`
    /// messages were delivered by an earlier call (the turn paused in the
    /// frame: see `pace.rs`); at most `limit` more are. Returns how many
    /// were, and whether the frame is finished.
    #[allow(clippy::too_many_arguments)] // one frame's whole context
    pub(crate) fn on_packed(
        &mut self,
        h: &FrameHeader,
        payload: (&[u8], &[u8]),
        deliver: &mut dyn Deliver,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
        max_message: u64,
        arena: &mut BytesMut,
        (skip, limit): (u32, u32),
    ) -> Result<(u32, bool), ProtocolError> {
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
        for _ in 0..skip {
            match entries.skip_entry() {
                Some(r) => r?,
                None => break,
            }
            next = next.and_then(|n| n.checked_add(1));
        }
        let mut done = 0;
        while done < limit {
            let Some(e) = entries.next_entry(arena) else {
                return Ok((done, true));
            };
            let e = e?;
            let n = next.ok_or(ProtocolError::NumberGap {
                last: self.last_received,
                got: u64::MAX,
            })?;
            let size = e.prelude.total_len();
            let parts = || (e.prelude, e.header, e.body);
            self.deliver_whole(lane, n, size, parts, deliver, ack, stats)?;
            next = n.checked_add(1);
            done += 1;
        }
        Ok((done, entries.at_end()))
    }

    /// Hands the whole message `n` of `lane` (`size` wire bytes; `parts`
    /// makes it) to `deliver` if it is the next one: exactly once, the ack
    /// advancing after the handler returned (see
    /// [`check_number`](Self::check_number)).
    #[allow(clippy::too_many_arguments)] // one message's whole context
    fn deliver_whole(
        &mut self,
        lane: u8,
        n: u64,
        size: u64,
        parts: impl FnOnce() -> (Prelude, Bytes, Bytes),
        deliver: &mut dyn Deliver,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
    ) -> Result<(), ProtocolError> {
        if self.check_number(n, stats)? {
            deliver.message(in_message(lane, n, parts()));
            self.delivered(lane, n, size, ack, stats);
        }
        Ok(())
    }

    /// Checks the number `n` of a complete message: true if it is the next
    /// one (deliver it, then call [`delivered`](Self::delivered)), false if
    /// it was delivered before (dropped and counted: exactly once); a gap
    /// in the numbers is a protocol error.
    fn check_number(&self, n: u64, stats: &mut SessionStats) -> Result<bool, ProtocolError> {
        if n <= self.last_received {
            stats.duplicates += 1;
            crate::base::coverage::hit(crate::base::coverage::Point::ReceiveDuplicate);
            return Ok(false);
        }
        if n != self.last_received + 1 {
            return Err(ProtocolError::NumberGap {
                last: self.last_received,
                got: n,
            });
        }
        Ok(true)
    }

    /// Message `n` of `lane` (`size` wire bytes) was handed over: the ack
    /// advances only now, after the handler returned.
    fn delivered(
        &mut self,
        lane: u8,
        n: u64,
        size: u64,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
    ) {
        self.last_received = n;
        stats.delivered += 1;
        stats.delivered_by_level[lane as usize - 1] += 1;
        ack.on_delivered(size);
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
