//! Exactly-once, per-priority FIFO delivery across lost channels, over TCP
//! with a seeded fault-injecting wrapper cutting channels mid-stream.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use sitenet::{Node, Priority, Runtime};
use sitenet_transport::fault::{FaultInjector, SEED_ENV};

/// 100,000 messages of mixed sizes and priorities while the channel is cut at
/// random byte offsets (mid-frame included) at least 100 times: every message
/// arrives exactly once, in order within its priority.
#[test]
fn a_hundred_cuts_during_a_hundred_thousand_messages_lose_nothing() {
    const N: u64 = 100_000;
    const CUTS: u64 = 100;
    let faults = FaultInjector::from_env_or_random(SEED_ENV);
    let _report = faults.report_on_panic();
    let server = listening_node_on(Runtime::dedicated("rel-server"));
    let sink = Sink::install(&server, N, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("rel-client"))
        .configure(|c| {
            c.fault_injector = Some(faults.clone());
            c.reconnect_max = Duration::from_millis(50);
        })
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    // Sizes from 0 to 8 KiB; three priorities, one stream each (the sink
    // checks order per stream, so per priority).
    let bodies: Vec<Bytes> = [0usize, 16, 200, 1500, 8192]
        .iter()
        .map(|&n| Bytes::from(vec![0xC3; n]))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(faults.seed());
    // Cuts every ~150 KB on average: far more than 100 cuts over the run.
    faults.random_cuts(150_000);
    let mut seqs = [0u64; 3];
    for _ in 0..N {
        let lane: usize = rand::Rng::gen_range(&mut rng, 0..3);
        let prio = [Priority::Low, Priority::Medium, Priority::High][lane];
        let body = bodies[rand::Rng::gen_range(&mut rng, 0..bodies.len())].clone();
        let m = Numbered {
            stream: lane as u32,
            seq: seqs[lane],
        };
        seqs[lane] += 1;
        site.send(&m).priority(prio).body(body).blocking().unwrap();
    }
    // Keep cutting until CUTS channels were cut (or everything arrived).
    let server_handle = server.clone();
    client
        .wait_until_blocking(
            move |m| m.channels_closed >= CUTS || server_handle.metrics().messages_delivered >= N,
            PATIENCE,
        )
        .unwrap();
    faults.stop_random_cuts();
    // Whatever was still in flight at the last cut is resent.
    site.flush(PATIENCE).blocking().unwrap();
    sink.wait_blocking();
    let cuts = faults.cuts();
    let (mc, ms) = (client.metrics(), server.metrics());
    eprintln!(
        "{}: {cuts} cuts; client {mc:?}; server {ms:?}",
        faults.seed_report()
    );
    assert_eq!(
        sink.total.load(Ordering::Acquire),
        N,
        "every message exactly once"
    );
    assert_eq!(
        sink.out_of_order.load(Ordering::Acquire),
        0,
        "no reordering within a priority (nor duplicates)"
    );
    assert_eq!(ms.messages_delivered, N);
    assert!(cuts >= CUTS, "only {cuts} cuts happened");
    assert!(
        mc.channels_opened > CUTS,
        "a new channel after each cut: {mc:?}"
    );
    assert!(
        mc.messages_retransmitted > 0,
        "in-flight messages were resent: {mc:?}"
    );
}

use rand::SeedableRng;
