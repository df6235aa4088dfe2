//! One client site of a stress run: bursts of numbered messages of mixed
//! priorities and sizes, a round-trip probe after each burst, and, when the
//! run stops sending, a flush until the server acknowledged everything.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{StressData, StressPing, StressPong};
use crate::{FlushError, Priority, SiteRef};

/// Messages per burst, before each probe.
const BURST: usize = 8;

/// Largest message of a run (several MiB, as the issue asks).
const BIG_MAX: usize = 4 << 20;

/// State shared by the run and its clients.
pub(crate) struct Shared {
    /// Set once every client's node runs: the clients start together, so
    /// that those made first (10,000 nodes take seconds to make) do not
    /// run alone meanwhile and skew the fairness the run measures.
    go: tokio::sync::watch::Sender<bool>,
    stop: AtomicBool,
    /// Bursts per client, if the run has a fixed amount of work.
    rounds: Option<u64>,
    /// Clients that finished their rounds.
    finished: AtomicU64,
    /// Told each time a client finishes its rounds (the run's watch loop
    /// waits on it between samples).
    pub(crate) finished_wake: tokio::sync::Notify,
    /// Messages queued by all clients.
    pub(crate) sent: AtomicU64,
    /// Every probe's round trip, µs, in [`SHARDS`] histograms (a client
    /// records in its own, `client % SHARDS`), so clients on different
    /// threads seldom wait for one another's lock.
    rtt: Box<[Mutex<Histogram<u64>>]>,
    /// The probes since the last timeline sample, sharded as `rtt`.
    window: Box<[Mutex<Histogram<u64>>]>,
    /// Message bodies are slices of this (no copy per message).
    pattern: Bytes,
}

/// Histograms of round trips per run (see [`Shared::rtt`]).
const SHARDS: usize = 16;

fn histograms() -> Box<[Mutex<Histogram<u64>>]> {
    (0..SHARDS).map(|_| Mutex::new(histogram())).collect()
}

/// All of `shards` in one histogram.
fn merged(shards: &[Mutex<Histogram<u64>>], reset: bool) -> Histogram<u64> {
    let mut all = histogram();
    for s in shards {
        let mut h = s.lock();
        let _ = all.add(&*h);
        if reset {
            h.reset();
        }
    }
    all
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

impl Shared {
    pub(crate) fn new(rounds: Option<u64>) -> Self {
        Self {
            go: tokio::sync::watch::Sender::new(false),
            stop: AtomicBool::new(false),
            rounds,
            finished: AtomicU64::new(0),
            finished_wake: tokio::sync::Notify::new(),
            sent: AtomicU64::new(0),
            rtt: histograms(),
            window: histograms(),
            pattern: Bytes::from((0..BIG_MAX).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
        }
    }

    /// Lets every client start.
    pub(crate) fn go(&self) {
        self.go.send_replace(true);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Clients that finished their rounds.
    pub(crate) fn done(&self) -> usize {
        self.finished.load(Ordering::Relaxed) as usize
    }

    fn record_rtt(&self, client: u32, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, 600_000_000);
        let shard = client as usize % SHARDS;
        let _ = self.rtt[shard].lock().record(us);
        let _ = self.window[shard].lock().record(us);
    }

    /// Every probe's round trip of the run so far, µs.
    pub(crate) fn rtt(&self) -> Histogram<u64> {
        merged(&self.rtt, false)
    }

    /// The median and the 99th percentile of the probes since the last
    /// call ((0, 0) if none), and a new window: one timeline sample's
    /// round trips. Both, because a median alone hides the probes that
    /// waited (for a slot, behind a big message) — the ones a user feels.
    pub(crate) fn take_window(&self) -> (u64, u64) {
        let w = merged(&self.window, true);
        if w.is_empty() {
            (0, 0)
        } else {
            (w.value_at_quantile(0.5), w.value_at_quantile(0.99))
        }
    }
}

/// A level: mostly medium and high, some low, a little background.
fn level(rng: &mut StdRng) -> u8 {
    match rng.gen_range(0..100) {
        0..=4 => 1,
        5..=29 => 2,
        30..=69 => 3,
        _ => 4,
    }
}

/// A size: mostly small, some of a frame or more, rarely several MiB.
fn size(rng: &mut StdRng, big_allowed: bool) -> usize {
    match rng.gen_range(0..1000) {
        0..=1 if big_allowed => rng.gen_range(2 << 20..=BIG_MAX),
        0..=849 => 64,
        850..=989 => rng.gen_range(1024..=16 * 1024),
        _ => rng.gen_range(64 * 1024..=256 * 1024),
    }
}

/// The client's loop (see the module documentation).
pub(crate) async fn run(client: u32, site: SiteRef, seed: u64, shared: Arc<Shared>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seq = [0u64; 5];
    let mut last_big: Option<Instant> = None;
    let mut rounds = 0u64;
    let _ = shared.go.subscribe().wait_for(|go| *go).await;
    'run: while !shared.stopped() && shared.rounds.is_none_or(|r| rounds < r) {
        rounds += 1;
        let mut queued = 0;
        for _ in 0..BURST {
            // At most one multi-MiB message per client every few seconds.
            let big_allowed = last_big.is_none_or(|t| t.elapsed() > Duration::from_secs(3));
            let level = level(&mut rng);
            let n = size(&mut rng, big_allowed);
            if n > 1 << 20 {
                last_big = Some(Instant::now());
            }
            let m = StressData {
                client,
                level,
                seq: seq[level as usize],
            };
            let prio = Priority::from_lane(level).expect("levels 1 to 4");
            let body = shared.pattern.slice(..n);
            if let Err(e) = site.send(&m).priority(prio).body(body).await {
                tracing::warn!(client, error = %e, "stress client cannot send");
                shared.sent.fetch_add(queued, Ordering::Relaxed);
                break 'run;
            }
            seq[level as usize] += 1;
            queued += 1;
        }
        // Once per burst: a counter every client on every thread adds to.
        shared.sent.fetch_add(queued, Ordering::Relaxed);
        let t = Instant::now();
        match site
            .request::<StressPing, StressPong>(&StressPing { client })
            .priority(Priority::High)
            .timeout(Duration::from_secs(60))
            .await
        {
            Ok(_) => shared.record_rtt(client, t.elapsed()),
            Err(e) => tracing::warn!(client, error = %e, "stress probe failed"),
        }
    }
    shared.finished.fetch_add(1, Ordering::Relaxed);
    shared.finished_wake.notify_one();
    // Everything queued must be acknowledged: the run then checks that the
    // server delivered exactly what was sent.
    loop {
        match site.flush(Duration::from_secs(30)).await {
            Ok(()) => return,
            Err(FlushError::Timeout { .. }) => continue,
            Err(e) => {
                tracing::warn!(client, error = %e, "stress client cannot flush");
                return;
            }
        }
    }
}
