//! `sitenet sim`: the deterministic simulator (`sitenet_sim`)
//! from the command line. One seed: run it, print the checkers' verdict and
//! the figures. No seed: try seeds for a while and report those that fail.
//! `--shrink`: make a failing seed's run as small as it still fails.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use sitenet_sim::{self as sim, Faults, Sim, SimConfig, SimConfigError, Verdict};

mod figures;

use figures::{add, print, verdict_code, Json, Shrunk};

/// The smallest `--output-bound`: twice the default workload's largest
/// message (40 KiB of body, and its header and record), as the runtime
/// keeps its bound at least twice its largest message; the floor of the
/// library's default too.
const MIN_OUTPUT_BOUND: u64 = SimConfig::MIN_DEFAULT_OUTPUT_BOUND;

/// The most threads `--jobs` may ask for (the library's bound).
const MAX_JOBS: usize = sim::MAX_JOBS;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Number of simulated sites (2 to 1,000,000; each is a node in memory).
    #[arg(long, default_value_t = 50)]
    sites: usize,
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
    /// How many faults: cuts, partitions, crashes and restarts, slow readers.
    #[arg(long, default_value = "light", value_parser = ["none", "light", "heavy"])]
    faults: String,
    /// Seconds between two acts of each site's application (sends,
    /// requests, the chances of the options below): a shorter tick loads
    /// the network more (at least 0.001).
    #[arg(long, default_value_t = 1.0)]
    tick: f64,
    /// Each site's weak channel slot limit (connects beyond it wait in line).
    #[arg(long, default_value_t = 8)]
    weak_slots: usize,
    /// Each site's hard channel slot limit (never exceeded).
    #[arg(long, default_value_t = 12)]
    hard_slots: usize,
    /// The share (0 to 1) of one-way messages sent to a site's address
    /// rather than its id: each node's site table then binds such entries,
    /// and merges one into the entry it already has for the site.
    #[arg(long, default_value_t = 0.0)]
    address_sends: f64,
    /// A forwarded request's origin the node does not know becomes an
    /// entry on the forwarder's word, a claim it holds, as in the runtime:
    /// each forwarder may hold this many claims on sites not proven yet
    /// (the runtime's default is 16); a request beyond is refused.
    #[arg(long)]
    peer_claims: Option<u32>,
    /// The chance (0 to 1) that a site's tick also opens a cooperation: a
    /// scatter/gather to its neighbours whose replies, and votes, fill its
    /// receive descriptors by the runtime's rules; it completes, times
    /// out, fails with a site it waits for, or is cancelled, once.
    #[arg(long, default_value_t = 0.0)]
    cooperations: f64,
    /// The share (0 to 1) of one-way messages that name another site (a
    /// SiteRef in them): the receiver learns the site on the sender's word,
    /// a claim the sender holds (--peer-claims bounds it), and sends to it.
    #[arg(long, default_value_t = 0.0)]
    site_refs: f64,
    /// The chance (0 to 1) that a site's tick also submits a batch: sends
    /// and requests to its neighbours, a send done when acknowledged, each
    /// retried on the site then at its address by the runtime's rule.
    #[arg(long, default_value_t = 0.0)]
    batches: f64,
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
    /// --output-bound.
    #[arg(long, default_value_t = 0.0)]
    bursts: f64,
    /// A send waits in its entry's outbox queue until the ComObject's next
    /// turn (an event up to 5 ms later, the runtime's wake through the
    /// actor's mailbox), so that a merge can come in between and order the
    /// queues as the runtime's does.
    #[arg(long)]
    outbox_queue: bool,
    /// An accepted channel reaches its entry's ComObject through the
    /// entry's mailbox (an event up to 5 ms after it was routed there, the
    /// runtime's Adopt message), counted on the entry meanwhile: the
    /// machine opens, parks or fails in between, the reclaim re-check must
    /// keep the entry, and the peer may give up.
    #[arg(long)]
    adopt_hop: bool,
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
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> ExitCode {
    let duration = match crate::seconds("duration", a.duration) {
        Ok(d) => d,
        Err(e) => return crate::usage(e),
    };
    let settle = match crate::seconds("settle", a.settle) {
        Ok(d) => d,
        Err(e) => return crate::usage(e),
    };
    let tick = match crate::seconds("tick", a.tick) {
        Ok(d) => d,
        Err(e) => return crate::usage(e),
    };
    if let Some(b) = a.output_bound.filter(|b| *b < MIN_OUTPUT_BOUND) {
        return crate::usage(format!(
            "--output-bound must be at least {MIN_OUTPUT_BOUND} bytes (twice the largest \
             message the workload sends), got {b}"
        ));
    }
    if let (Some(node), Some(site)) = (a.node_output_bound, a.output_bound) {
        if node < site {
            return crate::usage(format!(
                "--node-output-bound ({node}) must be at least --output-bound ({site})"
            ));
        }
    }
    let faults: Faults = a.faults.parse().expect("clap checked the level");
    let cfg = SimConfig {
        sites: a.sites,
        seed: a.seed.unwrap_or(a.first_seed),
        duration,
        settle,
        faults,
        tick,
        weak_slots: a.weak_slots,
        hard_slots: a.hard_slots,
        address_sends: a.address_sends,
        peer_claims: a.peer_claims,
        cooperations: a.cooperations,
        site_refs: a.site_refs,
        batches: a.batches,
        output_bound: a.output_bound,
        node_output_bound: a.node_output_bound,
        bursts: a.bursts,
        outbox_queue: a.outbox_queue,
        adopt_hop: a.adopt_hop,
        ..SimConfig::default()
    };
    // The library's check, told by the option's name.
    if let Err(e) = cfg.check() {
        return crate::usage(flag_error(&e));
    }
    match a.seed {
        Some(_) => one(cfg, &a),
        None => search(cfg, &a),
    }
}

/// The fields of `SimConfig` that an option of `sitenet sim` sets, by the
/// option's name (an underscore for its dash).
const FLAG_FIELDS: [&str; 11] = [
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
fn one(cfg: SimConfig, a: &Args) -> ExitCode {
    let faults = cfg.faults;
    let mut sim = Sim::new(cfg.clone());
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
    if report.verdict != Verdict::Ok && a.shrink {
        json.shrunk = Some(shrink(&cfg));
    }
    print(&json, a.json);
    verdict_code(&json)
}

/// No seed: tries seeds until the time is up; reports the failing ones.
fn search(cfg: SimConfig, a: &Args) -> ExitCode {
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
    let tried = sim::search(&cfg, jobs, budget, |run| {
        let seed = run.report.seed;
        let one = Json::new(&run.report, cfg.faults, run.wall);
        if let Some(v) = &one.violation {
            eprintln!("sitenet sim: seed {seed} fails: {}", v.what);
        }
        ended.insert(seed.wrapping_sub(cfg.seed), one);
        while let Some(one) = ended.remove(&next) {
            if one.violation.is_some() {
                failing.push(cfg.seed.wrapping_add(next));
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
    });
    debug_assert!(ended.is_empty() && next == tried, "every seed taken is run");
    bar.finish_and_clear();
    let mut json = total.expect("at least one run");
    json.wall_s = start.elapsed().as_secs_f64();
    json.speed = json.sim_s / json.wall_s;
    json.events_per_s = json.events as f64 / json.wall_s;
    json.seeds_tried = Some(tried);
    if failing.is_empty() {
        json.seed = None;
    } else if a.shrink {
        json.shrunk = Some(shrink(&SimConfig {
            seed: failing[0],
            ..cfg.clone()
        }));
    }
    json.failing_seeds = Some(failing);
    print(&json, a.json);
    verdict_code(&json)
}

fn shrink(cfg: &SimConfig) -> Shrunk {
    eprintln!("sitenet sim: shrinking seed {}", cfg.seed);
    let (small, runs) = sim::shrink(cfg, |c| {
        eprintln!(
            "sitenet sim:   trying {} sites, {} faults, {:.1}s",
            c.sites,
            c.faults.name(),
            c.duration.as_secs_f64()
        );
    });
    Shrunk {
        sites: small.sites,
        faults: small.faults.name(),
        duration_s: small.duration.as_secs_f64(),
        runs,
        command: format!(
            "sitenet sim --seed {} --sites {} --faults {} --duration {} --settle {} --tick {} \
             --weak-slots {} --hard-slots {} --address-sends {} --cooperations {} --site-refs {} --batches {} --bursts {}{}{}{}{} --trace",
            small.seed,
            small.sites,
            small.faults.name(),
            small.duration.as_secs_f64(),
            small.settle.as_secs_f64(),
            small.tick.as_secs_f64(),
            small.weak_slots,
            small.hard_slots,
            small.address_sends,
            small.cooperations,
            small.site_refs,
            small.batches,
            small.bursts,
            small
                .peer_claims
                .map_or(String::new(), |b| format!(" --peer-claims {b}")),
            small.output_bound.map_or(String::new(), |b| format!(
                " --output-bound {b} --node-output-bound {}",
                small.node_output_bound()
            )),
            if small.outbox_queue {
                " --outbox-queue"
            } else {
                ""
            },
            if small.adopt_hop { " --adopt-hop" } else { "" }
        ),
    }
}
