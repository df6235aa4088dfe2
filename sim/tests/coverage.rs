//! Coverage of the protocol machines' decisions in simulated runs: a run
//! reports the decision points it reached, the same seed reaches them the
//! same number of times, and the workloads and faults meant to reach a
//! point do reach it.

use std::time::Duration;

use sitenet_protocols::base::coverage::{Coverage, Point};
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
    assert!(c.count(Point::SendRewindHalfSent) > 0);
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
