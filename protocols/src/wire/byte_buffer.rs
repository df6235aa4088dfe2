//! [`ByteBuffer`]: the fixed-capacity circular buffer of one channel direction.
//!
//! Each channel owns exactly two of these (input and output), each with a
//! capacity fixed when the channel is made, so the memory a channel can use
//! is known in advance and a flooding peer cannot make it grow past it (which
//! is why sitenet does not use `FramedRead`/`FramedWrite`, whose buffers
//! grow without a bound).
//!
//! # Storage grows up to the capacity, never past it
//!
//! The capacity is a bound, not an allocation: a buffer starts with no
//! storage and doubles it when the bytes it holds need more, up to its
//! capacity. A channel that carries only heartbeats and small messages
//! holds a few hundred bytes instead of two full rings, and a bulk channel
//! reaches its capacity after a handful of doublings. While its storage is
//! below its capacity the data never wraps (it is moved to the front
//! instead), so wrapping only happens in a buffer at full size, where it
//! always did. The marshaler
//! writes frames into the output buffer while it has room; the socket drains it.
//! The socket fills the input buffer; the unmarshaler consumes whole frames.
//!
//! # Shared pieces (zero-copy bodies)
//!
//! An output buffer may also carry *shared pieces*: slices of message bodies
//! queued by reference ([`push_shared`](ByteBuffer::push_shared)) between
//! the ring's bytes, instead of being copied into the ring. The marshaler
//! puts frame headers and small parts in the ring and large body parts in
//! shared pieces, and the driver writes both in order with one vectored
//! write ([`io_slices`](ByteBuffer::io_slices)), so a 64 KiB body goes from
//! the application's `Bytes` to the socket without a copy (BMI's list I/O).
//! A shared piece costs no memory of its own (the message holds its body
//! until acknowledged anyway); the bound [`with_shared`](ByteBuffer::with_shared)
//! sets limits only how many bytes wait in front of the next frame the
//! scheduler picks, which is what a high-priority message waits behind.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Storage a buffer takes at least when it first needs some (or its
/// capacity, if smaller): enough for a few control frames.
const MIN_STORAGE: usize = 256;

/// A slice of a message body queued by reference.
#[derive(Debug)]
struct Piece {
    /// Ring bytes written before it since the buffer was made (it goes out
    /// once the ring is consumed up to there).
    at: u64,
    data: Bytes,
}

/// The shared pieces of an output buffer.
#[derive(Debug)]
struct Shared {
    limit: usize,
    pieces: VecDeque<Piece>,
    /// Bytes the pieces hold.
    bytes: usize,
}

/// A fixed-capacity ring of bytes, with shared pieces in between when
/// enabled (see the module documentation).
///
/// Invariant: `len <= cap` and `buf.len() <= cap`; the ring's data occupies
/// `len` bytes starting at `head`, wrapping at the end of the storage only
/// when the storage is the whole capacity (below it, `head + len <=
/// buf.len()`).
///
/// # Example
///
/// ```
/// use sitenet_protocols::ByteBuffer;
///
/// let mut out = ByteBuffer::new(8); // 8 bytes for life
/// out.push(b"abcdef");
/// assert_eq!(out.free(), 2);
/// out.consume(4); // the socket took 4 bytes
/// out.push(b"ghij"); // wraps around the end of the storage
/// let (first, second) = out.chunks();
/// assert_eq!((first, second), (&b"efgh"[..], &b"ij"[..]));
///
/// // An input buffer: read from the socket straight into its free space.
/// let mut input = ByteBuffer::new(16);
/// let spare = input.spare_mut();
/// spare[..5].copy_from_slice(b"hello"); // as `read(spare)` would
/// input.commit(5);
/// let mut word = [0u8; 5];
/// assert!(input.peek(0, &mut word)); // look without consuming
/// assert_eq!(&word, b"hello");
/// ```
pub struct ByteBuffer {
    /// The storage: grows by doubling up to `cap` (module documentation).
    buf: Vec<u8>,
    /// The capacity: the most ring bytes the buffer ever holds.
    cap: usize,
    head: usize,
    len: usize,
    /// Ring bytes ever pushed and ever consumed: where shared pieces sit.
    pushed: u64,
    consumed: u64,
    shared: Option<Box<Shared>>,
    /// A read filled all the room [`spare_mut`](Self::spare_mut) gave
    /// below full size: the next call doubles the storage (the socket
    /// likely holds more), so a busy input ring reaches its capacity in a
    /// few reads and an idle one stays small.
    filled: bool,
}

impl std::fmt::Debug for ByteBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBuffer")
            .field("capacity", &self.cap)
            .field("storage", &self.buf.len())
            .field("len", &self.len)
            .field("shared", &self.shared_len())
            .finish()
    }
}

impl ByteBuffer {
    /// A buffer that holds at most `capacity` bytes for life. It allocates
    /// nothing yet: storage comes as bytes arrive (module documentation).
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a ByteBuffer needs a non-zero capacity");
        Self {
            buf: Vec::new(),
            cap: capacity,
            head: 0,
            len: 0,
            pushed: 0,
            consumed: 0,
            shared: None,
            filled: false,
        }
    }

    /// An output buffer of `capacity` ring bytes that also takes up to
    /// `shared_limit` bytes of shared pieces (module documentation).
    pub fn with_shared(capacity: usize, shared_limit: usize) -> Self {
        let mut b = Self::new(capacity);
        b.shared = (shared_limit > 0).then(|| {
            Box::new(Shared {
                limit: shared_limit,
                pieces: VecDeque::new(),
                bytes: 0,
            })
        });
        b
    }

    /// Total capacity of the ring: the bound on what it holds.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes of storage allocated now (at most the capacity): what an idle
    /// channel really costs.
    pub fn storage(&self) -> usize {
        self.buf.len()
    }

    /// True while the storage is below the capacity: the data does not
    /// wrap then.
    fn growing(&self) -> bool {
        self.buf.len() < self.cap
    }

    /// Makes room for `want` more bytes after the data, contiguous, while
    /// the storage is below the capacity (a no-op at full size, where the
    /// ring wraps instead). The caller keeps `len + want <= cap`.
    fn reserve(&mut self, want: usize) {
        let need = self.len + want;
        if !self.growing() || self.head + need <= self.buf.len() {
            return;
        }
        // Move the data to the front: cheap when little is held, and
        // growing needs it there anyway.
        self.buf.copy_within(self.head..self.head + self.len, 0);
        self.head = 0;
        if need <= self.buf.len() {
            return;
        }
        let size = need
            .next_power_of_two()
            .max(2 * self.buf.len())
            .max(MIN_STORAGE)
            .min(self.cap);
        self.buf.resize(size, 0);
    }

    /// Bytes stored: the ring's and the shared pieces'.
    pub fn len(&self) -> usize {
        self.len + self.shared_len()
    }

    /// True if nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free bytes of the ring.
    pub fn free(&self) -> usize {
        self.cap - self.len
    }

    /// Bytes held in shared pieces.
    pub fn shared_len(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.bytes)
    }

    /// How many more bytes [`push_shared`](Self::push_shared) takes now (0
    /// on a buffer without shared pieces).
    pub fn shared_room(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.limit - s.bytes)
    }

    /// Queues `data` after everything stored, by reference. Panics beyond
    /// [`shared_room`](Self::shared_room): callers size frames to fit.
    pub fn push_shared(&mut self, data: Bytes) {
        let at = self.pushed;
        let s = self.shared.as_mut().expect("a buffer with shared pieces");
        assert!(data.len() <= s.limit - s.bytes, "shared pieces overflow");
        if data.is_empty() {
            return;
        }
        s.bytes += data.len();
        s.pieces.push_back(Piece { at, data });
    }

    /// Wraps a position in `0..2*cap` into the ring (a subtraction, not a
    /// division: this runs several times per small message).
    fn wrap(&self, pos: usize) -> usize {
        let cap = self.buf.len();
        if pos >= cap {
            pos - cap
        } else {
            pos
        }
    }

    fn tail(&self) -> usize {
        if self.growing() {
            self.head + self.len
        } else {
            self.wrap(self.head + self.len)
        }
    }

    /// Appends all of `data` to the ring. Panics if it does not fit: callers
    /// check [`free`](Self::free) first (the marshaler sizes every frame to
    /// fit).
    pub fn push(&mut self, data: &[u8]) {
        assert!(data.len() <= self.free(), "ByteBuffer overflow");
        self.reserve(data.len());
        let cap = self.buf.len();
        let tail = self.tail();
        let first = data.len().min(cap - tail);
        self.buf[tail..tail + first].copy_from_slice(&data[..first]);
        let rest = data.len() - first;
        self.buf[..rest].copy_from_slice(&data[first..]);
        self.len += data.len();
        self.pushed += data.len() as u64;
    }

    /// The largest contiguous free region, to read from a socket into. Call
    /// [`commit`](Self::commit) with the number of bytes written there.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        if self.growing() {
            // Below full size: at least MIN_STORAGE bytes (or what is free),
            // and the storage doubles when they run out or the last read
            // filled them.
            let room = self.buf.len() - self.head - self.len;
            if std::mem::take(&mut self.filled) {
                let want = (2 * self.buf.len()).min(self.free());
                self.reserve(want);
            } else if room < MIN_STORAGE.min(self.free()) {
                let want = self.buf.len().max(MIN_STORAGE).min(self.free());
                self.reserve(want);
            }
            let tail = self.head + self.len;
            return &mut self.buf[tail..];
        }
        let cap = self.buf.len();
        if self.len == cap {
            return &mut [];
        }
        let tail = self.tail();
        // Data not wrapped (or empty): free space runs from the tail to the
        // end of storage. Data wrapped: it runs from the tail up to the head.
        let end = if tail >= self.head { cap } else { self.head };
        &mut self.buf[tail..end]
    }

    /// Marks `n` bytes written into [`spare_mut`](Self::spare_mut) as data.
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.free(), "commit past capacity");
        self.len += n;
        self.pushed += n as u64;
        self.filled = n > 0 && self.growing() && self.head + self.len == self.buf.len();
    }

    /// The ring's data as up to two slices, in order (an input buffer's
    /// bytes, or an output buffer without shared pieces; an output buffer
    /// is written with [`io_slices`](Self::io_slices)).
    pub fn chunks(&self) -> (&[u8], &[u8]) {
        debug_assert_eq!(self.shared_len(), 0, "chunks() misses shared pieces");
        let cap = self.buf.len();
        let first = self.len.min(cap - self.head);
        (
            &self.buf[self.head..self.head + first],
            &self.buf[..self.len - first],
        )
    }

    /// Fills `dst` with the stored bytes in order (ring runs and shared
    /// pieces), at most `max` bytes; returns how many slices it filled. The
    /// driver writes them with one vectored write and then
    /// [`consume`](Self::consume)s what the socket took.
    ///
    /// # Example
    ///
    /// ```
    /// use std::io::IoSlice;
    ///
    /// use bytes::Bytes;
    /// use sitenet_protocols::ByteBuffer;
    ///
    /// // 64 ring bytes, and up to 4 KiB of body slices queued by reference.
    /// let mut out = ByteBuffer::with_shared(64, 4096);
    /// out.push(b"head:");
    /// out.push_shared(Bytes::from_static(b"a large body, not copied"));
    /// out.push(b":tail");
    /// assert_eq!((out.len(), out.shared_len(), out.free()), (34, 24, 54));
    ///
    /// let mut slices = [IoSlice::new(&[]); 4];
    /// let n = out.io_slices(&mut slices, usize::MAX);
    /// assert_eq!(n, 3); // ring bytes, the shared piece, ring bytes
    /// let wire: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
    /// assert_eq!(wire, b"head:a large body, not copied:tail");
    /// out.consume(wire.len()); // what the vectored write took
    /// assert!(out.is_empty());
    /// ```
    pub fn io_slices<'a>(&'a self, dst: &mut [IoSlice<'a>], max: usize) -> usize {
        let mut n = 0;
        let mut left = max;
        // Ring bytes not yet placed: offset into the ring's data.
        let mut ring_off = 0usize;
        let mut push = |s: &'a [u8], n: &mut usize, left: &mut usize| -> bool {
            if *n == dst.len() || *left == 0 {
                return false;
            }
            if !s.is_empty() {
                let s = &s[..s.len().min(*left)];
                dst[*n] = IoSlice::new(s);
                *n += 1;
                *left -= s.len();
            }
            true
        };
        let pieces = self.shared.as_ref().map(|s| &s.pieces);
        for p in pieces.into_iter().flatten() {
            let upto = (p.at - self.consumed) as usize;
            if upto > ring_off {
                let (a, b) = self.slices(ring_off, upto - ring_off);
                if !push(a, &mut n, &mut left) || !push(b, &mut n, &mut left) {
                    return n;
                }
                ring_off = upto;
            }
            if !push(&p.data, &mut n, &mut left) {
                return n;
            }
        }
        if self.len > ring_off {
            let (a, b) = self.slices(ring_off, self.len - ring_off);
            if push(a, &mut n, &mut left) {
                push(b, &mut n, &mut left);
            }
        }
        n
    }

    /// Copies `dst.len()` bytes starting `offset` bytes into the ring's
    /// data, without consuming them. Returns false if not that many bytes
    /// are stored.
    pub fn peek(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset + dst.len() > self.len {
            return false;
        }
        let cap = self.buf.len();
        let start = self.wrap(self.head + offset);
        let first = dst.len().min(cap - start);
        dst[..first].copy_from_slice(&self.buf[start..start + first]);
        let rest = dst.len() - first;
        dst[first..].copy_from_slice(&self.buf[..rest]);
        true
    }

    /// The `n` ring bytes starting at `offset`, as up to two slices.
    pub fn slices(&self, offset: usize, n: usize) -> (&[u8], &[u8]) {
        assert!(offset + n <= self.len, "slice past the stored data");
        let cap = self.buf.len();
        let start = self.wrap(self.head + offset);
        let first = n.min(cap - start);
        (&self.buf[start..start + first], &self.buf[..n - first])
    }

    /// Drops `n` bytes from the front (ring bytes and shared pieces, in
    /// their order).
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.len(), "consume past the stored data");
        let mut n = n;
        while n > 0 {
            let consumed = self.consumed;
            let Some(s) = self.shared.as_deref_mut() else {
                break;
            };
            let Some(p) = s.pieces.front_mut() else {
                break;
            };
            let gap = (p.at - consumed) as usize;
            if gap == 0 {
                let k = p.data.len().min(n);
                p.data.advance(k);
                s.bytes -= k;
                n -= k;
                if p.data.is_empty() {
                    s.pieces.pop_front();
                }
            } else {
                let k = gap.min(n);
                self.consume_ring(k);
                n -= k;
            }
        }
        self.consume_ring(n);
    }

    fn consume_ring(&mut self, n: usize) {
        assert!(n <= self.len, "consume past the stored data");
        self.len -= n;
        self.consumed += n as u64;
        self.head = if self.len == 0 {
            // Restart at 0 so the next read gets the largest contiguous region.
            0
        } else {
            self.wrap(self.head + n)
        };
    }

    /// Discards everything (a channel that is closed).
    pub fn clear(&mut self) {
        self.consumed += self.len as u64;
        self.head = 0;
        self.len = 0;
        if let Some(s) = &mut self.shared {
            s.pieces.clear();
            s.bytes = 0;
        }
    }

    /// Gives the ring a capacity of `size` bytes (at least what it holds),
    /// keeping its contents and shared pieces; returns the change in
    /// capacity (a channel's rings shrink while it idles and grow back).
    /// The storage starts again from what it holds (a handshake's large
    /// frames leave no large storage behind) and grows with the bytes, as
    /// for a new buffer.
    pub fn resize(&mut self, size: usize) -> i64 {
        let size = size.max(self.len);
        if self.cap == size {
            return 0;
        }
        let before = self.cap as i64;
        let storage = if self.len == 0 {
            0
        } else {
            self.len.next_power_of_two().max(MIN_STORAGE).min(size)
        };
        let mut buf = Vec::with_capacity(storage);
        let (a, b) = self.slices(0, self.len);
        buf.extend_from_slice(a);
        buf.extend_from_slice(b);
        buf.resize(storage, 0);
        self.buf = buf;
        self.cap = size;
        self.head = 0;
        size as i64 - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_and_keeps_order() {
        let mut b = ByteBuffer::new(8);
        b.push(b"abcdef");
        b.consume(4);
        b.push(b"ghijk");
        assert_eq!(b.len(), 7);
        let (x, y) = b.chunks();
        let mut all = x.to_vec();
        all.extend_from_slice(y);
        assert_eq!(all, b"efghijk");
        let mut p = [0u8; 3];
        assert!(b.peek(2, &mut p));
        assert_eq!(&p, b"ghi");
        assert!(!b.peek(5, &mut p));
    }

    #[test]
    fn spare_never_overlaps_data() {
        let mut b = ByteBuffer::new(8);
        b.push(b"abcdefgh");
        assert!(b.spare_mut().is_empty());
        b.consume(3);
        assert_eq!(b.spare_mut().len(), 3);
        b.spare_mut().copy_from_slice(b"xyz");
        b.commit(3);
        let mut all = [0u8; 8];
        assert!(b.peek(0, &mut all));
        assert_eq!(&all, b"defghxyz");
    }

    /// A capacity, small (below the first storage step, so the buffer is
    /// full size at once) or large (so it grows through several sizes),
    /// and up to 200 operations of up to a capacity's bytes each.
    fn any_cap_and_ops(kinds: u8) -> impl Strategy<Value = (usize, Vec<(u8, usize)>)> {
        prop_oneof![1usize..64, 64usize..3000].prop_flat_map(move |cap| {
            (
                Just(cap),
                prop::collection::vec((0u8..kinds, 0usize..cap + 40), 0..200),
            )
        })
    }

    #[test]
    fn storage_grows_with_the_bytes_held_and_never_past_the_capacity() {
        let mut b = ByteBuffer::new(64 * 1024);
        assert_eq!(b.storage(), 0, "a new buffer allocates nothing");
        // Small frames pushed and consumed in turn: the storage stays at
        // its first step however many go through.
        for _ in 0..10_000 {
            b.push(&[7u8; 40]);
            b.consume(40);
        }
        assert_eq!(b.storage(), MIN_STORAGE);
        // A burst needs more: the storage doubles up to what is held.
        b.push(&[1u8; 5000]);
        assert_eq!(b.storage(), 8192);
        b.push(&vec![2u8; 60 * 1024 - 5000]);
        assert_eq!(b.storage(), 64 * 1024);
        assert_eq!(b.free(), 4 * 1024);
        // At full size the ring wraps as it always did.
        b.consume(10_000);
        b.push(&[3u8; 8000]);
        assert_eq!((b.storage(), b.len()), (64 * 1024, 59_440));
        // A new capacity starts the storage again from what is held (a
        // handshake's large frames leave no large storage behind), data
        // kept in order.
        b.consume(59_440 - 100);
        b.resize(1024);
        assert_eq!(
            (b.capacity(), b.storage(), b.len()),
            (1024, MIN_STORAGE, 100)
        );
        assert_eq!(b.chunks().0, &[3u8; 100][..]);
    }

    #[test]
    fn a_read_into_a_growing_buffer_gets_room_each_time() {
        let mut b = ByteBuffer::new(4096);
        let mut total = 0;
        while b.free() > 0 {
            let spare = b.spare_mut();
            assert!(!spare.is_empty(), "free {} but no spare", b.free());
            let n = spare.len();
            spare.fill(9);
            b.commit(n);
            total += n;
        }
        assert_eq!((total, b.storage()), (4096, 4096));
    }

    /// A socket read that fills the room it was given asks for more: the
    /// next room is twice as large, even when the bytes were consumed in
    /// between (a bulk channel's input ring reaches its capacity in a few
    /// reads, not one read per MIN_STORAGE bytes), while small reads leave
    /// it small.
    #[test]
    fn full_reads_double_the_room_and_small_reads_do_not() {
        let mut b = ByteBuffer::new(64 * 1024);
        let mut rooms = Vec::new();
        for _ in 0..10 {
            let spare = b.spare_mut();
            rooms.push(spare.len());
            let n = spare.len();
            b.commit(n);
            b.consume(n);
        }
        assert_eq!(
            rooms,
            [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 65536]
        );
        let mut small = ByteBuffer::new(64 * 1024);
        for _ in 0..100 {
            let n = small.spare_mut().len().min(40);
            small.commit(n);
            small.consume(n);
        }
        assert_eq!(small.storage(), MIN_STORAGE);
    }

    proptest! {
        /// The ring behaves as a FIFO of bytes bounded by its capacity,
        /// whatever mix of pushes, reads into spare space and consumes.
        #[test]
        fn behaves_like_a_bounded_fifo((cap, ops) in any_cap_and_ops(3)) {
            let mut b = ByteBuffer::new(cap);
            let mut model: std::collections::VecDeque<u8> = Default::default();
            let mut next = 0u8;
            for (op, n) in ops {
                match op {
                    0 => {
                        let n = n.min(b.free());
                        let data: Vec<u8> = (0..n).map(|_| { next = next.wrapping_add(1); next }).collect();
                        b.push(&data);
                        model.extend(data);
                    }
                    1 => {
                        let spare = b.spare_mut();
                        let n = n.min(spare.len());
                        for x in &mut spare[..n] { next = next.wrapping_add(1); *x = next; model.push_back(next); }
                        b.commit(n);
                    }
                    _ => {
                        let n = n.min(b.len());
                        b.consume(n);
                        model.drain(..n);
                    }
                }
                prop_assert!(b.len() <= cap);
                prop_assert!(b.storage() <= cap);
                prop_assert_eq!(b.len(), model.len());
                let (x, y) = b.chunks();
                let got: Vec<u8> = x.iter().chain(y).copied().collect();
                let want: Vec<u8> = model.iter().copied().collect();
                prop_assert_eq!(got, want);
            }
        }

        /// With shared pieces, the buffer still behaves as one FIFO of
        /// bytes: ring bytes and pieces come out in the order they were
        /// queued, whatever the consumes cut, and only the ring's bytes
        /// count against its capacity.
        #[test]
        fn shared_pieces_keep_the_byte_order((cap, ops) in any_cap_and_ops(4)) {
            let limit = 150;
            let mut b = ByteBuffer::with_shared(cap, limit);
            let mut model: std::collections::VecDeque<u8> = Default::default();
            let mut next = 0u8;
            let mut gen = |n: usize| -> Vec<u8> { (0..n).map(|_| { next = next.wrapping_add(1); next }).collect() };
            for (op, n) in ops {
                match op {
                    0 => {
                        let data = gen(n.min(b.free()));
                        b.push(&data);
                        model.extend(data);
                    }
                    1 => {
                        let data = gen(n.min(b.shared_room()));
                        model.extend(&data);
                        b.push_shared(Bytes::from(data));
                    }
                    2 => {
                        let n = n.min(b.len());
                        b.consume(n);
                        model.drain(..n);
                    }
                    _ => {
                        // A bounded gather sees a prefix, in order.
                        let mut s = [IoSlice::new(&[]); 3];
                        let k = b.io_slices(&mut s, n);
                        let got: Vec<u8> = s[..k].iter().flat_map(|x| x.iter().copied()).collect();
                        prop_assert!(got.len() <= n);
                        let want: Vec<u8> = model.iter().take(got.len()).copied().collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert!(b.len() - b.shared_len() <= cap);
                prop_assert!(b.storage() <= cap);
                prop_assert!(b.shared_len() <= limit);
                prop_assert_eq!(b.len(), model.len());
                let mut s = [IoSlice::new(&[]); 512];
                let k = b.io_slices(&mut s, usize::MAX);
                let got: Vec<u8> = s[..k].iter().flat_map(|x| x.iter().copied()).collect();
                let want: Vec<u8> = model.iter().copied().collect();
                prop_assert_eq!(got, want);
            }
            b.clear();
            prop_assert!(b.is_empty());
        }
    }
}
