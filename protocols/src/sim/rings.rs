//! A pool of ring buffers for the simulated connections.
//!
//! Why: a large simulation opens and closes hundreds of channels per
//! simulated second, each with two rings per end, and each ring grows to
//! the negotiated buffer size when its handshake completes. Allocating them
//! afresh cost a quarter of the simulator's time at 1,000 sites: zeroed
//! memory, and the allocator handing pages back to the kernel and faulting
//! them in again. Rings of the few sizes in use are kept here instead, empty,
//! and handed out again. A pooled ring holds no bytes (it is cleared), so
//! nothing of one connection reaches another, and the pool never changes
//! what the simulation does — only how fast it runs.

use std::collections::BTreeMap;

use crate::byte_buffer::ByteBuffer;

/// Empty rings kept per size, at most; the rest are freed.
const KEEP_PER_SIZE: usize = 8192;

/// Empty rings by capacity.
#[derive(Default)]
pub(super) struct Rings {
    free: BTreeMap<usize, Vec<ByteBuffer>>,
}

impl Rings {
    /// An empty ring of exactly `size` bytes.
    pub(super) fn take(&mut self, size: usize) -> ByteBuffer {
        self.free
            .get_mut(&size)
            .and_then(Vec::pop)
            .unwrap_or_else(|| ByteBuffer::new(size))
    }

    /// Takes back a ring no connection uses any more.
    pub(super) fn give(&mut self, mut ring: ByteBuffer) {
        let pool = self.free.entry(ring.capacity()).or_default();
        if pool.len() < KEEP_PER_SIZE {
            ring.clear();
            pool.push(ring);
        }
    }

    /// Replaces `ring` by one of `size` bytes (at least what it holds),
    /// keeping its contents in order, as [`ByteBuffer::resize`] does.
    pub(super) fn regrow(&mut self, ring: &mut ByteBuffer, size: usize) {
        let size = size.max(ring.len());
        if ring.capacity() == size {
            return;
        }
        let mut new = self.take(size);
        let (a, b) = ring.chunks();
        new.push(a);
        new.push(b);
        let old = std::mem::replace(ring, new);
        self.give(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regrown_ring_keeps_its_bytes_in_order_and_a_reused_one_is_empty() {
        let mut rings = Rings::default();
        let mut r = rings.take(8);
        r.push(b"abcdef");
        r.consume(4);
        r.push(b"ghij"); // wraps
        rings.regrow(&mut r, 32);
        assert_eq!(r.capacity(), 32);
        let (a, b) = r.chunks();
        assert_eq!([a, b].concat(), b"efghij");
        // The old ring went back to the pool, emptied.
        let again = rings.take(8);
        assert_eq!((again.capacity(), again.len()), (8, 0));
        rings.give(r);
        let big = rings.take(32);
        assert_eq!((big.capacity(), big.len()), (32, 0));
    }
}
