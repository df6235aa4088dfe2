//! The suspendable marshaler: writes one message into frames, a frame at a
//! time, as output buffer space allows, and resumes where it stopped.
//!
//! A message's wire bytes are its prelude, header and body parts in sequence.
//! The marshaler keeps a cursor into them, so a 1 GiB body is copied into the
//! ring a frame at a time and never needs a 1 GiB transport buffer; the body
//! parts stay shared `Bytes`. On an output buffer that takes shared pieces
//! (see [`ByteBuffer`]), body parts of at least [`SHARE_MIN`] bytes are not
//! copied at all: the frame's header and small parts go into the ring and
//! the large parts are queued by reference, for one vectored write.

use bytes::Bytes;

use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, FLAG_FIRST, FLAG_LAST, HEADER_LEN};
use crate::wire::message::{OutMessage, PRELUDE_LEN};

/// Below this many free payload bytes a continuation frame is not started:
/// tiny frames waste header bytes, and the buffer drains soon anyway.
pub const MIN_FRAGMENT: usize = 256;

/// Body parts with at least this many bytes left go out by reference when
/// the output buffer takes shared pieces; smaller ones are cheaper to copy
/// than to give a slot of their own in a vectored write.
pub const SHARE_MIN: usize = 1024;

/// Where a frame's payload ends in the message: bytes, and the cursor after.
#[derive(Debug, Clone, Copy)]
struct Span {
    len: usize,
    seg: usize,
    pos: usize,
}

/// A message being marshaled, with its place.
///
/// # Example
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::wire::marshal::InProgress;
/// use sitenet_protocols::{ByteBuffer, FrameHeader, OutMessage, Priority, HEADER_LEN};
///
/// let body = Bytes::from(vec![0u8; 2500]);
/// let msg = OutMessage::new(Priority::Medium, 7, Bytes::from("hd"), vec![body]);
/// // A first transmission (no number yet): numbered when its last frame is written.
/// let mut m = InProgress::new(msg, None);
/// assert_eq!(m.total(), 28 + 2 + 2500); // prelude, header, body
/// let mut out = ByteBuffer::new(64 * 1024);
/// let mut frames = 0;
/// loop {
///     // Payloads of at most 1000 bytes, piggy-backing ack 0; the message gets number 1.
///     let written = m.write_frame(&mut out, 1000, 0, || 1).expect("room in `out`");
///     frames += 1;
///     if written.done {
///         break;
///     }
/// }
/// assert_eq!(frames, 3); // payloads of 1000, 1000 and 530 bytes
/// assert_eq!(out.len(), 3 * HEADER_LEN + 2530);
///
/// let mut first = [0u8; HEADER_LEN];
/// assert!(out.peek(0, &mut first));
/// let h = FrameHeader::decode(&first, 1000)?;
/// assert_eq!((h.lane, h.payload_len, h.msg_number), (3, 1000, 0));
/// assert!(h.is_first() && !h.is_last());
/// # Ok::<(), sitenet_protocols::FrameError>(())
/// ```
#[derive(Debug)]
pub struct InProgress {
    /// The message.
    pub msg: OutMessage,
    /// The number it was sent under before, for a resend; `None` for a first
    /// transmission (numbered when its last fragment is written).
    pub number: Option<u64>,
    prelude: [u8; PRELUDE_LEN],
    total: u64,
    /// Bytes of the wire form already written.
    offset: u64,
    /// Segment index (0 prelude, 1 header, 2.. body parts) and position in it.
    seg: usize,
    pos: usize,
}

/// What one call to [`InProgress::write_frame`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes written into the buffer, header included.
    pub frame_len: usize,
    /// True if this frame was the message's last.
    pub done: bool,
}

impl InProgress {
    /// Starts marshaling `msg` (a resend passes its original number).
    #[inline]
    pub fn new(msg: OutMessage, number: Option<u64>) -> Self {
        let prelude = msg.prelude().encode();
        let total = msg.wire_len();
        Self {
            msg,
            number,
            prelude,
            total,
            offset: 0,
            seg: 0,
            pos: 0,
        }
    }

    /// True if no byte of it has been written yet.
    pub fn is_fresh(&self) -> bool {
        self.offset == 0
    }

    /// Total wire length.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn segment(&self, i: usize) -> Option<&[u8]> {
        match i {
            0 => Some(&self.prelude),
            1 => Some(&self.msg.header),
            i => self.msg.body.get(i - 2).map(Bytes::as_ref),
        }
    }

    /// Walks the payload of a frame from the cursor: at most `limit`
    /// bytes, copying at most `ring` and sharing at most `shared` of them,
    /// and calls `emit(segment, position, length, by_reference)` for each
    /// piece. Whether a piece goes by reference depends only on the
    /// segment and the shared room, never on `limit`, so a second walk
    /// limited to the first walk's length takes the same pieces.
    fn walk(
        &self,
        mut ring: usize,
        mut shared: usize,
        limit: usize,
        mut emit: impl FnMut(usize, usize, usize, bool),
    ) -> Span {
        let (mut seg, mut pos, mut len) = (self.seg, self.pos, 0);
        while len < limit {
            let Some(s) = self.segment(seg) else {
                break;
            };
            let rest = s.len() - pos;
            if rest == 0 {
                seg += 1;
                pos = 0;
                continue;
            }
            let in_frame = rest.min(limit - len);
            let by_ref = seg >= 2 && rest >= SHARE_MIN && shared >= SHARE_MIN;
            let room = if by_ref { &mut shared } else { &mut ring };
            let take = in_frame.min(*room);
            if take == 0 {
                break;
            }
            *room -= take;
            emit(seg, pos, take, by_ref);
            len += take;
            pos += take;
            if take < in_frame {
                break;
            }
        }
        // Skip finished and empty segments so the cursor points at a byte
        // to send.
        while self.segment(seg).is_some_and(|s| s.len() == pos) {
            seg += 1;
            pos = 0;
        }
        Span { len, seg, pos }
    }

    /// The payload the next frame would carry in `out`, or `None` if the
    /// room is too small to be worth a frame.
    fn next_payload(&self, out: &ByteBuffer, max_payload: usize) -> Option<usize> {
        let remaining = (self.total - self.offset) as usize;
        let ring = out.free().checked_sub(HEADER_LEN)?;
        let span = self.walk(ring, out.shared_room(), max_payload, |_, _, _, _| {});
        let need = if self.offset == 0 {
            // The first fragment carries the whole prelude (the receiver sizes
            // the message from it) — or the whole message if smaller.
            remaining.min(PRELUDE_LEN.max(MIN_FRAGMENT))
        } else {
            remaining.min(MIN_FRAGMENT)
        };
        (span.len >= need.max(1)).then_some(span.len)
    }

    /// Writes the next frame into `out`. `ack` is piggy-backed; `assign`
    /// supplies the message number if this frame completes a message sent for
    /// the first time. Returns `None` if `out` has too little room.
    pub fn write_frame(
        &mut self,
        out: &mut ByteBuffer,
        max_payload: usize,
        ack: u64,
        assign: impl FnOnce() -> u64,
    ) -> Option<Written> {
        let payload = self.next_payload(out, max_payload)?;
        let done = self.offset + payload as u64 == self.total;
        let mut flags = 0;
        if self.offset == 0 {
            flags |= FLAG_FIRST;
        }
        let mut msg_number = 0;
        if done {
            flags |= FLAG_LAST;
            msg_number = *self.number.get_or_insert_with(assign);
        }
        let header = FrameHeader {
            kind: FrameKind::Data,
            lane: self.msg.priority.lane(),
            flags,
            payload_len: payload as u32,
            ack,
            msg_number,
            frag_offset: self.offset,
        };
        let mut hb = [0u8; HEADER_LEN];
        header.encode(&mut hb);
        out.push(&hb);
        let (ring, shared) = (out.free(), out.shared_room());
        let span = self.walk(ring, shared, payload, |seg, pos, len, by_ref| {
            if by_ref {
                out.push_shared(self.msg.body[seg - 2].slice(pos..pos + len));
            } else {
                let s = self.segment(seg).expect("walked");
                out.push(&s[pos..pos + len]);
            }
        });
        debug_assert_eq!(span.len, payload, "the second walk takes the same pieces");
        self.seg = span.seg;
        self.pos = span.pos;
        self.offset += payload as u64;
        Some(Written {
            frame_len: HEADER_LEN + payload,
            done,
        })
    }

    /// Whether some of the message went out already (a
    /// [`rewind`](Self::rewind) then restarts it).
    pub fn started(&self) -> bool {
        self.offset > 0
    }

    /// Rewinds to the first byte (the channel was lost mid-message: it will
    /// restart from its first fragment on the next channel).
    pub fn rewind(&mut self) {
        self.offset = 0;
        self.seg = 0;
        self.pos = 0;
    }
}
