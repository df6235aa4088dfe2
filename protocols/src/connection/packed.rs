//! Packed frames: several small whole messages of one lane in one frame.
//!
//! A 64-byte message sent alone costs a 32-byte frame header and a 28-byte
//! prelude, and a frame header to encode, decode and schedule of its own.
//! A `PACKED` frame (kind 11, `docs/protocol.md` §2.5) carries any number
//! of whole messages of its lane, each behind a compact *entry head*:
//!
//! ```text
//!  0      kind        u8   0 one-way, 1 request, 2 reply
//!  1..5   type_id     u32
//!  5..7   header_len  u16
//!  7..9   body_len    u16
//!  9..17  corr        u64  only when kind is not one-way
//! ```
//!
//! followed by the header and the body. The frame header's `msg_number`
//! is the number of the first message; the others follow it one by one, so
//! numbering, acknowledgement, resend and duplicate detection stay per
//! message. Packing never waits for more messages (there is no Nagle
//! delay): the sender packs what is queued when it writes.

use bytes::{Bytes, BytesMut};

use crate::connection::error::ProtocolError;
use crate::connection::reassembly::{copy_at, extract_bytes};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::message::{MessageKind, OutMessage, Prelude};

/// Length of an entry head for a one-way message.
pub const ENTRY_HEAD_LEN: usize = 9;
/// Length of an entry head for any kind but one-way (with its `corr`).
pub const ENTRY_HEAD_CORR_LEN: usize = 17;

/// Messages whose packed entry is at most this long are packed; larger
/// ones go alone in `DATA` frames, where 60 bytes of framing no longer
/// matter (under 1.5% of the message).
pub const PACK_MAX_ENTRY: usize = 4096;

/// The length of `msg` as a packed entry, or `None` if it is not packed
/// (its header or body is too long for the entry head's 16-bit lengths,
/// or the entry is above [`PACK_MAX_ENTRY`]).
#[inline]
pub fn entry_len(msg: &OutMessage) -> Option<usize> {
    let head = head_len(msg.kind);
    let len = head + msg.header.len() + msg.body_len() as usize;
    (len <= PACK_MAX_ENTRY).then_some(len)
}

fn head_len(kind: MessageKind) -> usize {
    match kind {
        MessageKind::OneWay => ENTRY_HEAD_LEN,
        _ => ENTRY_HEAD_CORR_LEN,
    }
}

/// Writes `msg` as a packed entry into `out` (which has room for
/// [`entry_len`] bytes).
pub fn write_entry(msg: &OutMessage, out: &mut ByteBuffer) {
    let mut head = [0u8; ENTRY_HEAD_CORR_LEN];
    head[0] = msg.kind as u8;
    head[1..5].copy_from_slice(&msg.type_id.to_le_bytes());
    head[5..7].copy_from_slice(&(msg.header.len() as u16).to_le_bytes());
    head[7..9].copy_from_slice(&(msg.body_len() as u16).to_le_bytes());
    head[9..17].copy_from_slice(&msg.corr.to_le_bytes());
    out.push(&head[..head_len(msg.kind)]);
    out.push(&msg.header);
    for part in &msg.body {
        out.push(part);
    }
}

/// One message decoded from a packed frame's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The message's prelude, as it would have been sent alone (its
    /// `total_len` is the message size the limits and acks count).
    pub prelude: Prelude,
    /// The typed header.
    pub header: Bytes,
    /// The body.
    pub body: Bytes,
}

/// Decodes a packed frame's payload (split in the ring's two slices `a`
/// and `b`) entry by entry. Small headers and bodies are copied into
/// `arena` (see [`crate::connection::reassembly::ARENA_CHUNK`]). Every error closes the
/// channel: the payload must be whole entries, at least one, each a message
/// of at most `max_message` bytes.
///
/// # Example
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use sitenet_protocols::connection::packed::{entry_len, write_entry, Entries, ENTRY_HEAD_LEN};
/// use sitenet_protocols::{ByteBuffer, OutMessage, Priority, ProtocolError};
///
/// // Three small one-way messages of lane 2 packed into one frame's payload.
/// let mut payload = ByteBuffer::new(1024);
/// for i in 1..=3u8 {
///     let body = Bytes::from(vec![i; 10]);
///     let msg = OutMessage::new(Priority::Low, 7, Bytes::from("h"), vec![body]);
///     assert_eq!(entry_len(&msg), Some(ENTRY_HEAD_LEN + 1 + 10));
///     write_entry(&msg, &mut payload);
/// }
///
/// let mut entries = Entries::new(Priority::Low.lane(), payload.chunks(), 1 << 20);
/// let mut arena = BytesMut::new(); // small pieces share its chunks
/// let mut bodies = Vec::new();
/// while let Some(entry) = entries.next_entry(&mut arena) {
///     let entry = entry?;
///     assert_eq!((entry.prelude.type_id, &entry.header[..]), (7, &b"h"[..]));
///     bodies.push(entry.body);
/// }
/// assert_eq!(bodies, [vec![1u8; 10], vec![2u8; 10], vec![3u8; 10]]);
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug)]
pub struct Entries<'a> {
    a: &'a [u8],
    b: &'a [u8],
    at: usize,
    lane: u8,
    max_message: u64,
    /// Set after the first error or the end: the iterator is fused.
    done: bool,
}

impl<'a> Entries<'a> {
    /// Starts decoding the payload `a` + `b` of a packed frame on `lane`.
    pub fn new(lane: u8, (a, b): (&'a [u8], &'a [u8]), max_message: u64) -> Self {
        Self {
            a,
            b,
            at: 0,
            lane,
            max_message,
            done: false,
        }
    }

    fn len(&self) -> usize {
        self.a.len() + self.b.len()
    }

    /// Decodes the next entry's head and checks its lengths; returns the
    /// prelude and where its header starts.
    fn next_head(&self) -> Result<(Prelude, usize), ProtocolError> {
        let left = self.len() - self.at;
        let malformed = |reason: &'static str| ProtocolError::Malformed {
            what: "packed entry",
            reason: reason.into(),
        };
        if left < ENTRY_HEAD_LEN {
            return Err(malformed("payload ends inside an entry head"));
        }
        // The longest head there can be, or what is left of the payload.
        let mut h = [0u8; ENTRY_HEAD_CORR_LEN];
        let have = left.min(ENTRY_HEAD_CORR_LEN);
        copy_at(self.a, self.b, self.at, &mut h[..have]);
        let kind = MessageKind::from_u8(h[0]).ok_or_else(|| malformed("unknown message kind"))?;
        let head = head_len(kind);
        if have < head {
            return Err(malformed("payload ends inside an entry head"));
        }
        let prelude = Prelude {
            type_id: u32::from_le_bytes([h[1], h[2], h[3], h[4]]),
            kind,
            header_len: u16::from_le_bytes([h[5], h[6]]) as u32,
            body_len: u16::from_le_bytes([h[7], h[8]]) as u64,
            corr: match kind {
                MessageKind::OneWay => 0,
                _ => u64::from_le_bytes(h[9..17].try_into().expect("8 bytes")),
            },
        };
        let size = prelude.total_len();
        if size > self.max_message {
            return Err(ProtocolError::MessageTooLarge {
                size,
                max: self.max_message,
            });
        }
        let content = prelude.header_len as u64 + prelude.body_len;
        if content > (left - head) as u64 {
            return Err(ProtocolError::MessageLength {
                lane: self.lane,
                got: (left - head) as u64,
                announced: content,
            });
        }
        Ok((prelude, self.at + head))
    }

    /// Steps over the next message without copying it (one delivered
    /// before a paused turn resumed the frame); `None` at the end.
    pub fn skip_entry(&mut self) -> Option<Result<(), ProtocolError>> {
        if self.done || self.at == self.len() {
            return None;
        }
        match self.next_head() {
            Ok((prelude, at)) => {
                self.at = at + prelude.header_len as usize + prelude.body_len as usize;
                Some(Ok(()))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// True once every message of the payload was taken (or an error
    /// ended it).
    pub fn at_end(&self) -> bool {
        self.done || (self.at == self.len() && self.at > 0)
    }

    /// The next message, copied out of the payload; `None` at the end.
    pub fn next_entry(&mut self, arena: &mut BytesMut) -> Option<Result<Entry, ProtocolError>> {
        if self.done {
            return None;
        }
        if self.at == self.len() {
            self.done = true;
            return (self.at == 0).then(|| {
                Err(ProtocolError::Malformed {
                    what: "packed frame",
                    reason: "no message in it".into(),
                })
            });
        }
        match self.next_head() {
            Ok((prelude, at)) => {
                let hl = prelude.header_len as usize;
                let bl = prelude.body_len as usize;
                let header = extract_bytes(self.a, self.b, at, hl, arena);
                let body = extract_bytes(self.a, self.b, at + hl, bl, arena);
                self.at = at + hl + bl;
                Some(Ok(Entry {
                    prelude,
                    header,
                    body,
                }))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::priority::Priority;
    use crate::wire::message::Body;
    use proptest::prelude::*;

    fn msg(kind: MessageKind, header: &[u8], body: &[u8]) -> OutMessage {
        let mut b = Body::new();
        if !body.is_empty() {
            b.push(Bytes::copy_from_slice(body));
        }
        OutMessage {
            priority: Priority::Medium,
            type_id: 0xABCD_0102,
            kind,
            corr: if kind == MessageKind::OneWay { 0 } else { 77 },
            header: Bytes::copy_from_slice(header),
            body: b,
            tracked: false,
        }
    }

    fn decode_all(ring: &ByteBuffer, max: u64) -> Vec<Result<Entry, ProtocolError>> {
        let mut arena = BytesMut::new();
        let mut it = Entries::new(3, ring.slices(0, ring.len()), max);
        std::iter::from_fn(|| it.next_entry(&mut arena)).collect()
    }

    #[test]
    fn one_way_entry_is_nine_bytes_plus_content() {
        let m = msg(MessageKind::OneWay, b"hh", b"body");
        assert_eq!(entry_len(&m), Some(9 + 2 + 4));
        let r = msg(MessageKind::Reply, b"hh", b"body");
        assert_eq!(entry_len(&r), Some(17 + 2 + 4));
        let mut ring = ByteBuffer::new(64);
        write_entry(&m, &mut ring);
        let mut bytes = vec![0u8; ring.len()];
        ring.peek(0, &mut bytes);
        assert_eq!(
            bytes,
            [0, 0x02, 0x01, 0xCD, 0xAB, 2, 0, 4, 0, b'h', b'h', b'b', b'o', b'd', b'y']
        );
    }

    #[test]
    fn large_messages_are_not_packed() {
        let m = msg(MessageKind::OneWay, b"", &vec![0; PACK_MAX_ENTRY]);
        assert_eq!(entry_len(&m), None);
        let m = msg(MessageKind::OneWay, b"", &vec![0; PACK_MAX_ENTRY - 9]);
        assert_eq!(entry_len(&m), Some(PACK_MAX_ENTRY));
    }

    #[test]
    fn an_empty_payload_is_malformed() {
        let ring = ByteBuffer::new(16);
        let out = decode_all(&ring, 1 << 20);
        assert!(matches!(
            out.as_slice(),
            [Err(ProtocolError::Malformed {
                what: "packed frame",
                ..
            })]
        ));
    }

    #[test]
    fn truncated_entries_and_bad_kinds_are_errors_not_panics() {
        let m = msg(MessageKind::Request, b"header", b"body");
        let mut ring = ByteBuffer::new(256);
        write_entry(&m, &mut ring);
        let full = ring.len();
        for cut in 1..full {
            let mut r = ByteBuffer::new(256);
            let mut bytes = vec![0u8; full];
            ring.peek(0, &mut bytes);
            r.push(&bytes[..cut]);
            let out = decode_all(&r, 1 << 20);
            assert_eq!(out.len(), 1, "cut at {cut}");
            assert!(out[0].is_err(), "cut at {cut}: {:?}", out[0]);
        }
        let mut bytes = vec![0u8; full];
        ring.peek(0, &mut bytes);
        bytes[0] = 5;
        let mut r = ByteBuffer::new(256);
        r.push(&bytes);
        assert!(matches!(
            decode_all(&r, 1 << 20).as_slice(),
            [Err(ProtocolError::Malformed { .. })]
        ));
    }

    #[test]
    fn an_entry_above_the_maximum_message_is_refused() {
        let m = msg(MessageKind::OneWay, b"h", &[0; 100]);
        let mut ring = ByteBuffer::new(256);
        write_entry(&m, &mut ring);
        let out = decode_all(&ring, 100);
        assert!(matches!(
            out.as_slice(),
            [Err(ProtocolError::MessageTooLarge {
                size: 129,
                max: 100
            })]
        ));
    }

    fn arb_msg() -> impl Strategy<Value = OutMessage> {
        (
            0u8..3,
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(any::<u8>(), 0..700),
        )
            .prop_map(|(k, h, b)| {
                let kind = [
                    MessageKind::OneWay,
                    MessageKind::Request,
                    MessageKind::Reply,
                ][k as usize];
                msg(kind, &h, &b)
            })
    }

    proptest! {
        /// Whatever the messages and wherever the ring wraps, the entries
        /// decode to the messages that were written, in order.
        #[test]
        fn entries_round_trip_across_the_ring_wrap(
            msgs in proptest::collection::vec(arb_msg(), 1..12),
            skew in 0usize..10 * 1024 - 1,
        ) {
            // One byte stays in front so the ring's head stays at `skew`
            // and the entries wrap around its end.
            let mut ring = ByteBuffer::new(10 * 1024);
            ring.push(&vec![0u8; skew + 1]);
            ring.consume(skew);
            for m in &msgs {
                write_entry(m, &mut ring);
            }
            let mut arena = BytesMut::new();
            let mut it = Entries::new(3, ring.slices(1, ring.len() - 1), 1 << 20);
            let out: Vec<_> = std::iter::from_fn(|| it.next_entry(&mut arena)).collect();
            prop_assert_eq!(out.len(), msgs.len());
            for (m, e) in msgs.iter().zip(out) {
                let e = e.expect("decodes");
                prop_assert_eq!(e.prelude, m.prelude());
                prop_assert_eq!(&e.header, &m.header);
                let body: Vec<u8> = m.body.iter().flat_map(|p| p.iter().copied()).collect();
                prop_assert_eq!(&e.body[..], &body[..]);
            }
        }
    }
}
