//! # raw_tcp — the raw tokio TCP baseline for every sitenet measurement
//!
//! sitenet is only worth its protocol (handshakes, acks, priorities,
//! fragmentation, reconnects) if it costs little over what plain TCP gives on
//! the same machine. Numbers from another day or another machine mean
//! nothing, so every sitenet figure is compared with this program measured
//! **in the same run**: a raw tokio TCP echo server and client doing the same
//! workloads as `sitenet ping`, with nothing on top but length-prefixed
//! frames.
//!
//! The baseline itself is `sitenet::bench::raw` (which `sitenet bench`
//! runs too); this program is a command line over it. It is a fair,
//! reasonably tuned baseline, not a strawman:
//!
//! * frames are `u32` little-endian length + payload;
//! * `TCP_NODELAY` on both ends;
//! * reads go into one large buffer (256 KiB, grown for bigger frames), and
//!   every complete frame in it is handled in one pass;
//! * writes are batched: replies (or, for `send`, outgoing frames up to
//!   64 KiB) are accumulated into one buffer and written with one `write_all`;
//! * threads as in `sitenet ping`: the client runs on one current-thread tokio
//!   runtime, the server on its own current-thread runtime.
//!
//! A connection starts with one mode byte: `E` (echo every frame back) or
//! `S` (sink: count frames; a frame whose length field is `u32::MAX` asks for
//! the count, answered by a 16-byte frame `count: u64 LE, bytes: u64 LE`).
//!
//! ## Workloads
//!
//! * `ping` — COUNT round trips of SIZE bytes, one outstanding at a time, after
//!   one untimed warm-up round trip (as `sitenet ping`). Reports min/p50/p99/
//!   max/mean in µs from an hdrhistogram; `--json` prints the same keys as
//!   `sitenet ping --json`: `count, size, min_us, p50_us, p99_us, max_us,
//!   mean_us` (there is no `site_id`: raw TCP has no sites).
//! * `send` — COUNT messages of SIZE bytes streamed one way as fast as
//!   possible (batched writes), counted by the server, then one final round
//!   trip confirms the server saw them all. Reports `count, size,
//!   msgs_per_sec` (and `mb_per_sec`, `elapsed_ms`).
//!
//! ## Running
//!
//! Two processes, as sitenet's `node` + `ping` (build first so the server
//! starts at once):
//!
//! ```text
//! cargo build --release --example raw_tcp
//! ./target/release/examples/raw_tcp server --listen 127.0.0.1:0 &
//! #   -> {"listen":"127.0.0.1:PORT"}   (first stdout line; serves until killed)
//! ./target/release/examples/raw_tcp ping 127.0.0.1:PORT --count 10000 --size 64 --json
//! ./target/release/examples/raw_tcp send 127.0.0.1:PORT --count 1000000 --size 64 --json
//! kill %1
//! ```
//!
//! and the sitenet side in the same run:
//!
//! ```text
//! ./target/release/sitenet node --listen tcp:127.0.0.1:0 &
//! ./target/release/sitenet ping tcp:127.0.0.1:PORT --count 10000 --size 64 --json
//! ```
//!
//! One process (the server on its own thread, for quick runs):
//!
//! ```text
//! cargo run --release --example raw_tcp -- both --count 2000 --size 64 --json
//! cargo run --release --example raw_tcp -- both --workload send --count 1000000 --size 64
//! ```
//!
//! Addresses may be written `HOST:PORT` or, as for sitenet, `tcp:HOST:PORT`.
//! Exit codes: 0 success, 1 failure (connection refused, timeout, a wrong
//! echo), 2 usage errors and malformed addresses.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use sitenet::bench::raw::{self, MAX_FRAME};

#[derive(Parser)]
#[command(
    name = "raw_tcp",
    about = "Raw tokio TCP baseline (length-prefixed frames) for sitenet comparisons"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve echo and sink connections. Prints {"listen": "HOST:PORT"} as its
    /// first stdout line, then serves until killed.
    Server {
        /// Address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Round trips to a server, one outstanding at a time.
    Ping {
        /// The server's address, HOST:PORT (or tcp:HOST:PORT).
        addr: String,
        #[command(flatten)]
        opts: Opts,
    },
    /// Stream messages one way as fast as possible, then confirm the count.
    Send {
        /// The server's address, HOST:PORT (or tcp:HOST:PORT).
        addr: String,
        #[command(flatten)]
        opts: Opts,
    },
    /// Start a server in this process on its own thread and run a workload
    /// against it.
    Both {
        /// Which workload to run.
        #[arg(long, value_enum, default_value_t = Workload::Ping)]
        workload: Workload,
        #[command(flatten)]
        opts: Opts,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    Ping,
    Send,
}

#[derive(clap::Args, Clone, Copy)]
struct Opts {
    /// Number of round trips (ping) or messages (send).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the connection to be established.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

/// Why a command failed, and so its exit code.
enum Fail {
    /// Exit code 2.
    Usage(String),
    /// Exit code 1.
    Failure(String),
}

impl Fail {
    fn exit(self) -> ExitCode {
        match self {
            Fail::Usage(m) => {
                eprintln!("raw_tcp: {m}");
                ExitCode::from(2)
            }
            Fail::Failure(m) => {
                eprintln!("raw_tcp: {m}");
                ExitCode::from(1)
            }
        }
    }
}

/// The result of `ping`: the JSON keys of `sitenet ping --json`.
#[derive(Debug, Serialize)]
struct PingResult {
    count: u64,
    size: usize,
    min_us: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
}

/// The result of `send`.
#[derive(Debug, Serialize)]
struct SendResult {
    count: u64,
    size: usize,
    msgs_per_sec: f64,
    mb_per_sec: f64,
    elapsed_ms: f64,
}

fn main() -> ExitCode {
    // The server reports failed connections as warnings, on stderr.
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Server { listen } => parse_addr(&listen).and_then(|a| {
            raw::serve_forever(&a, |local| {
                println!("{}", serde_json::json!({ "listen": local.to_string() }));
                let _ = io::stdout().flush();
            })
            .map_err(|e| Fail::Failure(format!("cannot serve on {a}: {e}")))
        }),
        Cmd::Ping { addr, opts } => {
            check(&opts).and_then(|()| run_client(&parse_addr(&addr)?, Workload::Ping, opts))
        }
        Cmd::Send { addr, opts } => {
            check(&opts).and_then(|()| run_client(&parse_addr(&addr)?, Workload::Send, opts))
        }
        Cmd::Both { workload, opts } => check(&opts).and_then(|()| {
            let addr = raw::spawn_server_thread()
                .map_err(|e| Fail::Failure(format!("cannot start the server thread: {e}")))?;
            run_client(&addr.to_string(), workload, opts)
        }),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

fn check(o: &Opts) -> Result<(), Fail> {
    if o.count == 0 {
        return Err(Fail::Usage("--count must be at least 1".into()));
    }
    if o.size > MAX_FRAME {
        return Err(Fail::Usage(format!(
            "--size {} exceeds the largest frame ({MAX_FRAME} bytes)",
            o.size
        )));
    }
    if !(o.timeout.is_finite() && o.timeout > 0.0) {
        return Err(Fail::Usage(format!(
            "--timeout must be a positive number of seconds, got {}",
            o.timeout
        )));
    }
    Ok(())
}

/// `HOST:PORT` or `tcp:HOST:PORT` → `HOST:PORT` (resolved when connecting).
fn parse_addr(a: &str) -> Result<String, Fail> {
    let s = a.strip_prefix("tcp:").unwrap_or(a);
    let bad = || {
        Fail::Usage(format!(
            "malformed address {a:?}: expected HOST:PORT or tcp:HOST:PORT"
        ))
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(s.to_string())
}

fn run_client(addr: &str, workload: Workload, o: Opts) -> Result<(), Fail> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::Failure(format!("cannot start a tokio runtime: {e}")))?;
    let timeout = Duration::from_secs_f64(o.timeout);
    let fail = |e: io::Error| Fail::Failure(format!("{addr}: {e}"));
    match workload {
        Workload::Ping => {
            let hist = rt
                .block_on(raw::rtt(addr, o.count, o.size, timeout))
                .map_err(fail)?;
            let us = |ns: u64| ns as f64 / 1000.0;
            let r = PingResult {
                count: o.count,
                size: o.size,
                min_us: us(hist.min()),
                p50_us: us(hist.value_at_quantile(0.5)),
                p99_us: us(hist.value_at_quantile(0.99)),
                max_us: us(hist.max()),
                mean_us: hist.mean() / 1000.0,
            };
            if o.json {
                println!("{}", serde_json::to_string(&r).expect("serialisable"));
            } else {
                println!(
                    "{} round trips of {} bytes to {addr} (raw tcp): min {:.1} µs, p50 {:.1} µs, \
                     p99 {:.1} µs, max {:.1} µs, mean {:.1} µs",
                    r.count, r.size, r.min_us, r.p50_us, r.p99_us, r.max_us, r.mean_us
                );
            }
        }
        Workload::Send => {
            let elapsed = rt
                .block_on(raw::stream(addr, o.count, o.size, timeout))
                .map_err(fail)?;
            let secs = elapsed.as_secs_f64();
            let r = SendResult {
                count: o.count,
                size: o.size,
                msgs_per_sec: o.count as f64 / secs,
                mb_per_sec: (o.count * o.size as u64) as f64 / secs / 1e6,
                elapsed_ms: secs * 1e3,
            };
            if o.json {
                println!("{}", serde_json::to_string(&r).expect("serialisable"));
            } else {
                println!(
                    "{} messages of {} bytes to {addr} (raw tcp): {:.0} msg/s, {:.1} MB/s, {:.1} ms",
                    r.count, r.size, r.msgs_per_sec, r.mb_per_sec, r.elapsed_ms
                );
            }
        }
    }
    Ok(())
}
