//! # churn: many short-lived variables across three sites
//!
//! Each of three sites (nodes in this process, over TCP loopback) makes
//! variables, sends each to the next site through a port, waits for the
//! next site to bind it, and drops it. Distributed collection must give
//! every entity back: the sites' books end empty and the process's
//! resident memory where it was after a warm-up.
//!
//! ```text
//! cargo run --release -p sitenet-dataflow --example churn -- --vars 1000000 --json
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use sitenet_dataflow::{Dataflow, Port, Stream, Ticket, Var};

#[path = "common/procs.rs"]
mod procs;

#[derive(Parser)]
#[command(about = "Short-lived variables made, bound and dropped across three sites")]
struct Cli {
    /// Variables in all (a third made on each site).
    #[arg(long, default_value_t = 300_000)]
    vars: u64,
    /// Variables made before the first memory reading.
    #[arg(long, default_value_t = 30_000)]
    warm_up: u64,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Resident memory of this process, KiB.
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

/// Runs `n` variables per site through the ring of sites; each site's
/// stream is read from where the last round left it.
fn round(
    dfs: &[Dataflow],
    ports: &[Ticket],
    streams: Vec<Stream<Var<u64>>>,
    n: u64,
) -> Vec<Stream<Var<u64>>> {
    let binders: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                for k in 0..n {
                    s.next_blocking().unwrap().bind_blocking(k).unwrap();
                }
                s
            })
        })
        .collect();
    let makers: Vec<_> = (0..3)
        .map(|i| {
            let df = dfs[i].clone();
            let next: Port<Var<u64>> = df.take(&ports[(i + 1) % 3]).unwrap();
            std::thread::spawn(move || {
                for k in 0..n {
                    let v: Var<u64> = Var::new(&df);
                    next.send(v.clone()).unwrap();
                    assert_eq!(v.wait_blocking().unwrap(), k);
                }
            })
        })
        .collect();
    for t in makers {
        t.join().unwrap();
    }
    binders.into_iter().map(|b| b.join().unwrap()).collect()
}

fn main() {
    let cli = Cli::parse();
    let nodes: Vec<_> = (0..3)
        .map(|_| procs::node(Duration::from_secs(10)))
        .collect();
    let dfs: Vec<Dataflow> = nodes.iter().map(Dataflow::on).collect();
    let (mut ports, mut streams) = (Vec::new(), Vec::new());
    for df in &dfs {
        let (p, s) = Port::<Var<u64>>::new(df);
        ports.push(df.offer(&p));
        streams.push(s);
    }
    let streams = round(&dfs, &ports, streams, cli.warm_up / 3);
    let before = rss_kib();
    let start = Instant::now();
    let streams = round(&dfs, &ports, streams, cli.vars / 3);
    let elapsed = start.elapsed().as_secs_f64();
    // The last Cleans may still be on their way.
    let settle = Instant::now();
    while dfs.iter().any(|d| d.entities().1 != 0) && settle.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = rss_kib();
    // What is left on each site: its port and its stream's current
    // cell, and proxies of nothing.
    let left: Vec<(usize, usize)> = dfs.iter().map(|d| d.entities()).collect();
    if cli.json {
        println!(
            "{}",
            serde_json::json!({
                "vars": cli.vars / 3 * 3,
                "elapsed_s": elapsed,
                "vars_per_s": (cli.vars / 3 * 3) as f64 / elapsed,
                "rss_before_kib": before,
                "rss_after_kib": after,
                "entities_left": left,
            })
        );
    } else {
        println!(
            "{} variables in {elapsed:.2} s; resident {before} KiB before, {after} KiB after; entities left per site {left:?}",
            cli.vars / 3 * 3
        );
    }
    drop(streams);
    for n in nodes {
        let _ = n.shutdown_blocking(Duration::from_secs(5));
    }
}
