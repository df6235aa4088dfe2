//! The unmarshaler: reassembles a message from its frames within the size
//! limits and the node's reassembly budget.
//!
//! The first fragment carries the prelude, so the receiver knows the whole
//! message's size before it allocates anything and checks it against the
//! maximum message size. It does **not** reserve that size: a peer holds
//! budget only for bytes it has actually sent. Each fragment's bytes are
//! taken from the session's [`BudgetShare`] as the fragment arrives, and the
//! header and body grow with them (geometrically, never beyond the announced
//! size; past [`LARGE_FROM`] in one step to [`LARGE_STEP`], whose pages
//! become resident only as bytes arrive), so four first fragments
//! announcing the maximum message cost four fragments, not 1 GiB.
//!
//! Header and body are separate allocations, each handed over as a `Bytes`
//! built from its `Vec` (no shared control block). A message that fits in
//! one frame never needs this type: the session copies it out of the ring at
//! once (see [`split_whole`]), and it is never "partly received", so it takes
//! nothing from the budget. The budget and its sharing rule are in
//! [`budget`].
//!
use bytes::{Bytes, BytesMut};

use crate::connection::error::ProtocolError;
use crate::wire::message::{Prelude, PRELUDE_LEN};

pub mod budget;
pub use budget::{Blocked, BudgetShare, ReassemblyBudget};

/// A message partly received on one lane.
///
/// # Example
///
/// ```
/// use sitenet_protocols::connection::reassembly::Reassembly;
/// use sitenet_protocols::{MessageKind, Prelude, ProtocolError};
///
/// // A message's wire bytes: prelude, typed header, body.
/// let prelude =
///     Prelude { type_id: 7, kind: MessageKind::OneWay, header_len: 2, body_len: 600, corr: 0 };
/// let wire = [&prelude.encode()[..], &b"hd"[..], &[1u8; 600][..]].concat();
/// // Two fragments on lane 3: the first announces the size, which is checked
/// // against the largest message accepted before anything is allocated.
/// let (first, rest) = wire.split_at(300);
/// let too_large = Reassembly::start(3, first, &[], 100);
/// assert!(matches!(too_large, Err(ProtocolError::MessageTooLarge { size: 630, max: 100 })));
///
/// let mut r = Reassembly::start(3, first, &[], 1 << 20)?;
/// assert!(r.header_complete() && !r.is_complete());
/// r.extend(3, rest)?;
/// assert!(r.is_complete());
/// assert_eq!(r.reserved(), 602); // header and body bytes: the budget it took
/// let (p, header, body) = r.finish();
/// assert_eq!((p.type_id, &header[..], body.len()), (7, &b"hd"[..], 600));
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug)]
pub struct Reassembly {
    prelude: Prelude,
    header: Vec<u8>,
    body: Vec<u8>,
    /// Wire bytes received so far (prelude included).
    received: u64,
    /// Budget bytes taken for it (its header and body bytes so far).
    reserved: u64,
    /// The last bytes of `body`, opened for writing in place and not yet
    /// written (see [`Reassembly::open_in_place`]).
    in_place: usize,
}

impl Reassembly {
    /// Starts a message from its first fragment's payload (split in the
    /// ring's two slices `a` and `b`), once the caller has taken budget for
    /// its content bytes ([`first_content_len`]).
    pub fn start(lane: u8, a: &[u8], b: &[u8], max_message: u64) -> Result<Self, ProtocolError> {
        let prelude = first_prelude(lane, a, b, max_message)?;
        let mut r = Self {
            prelude,
            header: Vec::new(),
            body: Vec::new(),
            received: PRELUDE_LEN as u64,
            reserved: 0,
            in_place: 0,
        };
        let k = a.len().min(PRELUDE_LEN);
        r.extend(lane, &a[k..])?;
        r.extend(lane, &b[PRELUDE_LEN - k..])?;
        Ok(r)
    }

    /// The message's prelude.
    pub fn prelude(&self) -> &Prelude {
        &self.prelude
    }

    /// Wire bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Budget bytes taken for this message so far.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Checks that `len` more payload bytes fit the announced size.
    pub fn check_room(&self, lane: u8, len: u64) -> Result<(), ProtocolError> {
        let total = self.prelude.total_len();
        if self.received + len > total {
            return Err(ProtocolError::MessageLength {
                lane,
                got: self.received + len,
                announced: total,
            });
        }
        Ok(())
    }

    /// Appends a fragment's payload (whose budget the caller took).
    pub fn extend(&mut self, lane: u8, payload: &[u8]) -> Result<(), ProtocolError> {
        debug_assert_eq!(self.in_place, 0, "bytes opened in place come first");
        self.check_room(lane, payload.len() as u64)?;
        let to_header = (self.prelude.header_len as usize - self.header.len()).min(payload.len());
        grow(&mut self.header, to_header, self.prelude.header_len as u64);
        self.header.extend_from_slice(&payload[..to_header]);
        let rest = &payload[to_header..];
        grow(&mut self.body, rest.len(), self.prelude.body_len);
        self.body.extend_from_slice(rest);
        self.received += payload.len() as u64;
        self.reserved += payload.len() as u64;
        Ok(())
    }

    /// True if the whole typed header has arrived (the rest is body).
    pub fn header_complete(&self) -> bool {
        self.header.len() == self.prelude.header_len as usize
    }

    /// Makes room for the next `n` body bytes to be written in place — a
    /// fragment read from the socket straight into the message, with no
    /// copy through the ring — and counts them as reserved (the caller took
    /// their budget). They count as received once [`commit`](Self::commit)ted;
    /// [`in_place`](Self::in_place) is where they go.
    pub fn open_in_place(&mut self, lane: u8, n: usize) -> Result<(), ProtocolError> {
        debug_assert!(self.header_complete() && self.in_place == 0);
        self.check_room(lane, n as u64)?;
        grow(&mut self.body, n, self.prelude.body_len);
        self.body.resize(self.body.len() + n, 0);
        self.in_place = n;
        self.reserved += n as u64;
        Ok(())
    }

    /// The room opened by [`open_in_place`](Self::open_in_place) not yet
    /// filled.
    pub fn in_place(&mut self) -> &mut [u8] {
        let end = self.body.len();
        &mut self.body[end - self.in_place..]
    }

    /// `n` bytes were written at the start of [`in_place`](Self::in_place).
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.in_place, "commit past the room opened");
        self.in_place -= n;
        self.received += n as u64;
    }

    /// Bytes opened in place and not yet written.
    pub fn in_place_left(&self) -> usize {
        self.in_place
    }

    /// True once every announced byte has arrived.
    pub fn is_complete(&self) -> bool {
        self.received == self.prelude.total_len()
    }

    /// Splits the finished message into its header and body. The caller
    /// gives its budget back: the bytes now belong to the handler.
    pub fn finish(self) -> (Prelude, Bytes, Bytes) {
        (self.prelude, self.header.into(), self.body.into())
    }
}

/// A message buffer that outgrows this many bytes grows straight to
/// [`LARGE_STEP`] (or its announced size, if smaller).
pub const LARGE_FROM: usize = 256 << 10;

/// See [`LARGE_FROM`]. The allocator maps a buffer this large afresh (32 MiB
/// is glibc's largest mmap threshold), so its later growth moves pages
/// instead of copying bytes; doubling from 8 to 16 MiB in the heap copied
/// 8 MiB on the I/O thread (4 ms, measured), which an urgent message behind
/// a 64 MiB one had to wait for. Its pages are touched — made resident —
/// only as bytes arrive, so memory still follows the bytes received.
pub const LARGE_STEP: usize = 32 << 20;

/// Makes room for `n` more bytes in `v`, growing geometrically (from
/// [`LARGE_FROM`] on in one step to [`LARGE_STEP`]) but never beyond
/// `total` (the announced size): memory follows the bytes received.
fn grow(v: &mut Vec<u8>, n: usize, total: u64) {
    let need = v.len() + n;
    if need <= v.capacity() {
        return;
    }
    let mut target = (v.capacity() * 2).max(need);
    if target > LARGE_FROM {
        target = target.max(LARGE_STEP);
    }
    let target = target.min(total as usize).max(need);
    v.reserve_exact(target - v.len());
}

/// The content bytes (header and body) a first fragment's payload of
/// `len` bytes carries, after the prelude.
pub fn first_content_len(len: usize) -> u64 {
    len.saturating_sub(PRELUDE_LEN) as u64
}

/// Small messages received whole are copied into chunks of this size,
/// shared by their `Bytes` (no allocation per message); a received message
/// kept alive keeps at most this much memory alive with it.
pub const ARENA_CHUNK: usize = 4096;

/// Header and body pieces up to this size go to the arena; larger ones get
/// an allocation of their own.
const ARENA_PIECE: usize = 512;

/// Copies `len` bytes at `at` of `a`+`b` out as `Bytes`: small pieces into
/// `arena` (a new [`ARENA_CHUNK`] when it is full), others on their own.
pub(crate) fn extract_bytes(
    a: &[u8],
    b: &[u8],
    at: usize,
    len: usize,
    arena: &mut BytesMut,
) -> Bytes {
    if len == 0 {
        return Bytes::new();
    }
    if len > ARENA_PIECE {
        return extract(a, b, at, len).into();
    }
    if arena.capacity() - arena.len() < len {
        *arena = BytesMut::with_capacity(ARENA_CHUNK);
    }
    let (x, y) = sub_slices(a, b, at, len);
    arena.extend_from_slice(x);
    arena.extend_from_slice(y);
    arena.split().freeze()
}

/// Splits a message received whole in one frame (its payload split in the
/// ring's two slices `a` and `b`) into its prelude, header and body; small
/// pieces are copied into `arena` (see [`ARENA_CHUNK`]). Fails as the
/// fragment path would: a payload shorter than the prelude, a malformed
/// prelude, a message above `max_message`, or a length other than the
/// announced one.
pub fn split_whole(
    lane: u8,
    a: &[u8],
    b: &[u8],
    max_message: u64,
    arena: &mut BytesMut,
) -> Result<(Prelude, Bytes, Bytes), ProtocolError> {
    let len = a.len() + b.len();
    let prelude = first_prelude(lane, a, b, max_message)?;
    let total = prelude.total_len();
    if total != len as u64 {
        return Err(ProtocolError::MessageLength {
            lane,
            got: len as u64,
            announced: total,
        });
    }
    let header_len = prelude.header_len as usize;
    let header = extract_bytes(a, b, PRELUDE_LEN, header_len, arena);
    let body = extract_bytes(
        a,
        b,
        PRELUDE_LEN + header_len,
        prelude.body_len as usize,
        arena,
    );
    Ok((prelude, header, body))
}

/// Decodes the prelude at the start of a first fragment's payload (split in
/// `a` and `b`) and checks the announced size against `max_message`, before
/// anything is allocated for the message.
pub fn first_prelude(
    lane: u8,
    a: &[u8],
    b: &[u8],
    max_message: u64,
) -> Result<Prelude, ProtocolError> {
    if a.len() + b.len() < PRELUDE_LEN {
        return Err(ProtocolError::FragmentSequence {
            lane,
            reason: "first fragment shorter than the message prelude",
        });
    }
    let mut pb = [0u8; PRELUDE_LEN];
    copy_at(a, b, 0, &mut pb);
    // The error's text is built only on the error path (`ok_or` built it
    // for every message: an allocation per message received).
    let prelude = Prelude::decode(&pb).ok_or_else(|| ProtocolError::Malformed {
        what: "message prelude",
        reason: "unknown message kind or non-zero reserved bytes".into(),
    })?;
    let total = prelude.total_len();
    if total > max_message {
        return Err(ProtocolError::MessageTooLarge {
            size: total,
            max: max_message,
        });
    }
    Ok(prelude)
}

/// The `len` bytes at `at` of the concatenation of `a` and `b` (a payload
/// the ring's wrap split in two), as up to two slices.
#[inline]
pub(crate) fn sub_slices<'a>(
    a: &'a [u8],
    b: &'a [u8],
    at: usize,
    len: usize,
) -> (&'a [u8], &'a [u8]) {
    if at < a.len() {
        let n = (a.len() - at).min(len);
        (&a[at..at + n], &b[..len - n])
    } else {
        let at = at - a.len();
        (&b[at..at + len], &[])
    }
}

/// Copies `dst.len()` bytes at `at` of `a` + `b` into `dst`.
#[inline]
pub(crate) fn copy_at(a: &[u8], b: &[u8], at: usize, dst: &mut [u8]) {
    let (x, y) = sub_slices(a, b, at, dst.len());
    dst[..x.len()].copy_from_slice(x);
    dst[x.len()..].copy_from_slice(y);
}

/// Copies `len` bytes starting at `at` of the concatenation of `a` and `b`
/// into an exactly sized `Vec`.
fn extract(a: &[u8], b: &[u8], at: usize, len: usize) -> Vec<u8> {
    let (x, y) = sub_slices(a, b, at, len);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(x);
    v.extend_from_slice(y);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::message::MessageKind;

    /// Doubling below LARGE_FROM; then one step to LARGE_STEP (never past
    /// the announced size), then doubling again: an 8 MiB message is never
    /// copied from 4 to 8 MiB, a 64 MiB one never from 8 to 16.
    #[test]
    fn buffers_grow_by_doubling_then_in_one_large_step() {
        let caps = |total: usize| {
            let mut v = Vec::new();
            let mut caps = Vec::new();
            while v.len() < total {
                let n = (total - v.len()).min(60_000);
                grow(&mut v, n, total as u64);
                if caps.last() != Some(&v.capacity()) {
                    caps.push(v.capacity());
                }
                v.resize(v.len() + n, 0);
            }
            caps
        };
        let big = caps(64 << 20);
        assert_eq!(&big[..3], &[60_000, 120_000, 240_000]);
        assert_eq!(&big[3..], &[LARGE_STEP, 64 << 20]);
        assert_eq!(&caps(8 << 20)[3..], &[8 << 20]);
        assert_eq!(caps(100_000), vec![60_000, 100_000]);
    }

    fn wire(header: &[u8], body: &[u8]) -> Vec<u8> {
        let p = Prelude {
            type_id: 7,
            kind: MessageKind::Request,
            header_len: header.len() as u32,
            body_len: body.len() as u64,
            corr: 9,
        };
        [&p.encode()[..], header, body].concat()
    }

    #[test]
    fn small_messages_share_an_arena_chunk_and_big_pieces_do_not() {
        let mut arena = BytesMut::new();
        let w1 = wire(b"head", &[1u8; 64]);
        let w2 = wire(b"h2", &[2u8; 100]);
        let (_, h1, b1) = split_whole(1, &w1, &[], 1 << 20, &mut arena).unwrap();
        let (_, h2, b2) = split_whole(1, &w2[..10], &w2[10..], 1 << 20, &mut arena).unwrap();
        assert_eq!((&h1[..], &b1[..]), (&b"head"[..], &[1u8; 64][..]));
        assert_eq!((&h2[..], &b2[..]), (&b"h2"[..], &[2u8; 100][..]));
        // One chunk holds them all, back to back.
        let end = |b: &Bytes| b.as_ptr() as usize + b.len();
        assert_eq!(end(&h1), b1.as_ptr() as usize);
        assert_eq!(end(&b1), h2.as_ptr() as usize);
        // A big body gets its own allocation: it does not pin the chunk.
        let big = wire(b"h", &[3u8; ARENA_PIECE + 1]);
        let (_, _, bb) = split_whole(1, &big, &[], 1 << 20, &mut arena).unwrap();
        assert_ne!(bb.as_ptr() as usize, end(&b2));
        assert_eq!(&bb[..], &[3u8; ARENA_PIECE + 1][..]);
    }

    #[test]
    fn a_whole_message_splits_identically_at_every_ring_wrap() {
        let (header, body) = (
            b"hdr-bytes".as_slice(),
            b"the body, a little longer".as_slice(),
        );
        let w = wire(header, body);
        for cut in 0..=w.len() {
            let (a, b) = w.split_at(cut);
            let (p, h, bd) = split_whole(3, a, b, 1 << 20, &mut BytesMut::new()).unwrap();
            assert_eq!((p.type_id, p.corr), (7, 9), "cut {cut}");
            assert_eq!((&h[..], &bd[..]), (header, body), "cut {cut}");
        }
        // An empty header and body allocate nothing and still split.
        let w = wire(b"", b"");
        let (_, h, bd) = split_whole(3, &w[..5], &w[5..], 1 << 20, &mut BytesMut::new()).unwrap();
        assert!(h.is_empty() && bd.is_empty());
    }

    #[test]
    fn a_whole_message_is_checked_like_fragments() {
        let w = wire(b"h", b"body");
        let err =
            |a: &[u8], b: &[u8], max| split_whole(2, a, b, max, &mut BytesMut::new()).unwrap_err();
        assert!(matches!(
            err(&w[..10], &[], 1 << 20),
            ProtocolError::FragmentSequence { lane: 2, .. }
        ));
        assert!(matches!(
            err(&w[..w.len() - 1], &[], 1 << 20),
            ProtocolError::MessageLength { got, announced, .. } if got + 1 == announced
        ));
        assert!(matches!(
            err(&w, &[0], 1 << 20),
            ProtocolError::MessageLength { got, announced, .. } if got == announced + 1
        ));
        assert!(matches!(
            err(&w, &[], 10),
            ProtocolError::MessageTooLarge { max: 10, .. }
        ));
        let mut bad = w.clone();
        bad[4] = 0xEE;
        assert!(matches!(
            err(&bad, &[], 1 << 20),
            ProtocolError::Malformed { .. }
        ));
    }
}
