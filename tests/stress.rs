//! The stress engine as a library: a small run against a server with few
//! slots, with cuts, loses nothing and keeps every bound, and the policies
//! both work.

use std::time::Duration;

use sitenet::stress::{run, StressConfig};
use sitenet_protocols::slots::Admission;

fn small(policy: &str, seed: u64) -> StressConfig {
    StressConfig {
        clients: 16,
        slots: 5,
        policy: policy.into(),
        admission: Admission::default(),
        duration: Duration::from_millis(1500),
        cut_rate: 5.0,
        seed,
        transport: "tcp".into(),
        rounds: None,
        cookies: Vec::new(),
        threads: None,
    }
}

/// The run's nodes on one thread or on two, over mem: nothing
/// lost either way, and the report says how many threads ran it.
#[test]
fn a_run_on_one_thread_and_on_two_loses_nothing() {
    for threads in [1, 2] {
        let cfg = StressConfig {
            transport: "mem".into(),
            threads: Some(threads),
            ..small("default", 7)
        };
        let r = run(&cfg, |_| {}).expect("the run starts");
        assert!(r.failures().is_empty(), "{threads}: {:?}", r.failures());
        assert!(r.sent > 0 && r.delivered == r.sent, "{threads}: {r:?}");
        assert_eq!(r.threads, threads);
    }
}

#[test]
fn sixteen_clients_on_five_slots_with_cuts_lose_nothing_under_either_policy() {
    for (policy, seed) in [("default", 1), ("naive", 2)] {
        let mut ticks = 0;
        let r = run(&small(policy, seed), |_| ticks += 1).expect("the run starts");
        assert!(r.failures().is_empty(), "{policy}: {:?}", r.failures());
        assert!(r.sent > 0 && r.delivered == r.sent, "{policy}: {r:?}");
        assert!(r.peak_slots <= 5);
        assert!(r.peak_transport_bytes <= r.transport_bytes_bound);
        assert!(
            r.preemptions + r.accepts_refused > 0,
            "{policy}: 16 clients on 5 slots never short: {r:?}"
        );
        assert!(r.round_trips > 0 && r.rtt_p50_us > 0);
        assert!(ticks > 0, "progress was reported");
        assert!(!r.timeline.is_empty());
        // The reasons counted belong to the policy that ran, or to the
        // admission policy's turns while clients waited in line.
        for reason in r.preemptions_by_reason.keys() {
            if !reason.starts_with("turn_") {
                assert_eq!(reason.starts_with("naive"), policy == "naive", "{reason}");
            }
        }
        assert_eq!(
            r.accepts_refused, 0,
            "{policy}: the line holds every client"
        );
        assert!(r.grants > 0, "{policy}: {r:?}");
    }
}

#[test]
fn options_that_cannot_work_are_refused() {
    let mut c = small("lru", 1);
    assert!(run(&c, |_| {}).is_err());
    c.policy = "default".into();
    c.slots = 1;
    assert!(run(&c, |_| {}).is_err());
    c.slots = 5;
    c.clients = 0;
    assert!(run(&c, |_| {}).is_err());
}

#[test]
fn a_run_with_fixed_rounds_ends_when_every_client_is_done() {
    let cfg = StressConfig {
        rounds: Some(5),
        duration: Duration::from_secs(120),
        cut_rate: 0.0,
        ..small("default", 3)
    };
    let r = run(&cfg, |_| {}).expect("the run starts");
    assert!(r.failures().is_empty(), "{:?}", r.failures());
    // 16 clients x 5 bursts of 8 messages and one probe each.
    assert_eq!(r.sent, 16 * 5 * 8);
    assert_eq!(r.round_trips, 16 * 5);
    assert!(r.duration_s < 120.0, "ended with the work, not the clock");
    // The report's keys: the mean among the probes, p99 over p50 in every
    // sample, the drain marked at the end; and, the same work for every
    // client, every percentile of the per-client counts is that work.
    assert!(r.rtt_min_us as f64 <= r.rtt_mean_us && r.rtt_mean_us <= r.rtt_max_us as f64);
    assert!(r.rtt_p50_us <= r.rtt_p99_us && r.rtt_p99_us <= r.rtt_max_us);
    for s in &r.timeline {
        assert!(s.rtt_p99_us >= s.rtt_p50_us, "{s:?}");
        assert!(!s.draining || s.t_s >= r.duration_s, "{s:?}");
    }
    assert!(r.timeline.last().is_some_and(|s| s.draining));
    assert_eq!(r.per_client_delivered_quantiles, vec![5 * 8; 101]);
    assert_eq!(r.fairness_jain, 1.0);
}

/// 16 clients on 5 slots, each doing the same work: 11 wait in the
/// server's line for their first slot. Each client's first reply is
/// reported as its first-contact wait, apart from the round trips of the
/// probes on an open channel and of those that waited for a slot again;
/// the three add up to every probe, each spread is ordered (no mean above
/// its own p99), and every client is counted in one group of threads.
#[test]
fn the_first_contact_is_reported_apart_from_the_steady_round_trip() {
    let cfg = StressConfig {
        rounds: Some(5),
        duration: Duration::from_secs(120),
        cut_rate: 0.0,
        ..small("default", 6)
    };
    let r = run(&cfg, |_| {}).expect("the run starts");
    assert!(r.failures().is_empty(), "{:?}", r.failures());
    assert!(r.grants > 0, "nobody waited in line: {r:?}");
    let (steady, again, first) = (r.steady_rtt, r.reconnect_rtt, r.first_contact);
    assert_eq!(first.count, 16, "one first contact per client: {first:?}");
    assert_eq!(steady.count + again.count + first.count, r.round_trips);
    assert!(steady.count > 0, "{r:?}");
    for s in [steady, again, first] {
        if s.count > 0 {
            assert!(s.mean_us <= s.p99_us as f64, "{s:?}");
            assert!(s.p50_us <= s.p99_us && s.p99_us <= s.max_us, "{s:?}");
            assert!(s.max_us <= 120_000_000, "{s:?}");
        }
    }
    let groups = &r.delivered_by_threads;
    assert_eq!(groups.iter().map(|g| g.clients).sum::<usize>(), 16);
    assert!(groups
        .iter()
        .all(|g| g.client_thread < r.threads && g.server_thread < r.threads));
    let by_groups: f64 = groups
        .iter()
        .map(|g| g.delivered_mean * g.clients as f64)
        .sum();
    assert!((by_groups - r.delivered as f64).abs() < 0.5, "{groups:?}");
    assert!(r.timeline.iter().any(|s| s.steady_rtt_p99_us > 0));
}

/// The cutter sleeps between cuts; a run that stops waited out its sleep
/// (once 0.75 s at every size of a sweep, whose total time then measured
/// it). A mean gap of 100 s: had the run waited, it would take 50 s or
/// more, whatever the machine.
#[test]
fn a_run_of_fixed_rounds_does_not_wait_for_the_next_cut() {
    let cfg = StressConfig {
        clients: 4,
        rounds: Some(2),
        duration: Duration::from_secs(600),
        cut_rate: 0.01,
        ..small("default", 5)
    };
    let r = run(&cfg, |_| {}).expect("the run starts");
    assert!(r.failures().is_empty(), "{:?}", r.failures());
    assert_eq!(r.round_trips, 4 * 2);
    assert!(r.elapsed_s < 50.0, "waited for the cutter: {r:?}");
}

#[test]
fn the_stress_runs_over_unix_sockets_and_mem_channels_too() {
    for transport in ["unix", "mem"] {
        let cfg = StressConfig {
            transport: transport.into(),
            duration: Duration::from_millis(800),
            ..small("default", 4)
        };
        let r = run(&cfg, |_| {}).expect("the run starts");
        assert!(r.failures().is_empty(), "{transport}: {:?}", r.failures());
        assert!(r.sent > 0 && r.delivered == r.sent, "{transport}: {r:?}");
        assert_eq!(r.transport, transport);
        assert!(
            r.cuts > 0,
            "{transport}: the fault injector cuts these channels too"
        );
    }
    let bad = StressConfig {
        transport: "carrier-pigeon".into(),
        ..small("default", 4)
    };
    assert!(run(&bad, |_| {}).is_err());
}

/// The Mozart paper's setting: 300 client sites against a server with a hard limit
/// of 30 slots, with channel cuts. Every client does its fixed work — so
/// no waiter for a slot starves — nothing is lost,
/// duplicated or reordered, and the server never holds more than 30 slots,
/// under both policies.
#[test]
fn three_hundred_clients_on_thirty_slots_all_finish_losing_nothing() {
    for (policy, seed) in [("default", 30), ("naive", 31)] {
        let cfg = StressConfig {
            clients: 300,
            slots: 30,
            rounds: Some(2),
            duration: Duration::from_secs(600),
            cut_rate: 2.0,
            ..small(policy, seed)
        };
        let r = run(&cfg, |_| {}).expect("the run starts");
        assert!(r.failures().is_empty(), "{policy}: {:?}", r.failures());
        assert_eq!(r.sent, 300 * 2 * 8, "{policy}");
        assert_eq!(r.delivered, r.sent, "{policy}");
        assert_eq!(r.round_trips, 300 * 2, "{policy}: every client finished");
        assert!(r.peak_slots <= 30, "{policy}: {} slots", r.peak_slots);
        assert!(
            r.preemptions > 0,
            "{policy}: 300 clients never short of 30 slots"
        );
        assert!(r.duration_s < 600.0, "{policy}: ended with the work");
    }
}
