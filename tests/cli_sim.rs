//! `sitenet sim`: the JSON keys scripts read, the same seed giving the same
//! digest from two processes, the search without a seed, settings drawn per
//! seed (`--swarm`) and their replay, the trace, sends by address, the
//! output bound, and usage errors.

mod common;

use common::cli::{json_of, run};

const SMALL: &[&str] = &[
    "sim",
    "--sites",
    "8",
    "--duration",
    "3",
    "--settle",
    "20",
    "--faults",
    "heavy",
    "--json",
];

#[test]
fn one_seed_prints_the_verdict_and_the_figures() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "11"]);
    let v = json_of(&args);
    for key in [
        "verdict",
        "seed",
        "sites",
        "digest",
        "messages",
        "delivered",
        "cuts",
        "partitions",
        "preemptions",
        "restarts",
        "retransmitted",
        "parks",
        "unparks",
        "sim_s",
        "wall_s",
        "speed",
        "events_per_s",
    ] {
        assert!(v.get(key).is_some(), "no {key:?} in {v}");
    }
    assert_eq!(v["verdict"], "ok");
    assert_eq!(v["seed"], 11);
    assert_eq!(v["sites"], 8);
    assert_eq!(v["sim_s"], 23.0);
    assert!(v["messages"].as_u64().unwrap() > 0);
    // Idle sites park and start again in every run.
    assert!(v["parks"].as_u64().unwrap() > 0);
    assert_eq!(v["digest"].as_str().unwrap().len(), 64);
    // Another process, the same seed: the same run.
    let again = json_of(&args);
    assert_eq!(again["digest"], v["digest"]);
    assert_eq!(again["delivered"], v["delivered"]);
}

#[test]
fn without_a_seed_it_searches_and_reports_the_seeds_it_tried() {
    let mut args = SMALL.to_vec();
    args.extend(["--search", "1", "--first-seed", "100"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok");
    assert!(v["seeds_tried"].as_u64().unwrap() >= 1);
    assert_eq!(v["failing_seeds"], serde_json::json!([]));
    assert!(v["seed"].is_null(), "no failing seed to name");
}

/// `--jobs`: seeds run on several threads; the summary sums the seeds
/// tried, consecutive from the first, each the run it is alone (its
/// messages are the sum of the seeds' own, run one by one). A search of a
/// microsecond runs the first seed, and maybe the next on the other thread.
#[test]
fn a_search_on_several_threads_sums_the_seeds_it_tried() {
    let mut args = SMALL.to_vec();
    args.extend(["--search", "0.000001", "--first-seed", "100", "--jobs", "2"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok");
    assert_eq!(v["failing_seeds"], serde_json::json!([]));
    let tried = v["seeds_tried"].as_u64().unwrap();
    assert!(tried >= 1);
    let mut messages = 0;
    for seed in 100..100 + tried.min(3) {
        let mut one = SMALL.to_vec();
        let seed = seed.to_string();
        // A search draws each seed's settings; `--swarm` replays them.
        one.extend(["--seed", &seed, "--swarm"]);
        messages += json_of(&one)["messages"].as_u64().unwrap();
    }
    let total = v["messages"].as_u64().unwrap();
    if tried <= 3 {
        assert_eq!(total, messages);
    } else {
        assert!(total > messages);
    }
    let out = run(&["sim", "--search", "1", "--jobs", "5000"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_trace_prints_one_line_per_event() {
    let out = run(&[
        "sim",
        "--sites",
        "3",
        "--seed",
        "1",
        "--duration",
        "2",
        "--settle",
        "2",
        "--trace",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().filter(|l| l.contains(" deliver ")).count() > 0);
    assert!(text.contains("verdict:        ok"), "{text}");
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["sim", "--sites", "1", "--seed", "1"][..],
        &["sim", "--duration", "0", "--seed", "1"],
        // Regression: a duration past what a clock holds panicked.
        &["sim", "--duration", "1e30", "--seed", "1"],
        &["sim", "--settle", "inf", "--seed", "1"],
        &["sim", "--tick", "0", "--seed", "1"],
        &["sim", "--tick", "0.0001", "--seed", "1"],
        &["sim", "--faults", "some", "--seed", "1"],
        &["sim", "--hard-slots", "1", "--seed", "1"],
        &["sim", "--address-sends", "1.5", "--seed", "1"],
        &["sim", "--cooperations=-0.1", "--seed", "1"],
        &["sim", "--weak-slots", "0", "--seed", "1"],
        &["sim", "--site-refs", "2", "--seed", "1"],
        &["sim", "--batches", "1.01", "--seed", "1"],
        &["sim", "--bursts=-1", "--seed", "1"],
        &["sim", "--output-bound", "1000", "--seed", "1"],
        // Regression: a number of sites past what memory holds aborted
        // (its nodes' table alone asked for 222 GB).
        &["sim", "--sites", "100000000", "--seed", "1"],
        &[
            "sim",
            "--output-bound",
            "200000",
            "--node-output-bound",
            "100000",
            "--seed",
            "1",
        ],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("memory allocation"), "{args:?}: {err}");
        // The option is named, not the library's field (`SimConfig::check`
        // makes most of these checks; the command says which flag).
        let flag = args[1].split('=').next().unwrap();
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("SimConfig::"), "{args:?}: {err}");
    }
}

/// `--address-sends`: a share of the messages goes to sites' addresses, and
/// the figures say how many such entries were bound and merged (0 without
/// it); `--peer-claims`: forwarded origins are claims of their forwarder.
#[test]
fn address_sends_bind_and_merge_entries() {
    let mut args = SMALL.to_vec();
    args.extend([
        "--seed",
        "3",
        "--address-sends",
        "0.8",
        "--peer-claims",
        "2",
    ]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    assert!(
        v["bound"].as_u64().unwrap() + v["merges"].as_u64().unwrap() > 0,
        "{v}"
    );
    for key in ["origins_claimed", "origins_refused"] {
        assert!(v[key].is_u64(), "no {key:?} in {v}");
    }
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "3"]);
    let v = json_of(&plain);
    assert_eq!(
        (v["bound"].as_u64(), v["merges"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
}

/// `--cooperations`: sites open cooperations, and the figures say how each
/// ended (every one once); without it, none.
#[test]
fn cooperations_are_opened_and_each_ends_once() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3", "--cooperations", "0.5"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k:?} in {v}"));
    let ended =
        n("coops_completed") + n("coops_timed_out") + n("coops_failed") + n("coops_cancelled");
    assert!(n("cooperations") > 0 && ended > 0, "{v}");
    assert!(ended <= n("cooperations"), "{v}");
    assert!(v["coop_discarded"].is_u64(), "{v}");
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "3"]);
    assert_eq!(json_of(&plain)["cooperations"].as_u64(), Some(0));
}

/// `--site-refs`: messages name other sites; the figures say how many were
/// handled, how many of those sites became claims, and how many were
/// refused (`--peer-claims` bounds the claims); without it, none.
#[test]
fn site_refs_are_handled_claimed_or_refused() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3", "--site-refs", "0.5", "--peer-claims", "1"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k:?} in {v}"));
    assert!(n("site_refs") > 0 && n("site_refs_claimed") > 0, "{v}");
    assert!(n("site_refs_claimed") <= n("site_refs"), "{v}");
    assert!(v["site_refs_refused"].is_u64(), "{v}");
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "3"]);
    assert_eq!(json_of(&plain)["site_refs"].as_u64(), Some(0));
}

/// `--batches`: sites submit batches, and the figures say how many, their
/// operations, the retries and the failures; without it, none.
#[test]
fn batches_are_submitted_and_counted() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3", "--batches", "0.5"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k:?} in {v}"));
    assert!(
        n("batches") > 0 && n("batch_ops") >= 2 * n("batches"),
        "{v}"
    );
    assert!(n("batch_ops_failed") <= n("batch_ops"), "{v}");
    assert!(v["batch_retries"].is_u64(), "{v}");
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "3"]);
    assert_eq!(json_of(&plain)["batches"].as_u64(), Some(0));
}

/// `--output-bound` and `--bursts`: bursts fill the small bound, senders
/// wait in line (`send_waits`), and no site holds more than its node bound
/// (`output_peak`, twice the entry's bound by default); without them,
/// nobody waits.
#[test]
fn an_output_bound_makes_senders_wait() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "2", "--output-bound", "98304", "--bursts", "0.5"]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k:?} in {v}"));
    assert!(n("send_waits") > 0, "{v}");
    assert!(n("output_peak") > 0 && n("output_peak") <= 2 * 98304, "{v}");
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "2"]);
    assert_eq!(json_of(&plain)["send_waits"].as_u64(), Some(0));
}

/// `--outbox-queue`: sends wait in their entry's outbox queue until its
/// ComObject's next turn; with sends by address, merges order the queues
/// and every checker holds. A run of its own: not the digest without it.
#[test]
fn the_outbox_queue_is_an_option_of_its_own() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "4", "--address-sends", "0.5"]);
    let plain = json_of(&args);
    args.push("--outbox-queue");
    let queued = json_of(&args);
    assert_eq!(queued["verdict"], "ok", "{queued}");
    assert_ne!(queued["digest"], plain["digest"]);
}

/// `--tick`: a shorter application tick sends more in the same simulated
/// time, and with few slots it congests them: attempts wait in peers'
/// lines and every checker still holds (the shapes of
/// `attempts_waiting_in_each_others_lines_do_not_stall_their_nodes`
/// come from the command line too).
#[test]
fn a_shorter_tick_sends_more() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3", "--weak-slots", "1", "--hard-slots", "2"]);
    let plain = json_of(&args);
    args.extend(["--tick", "0.02"]);
    let fast = json_of(&args);
    assert_eq!(fast["verdict"], "ok", "{fast}");
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    assert!(
        n(&fast, "messages") > 10 * n(&plain, "messages"),
        "{plain} {fast}"
    );
    // The lines' figures: peers told to wait and let in, our attempts
    // that gave their slot back.
    assert!(n(&fast, "line_waits") > 0, "{fast}");
    assert!(n(&fast, "line_grants") > 0, "{fast}");
    for k in ["accepts_refused", "line_yields", "reclaims_kept"] {
        assert!(fast[k].is_u64(), "no {k:?} in {fast}");
    }
}

/// `--adopt-hop`: accepted channels reach their entries' ComObjects
/// through the mailbox; every checker holds, and it is a run of its own.
#[test]
fn the_adopt_hop_is_an_option_of_its_own() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "5", "--tick", "0.2"]);
    let plain = json_of(&args);
    args.push("--adopt-hop");
    let hopped = json_of(&args);
    assert_eq!(hopped["verdict"], "ok", "{hopped}");
    assert_ne!(hopped["digest"], plain["digest"]);
}

/// The digest and settings of `args`' run.
fn digest_and_settings(args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let v = json_of(args);
    assert_eq!(v["verdict"], "ok", "{v}");
    (v["digest"].clone(), v["settings"].clone())
}

/// `--seed S --swarm`: the settings drawn from the seed, the options given
/// pinned; the same digest twice, and the same as the run of the drawn
/// settings typed (`settings.command`, no swarm); without `--swarm`, the
/// options as given (the run it always was).
#[test]
fn a_swarm_seed_replays_with_the_same_digest_and_settings() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "5", "--swarm"]);
    let (digest, settings) = digest_and_settings(&args);
    assert_eq!(settings["swarm"], true, "{settings}");
    assert_eq!(
        settings["pinned"],
        serde_json::json!(["--sites", "--faults"]),
        "{settings}"
    );
    assert_eq!(
        (&settings["sites"], &settings["faults"]),
        (&8.into(), &"heavy".into())
    );
    assert_eq!(
        settings["replay"],
        "sitenet sim --seed 5 --swarm --duration 3 --settle 20 --sites 8 --faults heavy"
    );
    assert_eq!(
        digest_and_settings(&args),
        (digest.clone(), settings.clone())
    );
    // The replay command, and the drawn settings typed: the same run.
    let replay = settings["replay"].as_str().unwrap().to_string();
    let mut again: Vec<&str> = replay.split(' ').skip(1).collect();
    again.push("--json");
    assert_eq!(digest_and_settings(&again).0, digest);
    let command = settings["command"].as_str().unwrap().to_string();
    let mut typed: Vec<&str> = command.split(' ').skip(1).collect();
    typed.push("--json");
    let (typed_digest, typed_settings) = digest_and_settings(&typed);
    assert_eq!(typed_digest, digest, "{command}");
    assert_eq!(typed_settings["swarm"], false);
    for key in [
        "tick_s",
        "weak_slots",
        "hard_slots",
        "bursts",
        "output_bound",
    ] {
        assert_eq!(typed_settings[key], settings[key], "{key}");
    }
    // Without --swarm: the options as given, every other setting the
    // library's default (the run a `SimConfig` of these makes).
    let mut plain = SMALL.to_vec();
    plain.extend(["--seed", "5"]);
    let (plain_digest, plain_settings) = digest_and_settings(&plain);
    assert_ne!(plain_digest, digest);
    let library = sitenet::sim::Sim::new(sitenet::sim::SimConfig {
        sites: 8,
        seed: 5,
        duration: std::time::Duration::from_secs(3),
        settle: std::time::Duration::from_secs(20),
        faults: sitenet::sim::Faults::Heavy,
        ..Default::default()
    })
    .run();
    assert_eq!(plain_digest, library.digest.as_str());
    assert_eq!(plain_settings["swarm"], false);
    assert_eq!(plain_settings["tick_s"], 1.0);
    assert_eq!(plain_settings["weak_slots"], 8);
}

/// A search draws each seed's settings unless `--no-swarm`: its one seed
/// (a search of a microsecond on one thread runs only the first) is the
/// run of `--seed S --swarm`, or of `--seed S` with `--no-swarm`.
#[test]
fn a_search_draws_settings_unless_told_not_to() {
    let messages = |extra: &[&str]| {
        let mut args = SMALL.to_vec();
        args.extend(extra);
        let v = json_of(&args);
        assert_eq!(v["verdict"], "ok", "{v}");
        v["messages"].as_u64().unwrap()
    };
    let search = ["--search", "0.000001", "--first-seed", "21"];
    let drawn = messages(&search);
    assert_eq!(drawn, messages(&["--seed", "21", "--swarm"]));
    let mut plain = search.to_vec();
    plain.push("--no-swarm");
    assert_eq!(messages(&plain), messages(&["--seed", "21"]));
    assert_ne!(drawn, messages(&["--seed", "21"]));
    // The last of --swarm and --no-swarm counts.
    plain.push("--swarm");
    assert_eq!(messages(&plain), drawn);
}

#[test]
fn coverage_counts_every_decision_point_and_lists_the_unreached() {
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3", "--coverage"]);
    let v = json_of(&args);
    let counts = v["coverage"].as_object().expect("a coverage object");
    assert!(counts.len() > 30, "{counts:?}");
    assert!(counts["link.accept"].as_u64().unwrap() > 0);
    let unreached: Vec<&str> = v["unreached"]
        .as_array()
        .expect("an unreached list")
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for (point, n) in counts {
        assert_eq!(
            unreached.contains(&point.as_str()),
            n.as_u64() == Some(0),
            "{point}: {n}"
        );
    }
    // Without the option, neither key.
    let mut args = SMALL.to_vec();
    args.extend(["--seed", "3"]);
    let v = json_of(&args);
    assert!(v.get("coverage").is_none() && v.get("unreached").is_none());
}

#[test]
fn half_open_cuts_and_leaves_are_options_of_their_own() {
    let mut args = SMALL.to_vec();
    args.extend([
        "--seed",
        "5",
        "--half-open",
        "1",
        "--leaves",
        "1",
        "--give-up",
        "3",
    ]);
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    assert!(v["half_open_cuts"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["half_open_cuts"], v["cuts"]);
    assert_eq!(v["settings"]["half_open"], 1.0);
    assert_eq!(v["settings"]["leaves"], 1.0);
    assert_eq!(v["settings"]["give_up_s"], 3.0);
}

/// `--app dataflow`: every site runs the dataflow protocols under their
/// checkers; the JSON says which application ran, and a seed's replay
/// names it.
#[test]
fn the_dataflow_application_runs_under_its_checkers() {
    let args = [
        "sim",
        "--app",
        "dataflow",
        "--seed",
        "1",
        "--duration",
        "10",
        "--faults",
        "light",
        "--json",
    ];
    let v = json_of(&args);
    assert_eq!(v["verdict"], "ok", "{v}");
    assert_eq!(v["app"], "dataflow");
    assert!(v["messages"].as_u64().unwrap() > 0, "{v}");
    let replay = v["settings"]["replay"].as_str().unwrap();
    assert!(replay.ends_with(" --app dataflow"), "{replay}");
    // The same seed, another process: the same run.
    assert_eq!(json_of(&args)["digest"], v["digest"]);
    // The default application is the node's workload.
    let node = json_of(&[
        "sim",
        "--seed",
        "1",
        "--duration",
        "3",
        "--settle",
        "20",
        "--json",
    ]);
    assert_eq!(node["app"], "node");
}
