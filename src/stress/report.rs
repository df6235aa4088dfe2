//! What a stress run reports: the verdict's counts, the round trips, the
//! fairness across clients and the timeline the plots draw. The JSON keys
//! are a contract (`sitenet stress --json`): keys are added, never renamed.

use std::collections::BTreeMap;

use serde::Serialize;

/// One point of the run's timeline (every 100 ms), for plots.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the clients started.
    pub t_s: f64,
    /// Median round trip of the probes answered in this interval (µs; 0
    /// if none).
    pub rtt_p50_us: u64,
    /// 99th percentile of the same probes (µs; 0 if none): the median
    /// alone hides the probes that waited for a slot or behind a big
    /// message, and those are what a user of a loaded server feels.
    pub rtt_p99_us: u64,
    /// 99th percentile of the steady probes among them (µs; 0 if none):
    /// those answered on a channel that stayed open
    /// ([`StressReport::steady_rtt`]). Where `rtt_p99_us` rises far above
    /// it, the slow probes of the interval waited for a slot.
    pub steady_rtt_p99_us: u64,
    /// True once the clients stopped sending and the run waits for the
    /// last messages to be acknowledged (from
    /// [`StressReport::duration_s`] on): round trips there are the
    /// stragglers', not the steady state's, so plots set them apart.
    pub draining: bool,
    /// The server's slots in use.
    pub slots_in_use: usize,
    /// Preemptions so far.
    pub preemptions: u64,
}

/// How long one kind of wait took, µs: how many there were and their
/// spread. Each kind apart, so that a few long waits of one kind (a client
/// in the server's line for its first slot) do not lift the mean of the
/// other (the round trip on an open channel) above its own p99.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// How many were measured.
    pub count: u64,
    /// Their mean, µs (0 if none).
    pub mean_us: f64,
    /// Their median, µs (0 if none).
    pub p50_us: u64,
    /// Their 99th percentile, µs (0 if none).
    pub p99_us: u64,
    /// The longest, µs (0 if none).
    pub max_us: u64,
}

impl Spread {
    /// The spread of the values in `h`.
    pub(crate) fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// The clients whose loop ran on one pool thread and whose messages the
/// server delivered on another (or the same), and what they got through:
/// a run on more than one thread is not fair across these groups, and the
/// per-client curve steps between them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadPair {
    /// The pool thread the clients' loops (and their own sites) ran on.
    pub client_thread: usize,
    /// The pool thread the server's sites for them ran on (where their
    /// messages were delivered).
    pub server_thread: usize,
    /// How many clients.
    pub clients: usize,
    /// Their mean messages delivered.
    pub delivered_mean: f64,
    /// The least any of them got through.
    pub delivered_min: u64,
    /// The most any of them got through.
    pub delivered_max: u64,
}

impl ThreadPair {
    /// The groups of `threads` (per client: its thread, the server's for
    /// it; clients with either unknown left out), with `delivered` per
    /// client, ordered by thread.
    pub fn groups(threads: &[(Option<usize>, Option<usize>)], delivered: &[u64]) -> Vec<Self> {
        let mut groups: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
        for (&t, &d) in threads.iter().zip(delivered) {
            if let (Some(c), Some(s)) = t {
                groups.entry((c, s)).or_default().push(d);
            }
        }
        groups
            .into_iter()
            .map(|((client_thread, server_thread), d)| Self {
                client_thread,
                server_thread,
                clients: d.len(),
                delivered_mean: d.iter().sum::<u64>() as f64 / d.len() as f64,
                delivered_min: d.iter().copied().min().unwrap_or(0),
                delivered_max: d.iter().copied().max().unwrap_or(0),
            })
            .collect()
    }
}

/// The outcome of a run. The JSON keys are a contract (`sitenet stress
/// --json`).
#[derive(Debug, Clone, Serialize)]
pub struct StressReport {
    /// Client sites.
    pub clients: usize,
    /// Messages the clients queued (and the server must deliver).
    pub sent: u64,
    /// Messages the server delivered.
    pub delivered: u64,
    /// Sent and never delivered.
    pub lost: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Delivered ahead of an earlier message of the same client and level.
    pub reordered: u64,
    /// Body bytes delivered.
    pub bytes: u64,
    /// Channels the server preempted.
    pub preemptions: u64,
    /// The same, by the reason that decided.
    pub preemptions_by_reason: BTreeMap<String, u64>,
    /// Accepts the server closed at once (at its hard limit, its line full
    /// or the client unable to wait).
    pub accepts_refused: u64,
    /// Slots the server granted from its waiting line (clients told to wait
    /// instead of refused, let in when a slot freed).
    pub grants: u64,
    /// Most clients in the server's line at once.
    pub peak_line: usize,
    /// Jain's fairness index of the messages the server delivered per
    /// client, (Σx)² / (n·Σx²): 1 when every client got as much through,
    /// 1/n when one client got everything.
    pub fairness_jain: f64,
    /// The messages the server delivered per client, sorted and taken at
    /// every percent: entry `q` (0 to 100) is the count at percentile `q`
    /// of the clients (nearest rank; 0 is the least served client, 100 the
    /// most, 50 the median). Always 101 numbers, whatever the number of
    /// clients: the counts behind `fairness_jain` as a curve (flat when
    /// every client got as much through) — a 10,000-client run's JSON does
    /// not carry 10,000 counts, and the curve drawn from the 101 looks the
    /// same.
    pub per_client_delivered_quantiles: Vec<u64>,
    /// The clients grouped by the pool threads they and the server's sites
    /// for them ran on, with what each group got through. On one thread,
    /// one group; on more, the groups' means tell whether a step in the
    /// per-client curve is the threads' (a group on the server's home
    /// thread, [`server_home_thread`](Self::server_home_thread), can get
    /// several times the messages of the others).
    pub delivered_by_threads: Vec<ThreadPair>,
    /// The pool thread of the server node's home (its listener, accepts
    /// and handshakes).
    pub server_home_thread: usize,
    /// The server's admission policy: `share` or `fifo`.
    pub admission: String,
    /// The threads the run's nodes ran their sites on.
    pub threads: usize,
    /// Channels the clients opened beyond their first.
    pub reconnects: u64,
    /// Messages resent after a lost channel.
    pub retransmitted: u64,
    /// Channels cut on purpose.
    pub cuts: u64,
    /// Most server slots in use at once.
    pub peak_slots: usize,
    /// The server's hard slot limit.
    pub slot_limit: usize,
    /// Most bytes of channel buffers the server held at once.
    pub peak_transport_bytes: u64,
    /// What they may never exceed: slot limit × 2 × buffer size.
    pub transport_bytes_bound: u64,
    /// Median round trip of the clients' probes, µs: every probe, whatever
    /// it waited for ([`steady_rtt`](Self::steady_rtt),
    /// [`reconnect_rtt`](Self::reconnect_rtt) and
    /// [`first_contact`](Self::first_contact) tell them apart). A probe's
    /// round trip counts from the moment it is queued, so a probe queued
    /// while its client waits in the server's line includes that wait.
    pub rtt_p50_us: u64,
    /// 99th percentile, µs (every probe).
    pub rtt_p99_us: u64,
    /// Mean round trip, µs (0 with no probes; every probe): the Mozart
    /// paper's measure (its Table I and Figure 5 give the average), so a
    /// run compares with it; beside the median it shows how much the slow
    /// probes weigh. Fewer than 1% of the probes (those that waited for a
    /// slot: each client's first, and those after a reconnect) can lift it
    /// above `rtt_p99_us`: [`steady_rtt`](Self::steady_rtt) is the round
    /// trip without them.
    pub rtt_mean_us: f64,
    /// Fastest probe, µs (0 with no probes).
    pub rtt_min_us: u64,
    /// Slowest probe, µs (0 with no probes): the worst wait a client saw.
    pub rtt_max_us: u64,
    /// Probes answered: `steady_rtt.count + reconnect_rtt.count +
    /// first_contact.count`.
    pub round_trips: u64,
    /// The steady state's round trip: the probes answered on a channel
    /// that stayed open from the moment they were queued to their answer
    /// (no wait for a slot in them), µs.
    pub steady_rtt: Spread,
    /// The round trips of the probes during which the client's channel was
    /// opened again (its turn ended while others waited, the server
    /// preempted it, or its channel was cut): each includes the client's
    /// wait for a slot, in the server's line while the slots were full, µs.
    pub reconnect_rtt: Spread,
    /// The first-contact wait: from a client's start (every client starts
    /// at once) to its first reply, one per client that got one, µs. It is
    /// the time a client spent in the server's line before its first slot,
    /// plus its first burst and probe: with more clients than slots, most
    /// wait for the work of those ahead of them.
    pub first_contact: Spread,
    /// Memory one idle remote site costs (entry, parked ComObject),
    /// measured in this run: resident memory grown by 5,000 sites started
    /// and parked, divided by their number, once the node has given back
    /// what their actors used while they ran (so it includes the
    /// allocator's own overhead; `tests/idle_site_memory.rs` counts what a
    /// parked site holds with a counting allocator).
    pub idle_site_bytes: u64,
    /// The same for a site only referenced, never used: its ComObject is
    /// not started, so it costs its entry.
    pub unused_site_bytes: u64,
    /// The preemption policy.
    pub policy: String,
    /// The byte channels used.
    pub transport: String,
    /// The seed (replays the workload and the cuts).
    pub seed: u64,
    /// Seconds the clients sent (the configured duration, or less when
    /// every client finished its rounds first): the drain begins here
    /// (the timeline's samples after it are marked `draining`).
    pub duration_s: f64,
    /// Seconds the whole run took, draining included.
    pub elapsed_s: f64,
    /// The timeline, every 100 ms.
    pub timeline: Vec<Sample>,
}

impl StressReport {
    /// What went wrong, if anything: each entry makes `sitenet stress` exit
    /// with 1.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.lost > 0 {
            f.push(format!("{} messages lost", self.lost));
        }
        if self.duplicated > 0 {
            f.push(format!("{} messages delivered twice", self.duplicated));
        }
        if self.reordered > 0 {
            f.push(format!("{} messages out of order", self.reordered));
        }
        if self.peak_slots > self.slot_limit {
            f.push(format!(
                "{} slots in use, beyond the limit of {}",
                self.peak_slots, self.slot_limit
            ));
        }
        if self.peak_transport_bytes > self.transport_bytes_bound {
            f.push(format!(
                "{} bytes of transport buffers, beyond the bound of {}",
                self.peak_transport_bytes, self.transport_bytes_bound
            ));
        }
        f
    }
}

/// Jain's fairness index of `x`: (Σx)² / (n·Σx²), in [1/n, 1]; 1 for no
/// values or all zero (nothing to be unfair about).
///
/// ```
/// use sitenet::stress::jain;
/// assert_eq!(jain(&[5, 5, 5, 5]), 1.0);
/// assert_eq!(jain(&[8, 0, 0, 0]), 0.25);
/// assert!((jain(&[1, 2, 3]) - 36.0 / 42.0).abs() < 1e-12);
/// ```
pub fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// `x`'s values sorted and taken at every percent (nearest rank): 101
/// numbers, the first the smallest, the last the largest; empty for no
/// values. A distribution of any size in a fixed, small space
/// ([`StressReport::per_client_delivered_quantiles`]).
///
/// ```
/// use sitenet::stress::quantiles;
/// let q = quantiles(&[30, 10, 20]);
/// assert_eq!(q.len(), 101);
/// assert_eq!((q[0], q[50], q[100]), (10, 20, 30));
/// assert!(quantiles(&[]).is_empty());
/// ```
pub fn quantiles(x: &[u64]) -> Vec<u64> {
    let mut v = x.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return v;
    }
    let last = v.len() - 1;
    (0..=100).map(|q| v[(q * last + 50) / 100]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank_at_every_percent() {
        // One value: every percentile is it.
        assert_eq!(quantiles(&[7]), vec![7; 101]);
        // 101 values: percentile q is the q-th smallest.
        let x: Vec<u64> = (0..=100).rev().collect();
        assert_eq!(quantiles(&x), (0..=100).collect::<Vec<u64>>());
        // Ten thousand clients, one starved: 101 numbers, the first 0.
        let mut x = vec![50; 10_000];
        x[1234] = 0;
        let q = quantiles(&x);
        assert_eq!((q.len(), q[0], q[1], q[100]), (101, 0, 50, 50));
    }
}
