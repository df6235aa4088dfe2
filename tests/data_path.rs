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
    let site = client.site(addr(&server)).unwrap();
    // Open the channel and let the first wake be consumed.
    site.send(&Numbered { stream: 0, seq: 0 })
        .blocking()
        .unwrap();
    while sink.total.load(std::sync::atomic::Ordering::Acquire) < 1 {
        std::thread::yield_now();
    }
    let guard = site.hold_busy();
    let before = client.metrics().wakes;
    for seq in 1..=N {
        site.send(&Numbered { stream: 0, seq }).try_now().unwrap();
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
    let site = client.site(addr(&server)).unwrap();
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
                    site.send(&Numbered { stream, seq }).blocking().unwrap();
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

/// Small messages share frames on a real socket (PACKED frames, protocol
/// version 2): 2,000 queued 64 B messages take about their own bytes on the
/// wire, not a 32 B frame header and a 28 B prelude each.
#[test]
fn queued_small_messages_share_frames_on_the_wire() {
    const N: u64 = 2_000;
    let server = listening_node_on(Runtime::dedicated("pk-server"));
    let sink = Sink::install(&server, N + 1, Some(64));
    let client = Node::builder()
        .runtime(Runtime::dedicated("pk-client"))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let body = bytes::Bytes::from(vec![7u8; 64]);
    let opts = || SendOptions::default().body(body.clone());
    site.send(&Numbered { stream: 0, seq: 0 })
        .options(opts())
        .blocking()
        .unwrap();
    while sink.total.load(std::sync::atomic::Ordering::Acquire) < 1 {
        std::thread::yield_now();
    }
    let sent_bytes = || -> u64 {
        client
            .stats()
            .per_site
            .iter()
            .map(|s| s.bytes_sent[2])
            .sum()
    };
    let before = sent_bytes();
    // Everything is queued before the ComObject writes any of it.
    let guard = site.hold_busy();
    for seq in 1..=N {
        site.send(&Numbered { stream: 0, seq })
            .options(opts())
            .try_now()
            .unwrap();
    }
    drop(guard);
    sink.wait_blocking();
    site.flush(PATIENCE).blocking().unwrap();
    // Each message alone would be at least a frame header, a prelude and
    // its body; packed, an entry head (9 B), its header (at most 13 B of
    // MessagePack here) and its body, plus a frame header per ~750.
    let alone = N * (32 + 28 + 64);
    let packed_at_most = N * (9 + 13 + 64) + 32 * (N / 700 + 1);
    // The statistics are published by the ComObject's turns.
    let deadline = std::time::Instant::now() + PATIENCE;
    while sent_bytes() - before < N * 64 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let wire = sent_bytes() - before;
    assert!(wire >= N * 64, "statistics published: {wire} B");
    assert!(
        wire <= packed_at_most,
        "{N} messages of 64 B took {wire} B of frames (one frame each: {alone} B; packed: at most {packed_at_most} B)"
    );
}

/// A reply queued by a handler while its request is delivered is written
/// by the same turn of the ComObject: answering costs no wake.
#[test]
fn a_handlers_reply_costs_no_wake() {
    const N: u64 = 1_000;
    let server = listening_node_on(Runtime::dedicated("dp-echo-server"));
    let client = Node::builder()
        .runtime(Runtime::dedicated("dp-echo-client"))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let echo = |seq| {
        let r = site
            .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
                &sitenet::services::Echo { seq },
            )
            .timeout(std::time::Duration::from_secs(30))
            .blocking()
            .unwrap();
        assert_eq!(r.msg.seq, seq);
    };
    echo(0);
    let before = server.metrics().wakes;
    for seq in 1..=N {
        echo(seq);
    }
    let wakes = server.metrics().wakes - before;
    assert!(
        wakes < N / 10,
        "{wakes} wakes of the server's ComObject for {N} replies"
    );
}
