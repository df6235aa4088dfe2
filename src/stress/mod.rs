//! `sitenet stress`, as a library: one server site and many client sites in
//! one process, the server with a handful of channel slots, mixed priorities
//! and sizes (several-MiB messages included), random channel cuts — and a
//! verdict: was anything lost, duplicated or reordered, and did the slot and
//! transport-memory bounds hold.
//!
//! The Mozart paper's server served 170 clients on 30 descriptors; this is
//! that experiment, repeatable (seeded) and checked message by message.

mod check;
mod client;
mod report;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use check::{Checker, StressData, StressPing, StressPong, Totals};
pub use report::{jain, quantiles, Sample, Spread, StressReport, ThreadPair};

use crate::{Node, NodeConfig};
use sitenet_protocols::slots::{by_name, Admission, SlotConfig};
use sitenet_transport::{FaultInjector, TransController};

/// How a stress run is set up. `Default` is the CLI's default run.
#[derive(Debug, Clone)]
pub struct StressConfig {
    /// Client sites, each a node of its own in this process.
    pub clients: usize,
    /// The server's hard slot limit (its weak limit is four fifths of it).
    pub slots: usize,
    /// The server's preemption policy: `naive` or `default`.
    pub policy: String,
    /// Who gives a slot up while clients wait in the server's line, and so
    /// who is served next: `Share` (the default) or `Fifo`.
    pub admission: Admission,
    /// How long the clients send.
    pub duration: Duration,
    /// Channels cut per second, on average (0: none).
    pub cut_rate: f64,
    /// Seeds the workload and the cuts: a run can be replayed.
    pub seed: u64,
    /// The byte channels: `tcp` (loopback), `tls` (loopback, mutual TLS
    /// with a certificate per node from a CA made for the run), `unix` (a
    /// socket file in the temp directory) or `mem` (in-process, no
    /// descriptor).
    pub transport: String,
    /// If set, each client stops after this many bursts (a fixed amount of
    /// work, for comparing runs of different sizes: `--sweep`); the run
    /// ends when every client is done, or at `duration`.
    pub rounds: Option<u64>,
    /// The cookies every node of the run (server and clients) holds
    /// (empty: the open level), to measure the cookie level under
    /// churn: every reconnect runs the proofs again.
    pub cookies: Vec<sitenet_protocols::Cookie>,
    /// The threads every node of the run runs its sites on:
    /// the process-wide pool of that many. `None`: the default pool, one
    /// thread per core.
    pub threads: Option<usize>,
}

impl Default for StressConfig {
    fn default() -> Self {
        Self {
            clients: 200,
            slots: 30,
            policy: "default".into(),
            admission: Admission::default(),
            duration: Duration::from_secs(20),
            cut_rate: 2.0,
            seed: 1,
            transport: "tcp".into(),
            rounds: None,
            cookies: Vec::new(),
            threads: None,
        }
    }
}

/// A run's own CA (`--transport tls`): every node of the run gets a
/// certificate of its own from it, as a deployment's sites do.
struct RunPki(sitenet_transport::tls::certs::CertAndKey);

impl RunPki {
    fn new() -> Result<Self, StressError> {
        sitenet_transport::tls::certs::new_ca()
            .map(Self)
            .map_err(|e| StressError::Config(e.to_string()))
    }

    /// A TLS identity for a fresh site.
    fn site(&self) -> Result<sitenet_transport::tls::TlsIdentity, StressError> {
        use sitenet_transport::tls::{certs, TlsIdentity};
        let id = sitenet_protocols::SiteId(rand::random());
        let s = certs::new_site(&self.0, id, &certs::Validity::default())
            .map_err(|e| StressError::Config(e.to_string()))?;
        TlsIdentity::from_pem(&s.cert_pem, &s.key_pem, &self.0.cert_pem)
            .map_err(|e| StressError::Config(e.to_string()))
    }
}

/// Why a run could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum StressError {
    /// The options cannot work.
    #[error("{0}")]
    Config(String),
    /// A node would not start.
    #[error("a node would not start: {0}")]
    Node(#[from] crate::NodeError),
}

/// Where a run stands, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Time since the clients started.
    pub elapsed: Duration,
    /// How long they send.
    pub duration: Duration,
    /// True once sending stopped and the run waits for the last messages.
    pub draining: bool,
    /// Messages sent so far.
    pub sent: u64,
    /// Messages the server delivered so far.
    pub delivered: u64,
    /// The server's slots in use now.
    pub slots_in_use: usize,
    /// Preemptions so far.
    pub preemptions: u64,
}

/// Resident memory of this process, in bytes (0 where it cannot be read).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Measures what an idle remote site costs: a node creates `n` site entries
/// (no channel, no traffic) and the resident memory it grows by is divided
/// among them — first while they are only referenced (their ComObjects not
/// started: they cost their entries), then once each ComObject was started,
/// as the first message to it would, and left idle: parked, and what their
/// actors used while they ran given back to the system (resident memory
/// read every 200 ms until it stops falling, at most 3 s). Returns (idle,
/// never used). Both figures include the allocator's own overhead.
fn measure_idle_site_bytes(n: u64) -> Result<(u64, u64), StressError> {
    let node = Node::builder().start()?;
    // The node's own start (its tasks on the runtime) is not the sites'.
    settle(&node);
    let before = resident_bytes();
    let sites: Vec<_> = (0..n)
        .map(|i| node.site(format!("tcp:127.0.0.1:{}", 1 + i)))
        .collect::<Result<_, _>>()?;
    let referenced = resident_bytes();
    let parks = node.metrics().parks;
    for s in &sites {
        s.prepare();
    }
    settle(&node);
    // Idle means parked: wait until every site's ComObject has parked, then
    // until what their actors used while they ran has been given back (the
    // node trims after a wave of parks), each wait bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while node.metrics().parks - parks < n && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut started = resident_bytes();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = resident_bytes();
        if now >= started {
            break;
        }
        started = now;
    }
    drop(sites);
    node.shutdown_blocking(Duration::from_millis(100))
        .unwrap_or_default();
    Ok((
        started.saturating_sub(before) / n,
        referenced.saturating_sub(before) / n,
    ))
}

/// Returns once every actor the node's runtime was asked to start before
/// now has started (they start in order on its thread).
fn settle(node: &Node) {
    let (tx, rx) = std::sync::mpsc::channel();
    node.runtime().spawn(async move {
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(60));
}

/// Timers short enough for a run of seconds (the defaults suit
/// long-lived deployments).
fn quick(c: &mut NodeConfig) {
    c.reconnect_min = Duration::from_millis(10);
    c.reconnect_max = Duration::from_millis(300);
    c.reopen_after_peer_hard_close = Duration::from_millis(30);
}

/// The most clients one run takes ([`StressConfig::clients`]): each is a
/// node of its own in this process, some 34 KB over `mem` (10,000 took
/// 338 MB), more over TCP, with a descriptor or two each. A million is
/// past most machines already; more would only fail later, for want of
/// memory.
pub const MAX_CLIENTS: usize = 1_000_000;

/// Checks a number of clients (1 to [`MAX_CLIENTS`]) before a run: a
/// sweep checks every count it is given before it runs the first.
pub fn check_clients(clients: usize) -> Result<(), StressError> {
    if clients == 0 {
        return Err(StressError::Config("--clients must be at least 1".into()));
    }
    if clients > MAX_CLIENTS {
        return Err(StressError::Config(format!(
            "--clients must be at most {MAX_CLIENTS} (each client is a node in this \
             process, some 34 KB and a descriptor or two), got {clients}"
        )));
    }
    Ok(())
}

/// Runs the stress test, calling `progress` every 100 ms.
pub fn run(
    cfg: &StressConfig,
    mut progress: impl FnMut(&Progress),
) -> Result<StressReport, StressError> {
    check_clients(cfg.clients)?;
    let min_hold = Duration::from_millis(50);
    let policy = by_name(&cfg.policy, min_hold).ok_or_else(|| {
        StressError::Config(format!(
            "unknown policy {:?}: use naive or default",
            cfg.policy
        ))
    })?;
    let mut slot_cfg = SlotConfig::new((cfg.slots * 4 / 5).max(1), cfg.slots)
        .map_err(|e| StressError::Config(format!("--slots: {e}")))?;
    slot_cfg.preempt_interval = Duration::from_millis(5);
    // Room in line for every client (each waits at most once): none is
    // refused for want of room.
    slot_cfg.line = cfg.clients;
    slot_cfg.admission = cfg.admission;
    let (idle_site_bytes, unused_site_bytes) = measure_idle_site_bytes(5_000)?;

    let listen = match cfg.transport.as_str() {
        "tcp" => "tcp:127.0.0.1:0".to_string(),
        "unix" => format!(
            "unix:{}",
            std::env::temp_dir()
                .join(format!(
                    "sitenet-stress-{}-{:x}.sock",
                    std::process::id(),
                    cfg.seed
                ))
                .display()
        ),
        "mem" => sitenet_transport::Address::unique_mem("sitenet-stress").to_string(),
        "tls" => "tls:127.0.0.1:0".to_string(),
        other => {
            return Err(StressError::Config(format!(
                "unknown transport {other:?}: use tcp, tls, unix or mem"
            )))
        }
    };
    // `tls`: a CA for the run, and a certificate per node.
    let pki = (cfg.transport == "tls").then(RunPki::new).transpose()?;
    let slots = TransController::new(slot_cfg, policy);
    let injector = FaultInjector::new(cfg.seed);
    let checker = Arc::new(Checker::new(cfg.clients));
    let server_tls = pki.as_ref().map(RunPki::site).transpose()?;
    let server = Node::builder()
        .listen(listen.clone())
        .configure(|c| {
            quick(c);
            c.cookies = cfg.cookies.clone();
            c.tls = server_tls;
            c.trans_controller = Some(slots.clone());
            c.fault_injector = Some(injector.clone());
            c.threads = cfg.threads;
        })
        .start()?;
    let ck = checker.clone();
    let server_rt = server.runtime().clone();
    server
        .handle(move |ctx, m: StressData| {
            if ck.server_thread_unknown(m.client) {
                if let Some(t) = server_rt.worker_of(std::thread::current().id()) {
                    ck.note_server_thread(m.client, t);
                }
            }
            ck.record(&m, ctx.body().len())
        })
        .map_err(StressError::Node)?;
    server
        .handle(|ctx, _: StressPing| {
            let _ = ctx.reply(&StressPong);
        })
        .map_err(StressError::Node)?;
    let target = server.listen_addresses()[0].clone();

    // The cutter and the sampling only: the clients run on their nodes.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| StressError::Config(format!("cannot start a runtime: {e}")))?;
    let shared = Arc::new(client::Shared::new(cfg.rounds));
    let mut clients = Vec::with_capacity(cfg.clients);
    let mut tasks = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        let tls = pki.as_ref().map(RunPki::site).transpose()?;
        let node = Node::builder()
            .configure(|c| {
                quick(c);
                c.cookies = cfg.cookies.clone();
                c.tls = tls;
                c.threads = cfg.threads;
            })
            .start()?;
        let site = node.site(&target)?;
        let seed = cfg.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The client's loop runs on its node's home thread, where its one
        // site (the server) lives too: what it sends is a queue push, not
        // a wake of another thread — as a runtime's own code on the node's
        // threads would (and `--threads 1` is the whole run on one).
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let counters = node.clone();
        let opened = move || counters.metrics().channels_opened;
        let work = client::run(i as u32, site, opened, seed, shared.clone());
        let (client_rt, ck) = (node.runtime().clone(), checker.clone());
        let work = async move {
            if let Some(t) = client_rt.worker_of(std::thread::current().id()) {
                ck.note_client_thread(i as u32, t);
            }
            work.await
        };
        if !node.runtime().spawn(async move {
            work.await;
            let _ = done.send(());
        }) {
            return Err(StressError::Config(
                "the nodes' runtime does not run".into(),
            ));
        }
        tasks.push(finished);
        clients.push(node);
    }
    let cuts = (cfg.cut_rate > 0.0).then(|| {
        let inj = injector.clone();
        let mean = Duration::from_secs_f64(1.0 / cfg.cut_rate);
        let stop = shared.clone();
        rt.spawn(async move {
            while !stop.stopped() {
                // Uniform in [0.5, 1.5] × the mean gap, from the seed's RNG.
                tokio::time::sleep(mean.mul_f64(0.5 + inj.unit_draw())).await;
                inj.cut_one();
            }
        })
    });

    // Watch the run: progress, timeline, then the end of sending. It
    // starts once every node runs.
    let start = Instant::now();
    shared.go();
    let mut timeline = Vec::new();
    let sample = |draining: bool, timeline: &mut Vec<Sample>| {
        let s = slots.stats();
        let p = Progress {
            elapsed: start.elapsed(),
            duration: cfg.duration,
            draining,
            sent: shared.sent.load(Ordering::Relaxed),
            delivered: checker.totals().delivered,
            slots_in_use: s.in_use,
            preemptions: s.total_preemptions(),
        };
        let (rtt_p50_us, rtt_p99_us, steady_rtt_p99_us) = shared.take_window();
        timeline.push(Sample {
            t_s: p.elapsed.as_secs_f64(),
            rtt_p50_us,
            rtt_p99_us,
            steady_rtt_p99_us,
            draining,
            slots_in_use: s.in_use,
            preemptions: p.preemptions,
        });
        p
    };
    // A sample every 100 ms; woken early when a client finishes its
    // rounds, so that a run of fixed work ends when its last client does,
    // not at the next tick (a sweep's total time is not rounded up to
    // 100 ms).
    let mut next = tokio::time::Instant::now() + Duration::from_millis(100);
    while start.elapsed() < cfg.duration && shared.done() < cfg.clients {
        let finished = rt.block_on(async {
            tokio::time::timeout_at(next, shared.finished_wake.notified())
                .await
                .is_ok()
        });
        if !finished {
            progress(&sample(false, &mut timeline));
            next = tokio::time::Instant::now() + Duration::from_millis(100);
        }
    }
    let sending = start.elapsed().min(cfg.duration);
    shared.stop();
    if let Some(c) = cuts {
        // The cutter sleeps between cuts (up to 1.5 × the mean gap, 0.75 s
        // at the default rate): stopped where it waits, not waited for —
        // the drain, and so a run of fixed rounds' total time, once
        // included the rest of that sleep (0.75 s at every sweep size).
        c.abort();
        let _ = rt.block_on(c);
    }
    injector.disarm_cuts();
    // Every client has flushed (everything it sent acknowledged) when its
    // task ends; then the server has delivered everything.
    // Sampled every 100 ms while they drain (not once per client that
    // finishes), and once more at the end.
    rt.block_on(async {
        let all = tokio::time::timeout(Duration::from_secs(180), futures::future::join_all(tasks));
        tokio::pin!(all);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.tick().await; // (the first tick is at once)
        loop {
            tokio::select! {
                _ = &mut all => break,
                _ = tick.tick() => progress(&sample(true, &mut timeline)),
            }
        }
    });
    progress(&sample(true, &mut timeline));
    let elapsed = start.elapsed();

    let s = slots.stats();
    let server_stats = server.stats();
    let (mut opened, mut retransmitted) = (0, server.metrics().messages_retransmitted);
    for c in &clients {
        let m = c.metrics();
        opened += m.channels_opened.saturating_sub(1);
        retransmitted += m.messages_retransmitted;
    }
    let rtt = shared.rtt();
    let sent = shared.sent.load(Ordering::Relaxed);
    let totals = checker.totals();
    let delivered = totals.delivered;
    let per_client = checker.per_client();
    let report = StressReport {
        clients: cfg.clients,
        sent,
        delivered,
        lost: sent.saturating_sub(delivered),
        duplicated: totals.duplicated,
        reordered: totals.reordered,
        bytes: totals.bytes,
        preemptions: s.total_preemptions(),
        preemptions_by_reason: s
            .preemptions
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.to_string(), *n))
            .collect(),
        accepts_refused: s.accepts_refused,
        grants: s.grants,
        peak_line: s.peak_line,
        fairness_jain: jain(&per_client),
        per_client_delivered_quantiles: quantiles(&per_client),
        delivered_by_threads: ThreadPair::groups(&checker.threads(), &per_client),
        server_home_thread: server.runtime().index_for(0),
        admission: s.admission.to_string(),
        threads: server.runtime().threads(),
        reconnects: opened,
        retransmitted,
        cuts: injector.cuts(),
        peak_slots: s.peak_in_use,
        slot_limit: s.hard,
        peak_transport_bytes: server_stats.transport_bytes_peak,
        transport_bytes_bound: server_stats.transport_bytes_bound,
        rtt_p50_us: rtt.value_at_quantile(0.5),
        rtt_p99_us: rtt.value_at_quantile(0.99),
        rtt_mean_us: rtt.mean(),
        rtt_min_us: rtt.min(),
        // (Undefined for an empty histogram.)
        rtt_max_us: if rtt.is_empty() { 0 } else { rtt.max() },
        round_trips: rtt.len(),
        steady_rtt: Spread::of(&shared.steady()),
        reconnect_rtt: Spread::of(&shared.reconnect()),
        first_contact: Spread::of(&shared.first_contact()),
        idle_site_bytes,
        unused_site_bytes,
        policy: cfg.policy.clone(),
        transport: cfg.transport.clone(),
        seed: cfg.seed,
        duration_s: sending.as_secs_f64(),
        elapsed_s: elapsed.as_secs_f64(),
        timeline,
    };
    for c in clients {
        c.shutdown_blocking(Duration::from_millis(200))
            .unwrap_or_default();
    }
    server
        .shutdown_blocking(Duration::from_millis(200))
        .unwrap_or_default();
    if let Some(path) = listen.strip_prefix("unix:") {
        let _ = std::fs::remove_file(path);
    }
    Ok(report)
}
