//! The `sitenet` command line: `node`, `ping`, `send`, `stress`, `stats`,
//! `demo`.
//!
//! Results go to stdout (one JSON object with `--json`), logs to stderr
//! (`RUST_LOG` filters them). Exit codes: 0 success, 1 failure (unreachable,
//! permanent failure), 2 usage errors and malformed addresses.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use sitenet::{metrics_http, Address, Node};

#[derive(Parser)]
#[command(
    name = "sitenet",
    version,
    about = "The network layer for distributed language runtimes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve a site: an echo service (for `ping`). Prints one JSON line with
    /// its site id and real listen addresses (and, with --metrics, the
    /// metrics address), then runs until interrupted.
    Node {
        /// Address to listen on, e.g. tcp:127.0.0.1:7000 (port 0 picks a free
        /// one); repeat for several. Default: tcp:127.0.0.1:0, or
        /// tls:127.0.0.1:0 with --cert (a node with a certificate listens
        /// only on tls: addresses).
        #[arg(long)]
        listen: Vec<String>,
        /// Answer `sitenet stats` from other hosts too (by default only from
        /// this host: the stats name every connected site).
        #[arg(long)]
        stats_from_anywhere: bool,
        /// Serve the node's counters and gauges as OpenMetrics text at
        /// http://HOST:PORT/metrics, for Prometheus and other scrapers
        /// (port 0 picks a free one; the first line's "metrics" key tells
        /// which). Plain HTTP with no authentication, and the per-site
        /// series name sites: bind it to 127.0.0.1 or a private interface.
        #[arg(long, value_name = "tcp:HOST:PORT")]
        metrics: Option<String>,
        /// Who gives a channel slot up while peers wait in this node's line
        /// (its slots full, peers are told to wait instead of refused):
        /// `share`, short turns in rotation (the default), or `fifo`, first
        /// come stays until preempted.
        #[arg(long, value_parser = ["share", "fifo"])]
        admission: Option<String>,
        /// Threads the node's sites run on (default: one per core): each
        /// site's channel, session and handlers stay on one of them.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
        threads: Option<u16>,
        #[command(flatten)]
        auth: auth::Members,
    },
    /// Measure round trips to a node's echo service.
    Ping {
        /// The node's address (e.g. tcp:127.0.0.1:7000, unix:/tmp/n.sock) or its
        /// descriptor ID@ADDR,ADDR,… (its site id and listen list: the best
        /// transport on this host is used).
        addr: String,
        /// Number of round trips (at least 1).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// Body bytes per request (echoed back), at most the maximum
        /// message (256 MiB, header included).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
        /// Seconds to wait for the node (connect and each reply).
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
        #[command(flatten)]
        auth: auth::Members,
    },
    /// Stream numbered messages to a node's sink, wait until every one is
    /// acknowledged, and report the sink's verdict (loss, duplicates, order).
    Send {
        /// The node's address (e.g. tcp:127.0.0.1:7000, unix:/tmp/n.sock) or its
        /// descriptor ID@ADDR,ADDR,… (its site id and listen list: the best
        /// transport on this host is used).
        addr: String,
        /// Number of messages (at least 1).
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// Body bytes per message, at most the maximum message (256 MiB,
        /// header included).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Priority level: 2 (low), 3 (medium) or 4 (high).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=4))]
        priority: u8,
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
        /// Seconds to wait for the node to answer at first connect.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
        /// Seconds a temporarily failed node is retried before it counts as
        /// permanently failed.
        #[arg(long, default_value_t = 60.0)]
        give_up: f64,
        #[command(flatten)]
        auth: auth::Members,
    },
    /// Start two nodes in this process, exchange messages and request/replies,
    /// and print what happened.
    Demo {
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Many client sites against one server with few channel slots, in this
    /// process: mixed priorities and sizes, random channel cuts, every
    /// message checked. Exits 1 if anything was lost or a bound exceeded.
    Stress(stress::Args),
    /// A deterministic simulation of many sites in this thread: the real
    /// connection machines over a virtual network with faults (cuts,
    /// partitions, crashes and restarts, slow readers), every message
    /// checked. Same seed, same run (its SHA-256 digest is printed). Without
    /// --seed, tries seeds for --search seconds. Exits 1 on a violation,
    /// naming the seed and the step.
    Sim(sim::Args),
    /// sitenet against a raw tokio TCP baseline on the same workloads, in
    /// one run: round trips at 64 B, 4 KiB, 64 KiB, 1 MiB; one-way 64 B
    /// messages; bulk 8 MiB messages; a small urgent message behind a
    /// 64 MiB one. Prints each figure and the ratio sitenet/raw.
    Bench(bench::Args),
    /// Ask a running `sitenet node` for its resources: channel slots,
    /// transport memory against its bound, sites, and per-site counters.
    Stats {
        /// The node's address (e.g. tcp:127.0.0.1:7000, unix:/tmp/n.sock) or its
        /// descriptor ID@ADDR,ADDR,… (its site id and listen list: the best
        /// transport on this host is used).
        addr: String,
        /// Print the node's answer as one JSON object.
        #[arg(long)]
        json: bool,
        /// Seconds to wait for the node.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
        #[command(flatten)]
        auth: auth::Members,
    },
    /// Shared-secret authentication (the cookie level): `sitenet cookie
    /// new PATH` writes a fresh random cookie, readable by its owner only.
    #[command(subcommand)]
    Cookie(cookie::CookieCmd),
    /// Certificates for the TLS level: `sitenet cert ca DIR` makes a CA,
    /// `sitenet cert site --ca DIR DIR2` a certificate for a fresh site id.
    #[command(subcommand)]
    Cert(cert::CertCmd),
}

mod auth;
mod bench;
mod cert;
mod cookie;
mod demo;
mod ping;
mod plot;
mod send;
mod sim;
mod stats;
mod stress;
mod target;

use target::{check_target, client};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A simulation's thousands of sites fail and restart on purpose: their
    // warnings would bury the verdict (RUST_LOG still chooses).
    let quiet = match cli.cmd {
        Cmd::Sim(_) => "error",
        // A client's site failing is the command's own error, printed once
        // by the command (which says what to do), not also as a warning.
        Cmd::Ping { .. } | Cmd::Send { .. } | Cmd::Stats { .. } => {
            "warn,sitenet_runtime::com_object::report=error"
        }
        _ => "warn",
    };
    // Colour codes only for a person at a terminal: in a file or a pipe
    // they are bytes that every reader (grep, a log collector) must strip.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| quiet.into()),
        )
        .init();
    match cli.cmd {
        Cmd::Node {
            listen,
            stats_from_anywhere,
            metrics,
            admission,
            threads,
            auth,
        } => run_node(
            listen,
            stats_from_anywhere,
            metrics,
            admission,
            threads,
            auth,
        ),
        Cmd::Ping {
            addr,
            count,
            size,
            json,
            timeout,
            auth,
        } => ping::run_ping(&addr, count, size, json, timeout, auth),
        Cmd::Send {
            addr,
            count,
            size,
            priority,
            json,
            timeout,
            give_up,
            auth,
        } => send::run_send(&addr, count, size, priority, json, timeout, give_up, auth),
        Cmd::Demo { json } => demo::run(json),
        Cmd::Stress(args) => stress::run(args),
        Cmd::Sim(args) => sim::run(args),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Stats {
            addr,
            json,
            timeout,
            auth,
        } => stats::run(&addr, json, timeout, auth),
        Cmd::Cookie(c) => cookie::run(c),
        Cmd::Cert(c) => cert::run(c),
    }
}

pub(crate) fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("sitenet: {msg}");
    ExitCode::from(2)
}

pub(crate) fn failure(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("sitenet: {msg}");
    ExitCode::from(1)
}

fn run_node(
    mut listen: Vec<String>,
    stats_from_anywhere: bool,
    metrics: Option<String>,
    admission: Option<String>,
    threads: Option<u16>,
    auth: auth::Members,
) -> ExitCode {
    if listen.is_empty() {
        let scheme = if auth.has_tls() { "tls" } else { "tcp" };
        listen.push(format!("{scheme}:127.0.0.1:0"));
    }
    for a in &listen {
        if let Err(e) = a.parse::<Address>() {
            return usage(e);
        }
    }
    if let Some(m) = &metrics {
        if let Err(e) = metrics_http::parse(m) {
            return usage(format!("--metrics: {e}"));
        }
    }
    let security = match auth.load("node") {
        Ok(s) => s,
        Err(code) => return code,
    };
    if security.cookies.is_empty() && security.tls.is_none() {
        eprintln!(
            "sitenet node: --open (no cookie, no certificate): ANYONE WHO REACHES THE LISTEN ADDRESSES CAN BE ANY SITE"
        );
    }
    // The CLI's node serves echo (`sitenet ping`) and the sink (`sitenet send`).
    let mut b = Node::builder().configure(|c| {
        c.builtin_services = true;
        c.stats_from_anywhere = stats_from_anywhere;
        c.admission = admission
            .as_deref()
            .and_then(sitenet_protocols::slots::Admission::by_name);
        c.threads = threads.map(usize::from);
        security.apply(c);
    });
    for a in listen {
        b = b.listen(a);
    }
    let node = match b.start() {
        Ok(n) => n,
        Err(e) => return failure(e),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Bound before the first line is printed, so the line names the real
    // port and a scraper started on it finds the listener there.
    let metrics = match metrics {
        None => None,
        Some(m) => match rt.block_on(metrics_http::bind(&m)) {
            Ok(l) => match metrics_http::local_address(&l) {
                Ok(a) => Some((l, a)),
                Err(e) => return failure(format!("--metrics {m}: {e}")),
            },
            Err(e) => return failure(e),
        },
    };
    // Exactly the form the README documents (key order and spacing), so a
    // script matching the line textually works as well as a JSON parser;
    // "metrics" comes last, and only with --metrics.
    let listen = serde_json::to_string(&node.listen_addresses()).expect("strings serialise");
    let metrics_key = match &metrics {
        Some((_, a)) => format!(", \"metrics\": {}", serde_json::json!(a)),
        None => String::new(),
    };
    println!(
        "{{\"site_id\": \"{}\", \"listen\": {}, \"protocol\": {}{metrics_key}}}",
        node.id(),
        listen.replace("\",\"", "\", \""),
        sitenet_protocols::PROTOCOL_VERSION
    );
    let _ = std::io::stdout().flush();
    // The memory bound, on stderr (stdout's first line is a contract).
    let stats = node.stats();
    eprintln!(
        "sitenet node: channel slots weak {} hard {} (policy {}, admission {}, line {}); transport buffers at most {} bytes",
        stats.slots.weak,
        stats.slots.hard,
        stats.slots.policy,
        stats.slots.admission,
        stats.slots.line_limit,
        stats.transport_bytes_bound
    );
    if let Some((listener, address)) = metrics {
        if listener.local_addr().is_ok_and(|a| !a.ip().is_loopback()) {
            eprintln!(
                "sitenet node: metrics on {address}: ANYONE WHO REACHES IT READS THE COUNTERS AND THE IDS OF THE BUSIEST SITES"
            );
        }
        rt.spawn(metrics_http::serve_node(
            listener,
            node.clone(),
            metrics_http::Limits::default(),
        ));
    }
    rt.block_on(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    let report = node
        .shutdown_blocking(Duration::from_secs(2))
        .unwrap_or_default();
    tracing::info!(?report, "node stopped");
    ExitCode::SUCCESS
}

pub(crate) fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v <= MAX_SECONDS {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{name} must be a positive number of seconds, at most {MAX_SECONDS:e}, got {v}"
        ))
    }
}

/// The longest time an option takes (about 31 years): a clock plus more
/// than that overflows, and nothing a user means lasts longer.
const MAX_SECONDS: f64 = 1e9;

/// `--size` of `ping` and `send`: a body no larger than the maximum message
/// (header and body together) the nodes take by default. It is made before
/// anything is sent, so a size past memory aborted the process.
pub(crate) fn body_size(size: usize) -> Result<usize, String> {
    let max = sitenet::NodeConfig::default().max_message_size;
    if size as u64 <= max {
        Ok(size)
    } else {
        Err(format!(
            "--size must be at most {max} bytes (the maximum message, header included), got {size}"
        ))
    }
}
