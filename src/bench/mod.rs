//! `sitenet bench`: sitenet and a raw tokio TCP baseline ([`raw`]) on the
//! same workloads, in one run, so every figure comes with the figure plain
//! TCP reaches on this machine at this moment (this virtual machine's
//! timings drift between runs; only figures of one run compare).
//!
//! | workload | what | unit |
//! |---|---|---|
//! | `rtt_64`, `rtt_4k`, `rtt_64k`, `rtt_1m` | median round trip of an echo of that size, one outstanding | µs |
//! | `throughput_64` | 64-byte messages one way, until all are acknowledged (sitenet) or counted (raw) | msg/s |
//! | `bulk_8m` | 8 MiB messages one way | MB/s |
//! | `hol_64_behind_64m` | a 64-byte message at priority 4 queued right after a 64 MiB one at priority 2: until its echo is back | ms |
//! | `rtt_64_tls`, `bulk_8m_tls` | `rtt_64` and `bulk_8m` over `tls:` (mutual TLS 1.3, certificates of a CA made for the run); the raw baseline is plain TCP | µs, MB/s |
//!
//! Each workload runs `rounds` times (default 3) and the median is kept.
//! With `processes`, each server runs in its own OS process (this
//! executable, `sitenet bench --serve sitenet|raw`), the way users deploy;
//! otherwise on threads of this process.

pub mod against;
pub mod raw;
mod site;
mod tls;

pub use site::echo_round_trips;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::{Node, Runtime};

/// How `sitenet bench` runs.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Each server in its own OS process.
    pub processes: bool,
    /// Runs per workload; the median is reported.
    pub rounds: usize,
    /// Smaller counts (for tests of the harness; figures are noisier).
    pub quick: bool,
    /// The `sitenet` executable that serves in `processes` mode (default:
    /// this one).
    pub server_exe: Option<PathBuf>,
    /// Bound on every wait (connecting, a reply, an acknowledgement).
    pub timeout: Duration,
    /// Run only these workloads (by name, e.g. `hol_64_behind_64m`); all
    /// when empty.
    pub only: Vec<String>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            processes: false,
            rounds: 3,
            quick: false,
            server_exe: None,
            only: Vec::new(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// One workload's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `rtt_64`, `rtt_4k`, `rtt_64k`, `rtt_1m`, `throughput_64`,
    /// `bulk_8m`, `hol_64_behind_64m`, `rtt_64_tls` or `bulk_8m_tls`.
    pub workload: &'static str,
    /// `us`, `msg/s`, `MB/s` or `ms`.
    pub unit: &'static str,
    /// sitenet's figure (median of the rounds).
    pub sitenet: f64,
    /// The raw TCP baseline's figure (median of the rounds).
    pub raw_tcp: f64,
    /// sitenet / raw TCP.
    pub ratio: f64,
    /// Round trips only: sitenet's 99th percentile in µs (median of the
    /// rounds' p99s); absent from other rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sitenet_p99: Option<f64>,
    /// Round trips only: the raw TCP baseline's 99th percentile in µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_tcp_p99: Option<f64>,
}

/// Why the bench could not run or a workload failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A server could not be started (the message says which and why).
    #[error("cannot start the {0} server: {1}")]
    Server(&'static str, String),
    /// A workload failed: a wrong echo, a lost message, a timeout.
    #[error("{0}")]
    Failed(String),
    /// A raw TCP workload failed.
    #[error("raw tcp: {0}")]
    Raw(#[from] std::io::Error),
    /// `only` named a workload that does not exist.
    #[error("no workload named {0:?}; the workloads are {WORKLOADS}")]
    UnknownWorkload(String),
    /// The sitenet client node could not start.
    #[error(transparent)]
    Node(#[from] crate::NodeError),
    /// A run of `bench --against`'s binaries failed (which, and why).
    #[error("{}: {why}", .exe.display())]
    Against {
        /// The binary whose run failed.
        exe: PathBuf,
        /// What went wrong.
        why: String,
    },
}

/// The workloads' names, in the order they run.
const WORKLOADS: &str = "rtt_64, rtt_4k, rtt_64k, rtt_1m, throughput_64, bulk_8m, \
     hol_64_behind_64m, rtt_64_tls, bulk_8m_tls";

/// The workloads that run over TLS (against a server with a certificate).
const TLS_WORKLOADS: [&str; 2] = ["rtt_64_tls", "bulk_8m_tls"];

/// What one workload measures.
#[derive(Debug, Clone, Copy)]
enum Work {
    Rtt {
        size: usize,
        count: u64,
    },
    /// One-way stream; its figure is messages per second, or MB/s when
    /// `bytes`.
    Stream {
        size: usize,
        count: u64,
        bytes: bool,
    },
    HeadOfLine {
        big: usize,
        small: usize,
    },
}

impl Work {
    fn all(quick: bool) -> [(&'static str, &'static str, Work); 9] {
        let q = |full: u64, small: u64| if quick { small } else { full };
        [
            (
                "rtt_64",
                "us",
                Work::Rtt {
                    size: 64,
                    count: q(10_000, 200),
                },
            ),
            (
                "rtt_4k",
                "us",
                Work::Rtt {
                    size: 4 << 10,
                    count: q(5_000, 100),
                },
            ),
            (
                "rtt_64k",
                "us",
                Work::Rtt {
                    size: 64 << 10,
                    count: q(2_000, 50),
                },
            ),
            (
                "rtt_1m",
                "us",
                Work::Rtt {
                    size: 1 << 20,
                    count: q(300, 10),
                },
            ),
            (
                "throughput_64",
                "msg/s",
                Work::Stream {
                    size: 64,
                    count: q(1_000_000, 20_000),
                    bytes: false,
                },
            ),
            (
                "bulk_8m",
                "MB/s",
                Work::Stream {
                    size: 8 << 20,
                    count: q(64, 4),
                    bytes: true,
                },
            ),
            (
                "hol_64_behind_64m",
                "ms",
                Work::HeadOfLine {
                    big: 64 << 20,
                    small: 64,
                },
            ),
            (
                "rtt_64_tls",
                "us",
                Work::Rtt {
                    size: 64,
                    count: q(10_000, 200),
                },
            ),
            (
                "bulk_8m_tls",
                "MB/s",
                Work::Stream {
                    size: 8 << 20,
                    count: q(64, 4),
                    bytes: true,
                },
            ),
        ]
    }

    /// The figure of one run, from a histogram (ns) or a duration.
    fn figure(self, hist: Option<&hdrhistogram::Histogram<u64>>, d: Duration) -> f64 {
        match self {
            Work::Rtt { .. } => hist.map_or(0.0, |h| h.value_at_quantile(0.5) as f64 / 1e3),
            Work::Stream {
                count,
                bytes: false,
                ..
            } => count as f64 / d.as_secs_f64(),
            Work::Stream { size, count, .. } => {
                (size as u64 * count) as f64 / d.as_secs_f64() / 1e6
            }
            Work::HeadOfLine { .. } => d.as_secs_f64() * 1e3,
        }
    }
}

/// A server child process, killed when dropped.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `exe bench --serve KIND` and reads the address it listens on
/// from its first stdout line (`{"listen": "…"}`).
fn spawn_server(
    exe: &PathBuf,
    kind: &'static str,
    tls_dir: Option<&std::path::Path>,
) -> Result<(ServerProcess, String), BenchError> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "--serve", kind]);
    if let Some(d) = tls_dir {
        cmd.arg("--tls-dir").arg(d);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::Server(kind, format!("{}: {e}", exe.display())))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let proc = ServerProcess(child);
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| BenchError::Server(kind, e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| BenchError::Server(kind, format!("first line {line:?}: {e}")))?;
    let listen = v["listen"]
        .as_str()
        .ok_or_else(|| BenchError::Server(kind, format!("no listen address in {line:?}")))?;
    Ok((proc, listen.to_string()))
}

/// The sitenet server: a node with the built-in echo and sink services
/// (over TLS, on `tls:`, with `tls`).
pub fn sitenet_server(
    rt: Option<Runtime>,
    tls: Option<sitenet_transport::tls::TlsIdentity>,
) -> Result<Node, crate::NodeError> {
    let listen = if tls.is_some() {
        "tls:127.0.0.1:0"
    } else {
        "tcp:127.0.0.1:0"
    };
    let mut b = Node::builder().listen(listen).configure(|c| {
        c.builtin_services = true;
        c.tls = tls;
    });
    if let Some(rt) = rt {
        b = b.runtime(rt);
    }
    b.start()
}

/// Serves `kind` (`sitenet`, `sitenet-tls` with the certificates in
/// `tls_dir` as `tls::BenchPki` wrote them, or `raw`) until the process
/// is killed, after printing `{"listen": "…"}` on stdout (the `--serve`
/// mode of `sitenet bench`, which the processes mode starts).
pub fn serve(kind: &str, tls_dir: Option<&std::path::Path>) -> Result<(), BenchError> {
    use std::io::Write;
    let tls = match (kind, tls_dir) {
        ("sitenet-tls", Some(d)) => Some(tls::BenchPki::server_identity(d)?),
        ("sitenet-tls", None) => {
            return Err(BenchError::Server(
                "sitenet-tls",
                "--serve sitenet-tls needs --tls-dir".into(),
            ))
        }
        _ => None,
    };
    match kind {
        "sitenet" | "sitenet-tls" => {
            let node = sitenet_server(None, tls)?;
            println!(
                "{}",
                serde_json::json!({ "listen": node.listen_addresses()[0] })
            );
            let _ = std::io::stdout().flush();
            loop {
                std::thread::park();
            }
        }
        "raw" => raw::serve_forever("127.0.0.1:0", |a| {
            println!("{}", serde_json::json!({ "listen": a.to_string() }));
            let _ = std::io::stdout().flush();
        })
        .map_err(|e| BenchError::Server("raw", e.to_string())),
        other => Err(BenchError::Server(
            "bench",
            format!("unknown server kind {other:?}: use sitenet, sitenet-tls or raw"),
        )),
    }
}

/// Runs every workload on both stacks and returns one row each.
/// `progress` is told each workload's name as it starts.
pub fn run(cfg: &BenchConfig, mut progress: impl FnMut(&str)) -> Result<Vec<Row>, BenchError> {
    // Servers: threads of this process, or processes of their own.
    let all = Work::all(cfg.quick);
    if let Some(bad) = cfg.only.iter().find(|w| !all.iter().any(|(n, ..)| n == w)) {
        return Err(BenchError::UnknownWorkload(bad.clone()));
    }
    let selected = |name: &str| cfg.only.is_empty() || cfg.only.iter().any(|w| w == name);
    // The TLS rows need a CA, a server certificate and a client one.
    // The TLS rows' certificates, server and client are made only when
    // the first TLS row runs (they come last): nothing of theirs runs
    // beside the plain rows.
    let mut pki = None;
    let mut tls_side: Option<TlsSide> = None;
    let mut children = Vec::new();
    let mut local_server = None;
    let exe = match (&cfg.server_exe, cfg.processes) {
        (_, false) => None,
        (Some(p), true) => Some(p.clone()),
        (None, true) => Some(
            std::env::current_exe().map_err(|e| BenchError::Server("sitenet", e.to_string()))?,
        ),
    };
    let (site_addr, raw_addr) = match &exe {
        Some(exe) => {
            let (p1, a1) = spawn_server(exe, "sitenet", None)?;
            let (p2, a2) = spawn_server(exe, "raw", None)?;
            children.push(p1);
            children.push(p2);
            (a1, a2)
        }
        None => {
            let node = sitenet_server(Some(Runtime::dedicated("bench-server")), None)?;
            let a = node.listen_addresses()[0].clone();
            local_server = Some(node);
            let r =
                raw::spawn_server_thread().map_err(|e| BenchError::Server("raw", e.to_string()))?;
            (a, r.to_string())
        }
    };
    let client = Node::builder().start()?;
    let site = client.site(&site_addr)?;
    let raw_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Raw)?;
    let t = cfg.timeout;
    let mut rows = Vec::new();
    for (name, unit, work) in all {
        if !selected(name) {
            continue;
        }
        progress(name);
        if TLS_WORKLOADS.contains(&name) && tls_side.is_none() {
            let p = pki.insert(tls::BenchPki::new()?);
            tls_side = Some(TlsSide::start(exe.as_ref(), p)?);
        }
        let (client, site) = match &tls_side {
            Some(t) if TLS_WORKLOADS.contains(&name) => (&t.client, &t.site),
            _ => (&client, &site),
        };
        let mut s_figs = Vec::new();
        let mut r_figs = Vec::new();
        let (mut s_p99s, mut r_p99s) = (Vec::new(), Vec::new());
        for _ in 0..cfg.rounds.max(1) {
            let (sf, rf) = match work {
                Work::Rtt { size, count } => {
                    let h = site::echo_round_trips(client, site, count, size, t)?;
                    let r = raw_rt.block_on(raw::rtt(&raw_addr, count, size, t))?;
                    let zero = Duration::ZERO;
                    s_p99s.push(p99_us(&h));
                    r_p99s.push(p99_us(&r));
                    (work.figure(Some(&h), zero), work.figure(Some(&r), zero))
                }
                Work::Stream { size, count, .. } => {
                    let d = site::stream(client, site, count, size, t)?;
                    let r = raw_rt.block_on(raw::stream(&raw_addr, count, size, t))?;
                    (work.figure(None, d), work.figure(None, r))
                }
                Work::HeadOfLine { big, small } => {
                    let d = site::head_of_line(client, site, big, small, t)?;
                    let r = raw_rt.block_on(raw::head_of_line(&raw_addr, big, small, t))?;
                    (work.figure(None, d), work.figure(None, r))
                }
            };
            s_figs.push(sf);
            r_figs.push(rf);
        }
        let (sitenet, raw_tcp) = (median(&mut s_figs), median(&mut r_figs));
        let p99 = |v: &mut Vec<f64>| (!v.is_empty()).then(|| median(v));
        rows.push(Row {
            workload: name,
            unit,
            sitenet,
            raw_tcp,
            ratio: if raw_tcp > 0.0 {
                sitenet / raw_tcp
            } else {
                0.0
            },
            sitenet_p99: p99(&mut s_p99s),
            raw_tcp_p99: p99(&mut r_p99s),
        });
    }
    drop(site);
    client
        .shutdown_blocking(Duration::from_secs(5))
        .unwrap_or_default();
    if let Some(n) = local_server {
        n.shutdown_blocking(Duration::from_secs(5))
            .unwrap_or_default();
    }
    if let Some(t) = tls_side {
        t.stop();
    }
    drop(children);
    drop(pki);
    Ok(rows)
}

/// The TLS rows' server (a process of its own, or a node on a thread of
/// this one) and client node.
struct TlsSide {
    process: Option<ServerProcess>,
    local: Option<Node>,
    client: Node,
    site: crate::SiteRef,
}

impl TlsSide {
    fn start(exe: Option<&PathBuf>, pki: &tls::BenchPki) -> Result<Self, BenchError> {
        let (process, local, addr) = match exe {
            Some(exe) => {
                let (p, a) = spawn_server(exe, "sitenet-tls", Some(pki.dir()))?;
                (Some(p), None, a)
            }
            None => {
                let id = tls::BenchPki::server_identity(pki.dir())?;
                let node = sitenet_server(Some(Runtime::dedicated("bench-tls-server")), Some(id))?;
                let a = node.listen_addresses()[0].clone();
                (None, Some(node), a)
            }
        };
        let client = Node::builder()
            .configure(|c| c.tls = Some(pki.client_identity.clone()))
            .start()?;
        let site = client.site(&addr)?;
        Ok(Self {
            process,
            local,
            client,
            site,
        })
    }

    fn stop(self) {
        drop(self.site);
        self.client
            .shutdown_blocking(Duration::from_secs(5))
            .unwrap_or_default();
        if let Some(n) = self.local {
            n.shutdown_blocking(Duration::from_secs(5))
                .unwrap_or_default();
        }
        drop(self.process);
    }
}

/// The 99th percentile of round trips recorded in nanoseconds, in µs.
fn p99_us(h: &hdrhistogram::Histogram<u64>) -> f64 {
    h.value_at_quantile(0.99) as f64 / 1e3
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
