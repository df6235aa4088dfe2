//! Priorities, end to end over TCP: a small priority-4 message overtakes a
//! 64 MiB priority-2 one still in flight (each level is a lane of its own;
//! TCP alone would make it wait for the whole big one), and saturated
//! levels share the channel's bytes in proportion to their weights (1:2:4
//! for levels 2, 3, 4 by default).

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use sitenet::{Node, Priority};

/// Messages delivered to the server, in order: (level, sequence number).
type Log = Arc<Mutex<Vec<(Priority, u64)>>>;

fn server_logging() -> (Node, Log) {
    let server = listening_node();
    let log: Log = Arc::default();
    let l = log.clone();
    server
        .handle(move |ctx, m: Numbered| {
            l.lock().unwrap().push((ctx.priority(), m.seq));
        })
        .unwrap();
    (server, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_4_message_overtakes_a_64_mib_priority_2_one_in_flight() {
    let (server, log) = server_logging();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    // A first message opens the channel: the big one starts at once.
    echo(&site, 0).await;
    let big = Bytes::from(vec![0x11u8; 64 << 20]);
    site.send(&Numbered { stream: 2, seq: 0 })
        .priority(Priority::Low)
        .body(big)
        .await
        .unwrap();
    site.send(&Numbered { stream: 4, seq: 1 })
        .priority(Priority::High)
        .body(vec![0x22u8; 64])
        .await
        .unwrap();
    site.flush(PATIENCE).await.unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [(Priority::High, 1), (Priority::Low, 0)],
        "the small message is delivered while the big one is still in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_levels_share_bytes_by_their_weights() {
    const PER_LEVEL: u64 = 200;
    const SIZE: usize = 128 << 10;
    let (server, log) = server_logging();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 0).await;
    // Every level always has a message queued: queued round robin, far
    // faster than the channel drains them.
    let body = Bytes::from(vec![0x33u8; SIZE]);
    let levels = [Priority::Low, Priority::Medium, Priority::High];
    for seq in 0..PER_LEVEL {
        for p in levels {
            site.send(&Numbered {
                stream: p as u32,
                seq,
            })
            .priority(p)
            .body(body.clone())
            .await
            .unwrap();
        }
    }
    site.flush(PATIENCE).await.unwrap();
    // When level 4's last message arrives, the others have had their
    // shares of the same bytes (messages are all the same size).
    let log = log.lock().unwrap().clone();
    let done = log
        .iter()
        .position(|&(p, seq)| p == Priority::High && seq == PER_LEVEL - 1)
        .expect("level 4 finished");
    let count = |p: Priority| log[..=done].iter().filter(|e| e.0 == p).count() as f64;
    let (l2, l3, l4) = (
        count(Priority::Low),
        count(Priority::Medium),
        count(Priority::High),
    );
    let total = l2 + l3 + l4;
    eprintln!("when level 4 finished: level 2 {l2}, level 3 {l3}, level 4 {l4} messages");
    for (got, weight, level) in [(l2, 1.0, 2), (l3, 2.0, 3), (l4, 4.0, 4)] {
        let share = got / total;
        let expected = weight / 7.0;
        assert!(
            (share - expected).abs() <= 0.03,
            "level {level}: {:.1}% of the bytes, weight says {:.1}% (2: {l2}, 3: {l3}, 4: {l4})",
            share * 100.0,
            expected * 100.0
        );
    }
}
