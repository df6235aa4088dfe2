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

/// Largest message of a run (several MiB).
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
    /// The probes' round trips in [`SHARDS`] shards (a client records in
    /// its own, `client % SHARDS`), so clients on different threads seldom
    /// wait for one another's lock.
    probes: Box<[Mutex<Probes>]>,
    /// Message bodies are slices of this (no copy per message).
    pattern: Bytes,
}

/// Shards of [`Shared::probes`] per run.
const SHARDS: usize = 16;

/// What a probe's round trip waited for, beside the server's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The client's first reply of the run: it waited for its channel to
    /// open, in the server's line while the slots were full (recorded as
    /// the time from the client's start, see [`Shared::first_contact`]).
    First,
    /// A later probe during which the client's channel was opened again
    /// (its turn ended, it was preempted or its channel was cut): it
    /// waited for a slot again.
    Reconnect,
    /// A probe on a channel that stayed open: the steady state.
    Steady,
}

impl Probe {
    /// The kind of a probe answered after `earlier` replies of its client,
    /// its client's node having opened `opened_before` channels when the
    /// probe was queued and `opened_after` when its answer came.
    pub(crate) fn of(earlier: u64, opened_before: u64, opened_after: u64) -> Self {
        if earlier == 0 {
            Self::First
        } else if opened_after != opened_before {
            Self::Reconnect
        } else {
            Self::Steady
        }
    }
}

/// One shard of a run's round trips, µs.
pub(crate) struct Probes {
    /// Every probe's (the report's `rtt_*` keys).
    pub(crate) all: Histogram<u64>,
    /// Every probe's since the last timeline sample.
    pub(crate) window: Histogram<u64>,
    /// [`Probe::Steady`] probes'.
    pub(crate) steady: Histogram<u64>,
    /// [`Probe::Steady`] probes' since the last timeline sample.
    pub(crate) steady_window: Histogram<u64>,
    /// [`Probe::Reconnect`] probes'.
    pub(crate) reconnect: Histogram<u64>,
    /// Each client's wait for its first reply, from its start.
    pub(crate) first_contact: Histogram<u64>,
}

impl Probes {
    pub(crate) fn new() -> Self {
        Self {
            all: histogram(),
            window: histogram(),
            steady: histogram(),
            steady_window: histogram(),
            reconnect: histogram(),
            first_contact: histogram(),
        }
    }

    /// Records a probe of kind `kind` that took `rtt`; a
    /// [`Probe::First`]'s client waited `since_start` for it.
    pub(crate) fn record(&mut self, kind: Probe, rtt: Duration, since_start: Duration) {
        let rtt = micros(rtt);
        let _ = self.all.record(rtt);
        let _ = self.window.record(rtt);
        let _ = match kind {
            Probe::First => self.first_contact.record(micros(since_start)),
            Probe::Reconnect => self.reconnect.record(rtt),
            Probe::Steady => {
                let _ = self.steady_window.record(rtt);
                self.steady.record(rtt)
            }
        };
    }
}

/// `d` in µs, within the histograms' bounds.
fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, 600_000_000)
}

/// One histogram of `shards`, all of them merged (each picked by `pick`,
/// and reset if `reset`).
fn merged(
    shards: &[Mutex<Probes>],
    pick: fn(&mut Probes) -> &mut Histogram<u64>,
    reset: bool,
) -> Histogram<u64> {
    let mut all = histogram();
    for s in shards {
        let mut p = s.lock();
        let h = pick(&mut p);
        let _ = all.add(&*h);
        if reset {
            h.reset();
        }
    }
    all
}

pub(crate) fn histogram() -> Histogram<u64> {
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
            probes: (0..SHARDS).map(|_| Mutex::new(Probes::new())).collect(),
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

    fn record(&self, client: u32, kind: Probe, rtt: Duration, since_start: Duration) {
        self.probes[client as usize % SHARDS]
            .lock()
            .record(kind, rtt, since_start);
    }

    /// Every probe's round trip of the run so far, µs.
    pub(crate) fn rtt(&self) -> Histogram<u64> {
        merged(&self.probes, |p| &mut p.all, false)
    }

    /// The round trips of the probes on a channel that stayed open, µs.
    pub(crate) fn steady(&self) -> Histogram<u64> {
        merged(&self.probes, |p| &mut p.steady, false)
    }

    /// The round trips of the probes that waited for a channel to open
    /// again, µs.
    pub(crate) fn reconnect(&self) -> Histogram<u64> {
        merged(&self.probes, |p| &mut p.reconnect, false)
    }

    /// Each client's wait from its start to its first reply, µs.
    pub(crate) fn first_contact(&self) -> Histogram<u64> {
        merged(&self.probes, |p| &mut p.first_contact, false)
    }

    /// The median and the 99th percentile of the probes since the last
    /// call, and the 99th percentile of the steady ones among them (0 for
    /// none), and a new window: one timeline sample's round trips. Both
    /// percentiles, because a median alone hides the probes that waited
    /// (for a slot, behind a big message) — the ones a user feels; the
    /// steady one tells the waits for a slot from the rest.
    pub(crate) fn take_window(&self) -> (u64, u64, u64) {
        let p99 = |h: &Histogram<u64>| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.99)
            }
        };
        let w = merged(&self.probes, |p| &mut p.window, true);
        let steady = merged(&self.probes, |p| &mut p.steady_window, true);
        let p50 = if w.is_empty() {
            0
        } else {
            w.value_at_quantile(0.5)
        };
        (p50, p99(&w), p99(&steady))
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
///
/// `opened` counts the channels the client's node has opened so far: a
/// probe during which it grew waited for a channel ([`Probe`]).
pub(crate) async fn run(
    client: u32,
    site: SiteRef,
    opened: impl Fn() -> u64,
    seed: u64,
    shared: Arc<Shared>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seq = [0u64; 5];
    let mut last_big: Option<Instant> = None;
    let mut rounds = 0u64;
    let mut replies = 0u64;
    let _ = shared.go.subscribe().wait_for(|go| *go).await;
    let start = Instant::now();
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
        let (t, opened_before) = (Instant::now(), opened());
        match site
            .request::<StressPing, StressPong>(&StressPing { client })
            .priority(Priority::High)
            .timeout(Duration::from_secs(60))
            .await
        {
            Ok(_) => {
                let kind = Probe::of(replies, opened_before, opened());
                shared.record(client, kind, t.elapsed(), start.elapsed());
                replies += 1;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stress::Spread;

    #[test]
    fn a_probe_is_told_by_what_it_waited_for() {
        // A client's first reply, whatever its channels did.
        assert_eq!(Probe::of(0, 0, 1), Probe::First);
        assert_eq!(Probe::of(0, 2, 2), Probe::First);
        // A channel opened while it was out: it waited for a slot again.
        assert_eq!(Probe::of(1, 1, 2), Probe::Reconnect);
        assert_eq!(Probe::of(9, 3, 5), Probe::Reconnect);
        // The channel stayed open.
        assert_eq!(Probe::of(9, 3, 3), Probe::Steady);
    }

    /// A default run's shape: 200 clients, each with 500 probes of 1 to
    /// 3 ms on an open channel, a first reply after up to 2 s in the
    /// server's line, and two probes that waited 2 s for a slot again.
    /// Fewer than 1% of the probes waited, and they lift the mean of every
    /// probe above its p99; told apart, no mean is above its own p99.
    #[test]
    fn waits_for_a_slot_do_not_lift_the_steady_mean_above_its_p99() {
        let mut p = Probes::new();
        let ms = Duration::from_millis;
        for client in 0..200 {
            p.record(Probe::First, ms(5), ms(10 * client));
            for i in 0..500 {
                p.record(Probe::Steady, ms(1 + i % 3), Duration::ZERO);
            }
            p.record(Probe::Reconnect, ms(2000), Duration::ZERO);
            p.record(Probe::Reconnect, ms(2000), Duration::ZERO);
        }
        let all = Spread::of(&p.all);
        assert_eq!(all.count, 200 * 503);
        assert!(all.mean_us > all.p99_us as f64, "{all:?}");
        let (steady, again, first) = (
            Spread::of(&p.steady),
            Spread::of(&p.reconnect),
            Spread::of(&p.first_contact),
        );
        assert_eq!(
            (steady.count, again.count, first.count),
            (100_000, 400, 200)
        );
        for s in [steady, again, first] {
            assert!(s.mean_us <= s.p99_us as f64, "{s:?}");
            assert!(s.p50_us <= s.p99_us && s.p99_us <= s.max_us, "{s:?}");
        }
        assert!(steady.p99_us < 3_010, "{steady:?}");
        // The first contact is the wait from the client's start (0 to
        // 1.99 s), not its first probe's round trip (5 ms).
        assert!(
            first.max_us >= 1_990_000 && first.p50_us >= 990_000,
            "{first:?}"
        );
    }
}
