//! The dataflow layer measured against the layer below, in one sitting:
//!
//! * **bind-to-wake**: a round trip through two streams across two
//!   processes (each hop a bind at one site that wakes a waiter at the
//!   other), against sitenet's own request/reply round trip;
//! * **port throughput**: messages sent to a port in the other process
//!   and read from its stream, against sitenet's one-way messages;
//! * **cells**: mobile against stationary, as the sharing pattern
//!   changes: one site hot, two sites alternating, all three at once.
//!
//! ```text
//! cargo bench -p sitenet-dataflow --bench dataflow [-- --rounds 2000 --items 200000 --json]
//! ```
//!
//! A benchmark, not a test: it asserts nothing about speed. Figures go to
//! docs/dataflow.md with their date and machine.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};
use sitenet_dataflow::{Cell, CellMode, Dataflow, Port, Stream, Ticket};

#[derive(Serialize, Deserialize)]
struct Ping(u64);
impl Message for Ping {
    const ID: u32 = 9001;
}
#[derive(Serialize, Deserialize)]
struct Pong(u64);
impl Message for Pong {
    const ID: u32 = 9002;
}
#[derive(Serialize, Deserialize)]
struct Blast(u64);
impl Message for Blast {
    const ID: u32 = 9003;
}
#[derive(Serialize, Deserialize)]
struct Count;
impl Message for Count {
    const ID: u32 = 9004;
}
#[derive(Serialize, Deserialize)]
struct Counted(u64);
impl Message for Counted {
    const ID: u32 = 9005;
}

/// What the parent sends on the peer's port.
#[derive(Serialize, Deserialize)]
enum Item {
    /// Answer with the same number on the parent's port.
    Ping(u64),
    /// Count; answer once the last one arrives.
    Bulk { last: bool },
}

const ROLE: &str = "SITENET_DATAFLOW_BENCH_ROLE";

#[path = "../../examples/common/args.rs"]
mod args;
#[path = "../examples/common/procs.rs"]
mod procs;
use args::arg;

fn node() -> Node {
    procs::node(Duration::from_secs(10))
}

/// The other process: serves sitenet's echo and count, and answers on
/// the parent's port what arrives on its own.
fn peer() {
    let n = node();
    let df = Dataflow::on(&n);
    n.handle_result(|_ctx, Ping(k): Ping| Ok::<_, String>(Pong(k)))
        .expect("a handler");
    let blasts = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let b = blasts.clone();
    n.handle(move |_ctx, Blast(_): Blast| {
        b.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .expect("a handler");
    let b = blasts.clone();
    n.handle_result(move |_ctx, Count: Count| {
        Ok::<_, String>(Counted(b.swap(0, std::sync::atomic::Ordering::Relaxed)))
    })
    .expect("a handler");
    let (port, mut stream) = Port::<Item>::new(&df);
    println!("{} {}", n.descriptor(), df.offer(&port));
    std::io::stdout().flush().expect("the parent reads");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("the parent's port");
    let back: Port<u64> = df
        .take(&line.trim().parse::<Ticket>().expect("a ticket"))
        .expect("a port");
    let mut bulk = 0u64;
    while let Ok(item) = stream.next_blocking() {
        match item {
            Item::Ping(k) => back.send(k).expect("an answer"),
            Item::Bulk { last } => {
                bulk += 1;
                if last {
                    back.send(bulk).expect("an answer");
                    bulk = 0;
                }
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if std::env::var(ROLE).is_ok() {
        return peer();
    }
    let rounds = arg("--rounds", 2_000);
    let items = arg("--items", 200_000);
    let exchanges = arg("--exchanges", 3_000);
    let json = std::env::args().any(|a| a == "--json");
    let exe = std::env::current_exe().expect("this benchmark's path");
    let mut child = Command::new(exe)
        .env(ROLE, "peer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the peer process");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the peer's tickets");
    let (desc, port_ticket) = line.trim().split_once(' ').expect("two words");
    let n = node();
    let df = Dataflow::on(&n);
    let site = n
        .site_from_descriptor(&desc.parse().expect("a descriptor"))
        .expect("the peer");
    let peer_port: Port<Item> = df
        .take(&port_ticket.parse().expect("a ticket"))
        .expect("a port");
    let (back, mut answers): (Port<u64>, Stream<u64>) = Port::new(&df);
    let mut stdin = child.stdin.take().expect("piped");
    writeln!(stdin, "{}", df.offer(&back)).expect("the peer reads");
    stdin.flush().expect("the peer reads");

    // Round trips: sitenet's request/reply, then two binds that wake.
    let rt = |f: &mut dyn FnMut(u64)| {
        for k in 0..rounds / 10 {
            f(k);
        }
        (0..rounds)
            .map(|k| {
                let t = Instant::now();
                f(k);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect::<Vec<f64>>()
    };
    eprintln!("[dataflow bench] round trips");
    let sitenet_rtt = median(rt(&mut |k| {
        let r = site
            .request::<Ping, Pong>(&Ping(k))
            .timeout(Duration::from_secs(30))
            .blocking()
            .expect("a pong");
        assert_eq!(r.msg.0, k);
    }));
    eprintln!("[dataflow bench] bind-to-wake");
    let df_rtt = median(rt(&mut |k| {
        peer_port.send(Item::Ping(k)).expect("a ping");
        assert_eq!(answers.next_blocking().expect("an answer"), k);
    }));

    eprintln!("[dataflow bench] one-way");
    // One-way throughput.
    let t = Instant::now();
    for k in 0..items {
        site.send(&Blast(k)).blocking().expect("a blast");
    }
    let counted = site
        .request::<Count, Counted>(&Count)
        .timeout(Duration::from_secs(120))
        .blocking()
        .expect("a count")
        .msg
        .0;
    let sitenet_oneway = counted as f64 / t.elapsed().as_secs_f64();
    eprintln!("[dataflow bench] port throughput");
    let t = Instant::now();
    for k in 0..items {
        peer_port
            .send(Item::Bulk {
                last: k + 1 == items,
            })
            .expect("a bulk item");
    }
    let got = answers.next_blocking().expect("the count");
    let port_oneway = got as f64 / t.elapsed().as_secs_f64();
    drop(stdin);
    // The peer serves until it is stopped.
    let _ = child.kill();
    let _ = child.wait();

    eprintln!("[dataflow bench] cells");
    // Cells: three nodes of this process, the cell made on the first.
    let nodes: Vec<Node> = (0..3).map(|_| node()).collect();
    let dfs: Vec<Dataflow> = nodes.iter().map(Dataflow::on).collect();
    let mut cells = Vec::new();
    for mode in [CellMode::Mobile, CellMode::Stationary] {
        for (pattern, who) in [
            ("one_hot", vec![1usize]),
            ("two_alternating", vec![1, 2]),
            ("all_three", vec![0, 1, 2]),
        ] {
            let cell = Cell::new(&dfs[0], mode, 0u64).expect("a cell");
            let t = dfs[0].offer(&cell);
            let moves_before: u64 = dfs.iter().map(|d| d.stats().moves).sum();
            let start = Instant::now();
            let per = exchanges / who.len() as u64;
            let workers: Vec<_> = who
                .iter()
                .map(|&i| {
                    let c: Cell<u64> = dfs[i].take(&t).expect("the cell");
                    std::thread::spawn(move || {
                        for k in 0..per {
                            c.exchange_blocking(k).expect("an exchange");
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("a worker");
            }
            let rate = (per * who.len() as u64) as f64 / start.elapsed().as_secs_f64();
            let moves: u64 = dfs.iter().map(|d| d.stats().moves).sum::<u64>() - moves_before;
            dfs[0].withdraw(&t);
            cells.push((format!("{mode:?}").to_lowercase(), pattern, rate, moves));
        }
    }
    if json {
        let cells: Vec<_> = cells
            .iter()
            .map(|(m, p, r, mv)| serde_json::json!({"mode": m, "pattern": p, "exchanges_per_s": r, "moves": mv}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "sitenet_rtt_us": sitenet_rtt,
                "dataflow_rtt_us": df_rtt,
                "bind_to_wake_us": df_rtt / 2.0,
                "sitenet_oneway_per_s": sitenet_oneway,
                "port_oneway_per_s": port_oneway,
                "cells": cells,
            })
        );
    } else {
        println!("round trip, median: sitenet request/reply {sitenet_rtt:.1} us; two binds that wake {df_rtt:.1} us (bind-to-wake {:.1} us)", df_rtt / 2.0);
        println!(
            "one-way: sitenet {sitenet_oneway:.0} msg/s; port {port_oneway:.0} msg/s ({:.2}x)",
            port_oneway / sitenet_oneway
        );
        for (m, p, r, mv) in &cells {
            println!("cell {m:>10} {p:>16}: {r:>9.0} exchanges/s, {mv} moves");
        }
    }
}
