//! A 128 MiB message through 64 KiB ByteBuffers, under a counting global
//! allocator: the sender marshals it a frame at a time from one shared 1 MiB
//! `Bytes` (no copy of the body beyond the ring), the transport holds only
//! its fixed buffers, and the receiver allocates the message once, exactly.
//!
//! Its own test binary (the allocator counts the whole process), with a
//! single test so that no other test allocates concurrently.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use common::Pair;
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use sitenet_protocols::{ByteBuffer, OutMessage, Priority, SessionConfig, PRELUDE_LEN};

/// Counts live and peak heap bytes.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn sub(n: usize) {
    CURRENT.fetch_sub(n, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        sub(l.size());
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new > l.size() {
                add(new - l.size());
            } else {
                sub(l.size() - new);
            }
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

fn current() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Resets the peak to the current live bytes; returns that baseline.
fn reset_peak() -> usize {
    let c = current();
    PEAK.store(c, Ordering::Relaxed);
    c
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

const MIB: usize = 1 << 20;
const PARTS: usize = 128;
const BUF: usize = 64 * 1024;

fn source_part() -> Bytes {
    // 1 MiB of non-repeating-looking content (so a misplaced fragment shows).
    let mut v = vec![0u8; MIB];
    let mut x: u32 = 0x1234_5678;
    for c in v.chunks_exact_mut(4) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        c.copy_from_slice(&x.to_le_bytes());
    }
    Bytes::from(v)
}

#[test]
fn a_128_mib_message_needs_no_128_mib_buffer() {
    let t = Instant::now();
    let part = source_part();
    let header = Bytes::from_static(b"big-one");
    let make = || OutMessage::new(Priority::Low, 42, header.clone(), vec![part.clone(); PARTS]);
    let wire = (PRELUDE_LEN + header.len() + PARTS * MIB) as u64;

    // Phase 1: the sender alone. Marshal the whole message into a 64 KiB
    // ring, draining it into nothing, and count what it allocates.
    {
        let mut pair = Pair::new(BUF, SessionConfig::default());
        pair.tapping = false;
        let mut sink = ByteBuffer::new(BUF);
        let base = reset_peak();
        pair.a.send(make());
        let mut payload = 0u64;
        let mut frames = 0;
        loop {
            let n = pair.a.session.poll_transmit(pair.now, &mut sink);
            if n == 0 {
                break;
            }
            let mut off = 0;
            let mut hb = [0u8; HEADER_LEN];
            while sink.peek(off, &mut hb) {
                let h = FrameHeader::decode(&hb, BUF - HEADER_LEN).unwrap();
                assert_eq!(h.kind, FrameKind::Data);
                payload += h.payload_len as u64;
                frames += 1;
                off += HEADER_LEN + h.payload_len as usize;
            }
            sink.clear();
        }
        assert_eq!(payload, wire);
        assert!(frames >= PARTS * MIB / BUF, "{frames} frames");
        let extra = peak() - base;
        assert!(
            extra <= MIB,
            "the sender allocated {extra} bytes to marshal a 128 MiB message"
        );
    }

    // Phase 2: sender, transport and receiver together.
    let mut pair = Pair::new(BUF, SessionConfig::default());
    pair.tapping = false;
    pair.chunks = vec![65_536, 4_000, 17, 30_000];
    let base = reset_peak();
    pair.a.send(make());
    pair.pump().unwrap();
    let live_peak = peak();
    let extra = live_peak - base;
    assert_eq!(pair.b.delivered.len(), 1);
    let m = &pair.b.delivered[0];
    assert_eq!(m.number, 1);
    assert_eq!(m.prelude.type_id, 42);
    assert_eq!(&m.header, &header);
    assert_eq!(m.body.len(), PARTS * MIB);
    // Every 1 MiB of the body is the source part (memcmp per part).
    for i in 0..PARTS {
        assert!(
            m.body[i * MIB..(i + 1) * MIB] == part[..],
            "part {i} differs"
        );
    }
    // The body's last bytes and a few straddling offsets.
    for off in [0, MIB - 1, MIB, 77 * MIB + 12_345, PARTS * MIB - 1] {
        assert_eq!(m.body[off], part[off % MIB], "offset {off}");
    }
    // Beyond the one received message, at most 8 MiB for everything else.
    let body = PARTS * MIB + header.len();
    assert!(
        extra <= body + 8 * MIB,
        "peak additional allocation {extra} bytes: {} beyond the received message",
        extra as i64 - body as i64
    );
    // And in absolute terms: never above message + source part + 8 MiB.
    assert!(
        live_peak <= PARTS * MIB + MIB + 8 * MIB,
        "live allocation peaked at {live_peak} bytes"
    );
    eprintln!(
        "128 MiB message: peak {:.2} MiB live, {:.2} MiB beyond the received body, {:?}",
        live_peak as f64 / MIB as f64,
        (extra as f64 - body as f64) / MIB as f64,
        t.elapsed()
    );
}
