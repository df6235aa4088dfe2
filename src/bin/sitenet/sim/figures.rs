//! What `sitenet sim` prints: one run's figures (or a search's sums) as
//! text or as the JSON object scripts read, and the exit code its verdict
//! gives. The keys are a contract: add, never rename.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use sitenet_protocols::base::coverage::Coverage;
use sitenet_sim::{Faults, Report, SimConfig, Verdict};

/// One run's figures, as `--json` prints them.
#[derive(Serialize)]
pub(super) struct Json {
    verdict: &'static str,
    pub(super) seed: Option<u64>,
    sites: usize,
    faults: &'static str,
    digest: String,
    messages: u64,
    delivered: u64,
    handed_back: u64,
    cuts: u64,
    /// Cuts that reached one end only (`--half-open`).
    half_open_cuts: u64,
    /// Crashes that were orderly shutdowns (`--leaves`).
    leaves: u64,
    partitions: u64,
    preemptions: u64,
    restarts: u64,
    retransmitted: u64,
    opens: u64,
    reclaimed: u64,
    parks: u64,
    unparks: u64,
    requests: u64,
    late_replies: u64,
    handshakes_dropped: u64,
    bound: u64,
    merges: u64,
    origins_claimed: u64,
    origins_refused: u64,
    site_refs: u64,
    site_refs_claimed: u64,
    site_refs_refused: u64,
    batches: u64,
    batch_ops: u64,
    batch_retries: u64,
    batch_ops_failed: u64,
    send_waits: u64,
    sends_given_up: u64,
    output_peak: u64,
    waiting_peak: u64,
    cooperations: u64,
    coops_completed: u64,
    coops_timed_out: u64,
    coops_failed: u64,
    coops_cancelled: u64,
    coop_discarded: u64,
    accepts_refused: u64,
    line_waits: u64,
    line_grants: u64,
    line_yields: u64,
    reclaims_kept: u64,
    pub(super) events: u64,
    pub(super) sim_s: f64,
    pub(super) wall_s: f64,
    pub(super) speed: f64,
    pub(super) events_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) violation: Option<ViolationJson>,
    /// With `--coverage`: how often the run (a search: every seed) reached
    /// each decision point of the protocol machines, by the point's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    coverage: Option<std::collections::BTreeMap<&'static str, u64>>,
    /// With `--coverage`: the points never reached, in the machines' order.
    #[serde(skip_serializing_if = "Option::is_none")]
    unreached: Option<Vec<&'static str>>,
    /// The counts behind `coverage`, kept for every run and summed.
    #[serde(skip)]
    covered: Coverage,
    /// Search mode: seeds tried, and those that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) seeds_tried: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) failing_seeds: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) shrunk: Option<Shrunk>,
    /// The application every site ran (`--app`): `node` or `dataflow`.
    pub(super) app: &'static str,
    /// Whether each seed drew its settings (`--swarm`).
    pub(super) swarm: bool,
    /// The settings the run named by `seed` used (drawn or given), and
    /// the commands that replay it: always for one seed, for a search its
    /// first failing seed's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) settings: Option<Settings>,
}

/// What one run was given, drawn (`--swarm`) or typed: every setting a
/// swarm draws, the phases, and how to run it again.
#[derive(Serialize)]
pub(super) struct Settings {
    /// Drawn from the seed (`--swarm`), or as given.
    swarm: bool,
    /// The options that pinned their setting in a swarm (given on the
    /// command line).
    pinned: Vec<String>,
    sites: usize,
    faults: &'static str,
    duration_s: f64,
    settle_s: f64,
    tick_s: f64,
    weak_slots: usize,
    hard_slots: usize,
    address_sends: f64,
    peer_claims: Option<u32>,
    cooperations: f64,
    site_refs: f64,
    batches: f64,
    bursts: f64,
    /// The bound in force: as given, or the default for the sites.
    output_bound: u64,
    /// The bound in force: as given, or twice `output_bound`.
    node_output_bound: u64,
    outbox_queue: bool,
    adopt_hop: bool,
    hold_references_s: f64,
    half_open: f64,
    leaves: f64,
    /// Absent: the machine's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    give_up_s: Option<f64>,
    /// The command that runs it again: `sitenet sim --seed S --swarm` and
    /// the pinned options in a swarm, else every setting typed.
    pub(super) replay: String,
    /// The same run with every setting typed, no drawing.
    pub(super) command: String,
}

impl Settings {
    pub(super) fn new(
        c: &SimConfig,
        swarm: bool,
        pinned: Vec<String>,
        replay: String,
        command: String,
    ) -> Self {
        Self {
            swarm,
            pinned,
            sites: c.sites,
            faults: c.faults.name(),
            duration_s: c.duration.as_secs_f64(),
            settle_s: c.settle.as_secs_f64(),
            tick_s: c.tick.as_secs_f64(),
            weak_slots: c.weak_slots,
            hard_slots: c.hard_slots,
            address_sends: c.address_sends,
            peer_claims: c.peer_claims,
            cooperations: c.cooperations,
            site_refs: c.site_refs,
            batches: c.batches,
            bursts: c.bursts,
            output_bound: c.output_bound(),
            node_output_bound: c.node_output_bound(),
            outbox_queue: c.outbox_queue,
            adopt_hop: c.adopt_hop,
            hold_references_s: c.hold_references.as_secs_f64(),
            half_open: c.half_open,
            leaves: c.leaves,
            give_up_s: c.give_up.map(|t| t.as_secs_f64()),
            replay,
            command,
        }
    }
}

#[derive(Serialize)]
pub(super) struct ViolationJson {
    pub(super) step: u64,
    pub(super) at_s: f64,
    pub(super) what: String,
}

#[derive(Serialize)]
pub(super) struct Shrunk {
    pub(super) sites: usize,
    pub(super) faults: &'static str,
    pub(super) duration_s: f64,
    pub(super) runs: u32,
    pub(super) command: String,
}

impl Json {
    pub(super) fn new(r: &Report, faults: Faults, wall: Duration) -> Self {
        let wall_s = wall.as_secs_f64().max(1e-9);
        let violation = match &r.verdict {
            Verdict::Ok => None,
            Verdict::Violation { step, at, what } => Some(ViolationJson {
                step: *step,
                at_s: at.as_secs_f64(),
                what: what.clone(),
            }),
        };
        Self {
            verdict: if violation.is_some() {
                "violation"
            } else {
                "ok"
            },
            seed: Some(r.seed),
            sites: r.sites,
            faults: faults.name(),
            digest: r.digest.clone(),
            messages: r.messages,
            delivered: r.delivered,
            handed_back: r.handed_back,
            cuts: r.cuts,
            half_open_cuts: r.half_open_cuts,
            leaves: r.leaves,
            partitions: r.partitions,
            preemptions: r.preemptions,
            restarts: r.restarts,
            retransmitted: r.retransmitted,
            opens: r.opens,
            reclaimed: r.reclaimed,
            parks: r.parks,
            unparks: r.unparks,
            requests: r.requests,
            late_replies: r.late_replies,
            handshakes_dropped: r.handshakes_dropped,
            bound: r.bound,
            merges: r.merges,
            origins_claimed: r.origins_claimed,
            origins_refused: r.origins_refused,
            site_refs: r.site_refs,
            site_refs_claimed: r.site_refs_claimed,
            site_refs_refused: r.site_refs_refused,
            batches: r.batches,
            batch_ops: r.batch_ops,
            batch_retries: r.batch_retries,
            batch_ops_failed: r.batch_ops_failed,
            send_waits: r.send_waits,
            sends_given_up: r.sends_given_up,
            output_peak: r.output_peak,
            waiting_peak: r.waiting_peak,
            cooperations: r.cooperations,
            coops_completed: r.coops_completed,
            coops_timed_out: r.coops_timed_out,
            coops_failed: r.coops_failed,
            coops_cancelled: r.coops_cancelled,
            coop_discarded: r.coop_discarded,
            accepts_refused: r.accepts_refused,
            line_waits: r.line_waits,
            line_grants: r.line_grants,
            line_yields: r.line_yields,
            reclaims_kept: r.reclaims_kept,
            events: r.events,
            sim_s: r.sim_s,
            wall_s,
            speed: r.sim_s / wall_s,
            events_per_s: r.events as f64 / wall_s,
            violation,
            coverage: None,
            unreached: None,
            covered: r.coverage.clone(),
            seeds_tried: None,
            failing_seeds: None,
            shrunk: None,
            app: "node",
            swarm: false,
            settings: None,
        }
    }
}

impl Json {
    /// Shows the coverage counted (`--coverage`): every point's count and
    /// the points never reached.
    pub(super) fn show_coverage(&mut self) {
        self.coverage = Some(self.covered.iter().map(|(p, n)| (p.label(), n)).collect());
        self.unreached = Some(self.covered.unreached().iter().map(|p| p.label()).collect());
    }
}

/// Sums `b`'s counts into `a` (which keeps its seed, digest and violation).
pub(super) fn add(mut a: Json, b: &Json) -> Json {
    a.messages += b.messages;
    a.delivered += b.delivered;
    a.handed_back += b.handed_back;
    a.cuts += b.cuts;
    a.half_open_cuts += b.half_open_cuts;
    a.leaves += b.leaves;
    a.covered.merge(&b.covered);
    a.partitions += b.partitions;
    a.preemptions += b.preemptions;
    a.restarts += b.restarts;
    a.retransmitted += b.retransmitted;
    a.opens += b.opens;
    a.reclaimed += b.reclaimed;
    a.parks += b.parks;
    a.unparks += b.unparks;
    a.bound += b.bound;
    a.merges += b.merges;
    a.origins_claimed += b.origins_claimed;
    a.origins_refused += b.origins_refused;
    a.site_refs += b.site_refs;
    a.site_refs_claimed += b.site_refs_claimed;
    a.site_refs_refused += b.site_refs_refused;
    a.batches += b.batches;
    a.batch_ops += b.batch_ops;
    a.batch_retries += b.batch_retries;
    a.batch_ops_failed += b.batch_ops_failed;
    a.send_waits += b.send_waits;
    a.sends_given_up += b.sends_given_up;
    a.output_peak = a.output_peak.max(b.output_peak);
    a.waiting_peak = a.waiting_peak.max(b.waiting_peak);
    a.cooperations += b.cooperations;
    a.coops_completed += b.coops_completed;
    a.coops_timed_out += b.coops_timed_out;
    a.coops_failed += b.coops_failed;
    a.coops_cancelled += b.coops_cancelled;
    a.coop_discarded += b.coop_discarded;
    a.accepts_refused += b.accepts_refused;
    a.line_waits += b.line_waits;
    a.line_grants += b.line_grants;
    a.line_yields += b.line_yields;
    a.reclaims_kept += b.reclaims_kept;
    a.requests += b.requests;
    a.late_replies += b.late_replies;
    a.handshakes_dropped += b.handshakes_dropped;
    a.events += b.events;
    a.sim_s += b.sim_s;
    a
}

pub(super) fn print(j: &Json, json: bool) {
    if json {
        println!("{}", serde_json::to_string(j).expect("serialisable"));
        return;
    }
    match &j.violation {
        None => println!("verdict:        ok (every checker held)"),
        Some(v) => println!(
            "verdict:        VIOLATION at step {} ({:.6}s): {}",
            v.step, v.at_s, v.what
        ),
    }
    match (&j.seeds_tried, &j.failing_seeds) {
        (Some(n), Some(f)) => println!("seeds:          {n} tried, failing: {f:?}"),
        _ => println!("seed:           {}", j.seed.unwrap_or_default()),
    }
    println!("sites:          {} ({} faults)", j.sites, j.faults);
    if j.app != "node" {
        println!("application:    {}", j.app);
    }
    if let Some(s) = &j.settings {
        if s.swarm {
            println!("settings:       drawn (--swarm): {}", s.command);
        }
        if j.seeds_tried.is_some() || s.swarm {
            println!("replay:         {}", s.replay);
        }
    }
    println!(
        "messages:       {} sent, {} delivered, {} handed back",
        j.messages, j.delivered, j.handed_back
    );
    println!(
        "faults:         {} cuts ({} half-open), {} partitions, {} restarts ({} after leaving), {} preemptions",
        j.cuts, j.half_open_cuts, j.partitions, j.restarts, j.leaves, j.preemptions
    );
    println!(
        "channels:       {} opens, {} retransmitted, {} sites reclaimed, {} handshakes dropped",
        j.opens, j.retransmitted, j.reclaimed, j.handshakes_dropped
    );
    println!("idle sites:     {} parks, {} unparks", j.parks, j.unparks);
    if j.line_waits + j.accepts_refused > 0 {
        println!(
            "waiting lines:  {} peers told to wait, {} let in, {} refused; \
             {} of our attempts gave their slot back",
            j.line_waits, j.line_grants, j.accepts_refused, j.line_yields
        );
    }
    if j.reclaims_kept > 0 {
        println!(
            "adoption:       {} reclaims kept for a channel on its way",
            j.reclaims_kept
        );
    }
    println!(
        "site table:     {} entries reached by address bound, {} merged; forwarded origins: {} claimed, {} refused",
        j.bound, j.merges, j.origins_claimed, j.origins_refused
    );
    if j.site_refs + j.site_refs_refused > 0 {
        println!(
            "site refs:      {} handled ({} sites claimed), {} refused",
            j.site_refs, j.site_refs_claimed, j.site_refs_refused
        );
    }
    println!(
        "requests:       {} sent (each ended once), {} late replies",
        j.requests, j.late_replies
    );
    if j.batches > 0 {
        println!(
            "batches:        {} submitted, {} operations ({} retried, {} failed)",
            j.batches, j.batch_ops, j.batch_retries, j.batch_ops_failed
        );
    }
    if j.send_waits > 0 {
        println!(
            "output bound:   {} sends waited for room ({} requests gave up at their deadline); \
             a site held at most {} bytes for others, and at most {} sends waited at once",
            j.send_waits, j.sends_given_up, j.output_peak, j.waiting_peak
        );
    }
    if j.cooperations > 0 {
        println!(
            "cooperations:   {} opened: {} completed, {} timed out, {} failed, {} cancelled; {} replies discarded",
            j.cooperations,
            j.coops_completed,
            j.coops_timed_out,
            j.coops_failed,
            j.coops_cancelled,
            j.coop_discarded
        );
    }
    println!(
        "speed:          {:.1} simulated s in {:.2} s: {:.1} sim s per wall s, {:.0} events/s",
        j.sim_s, j.wall_s, j.speed, j.events_per_s
    );
    println!("digest:         {}", j.digest);
    if let (Some(counts), Some(unreached)) = (&j.coverage, &j.unreached) {
        println!(
            "coverage:       {} of {} decision points reached",
            counts.len() - unreached.len(),
            counts.len()
        );
        for (p, n) in j.covered.iter() {
            println!("  {n:>12}  {}", p.label());
        }
        if !unreached.is_empty() {
            println!("unreached:      {}", unreached.join(", "));
        }
    }
    if let Some(s) = &j.shrunk {
        println!(
            "shrunk:         {} sites, {} faults, {:.1}s still fail ({} runs): {}",
            s.sites, s.faults, s.duration_s, s.runs, s.command
        );
    }
}

pub(super) fn verdict_code(j: &Json) -> ExitCode {
    let failing = j.failing_seeds.as_ref().is_some_and(|f| !f.is_empty());
    if j.violation.is_some() || failing {
        if let Some(v) = &j.violation {
            eprintln!(
                "sitenet: simulation violation (seed {}, step {}): {}",
                j.seed.unwrap_or_default(),
                v.step,
                v.what
            );
        }
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
