//! `sitenet sim`: the deterministic simulator (`sitenet_sim`)
//! from the command line. One seed: run it, print the checkers' verdict and
//! the figures. No seed: try seeds for a while and report those that fail.
//! `--shrink`: make a failing seed's run as small as it still fails.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use sitenet_sim::{self as sim, Faults, Knob, SimConfig, SimConfigError, Swarm, Verdict};

mod figures;
mod replay;

use figures::{add, print, verdict_code, Json, Shrunk};
use replay::{typed, App, Runs};

/// The smallest `--output-bound`: twice the default workload's largest
/// message (40 KiB of body, and its header and record), as the runtime
/// keeps its bound at least twice its largest message; the floor of the
/// library's default too.
const MIN_OUTPUT_BOUND: u64 = SimConfig::MIN_DEFAULT_OUTPUT_BOUND;

/// The most threads `--jobs` may ask for (the library's bound).
const MAX_JOBS: usize = sim::MAX_JOBS;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Number of simulated sites (2 to 1,000,000; each is a node in
    /// memory). Default 50; drawn per seed with --swarm (2 to 64).
    #[arg(long)]
    sites: Option<usize>,
    /// The seed of the run. Without it, seeds are tried for --search
    /// seconds and every one that fails is reported.
    #[arg(long)]
    seed: Option<u64>,
    /// Simulated seconds of the fault phase (applications send, faults
    /// happen); a settle phase of --settle seconds follows.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Simulated seconds after the faults stop, by the end of which every
    /// pair of live sites must have converged.
    #[arg(long, default_value_t = 60.0)]
    settle: f64,
    /// How many faults: cuts, partitions, crashes and restarts, slow
    /// readers. Default light.
    #[arg(long, value_parser = ["none", "light", "heavy"])]
    faults: Option<String>,
    /// Seconds between two acts of each site's application (sends,
    /// requests, the chances of the options below): a shorter tick loads
    /// the network more (at least 0.001). Default 1.
    #[arg(long)]
    tick: Option<f64>,
    /// Each site's weak channel slot limit (connects beyond it wait in
    /// line). Default 8.
    #[arg(long)]
    weak_slots: Option<usize>,
    /// Each site's hard channel slot limit (never exceeded). Default 12.
    #[arg(long)]
    hard_slots: Option<usize>,
    /// The share (0 to 1) of one-way messages sent to a site's address
    /// rather than its id: each node's site table then binds such entries,
    /// and merges one into the entry it already has for the site. Default 0.
    #[arg(long)]
    address_sends: Option<f64>,
    /// A forwarded request's origin the node does not know becomes an
    /// entry on the forwarder's word, a claim it holds, as in the runtime:
    /// each forwarder may hold this many claims on sites not proven yet
    /// (the runtime's default is 16); a request beyond is refused.
    #[arg(long)]
    peer_claims: Option<u32>,
    /// The chance (0 to 1) that a site's tick also opens a cooperation: a
    /// scatter/gather to its neighbours whose replies, and votes, fill its
    /// receive descriptors by the runtime's rules; it completes, times
    /// out, fails with a site it waits for, or is cancelled, once. Default 0.
    #[arg(long)]
    cooperations: Option<f64>,
    /// The share (0 to 1) of one-way messages that name another site (a
    /// SiteRef in them): the receiver learns the site on the sender's word,
    /// a claim the sender holds (--peer-claims bounds it), and sends to it.
    /// Default 0.
    #[arg(long)]
    site_refs: Option<f64>,
    /// The chance (0 to 1) that a site's tick also submits a batch: sends
    /// and requests to its neighbours, a send done when acknowledged, each
    /// retried on the site then at its address by the runtime's rule.
    /// Default 0.
    #[arg(long)]
    batches: Option<f64>,
    /// The bytes each site's entry for another may hold (queued and
    /// unacknowledged), as the runtime's output bound: a send beyond it
    /// waits in line until acknowledgements free room, and lines keep each
    /// sender's order. Default: the runtime's 512 MiB, less with more than
    /// two sites so that all the sites' bounds together hold at most 2 GiB
    /// (1 GiB / sites; 1 MiB at 1,000 sites), and at most
    /// --node-output-bound; never below 96 KiB. At least 96 KiB (twice the
    /// default workload's largest message).
    #[arg(long)]
    output_bound: Option<u64>,
    /// The bytes all of a site's entries may hold together, as the
    /// runtime's node output bound (each entry within a fair share once it
    /// is half full). Default: twice --output-bound.
    #[arg(long)]
    node_output_bound: Option<u64>,
    /// The chance (0 to 1) that a site's tick also sends a burst of four
    /// to eight large messages to one neighbour: what fills a small
    /// --output-bound. Default 0.
    #[arg(long)]
    bursts: Option<f64>,
    /// A send waits in its entry's outbox queue until the ComObject's next
    /// turn (an event up to 5 ms later, the runtime's wake through the
    /// actor's mailbox), so that a merge can come in between and order the
    /// queues as the runtime's does. Off by default; --outbox-queue=false
    /// pins it off with --swarm.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    outbox_queue: Option<bool>,
    /// An accepted channel reaches its entry's ComObject through the
    /// entry's mailbox (an event up to 5 ms after it was routed there, the
    /// runtime's Adopt message), counted on the entry meanwhile: the
    /// machine opens, parks or fails in between, the reclaim re-check must
    /// keep the entry, and the peer may give up. Off by default;
    /// --adopt-hop=false pins it off with --swarm.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    adopt_hop: Option<bool>,
    /// Seconds an application keeps its reference to a site after it last
    /// sent to it (checked on its ticks): short holds make entries
    /// unneeded, so their reclaim rule runs often; long ones keep more
    /// sites referenced than there are slots. Default 5.
    #[arg(long)]
    hold_references: Option<f64>,
    /// The share (0 to 1) of cuts whose reset reaches one end only: the
    /// other keeps a half-open channel until its silence shows or the
    /// peer's new channel replaces it. Default 0.
    #[arg(long)]
    half_open: Option<f64>,
    /// The share (0 to 1) of crashes that are orderly shutdowns: the node
    /// tells its peers it is leaving first, and they fail it at once.
    /// Default 0.
    #[arg(long)]
    leaves: Option<f64>,
    /// Seconds a site stays unreachable before its peers give up on it
    /// (permanently failed, what it held handed back): partitions longer
    /// than it make live sites fail each other. Default: the machine's.
    #[arg(long)]
    give_up: Option<f64>,
    /// Count how often the run (a search: all its seeds) reached each
    /// decision point of the protocol machines, and list the points never
    /// reached (JSON keys `coverage` and `unreached`).
    #[arg(long)]
    coverage: bool,
    /// Swarm testing: each seed also draws its settings (sites, slot
    /// limits, tick, the chances above, output bounds, faults), each
    /// option off with a fair chance; an option given on the command line
    /// pins its setting. The default of a search (without --seed);
    /// `--seed S --swarm` replays a searched seed's drawn settings exactly.
    #[arg(long, overrides_with = "no_swarm")]
    swarm: bool,
    /// A search runs every seed with the options as given (no drawing).
    #[arg(long, overrides_with = "swarm")]
    no_swarm: bool,
    /// Without --seed: wall-clock seconds to spend trying seeds.
    #[arg(long, default_value_t = 30.0)]
    search: f64,
    /// Without --seed: the first seed tried (then the next ones).
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Without --seed: how many seeds run at once, each on its own thread
    /// (0: one per core). Every run is the one it would be alone; more
    /// jobs only try more seeds in the --search time.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// On a violation, shrink the run (fewer sites, fewer faults, a shorter
    /// fault phase) to the smallest that still fails, and print it.
    #[arg(long)]
    shrink: bool,
    /// Print every event of the run, one line each, on stdout.
    #[arg(long)]
    trace: bool,
    /// The application every site runs: `node`, the node's random
    /// workload (messages, requests, the chances above), or `dataflow`,
    /// the dataflow protocols (variables, ports, mobile and stationary
    /// cells, distributed collection) under their own checkers: single
    /// assignment, linearizable exchanges, per-sender FIFO, and nothing
    /// kept after its last reference once the run settles.
    #[arg(long, value_parser = ["node", "dataflow"], default_value = "node")]
    app: String,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> ExitCode {
    let runs = match runs_of(&a) {
        Ok(runs) => runs,
        Err(e) => return crate::usage(e),
    };
    match a.seed {
        Some(seed) => one(runs.config(seed), &runs, &a),
        None => search(&runs, &a),
    }
}

/// What the options ask each seed to run, or the usage error that says
/// which option no run can be made of.
fn runs_of(a: &Args) -> Result<Runs, String> {
    let duration = crate::seconds("duration", a.duration)?;
    let settle = crate::seconds("settle", a.settle)?;
    let d = SimConfig::default();
    let tick = match a.tick {
        Some(t) => crate::seconds("tick", t)?,
        None => d.tick,
    };
    let hold_references = match a.hold_references {
        Some(t) => crate::seconds("hold-references", t)?,
        None => d.hold_references,
    };
    let give_up = match a.give_up {
        Some(t) => Some(crate::seconds("give-up", t)?),
        None => d.give_up,
    };
    if let Some(b) = a.output_bound.filter(|b| *b < MIN_OUTPUT_BOUND) {
        return Err(format!(
            "--output-bound must be at least {MIN_OUTPUT_BOUND} bytes (twice the largest \
             message the workload sends), got {b}"
        ));
    }
    if let (Some(node), Some(site)) = (a.node_output_bound, a.output_bound) {
        if node < site {
            return Err(format!(
                "--node-output-bound ({node}) must be at least --output-bound ({site})"
            ));
        }
    }
    let faults: Faults = match &a.faults {
        Some(f) => f.parse().expect("clap checked the level"),
        None => d.faults,
    };
    let cfg = SimConfig {
        sites: a.sites.unwrap_or(d.sites),
        seed: a.seed.unwrap_or(a.first_seed),
        duration,
        settle,
        faults,
        tick,
        weak_slots: a.weak_slots.unwrap_or(d.weak_slots),
        hard_slots: a.hard_slots.unwrap_or(d.hard_slots),
        address_sends: a.address_sends.unwrap_or(d.address_sends),
        peer_claims: a.peer_claims,
        cooperations: a.cooperations.unwrap_or(d.cooperations),
        site_refs: a.site_refs.unwrap_or(d.site_refs),
        batches: a.batches.unwrap_or(d.batches),
        output_bound: a.output_bound,
        node_output_bound: a.node_output_bound,
        bursts: a.bursts.unwrap_or(d.bursts),
        outbox_queue: a.outbox_queue.unwrap_or(d.outbox_queue),
        adopt_hop: a.adopt_hop.unwrap_or(d.adopt_hop),
        hold_references,
        half_open: a.half_open.unwrap_or(d.half_open),
        leaves: a.leaves.unwrap_or(d.leaves),
        give_up,
        ..d
    };
    // The library's check, told by the option's name.
    cfg.check().map_err(|e| flag_error(&e))?;
    // A search draws settings unless told not to; one seed only when told.
    let drawn = match a.seed {
        Some(_) => a.swarm,
        None => !a.no_swarm,
    };
    let app = match a.app.as_str() {
        "dataflow" => App::Dataflow,
        _ => App::Node,
    };
    Ok(Runs {
        swarm: drawn.then(|| pinned(Swarm::new(cfg.clone()), a)),
        cfg,
        app,
    })
}

/// The swarm of a search or a replay, each option given on the command
/// line pinning its knob (the output bounds one knob, and the slot limits
/// one).
fn pinned(mut swarm: Swarm, a: &Args) -> Swarm {
    let given = [
        (Knob::Sites, a.sites.is_some()),
        (Knob::Faults, a.faults.is_some()),
        (Knob::Tick, a.tick.is_some()),
        (
            Knob::Slots,
            a.weak_slots.is_some() || a.hard_slots.is_some(),
        ),
        (Knob::AddressSends, a.address_sends.is_some()),
        (Knob::PeerClaims, a.peer_claims.is_some()),
        (Knob::Cooperations, a.cooperations.is_some()),
        (Knob::SiteRefs, a.site_refs.is_some()),
        (Knob::Batches, a.batches.is_some()),
        (
            Knob::OutputBounds,
            a.output_bound.is_some() || a.node_output_bound.is_some(),
        ),
        (Knob::Bursts, a.bursts.is_some()),
        (Knob::OutboxQueue, a.outbox_queue.is_some()),
        (Knob::AdoptHop, a.adopt_hop.is_some()),
        (Knob::HoldReferences, a.hold_references.is_some()),
        (Knob::HalfOpen, a.half_open.is_some()),
        (Knob::Leaves, a.leaves.is_some()),
        (Knob::GiveUp, a.give_up.is_some()),
    ];
    for (knob, pin) in given {
        if pin {
            swarm = swarm.pin(knob);
        }
    }
    swarm
}

/// The fields of `SimConfig` that an option of `sitenet sim` sets, by the
/// option's name (an underscore for its dash).
const FLAG_FIELDS: [&str; 15] = [
    "sites",
    "duration",
    "settle",
    "tick",
    "weak_slots",
    "hard_slots",
    "address_sends",
    "cooperations",
    "site_refs",
    "batches",
    "bursts",
    "hold_references",
    "half_open",
    "leaves",
    "give_up",
];

/// `SimConfig::check`'s error, naming the option that set the field (one
/// no option sets keeps the library's words).
fn flag_error(e: &SimConfigError) -> String {
    match FLAG_FIELDS.contains(&e.field()) {
        true => format!("--{} {}", e.field().replace('_', "-"), e.requirement()),
        false => e.to_string(),
    }
}

/// One seed, with a progress bar over simulated time on a terminal.
fn one(cfg: SimConfig, runs: &Runs, a: &Args) -> ExitCode {
    let faults = cfg.faults;
    let mut sim = runs.make(cfg.clone());
    if a.trace {
        sim.set_trace(|l| println!("{l}"));
    }
    let bar = ProgressBar::new(sim.end().as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let start = Instant::now();
    let step = Duration::from_millis(250);
    let mut until = step;
    while sim.run_until(until) {
        bar.set_position(sim.now().as_millis() as u64);
        bar.set_message(format!("simulated {:.1}s", sim.now().as_secs_f64()));
        until += step;
    }
    let report = sim.finish();
    let wall = start.elapsed();
    bar.finish_and_clear();
    let mut json = Json::new(&report, faults, wall);
    json.app = runs.app.name();
    json.swarm = runs.swarm.is_some();
    json.settings = Some(runs.settings(cfg.seed));
    if report.verdict != Verdict::Ok && a.shrink {
        json.shrunk = Some(shrink(&cfg, runs));
    }
    if a.coverage {
        json.show_coverage();
    }
    print(&json, a.json);
    verdict_code(&json)
}

/// No seed: tries seeds until the time is up; reports the failing ones.
fn search(runs: &Runs, a: &Args) -> ExitCode {
    let budget = match crate::seconds("search", a.search) {
        Ok(d) => d,
        Err(e) => return crate::usage(e),
    };
    let jobs = match a.jobs {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n if n > MAX_JOBS => {
            return crate::usage(format!("--jobs must be at most {MAX_JOBS}, got {n}"))
        }
        n => n,
    };
    let first = runs.cfg.seed;
    let start = Instant::now();
    let bar = ProgressBar::new(budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    // Runs end in any order on several threads; they are summed in seed
    // order (those that end early wait in `ended`, a few at most), so the
    // summary depends only on which seeds ran.
    let mut ended = std::collections::BTreeMap::new();
    let mut next = 0u64;
    let mut failing = Vec::new();
    let mut total: Option<Json> = None;
    let each = |run: sim::SearchRun| {
        let seed = run.report.seed;
        let mut one = Json::new(&run.report, runs.config(seed).faults, run.wall);
        one.app = runs.app.name();
        one.swarm = runs.swarm.is_some();
        if let Some(v) = &one.violation {
            let settings = runs.settings(seed);
            eprintln!(
                "sitenet sim: seed {seed} fails: {}\nsitenet sim:   replay: {}",
                v.what, settings.replay
            );
            one.settings = Some(settings);
        }
        ended.insert(seed.wrapping_sub(first), one);
        while let Some(one) = ended.remove(&next) {
            if one.violation.is_some() {
                failing.push(first.wrapping_add(next));
            }
            total = Some(match total.take() {
                None => one,
                Some(t) if t.violation.is_none() && one.violation.is_some() => add(one, &t),
                Some(t) => add(t, &one),
            });
            next += 1;
        }
        bar.set_position(start.elapsed().as_millis().min(budget.as_millis()) as u64);
        bar.set_message(format!("{next} seeds, {} failing", failing.len()));
    };
    // Each seed's run is made on the thread that runs it, with the
    // command's application.
    let more = |_| start.elapsed() < budget;
    let tried = match &runs.swarm {
        Some(swarm) => sim::search_with(
            &swarm.base,
            jobs,
            more,
            |c| runs.make(swarm.config(c.seed)),
            each,
        ),
        None => sim::search_with(&runs.cfg, jobs, more, |c| runs.make(c), each),
    };
    debug_assert!(ended.is_empty() && next == tried, "every seed taken is run");
    bar.finish_and_clear();
    let mut json = total.expect("at least one run");
    json.wall_s = start.elapsed().as_secs_f64();
    json.speed = json.sim_s / json.wall_s;
    json.events_per_s = json.events as f64 / json.wall_s;
    json.seeds_tried = Some(tried);
    if failing.is_empty() {
        json.seed = None;
        json.settings = None;
    } else if a.shrink {
        json.shrunk = Some(shrink(&runs.config(failing[0]), runs));
    }
    json.failing_seeds = Some(failing);
    if a.coverage {
        json.show_coverage();
    }
    print(&json, a.json);
    verdict_code(&json)
}

/// Shrinks a failing `cfg`, each try run with the command's application.
fn shrink(cfg: &SimConfig, with: &Runs) -> Shrunk {
    eprintln!("sitenet sim: shrinking seed {}", cfg.seed);
    let (small, runs) = sim::shrink_with(cfg, |c| {
        eprintln!(
            "sitenet sim:   trying {} sites, {} faults, {:.1}s",
            c.sites,
            c.faults.name(),
            c.duration.as_secs_f64()
        );
        with.make(c.clone()).run().verdict != Verdict::Ok
    });
    Shrunk {
        sites: small.sites,
        faults: small.faults.name(),
        duration_s: small.duration.as_secs_f64(),
        runs,
        command: format!("{}{} --trace", typed(&small), with.app.flag()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    /// The seeds' settings `sitenet sim ARGS --swarm` runs.
    fn swarm_of(args: &[&str]) -> Runs {
        let a = Cmd::try_parse_from(["sim"].iter().chain(args).chain(&["--swarm"]))
            .expect("valid options")
            .args;
        runs_of(&a).expect("a run can be made")
    }

    /// A failing seed's replay names `--swarm` and every option given
    /// (booleans after `=`, so that one pinned off stays off), and those
    /// options read back pin the same knobs: the same settings drawn.
    #[test]
    fn a_replay_names_the_options_that_pinned_their_settings() {
        let given = [
            "--faults",
            "heavy",
            "--hard-slots",
            "3",
            "--bursts",
            "0.3",
            "--output-bound",
            "98304",
            "--outbox-queue=false",
            "--adopt-hop",
        ];
        let runs = swarm_of(&given);
        let settings = runs.settings(77);
        assert_eq!(
            settings.replay,
            "sitenet sim --seed 77 --swarm --faults heavy --weak-slots 8 --hard-slots 3 \
             --output-bound 98304 --bursts 0.3 --outbox-queue=false --adopt-hop=true"
        );
        let words: Vec<&str> = settings.replay.split(' ').skip(5).collect();
        let again = swarm_of(&words);
        let (a, b) = (runs.config(77), again.config(77));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(
            (a.hard_slots, a.outbox_queue, a.adopt_hop),
            (3, false, true)
        );
        // Without options, nothing is pinned and every knob is drawn.
        let free = swarm_of(&[]);
        assert_eq!(free.settings(77).replay, "sitenet sim --seed 77 --swarm");
    }

    /// A dataflow run's replay and typed command name the application:
    /// without it they would run the node's workload instead.
    #[test]
    fn a_dataflow_run_is_replayed_as_a_dataflow_run() {
        let runs = swarm_of(&["--app", "dataflow", "--faults", "heavy"]);
        assert_eq!(runs.app, App::Dataflow);
        let settings = runs.settings(5);
        assert_eq!(
            settings.replay,
            "sitenet sim --seed 5 --swarm --faults heavy --app dataflow"
        );
        assert!(
            settings.command.ends_with(" --app dataflow"),
            "{}",
            settings.command
        );
        let again = swarm_of(&settings.replay.split(' ').skip(5).collect::<Vec<_>>());
        assert_eq!(again.app, App::Dataflow);
        assert_eq!(swarm_of(&[]).app, App::Node);
    }
}
