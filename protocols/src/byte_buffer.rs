//! [`ByteBuffer`]: the fixed-capacity circular buffer of one channel direction.
//!
//! Each channel owns exactly two of these (input and output), allocated once
//! when the channel is made, so the memory a channel can use is known in
//! advance and a flooding peer cannot make it grow (which is why sitenet does
//! not use `FramedRead`/`FramedWrite`, whose buffers grow). The marshaler
//! writes frames into the output buffer while it has room; the socket drains it.
//! The socket fills the input buffer; the unmarshaler consumes whole frames.

/// A fixed-capacity ring of bytes.
///
/// Invariant: `len <= cap`; the data occupies `len` bytes starting at `head`,
/// wrapping at the end of the storage.
pub struct ByteBuffer {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
}

impl std::fmt::Debug for ByteBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBuffer")
            .field("capacity", &self.buf.len())
            .field("len", &self.len)
            .finish()
    }
}

impl ByteBuffer {
    /// Allocates a buffer of exactly `capacity` bytes (its size for life).
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "a ByteBuffer needs a non-zero capacity");
        Self {
            buf: vec![0; capacity].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Total capacity.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free bytes.
    pub fn free(&self) -> usize {
        self.buf.len() - self.len
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
        self.wrap(self.head + self.len)
    }

    /// Appends all of `data`. Panics if it does not fit: callers check
    /// [`free`](Self::free) first (the marshaler sizes every frame to fit).
    pub fn push(&mut self, data: &[u8]) {
        assert!(data.len() <= self.free(), "ByteBuffer overflow");
        let cap = self.buf.len();
        let tail = self.tail();
        let first = data.len().min(cap - tail);
        self.buf[tail..tail + first].copy_from_slice(&data[..first]);
        let rest = data.len() - first;
        self.buf[..rest].copy_from_slice(&data[first..]);
        self.len += data.len();
    }

    /// The largest contiguous free region, to read from a socket into. Call
    /// [`commit`](Self::commit) with the number of bytes written there.
    pub fn spare_mut(&mut self) -> &mut [u8] {
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
    }

    /// The stored data as up to two slices, in order (to write to a socket).
    pub fn chunks(&self) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        let first = self.len.min(cap - self.head);
        (
            &self.buf[self.head..self.head + first],
            &self.buf[..self.len - first],
        )
    }

    /// Copies `dst.len()` bytes starting `offset` bytes into the data, without
    /// consuming them. Returns false if not that many bytes are stored.
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

    /// The `n` stored bytes starting at `offset`, as up to two slices.
    pub fn slices(&self, offset: usize, n: usize) -> (&[u8], &[u8]) {
        assert!(offset + n <= self.len, "slice past the stored data");
        let cap = self.buf.len();
        let start = self.wrap(self.head + offset);
        let first = n.min(cap - start);
        (&self.buf[start..start + first], &self.buf[..n - first])
    }

    /// Drops `n` bytes from the front.
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.len, "consume past the stored data");
        self.len -= n;
        self.head = if self.len == 0 {
            // Restart at 0 so the next read gets the largest contiguous region.
            0
        } else {
            self.wrap(self.head + n)
        };
    }

    /// Discards everything (a channel that is closed).
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
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

    proptest! {
        /// The ring behaves as a FIFO of bytes bounded by its capacity,
        /// whatever mix of pushes, reads into spare space and consumes.
        #[test]
        fn behaves_like_a_bounded_fifo(cap in 1usize..64, ops in prop::collection::vec((0u8..3, 0usize..80), 0..200)) {
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
                prop_assert_eq!(b.len(), model.len());
                let (x, y) = b.chunks();
                let got: Vec<u8> = x.iter().chain(y).copied().collect();
                let want: Vec<u8> = model.iter().copied().collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
