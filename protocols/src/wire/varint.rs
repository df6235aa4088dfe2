//! A compact byte form for state kept while idle: unsigned integers as
//! LEB128 (7 bits a byte: a counter below 128 takes one byte), signed ones
//! zig-zagged first, instants as nanoseconds from a base instant. What a
//! parked site keeps ([`Parked`](crate::connection::com_object::Parked)) is mostly small
//! numbers and zeros: packed, it takes a fraction of the words it had.
//!
//! The form never leaves the process and is read back only by the code
//! that wrote it, in the same order: a [`Packer`] writes fields, an
//! [`Unpacker`] reads them back one by one. Reading past the end gives
//! zeros (a bug in the order, caught by the round-trip tests, never by a
//! peer: nothing a peer sends is read with it).

use std::time::{Duration, Instant};

/// Writes fields in order (see the module documentation).
#[derive(Debug)]
pub(crate) struct Packer {
    bytes: Vec<u8>,
}

impl Default for Packer {
    /// Room for a parked site's fields at once: growing from nothing took
    /// five allocations a park, each a small block the allocator may carve
    /// from memory other sites just freed.
    fn default() -> Self {
        Self {
            bytes: Vec::with_capacity(2 * INLINE),
        }
    }
}

/// The most packed bytes kept inline ([`Packed`]): a site that exchanged
/// messages and idles packs about 80 (its numbering and counters), one
/// never connected about 35.
pub(crate) const INLINE: usize = 94;

/// Packed bytes as they are kept: inline when they fit [`INLINE`], so
/// keeping them allocates nothing, else in an allocation of their size.
///
/// Why inline: a parked site's form is made on the thread its actor ran
/// on, just after that actor's task (about 1.3 KB) was freed there; a
/// small block that outlives the park is carved out of that freed memory,
/// and thousands of such blocks, one every task's width, keep every page
/// of the thread's heap resident (seen as 1.3 KB of resident memory per
/// idle site against 150 bytes held).
#[derive(Clone)]
pub(crate) enum Packed {
    /// Up to [`INLINE`] bytes, `len` of them used.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// More.
    Heap(Box<[u8]>),
}

impl Packed {
    /// True if the bytes are kept inline (no allocation of their own).
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self, Packed::Inline { .. })
    }
}

impl std::ops::Deref for Packed {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Packed::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Packed::Heap(b) => b,
        }
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("len", &self.len())
            .field("inline", &self.is_inline())
            .finish()
    }
}

impl Packer {
    /// An unsigned integer.
    pub(crate) fn u64(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }

    /// A signed integer (zig-zag: small magnitudes stay short).
    pub(crate) fn i64(&mut self, v: i64) {
        self.u64(((v << 1) ^ (v >> 63)) as u64);
    }

    /// Up to eight flags in one byte, the first in the lowest bit.
    pub(crate) fn flags(&mut self, flags: &[bool]) {
        debug_assert!(flags.len() <= 8);
        let b = flags
            .iter()
            .enumerate()
            .fold(0u8, |b, (i, &f)| b | (u8::from(f) << i));
        self.bytes.push(b);
    }

    /// A duration, in nanoseconds (saturating at about 584 years).
    pub(crate) fn duration(&mut self, d: Duration) {
        self.u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// An instant, as signed nanoseconds from `base` (saturating at about
    /// 292 years either way).
    pub(crate) fn instant(&mut self, at: Instant, base: Instant) {
        let nanos = match at.checked_duration_since(base) {
            Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            None => -i64::try_from(base.duration_since(at).as_nanos()).unwrap_or(i64::MAX),
        };
        self.i64(nanos);
    }

    /// An optional instant: 0 for none, else 1 and the instant.
    pub(crate) fn opt_instant(&mut self, at: Option<Instant>, base: Instant) {
        match at {
            None => self.u64(0),
            Some(at) => {
                self.u64(1);
                self.instant(at, base);
            }
        }
    }

    /// The bytes written: inline if they fit, else in an allocation of
    /// exactly their size.
    pub(crate) fn finish(self) -> Packed {
        match u8::try_from(self.bytes.len()) {
            Ok(len) if self.bytes.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..self.bytes.len()].copy_from_slice(&self.bytes);
                Packed::Inline { len, bytes }
            }
            _ => Packed::Heap(self.bytes.into_boxed_slice()),
        }
    }
}

/// Reads back what a [`Packer`] wrote, in the same order.
#[derive(Debug)]
pub(crate) struct Unpacker<'a> {
    bytes: &'a [u8],
}

impl<'a> Unpacker<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => {
                debug_assert!(false, "read past the end of a packed form");
                0
            }
        }
    }

    pub(crate) fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte();
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    pub(crate) fn i64(&mut self) -> i64 {
        let z = self.u64();
        ((z >> 1) as i64) ^ -((z & 1) as i64)
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::try_from(self.u64()).unwrap_or(u32::MAX)
    }

    /// `N` flags written by [`Packer::flags`].
    pub(crate) fn flags<const N: usize>(&mut self) -> [bool; N] {
        let b = self.byte();
        std::array::from_fn(|i| b & (1 << i) != 0)
    }

    pub(crate) fn duration(&mut self) -> Duration {
        Duration::from_nanos(self.u64())
    }

    pub(crate) fn instant(&mut self, base: Instant) -> Instant {
        let nanos = self.i64();
        if nanos >= 0 {
            base + Duration::from_nanos(nanos as u64)
        } else {
            base.checked_sub(Duration::from_nanos(nanos.unsigned_abs()))
                .unwrap_or(base)
        }
    }

    pub(crate) fn opt_instant(&mut self, base: Instant) -> Option<Instant> {
        (self.u64() != 0).then(|| self.instant(base))
    }

    /// True once every byte was read (the round-trip tests check it).
    pub(crate) fn is_done(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_reads_back_as_written() {
        let base = Instant::now() + Duration::from_secs(1000);
        let mut p = Packer::default();
        let numbers = [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX];
        for n in numbers {
            p.u64(n);
        }
        for n in [0, -1, 1, i64::MIN, i64::MAX, -300] {
            p.i64(n);
        }
        p.flags(&[true, false, true, true, false, false, false, true]);
        p.duration(Duration::new(5, 7));
        let earlier = base - Duration::new(3, 999_999_999);
        let later = base + Duration::new(86_400, 1);
        p.instant(earlier, base);
        p.instant(later, base);
        p.opt_instant(None, base);
        p.opt_instant(Some(base), base);
        p.u64(7);
        let bytes = p.finish();
        let mut u = Unpacker::new(&bytes);
        for n in numbers {
            assert_eq!(u.u64(), n);
        }
        for n in [0, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(u.i64(), n);
        }
        assert_eq!(
            u.flags::<8>(),
            [true, false, true, true, false, false, false, true]
        );
        assert_eq!(u.duration(), Duration::new(5, 7));
        assert_eq!(u.instant(base), earlier);
        assert_eq!(u.instant(base), later);
        assert_eq!(u.opt_instant(base), None);
        assert_eq!(u.opt_instant(base), Some(base));
        assert_eq!(u.u32(), 7);
        assert!(u.is_done());
    }

    #[test]
    fn small_numbers_take_one_byte() {
        let mut p = Packer::default();
        for n in 0..128 {
            p.u64(n);
        }
        p.i64(-64);
        p.i64(63);
        assert_eq!(p.finish().len(), 130);
    }

    /// Up to `INLINE` bytes are kept inline (keeping them allocates
    /// nothing), more in an allocation; both read back whole.
    #[test]
    fn short_packed_forms_are_kept_inline_and_long_ones_whole() {
        for n in [0, 1, INLINE - 1, INLINE, INLINE + 1, 3 * INLINE] {
            let mut p = Packer::default();
            for i in 0..n {
                p.u64((i % 128) as u64);
            }
            let bytes = p.finish();
            assert_eq!(bytes.is_inline(), n <= INLINE, "{n} bytes");
            assert_eq!(bytes.len(), n);
            let mut u = Unpacker::new(&bytes);
            for i in 0..n {
                assert_eq!(u.u64(), (i % 128) as u64);
            }
            assert!(u.is_done());
        }
    }
}
