//! Coverage of the protocol machines' decisions in simulated runs: a run
//! reports the decision points it reached, the same seed reaches them the
//! same number of times, and the workloads and faults meant to reach a
//! point do reach it.

use std::time::Duration;

use sitenet_protocols::base::coverage::{Coverage, Point};
use sitenet_protocols::Priority;
use sitenet_sim::{Faults, Sim, SimConfig, Verdict};

fn cfg(sites: usize, seed: u64, faults: Faults) -> SimConfig {
    SimConfig {
        sites,
        seed,
        faults,
        duration: Duration::from_secs(10),
        ..SimConfig::default()
    }
}

/// The coverage of seeds `seeds` of `make`, added up; every run must hold.
fn covered(seeds: std::ops::Range<u64>, make: impl Fn(u64) -> SimConfig) -> Coverage {
    let mut all = Coverage::default();
    for seed in seeds {
        let r = Sim::new(make(seed)).run();
        assert_eq!(r.verdict, Verdict::Ok, "seed {seed}");
        all.merge(&r.coverage);
    }
    all
}

#[test]
fn a_run_counts_the_decisions_it_takes_the_same_way_each_time() {
    let a = Sim::new(cfg(10, 3, Faults::Light)).run();
    let b = Sim::new(cfg(10, 3, Faults::Light)).run();
    assert_eq!(a.coverage, b.coverage);
    for p in [
        Point::LinkAccept,
        Point::ActRequestSlot,
        Point::ActOpen,
        Point::ActUp,
        Point::SlotGrantNow,
    ] {
        assert!(a.coverage.count(p) > 0, "{} not reached", p.label());
    }
}

#[test]
fn faults_reach_temporary_failures_and_retransmissions() {
    let c = covered(0..3, |seed| cfg(10, seed, Faults::Heavy));
    for p in [
        Point::FaultOkToTemp,
        Point::FaultTempToOk,
        Point::ActCloseLost,
        Point::SendRetransmit,
    ] {
        assert!(c.count(p) > 0, "{} not reached", p.label());
    }
}

#[test]
fn bursts_cut_messages_in_the_middle() {
    let c = covered(0..5, |seed| SimConfig {
        bursts: 0.2,
        duration: Duration::from_secs(30),
        ..cfg(10, seed, Faults::Heavy)
    });
    let rewinds: u64 = Priority::ALL
        .iter()
        .map(|&p| c.count(Point::rewind_on(p)))
        .sum();
    assert!(rewinds > 0);
}

#[test]
fn crowded_slots_preempt_and_release_preempted_slots() {
    let c = covered(0..3, |seed| SimConfig {
        weak_slots: 2,
        hard_slots: 3,
        tick: Duration::from_millis(10),
        address_sends: 0.8,
        ..cfg(10, seed, Faults::Light)
    });
    for p in [
        Point::SlotQueued,
        Point::SlotPreempt,
        Point::SlotReleasePreempted,
        Point::SlotToLine,
    ] {
        assert!(c.count(p) > 0, "{} not reached", p.label());
    }
}

#[test]
fn giving_up_on_partitioned_sites_reaches_the_refusal_of_a_closing_entry() {
    let c = covered(0..5, |seed| SimConfig {
        give_up: Some(Duration::from_secs(2)),
        duration: Duration::from_secs(30),
        ..cfg(10, seed, Faults::Heavy)
    });
    for p in [Point::FaultTempToPerm, Point::LinkRefuseClosing] {
        assert!(c.count(p) > 0, "{} not reached", p.label());
    }
}

#[test]
fn orderly_leaves_reach_the_last_words_to_a_failed_site() {
    let c = covered(0..5, |seed| SimConfig {
        leaves: 1.0,
        duration: Duration::from_secs(30),
        ..cfg(10, seed, Faults::Heavy)
    });
    assert!(c.count(Point::ActCloseFinal) > 0);
}

#[test]
fn a_give_up_of_zero_is_refused() {
    let e = Sim::try_new(SimConfig {
        give_up: Some(Duration::ZERO),
        ..SimConfig::default()
    });
    assert!(e.is_err());
}

/// Prints what a few settings reach (a tool for finding the unreached
/// points; `--ignored` to run).
#[test]
#[ignore]
fn print_unreached() {
    let mut all = Coverage::default();
    for make in [
        (|seed| cfg(20, seed, Faults::Heavy)) as fn(u64) -> SimConfig,
        |seed| SimConfig {
            bursts: 0.2,
            ..cfg(10, seed, Faults::Heavy)
        },
        |seed| SimConfig {
            weak_slots: 2,
            hard_slots: 3,
            tick: Duration::from_millis(10),
            address_sends: 0.8,
            adopt_hop: true,
            outbox_queue: true,
            ..cfg(10, seed, Faults::Heavy)
        },
        |seed| SimConfig {
            half_open: 0.5,
            peer_claims: Some(4),
            site_refs: 0.3,
            give_up: Some(Duration::from_secs(2)),
            leaves: 0.5,
            ..cfg(10, seed, Faults::Heavy)
        },
    ] {
        all.merge(&covered(0..5, make));
    }
    for (p, n) in all.iter() {
        println!("{:>10} {}", n, p.label());
    }
}

#[test]
fn half_open_cuts_reach_the_link_rules_replacement_of_a_lost_channel() {
    let c = covered(0..5, |seed| SimConfig {
        half_open: 0.5,
        duration: Duration::from_secs(30),
        ..cfg(10, seed, Faults::Heavy)
    });
    assert!(c.count(Point::LinkReplaceLostSame) > 0);
}

/// The points docs/architecture.md argues no honest run reaches: the
/// first column of the table under "Coverage" in its simulator section.
fn argued_unreachable() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/architecture.md"
    ))
    .expect("docs/architecture.md");
    let table = doc
        .split("**Coverage.**")
        .nth(1)
        .expect("the simulator section has a Coverage paragraph");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| point"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .flat_map(|l| {
            // The first column names one point or several, each in
            // backquotes.
            let first = l.split('|').nth(1).expect("a first column");
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The seed set the test command runs reaches every decision point but
/// those the docs argue no honest run reaches; and each of those is a
/// point (a renamed one would leave a stale argument).
#[test]
fn swarm_seeds_reach_every_point_the_docs_do_not_argue_unreachable() {
    let argued = argued_unreachable();
    assert!(!argued.is_empty());
    for a in &argued {
        assert!(
            Point::ALL.iter().any(|p| p.label() == a),
            "docs/architecture.md argues {a}, which is no point"
        );
    }
    let swarm = sitenet_sim::Swarm::new(SimConfig::default());
    let mut all = Coverage::default();
    for seed in 0..SEEDS {
        // Every seed's verdict is the swarm search's business; this test
        // counts what the seeds reach.
        all.merge(&Sim::new(swarm.config(seed)).run().coverage);
    }
    let unreached: Vec<_> = all
        .unreached()
        .into_iter()
        .map(|p| p.label().to_string())
        .filter(|p| !argued.contains(p))
        .collect();
    assert!(
        unreached.is_empty(),
        "{SEEDS} swarm seeds reach none of {unreached:?}, and docs/architecture.md does not \
         argue why"
    );
}

/// How many swarm seeds [`swarm_seeds_reach_every_point_the_docs_do_not_argue_unreachable`]
/// runs.
const SEEDS: u64 = 60;
