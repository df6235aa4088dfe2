//! The suspendable marshaler: writes one message into frames, a frame at a
//! time, as output buffer space allows, and resumes where it stopped.
//!
//! A message's wire bytes are its prelude, header and body parts in sequence.
//! The marshaler keeps a cursor into them, so a 1 GiB body is copied into the
//! ring a frame at a time and never needs a 1 GiB transport buffer; the body
//! parts stay shared `Bytes` (no copy is made except into the ring).

use bytes::Bytes;

use crate::byte_buffer::ByteBuffer;
use crate::frame::{FrameHeader, FrameKind, FLAG_FIRST, FLAG_LAST, HEADER_LEN};
use crate::message::{OutMessage, PRELUDE_LEN};

/// Below this many free payload bytes a continuation frame is not started:
/// tiny frames waste header bytes, and the buffer drains soon anyway.
pub const MIN_FRAGMENT: usize = 256;

/// A message being marshaled, with its place.
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

    /// The frame length this message would write next into `free` bytes, or
    /// `None` if the space is too small to be worth a frame.
    pub fn next_frame_len(&self, free: usize, max_payload: usize) -> Option<usize> {
        let remaining = (self.total - self.offset) as usize;
        let room = free.checked_sub(HEADER_LEN)?.min(max_payload);
        let need = if self.offset == 0 {
            // The first fragment carries the whole prelude (the receiver sizes
            // the message from it) — or the whole message if smaller.
            remaining.min(PRELUDE_LEN.max(MIN_FRAGMENT))
        } else {
            remaining.min(MIN_FRAGMENT)
        };
        (room >= need).then(|| HEADER_LEN + remaining.min(room))
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
        let frame_len = self.next_frame_len(out.free(), max_payload)?;
        let payload = frame_len - HEADER_LEN;
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
        let mut left = payload;
        while left > 0 {
            let (take, seg_len) = {
                let seg = self.segment(self.seg).expect("cursor within the message");
                let take = (seg.len() - self.pos).min(left);
                out.push(&seg[self.pos..self.pos + take]);
                (take, seg.len())
            };
            self.pos += take;
            left -= take;
            if self.pos == seg_len {
                self.seg += 1;
                self.pos = 0;
            }
        }
        // Skip empty segments so the cursor always points at a byte to send.
        while self.segment(self.seg).is_some_and(|s| s.is_empty()) {
            self.seg += 1;
        }
        self.offset += payload as u64;
        Some(Written { frame_len, done })
    }

    /// Rewinds to the first byte (the channel was lost mid-message: it will
    /// restart from its first fragment on the next channel).
    pub fn rewind(&mut self) {
        self.offset = 0;
        self.seg = 0;
        self.pos = 0;
    }
}
