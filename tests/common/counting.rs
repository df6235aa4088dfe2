//! A counting allocator for the tests that measure memory: a test crate
//! installs it with
//! `#[global_allocator] static A: Counting = Counting;`
//! and reads the live bytes ([`LIVE`]), their peak ([`PEAK`]) and the
//! number of allocations ([`ALLOCS`]) around what it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The system allocator, counting.
pub struct Counting;

/// Bytes allocated and not yet freed.
pub static LIVE: AtomicI64 = AtomicI64::new(0);

/// The most bytes live at once since the last [`reset_peak`].
pub static PEAK: AtomicI64 = AtomicI64::new(0);

/// Held by a test while it measures [`LIVE`]: the tests of one binary run
/// on threads of one process under `cargo test` (each in a process of its
/// own under nextest), and one test's allocations counted in another's
/// measure make it read nonsense (a negative cost, or 520 bytes for a
/// 499-byte site).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts measuring the peak from the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

fn grew(by: i64) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// Allocations (and reallocations) made.
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size() as i64);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        grew(n as i64 - l.size() as i64);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}
