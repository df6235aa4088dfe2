//! # pingpong — Madeleine's ping-pong RPC on sitenet
//!
//! Madeleine (Bougé, Méhaut, Namyst, "Madeleine: An Efficient and Portable
//! Communication Interface for RPC-based Multithreaded Environments", INRIA
//! RR-3845, 1999)
//! measured its network layer with a ping-pong of one-sided RPCs: the only
//! argument is an array of bytes, and handling the RPC means receiving the
//! array and sending it straight back. What makes it Madeleine's and not
//! MPI's is how the message is received:
//!
//! * an **express header** (`RECV_EXPRESS`) — a small description of the
//!   request (its type, its sequence number, how long the body is) that is
//!   unpacked first, so the handler can decide what to do and where the body
//!   should go *before* touching it;
//! * a **deferred body** (`RECV_CHEAPER`) — the bulk data, extracted only
//!   after the handler has looked at the header, without extra copies, and in
//!   the same network message (MPI needs two messages, and twice the latency).
//!
//! In sitenet a message is exactly that: a typed header (a small Rust type
//! serialised with rmp-serde, with a stable wire id) decoded first, and a
//! body of `Bytes` parts that is never serialised. Here the request is
//! [`PingHeader`] `{ seq, body_len }` + body; the handler checks the header,
//! then takes the body (`ctx.body()`, a cheap `Bytes` clone) and replies with a
//! [`PongHeader`] + the same body — the echo goes back without copying the
//! body in user code.
//!
//! The program starts two nodes in this process — a server node listening on
//! `tcp:127.0.0.1:0` and a client node without a listener — so the traffic
//! goes over a real loopback TCP connection. After a warm-up it measures,
//! for each body size, round trips with one request outstanding at a time,
//! running the loop on the client node's runtime thread (as `sitenet ping`
//! does, so a round trip costs what the network layer costs, not a hand-off
//! between threads). By default both nodes share sitenet's one runtime
//! thread; `--server-thread` gives the server node a runtime thread of its own
//! (closer to two processes).
//!
//! It prints, per size: round trips, min/p50/p99 µs, and MB/s computed as
//! `2 × size / p50` (the body crosses the network twice per round trip).
//!
//! ```text
//! cargo run --release --example pingpong
//! cargo run --release --example pingpong -- --count 200
//! cargo run --release --example pingpong -- --sizes 64,65536 --count 5000
//! cargo run --release --example pingpong -- --server-thread --json
//! ```
//!
//! The 1 MiB size (and any size of 1 MiB or more) uses `count / 10` round
//! trips, at least 10. Exit codes: 0 success, 1 failure, 2 usage errors.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use sitenet::{Message, Node, Runtime, SendOptions};

/// The express header of a ping: decoded before the handler sees the body.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PingHeader {
    /// The caller's sequence number, returned in the pong.
    pub seq: u64,
    /// How many body bytes follow.
    pub body_len: u64,
}

impl Message for PingHeader {
    const ID: u32 = 0x5049_4E47; // "PING", below sitenet's reserved 0xFFFF_0000
}

/// The header of the reply; the body is the ping's body, echoed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PongHeader {
    /// The ping's sequence number.
    pub seq: u64,
    /// Body bytes in the reply.
    pub body_len: u64,
}

impl Message for PongHeader {
    const ID: u32 = 0x504F_4E47; // "PONG"
}

const DEFAULT_SIZES: [usize; 6] = [8, 64, 1024, 16384, 65536, 1048576];
const WARM_UP: u64 = 100;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(
    name = "pingpong",
    about = "Madeleine's ping-pong RPC (header first, then body) over sitenet"
)]
struct Cli {
    /// Body sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES)]
    sizes: Vec<usize>,
    /// Round trips per size (sizes of 1 MiB or more use count/10, at least 10).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Run the server node on a runtime thread of its own.
    #[arg(long)]
    server_thread: bool,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    size: usize,
    round_trips: u64,
    min_us: f64,
    p50_us: f64,
    p99_us: f64,
    mb_per_sec: f64,
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("pingpong: {msg}");
    ExitCode::from(2)
}

fn failure(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("pingpong: {msg}");
    ExitCode::from(1)
}

fn count_for(size: usize, count: u64) -> u64 {
    if size >= 1 << 20 {
        (count / 10).max(10)
    } else {
        count
    }
}

/// A body whose bytes depend on their position, so a wrong echo shows.
fn pattern(size: usize) -> Bytes {
    (0..size)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    if cli.sizes.is_empty() {
        return usage("--sizes needs at least one size");
    }
    if cli.count == 0 {
        return usage("--count must be at least 1");
    }
    let max = sitenet::NodeConfig::default().max_message_size as usize;
    if let Some(s) = cli.sizes.iter().find(|&&s| s >= max) {
        return usage(format!(
            "size {s} is not below the maximum message size ({max} bytes)"
        ));
    }

    // The server: the handler reads the express header first, then takes
    // the body, and replies with a header and the same body.
    let mut builder = Node::builder().listen("tcp:127.0.0.1:0");
    if cli.server_thread {
        builder = builder.runtime(Runtime::dedicated("pingpong-server"));
    }
    let server = match builder.start() {
        Ok(n) => n,
        Err(e) => return failure(format!("cannot start the server node: {e}")),
    };
    let handled = server.handle(|ctx, h: PingHeader| {
        // Express part: decide from the header alone. A real handler would
        // choose here where the body goes (Madeleine's RECV_EXPRESS).
        let body = ctx.body().clone(); // deferred part: a `Bytes`, no copy
        if body.len() as u64 != h.body_len {
            eprintln!(
                "pingpong server: seq {} announced {} body bytes, got {}",
                h.seq,
                h.body_len,
                body.len()
            );
        }
        let pong = PongHeader {
            seq: h.seq,
            body_len: body.len() as u64,
        };
        if let Err(e) = ctx.reply_with(&pong, SendOptions::new().body(body)) {
            eprintln!("pingpong server: reply to seq {} not sent: {e}", h.seq);
        }
    });
    if let Err(e) = handled {
        return failure(format!("cannot register the ping handler: {e}"));
    }

    let client = match Node::builder().start() {
        Ok(n) => n,
        Err(e) => return failure(format!("cannot start the client node: {e}")),
    };
    let site = match client.site(&server.listen_addresses()[0]) {
        Ok(s) => s,
        Err(e) => return failure(e),
    };

    // The whole measurement runs on the client node's runtime thread.
    let (tx, rx) = std::sync::mpsc::channel();
    let sizes = cli.sizes.clone();
    let count = cli.count;
    let spawned = client.runtime().spawn(async move {
        let result = async {
            let mut seq = 0u64;
            // Warm-up: opens the channel and fills the caches, untimed.
            let small = pattern(64);
            for _ in 0..WARM_UP {
                seq += 1;
                let opts = SendOptions::default().body(small.clone());
                let h = PingHeader { seq, body_len: 64 };
                site.request::<PingHeader, PongHeader>(&h).options(opts).timeout(REQUEST_TIMEOUT)
                    .await
                    .map_err(|e| format!("warm-up: {e}"))?;
            }
            let mut rows = Vec::new();
            for &size in &sizes {
                let body = pattern(size);
                let n = count_for(size, count);
                let mut hist = Histogram::<u64>::new(3).expect("histogram");
                // One untimed round trip at this size first.
                for i in 0..=n {
                    seq += 1;
                    let h = PingHeader { seq, body_len: size as u64 };
                    let opts = SendOptions::default().body(body.clone());
                    let t = Instant::now();
                    let r = site.request::<PingHeader, PongHeader>(&h).options(opts).timeout(REQUEST_TIMEOUT).await;
                    let elapsed = t.elapsed();
                    let r = r.map_err(|e| format!("size {size}, seq {seq}: {e}"))?;
                    if r.msg.seq != seq || r.msg.body_len != size as u64 || r.body != body {
                        return Err(format!(
                            "echo mismatch: sent seq {seq} with {size} bytes, got seq {} announcing {} with {} bytes{}",
                            r.msg.seq,
                            r.msg.body_len,
                            r.body.len(),
                            if r.body.len() == size { " (contents differ)" } else { "" }
                        ));
                    }
                    if i > 0 {
                        hist.record(elapsed.as_nanos() as u64).expect("in range");
                    }
                }
                let us = |ns: u64| ns as f64 / 1000.0;
                let p50 = us(hist.value_at_quantile(0.5));
                rows.push(Row {
                    size,
                    round_trips: n,
                    min_us: us(hist.min()),
                    p50_us: p50,
                    p99_us: us(hist.value_at_quantile(0.99)),
                    mb_per_sec: 2.0 * size as f64 / p50,
                });
            }
            Ok(rows)
        }
        .await;
        let _ = tx.send(result);
    });
    if !spawned {
        return failure("the client node's runtime is not running");
    }
    let rows = match rx.recv() {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return failure(e),
        Err(_) => return failure("the measurement task ended without a result"),
    };

    if cli.json {
        let v = serde_json::json!({
            "server_thread": cli.server_thread,
            "results": rows,
        });
        println!("{v}");
    } else {
        println!(
            "Madeleine ping-pong over sitenet (loopback TCP, {})",
            if cli.server_thread {
                "server on its own thread"
            } else {
                "both nodes on one runtime thread"
            }
        );
        println!(
            "{:>9} {:>11} {:>10} {:>10} {:>10} {:>10}",
            "size", "round trips", "min µs", "p50 µs", "p99 µs", "MB/s"
        );
        for r in &rows {
            println!(
                "{:>9} {:>11} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                r.size, r.round_trips, r.min_us, r.p50_us, r.p99_us, r.mb_per_sec
            );
        }
    }
    // The server first, while the client can still acknowledge its last
    // reply: a client stopped first does not send its pending ack, and the
    // server would wait for the whole deadline.
    for (name, node) in [("server", &server), ("client", &client)] {
        // From main, never the node's own thread: it cannot deadlock.
        let report = node
            .shutdown_blocking(Duration::from_secs(2))
            .unwrap_or_default();
        if report.unacknowledged_bytes > 0 {
            eprintln!(
                "pingpong: {name} node: {} bytes unacknowledged at shutdown",
                report.unacknowledged_bytes
            );
        }
    }
    ExitCode::SUCCESS
}
