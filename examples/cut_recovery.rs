//! How long sitenet takes to resume delivery after a channel is cut, and the
//! fault-state transitions a monitor sees meanwhile.
//!
//! Two nodes in one process (each on its own runtime thread); the client
//! streams numbered messages through a seeded fault injector, which cuts the
//! channel twice in each of `--cuts` rounds: once idle (everything
//! acknowledged) and once busy (half a batch in flight). For each cut the time from the cut to the next
//! message delivered at the server is recorded (reconnect backoff, TCP
//! connect, open protocol, retransmission of the unacknowledged messages).
//! At the end the server's sink must have every message exactly once.
//!
//! ```sh
//! cargo run --release --example cut_recovery -- --cuts 50
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, Runtime};
use sitenet_transport::fault::{FaultInjector, SEED_ENV};

#[derive(Parser)]
struct Args {
    /// Rounds, each cutting the channel once idle and once busy.
    #[arg(long, default_value_t = 50)]
    cuts: u32,
    /// Messages sent between two cuts.
    #[arg(long, default_value_t = 2000)]
    per_cut: u64,
    /// Body bytes of the messages streamed while a cut happens.
    #[arg(long, default_value_t = 16384)]
    size: usize,
}

#[derive(Serialize, Deserialize)]
struct Tick {
    seq: u64,
}
impl Message for Tick {
    const ID: u32 = 42;
}

fn main() {
    let args = Args::parse();
    let faults = FaultInjector::from_env_or_random(SEED_ENV);
    eprintln!("{}", faults.seed_report());
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("server"))
        .start()
        .expect("server starts");
    let delivered = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    {
        let (delivered, next) = (delivered.clone(), next.clone());
        server
            .handle(move |_ctx, t: Tick| {
                assert_eq!(
                    t.seq,
                    next.fetch_add(1, Ordering::AcqRel),
                    "exactly once, in order"
                );
                delivered.fetch_add(1, Ordering::AcqRel);
                let _ = tx.send(Instant::now());
            })
            .expect("handler registers");
    }
    let client = Node::builder()
        .runtime(Runtime::dedicated("client"))
        .configure(|c| c.fault_injector = Some(faults.clone()))
        .start()
        .expect("client starts");
    let site = client
        .site(&server.listen_addresses()[0])
        .expect("valid address");
    let mut monitor = client.monitor(&site);
    let mut idle = Histogram::<u64>::new(3).expect("histogram");
    let mut busy = Histogram::<u64>::new(3).expect("histogram");
    let mut seq = 0;
    let wait_delivered = |n: u64| {
        while delivered.load(Ordering::Acquire) < n {
            let _ = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("delivery goes on");
        }
    };
    for _ in 0..args.cuts {
        // Idle channel: everything acknowledged, cut, then one message.
        site.flush(Duration::from_secs(60))
            .blocking()
            .expect("acknowledged");
        let cut = Instant::now();
        faults.cut_all();
        site.send(&Tick { seq }).blocking().expect("queued");
        seq += 1;
        wait_delivered(seq);
        idle.record(cut.elapsed().as_micros() as u64)
            .expect("in range");

        // Busy channel: cut with half a batch in flight; time until every
        // message queued before the cut is delivered (retransmission included).
        let body = bytes::Bytes::from(vec![0u8; args.size]);
        for _ in 0..args.per_cut {
            site.send(&Tick { seq })
                .body(body.clone())
                .blocking()
                .expect("queued");
            seq += 1;
        }
        wait_delivered(seq - args.per_cut / 2);
        let before = faults.cuts();
        let cut = Instant::now();
        faults.cut_all();
        wait_delivered(seq);
        if faults.cuts() > before {
            busy.record(cut.elapsed().as_micros() as u64)
                .expect("in range");
        }
    }
    site.flush(Duration::from_secs(60))
        .blocking()
        .expect("everything acknowledged");
    let mut transitions = Vec::new();
    while let Ok(ev) = monitor.try_recv() {
        transitions.push(ev.state);
    }
    let m = client.metrics();
    let q = |h: &Histogram<u64>| {
        format!(
            "min {} µs, p50 {} µs, p99 {} µs, max {} µs",
            h.min(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        )
    };
    println!(
        "{} cuts, {} messages delivered exactly once, {} retransmitted",
        faults.cuts(),
        delivered.load(Ordering::Acquire),
        m.messages_retransmitted
    );
    println!("idle channel, cut → next message delivered: {}", q(&idle));
    println!(
        "busy channel ({} cuts with ~{} KiB in flight), cut → every queued message delivered: {}",
        busy.len(),
        args.per_cut / 2 * args.size as u64 / 1024,
        q(&busy)
    );
    println!(
        "monitor saw {} transitions (ok → temporarily failed → ok per cut)",
        transitions.len()
    );
    assert_eq!(delivered.load(Ordering::Acquire), seq);
}
