//! What an idle remote site costs, measured with a counting allocator: its
//! entry, its ComObject actor and its session, with no channel. Thousands of
//! sites in one process must stay cheap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as i64 - l.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Waits until every actor started on the node's runtime before now exists.
fn settle(node: &sitenet::Node) {
    let (tx, rx) = std::sync::mpsc::channel();
    node.runtime().spawn(async move {
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
}

#[test]
fn an_idle_remote_site_costs_a_bounded_few_kib() {
    const N: i64 = 2_000;
    let node = sitenet::Node::builder().start().unwrap();
    settle(&node);
    let before = LIVE.load(Ordering::Relaxed);
    let sites: Vec<_> = (0..N)
        .map(|i| node.site(&format!("tcp:127.0.0.1:{}", 1 + i)).unwrap())
        .collect();
    settle(&node);
    let per_site = (LIVE.load(Ordering::Relaxed) - before) / N;
    eprintln!("an idle remote site costs {per_site} bytes");
    assert!(per_site > 0);
    // Measured 5,843 bytes before the session's lane slots were allocated
    // on first use, the RNG made small, the configuration shared and the
    // published counters boxed on first use; about 3,350 after. (Issue 7's
    // target is 2 KiB.)
    assert!(per_site <= 3584, "an idle site costs {per_site} bytes");
    drop(sites);
}
