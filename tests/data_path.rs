//! The data path: sends wake the ComObject only when its outbox goes from
//! empty to non-empty, and no wake is ever lost.

mod common;

use std::sync::Arc;

use common::*;
use sitenet::{Node, Runtime, SendOptions};

/// With the ComObject held busy, 10,000 sends cause exactly one wake.
#[test]
fn ten_thousand_sends_to_a_busy_com_object_cause_one_wake() {
    const N: u64 = 10_000;
    let server = listening_node_on(Runtime::dedicated("dp-server"));
    let sink = Sink::install(&server, N + 1, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("dp-client"))
        .start()
        .unwrap();
    let site = client.site(&addr(&server)).unwrap();
    // Open the channel and let the first wake be consumed.
    site.send_blocking(&Numbered { stream: 0, seq: 0 }, SendOptions::default())
        .unwrap();
    while sink.total.load(std::sync::atomic::Ordering::Acquire) < 1 {
        std::thread::yield_now();
    }
    let guard = site.hold_busy();
    let before = client.metrics().wakes;
    for seq in 1..=N {
        site.try_send(&Numbered { stream: 0, seq }).unwrap();
    }
    let wakes = client.metrics().wakes - before;
    drop(guard);
    assert_eq!(
        wakes, 1,
        "10,000 sends to a busy ComObject must cause exactly one wake"
    );
    sink.wait_blocking();
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Many threads sending at once while the ComObject keeps draining: every
/// message arrives (a lost wake would leave some stuck in the outbox for
/// ever), and each thread's stream stays in order.
#[test]
fn no_wake_is_lost_when_many_threads_send() {
    const THREADS: u32 = 8;
    const PER: u64 = 20_000;
    let server = listening_node_on(Runtime::dedicated("dp-server2"));
    let sink = Sink::install(&server, THREADS as u64 * PER, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("dp-client2"))
        .start()
        .unwrap();
    let site = client.site(&addr(&server)).unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|stream| {
            let site = site.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for seq in 0..PER {
                    // Alternate bursts and single sends so the outbox keeps
                    // going empty and non-empty under the actor's feet.
                    site.send_blocking(&Numbered { stream, seq }, SendOptions::default())
                        .unwrap();
                    if seq % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    sink.wait_blocking();
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let m = client.metrics();
    assert_eq!(m.messages_queued, THREADS as u64 * PER);
    assert!(
        m.wakes < m.messages_queued,
        "wakes {} for {} sends",
        m.wakes,
        m.messages_queued
    );
}
