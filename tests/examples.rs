//! Every example runs, and says what it should: each is started (the debug
//! build the test command made, with small arguments) and its output
//! checked. `cargo run --release --example NAME` runs them for real.

use std::path::PathBuf;
use std::process::Command;

/// The example binary `name`, built beside this test's binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    // target/<profile>/deps/examples-HASH → target/<profile>/examples/NAME
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("examples").join(name)
}

/// Runs `name` with `args`; returns its standard output (it must succeed).
fn run(name: &str, args: &[&str]) -> String {
    let path = example(name);
    assert!(path.exists(), "{} was not built", path.display());
    let out = Command::new(&path).args(args).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn pingpong_round_trips_with_madeleine_headers_and_bodies() {
    let out = run("pingpong", &["--sizes", "64,4096", "--count", "50"]);
    assert!(out.contains("64") && out.contains("4096"), "{out}");
}

#[test]
fn reply_later_grants_a_lock_in_turn_from_kept_responders() {
    let out = run("reply_later", &["--clients", "4"]);
    assert!(
        out.contains("4 clients held the lock in turns [1, 2, 3, 4]; at most 1 at once"),
        "{out}"
    );
}

#[test]
fn async_handlers_answer_after_asking_a_shard_and_refuse_beyond_the_cap() {
    let out = run(
        "async_handlers",
        &["--burst", "40", "--cap", "8", "--delay-ms", "1000"],
    );
    for line in [
        "apple => 1",
        "elder => 5",
        "fig => not found (shard",
        "refused busy (the front runs at most 8 at once)",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
}

#[test]
fn raw_dispatch_answers_terms_marshalled_without_serde() {
    let out = run("raw_dispatch", &["--count", "300"]);
    for line in [
        "pid 1 {add,1,2} => 3",
        "pid 2 {concat,hello,world} => helloworld",
        "pid 3 {echo,{nested,{-1}}} => {nested,{-1}}",
        "pid 42 {self} => 42",
        "pid 7 {frobnicate} => {error,{unknown_op,frobnicate}}",
        "one-way {log,started} seen by pid 9",
        "300 additions in flight: sum 89700 (expected 89700)",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
    assert!(
        out.contains("garbage => refused:") && out.contains("bad term: truncated term"),
        "{out}"
    );
}

#[test]
fn node_events_shows_up_down_unreachable_and_refused() {
    let out = run("node_events", &[]);
    assert_eq!(out.matches("up:").count(), 2, "{out}");
    assert!(out.contains("(the site shut down)"), "{out}");
    assert!(out.contains("(killed by the local node)"), "{out}");
    assert!(
        out.contains("unreachable:") && out.contains("refused"),
        "{out}"
    );
    assert!(
        out.contains("refused:     tcp:127.0.0.1:")
            && out.contains("AuthenticationFailed(Missing)"),
        "{out}"
    );
}

#[test]
fn delegation_answers_the_client_directly_in_three_messages() {
    let out = run("delegation", &["--keys", "4"]);
    assert_eq!(
        out.matches("answered the client directly: true").count(),
        4,
        "{out}"
    );
    assert!(out.contains("3 per lookup"), "{out}");
}

#[test]
fn scatter_gather_gathers_truncates_and_times_out() {
    let out = run("scatter_gather", &["--sites", "3"]);
    assert!(out.contains("gathered 3 answers, sum 60"), "{out}");
    assert!(out.contains("(truncated)"), "{out}");
    assert!(
        out.contains("timed out: 2 answers came, 1 missing"),
        "{out}"
    );
    assert!(out.contains("late answers discarded: 1"), "{out}");
}

#[test]
fn batch_completes_every_operation_and_retries_the_dead_site() {
    let out = run("batch", &["--ops", "60"]);
    assert!(out.contains("60 operations done (60 callbacks)"), "{out}");
    assert!(out.contains("retried on the restarted site: 42"), "{out}");
    assert!(out.contains("failures: 0"), "{out}");
}

#[test]
fn third_party_uses_a_reference_it_received() {
    let out = run("third_party", &[]);
    assert_eq!(
        out.matches("known only from the message").count(),
        3,
        "{out}"
    );
    assert!(
        out.contains("storage got the 3 results straight from the worker"),
        "{out}"
    );
}

#[test]
fn upload_streams_a_body_larger_than_what_it_keeps() {
    let out = run("upload", &["--mib", "16"]);
    assert!(
        out.contains("16 MiB stored") && out.contains("as sent"),
        "{out}"
    );
}

#[test]
fn transports_picks_the_best_transport() {
    let out = run("transports", &["--rounds", "20"]);
    assert!(
        out.contains("mem") && out.contains("unix") && out.contains("tcp"),
        "{out}"
    );
}

#[test]
fn counter_applies_every_increment_exactly_once_across_shards() {
    let out = run("counter", &["--adds", "2000", "--shards", "3"]);
    assert!(
        out.contains("2000 increments acknowledged, 0 failed"),
        "{out}"
    );
    // Key 0 belongs to shard 0, the front itself (its local site); key 7
    // to shard 1.
    assert!(out.contains("answered by shard 0)"), "{out}");
    assert!(out.contains("answered by shard 1)"), "{out}");
    assert!(
        out.contains("shard 0 is the front itself: the same SiteRef"),
        "{out}"
    );
    assert!(
        out.contains("total over 3 shards = 2000 (every increment applied exactly once)"),
        "{out}"
    );
}

#[test]
fn echo_clients_share_few_server_descriptors_and_lose_nothing() {
    let out = run(
        "echo_clients",
        &["--clients", "16", "--fds", "4", "--rounds", "10"],
    );
    assert!(out.contains("= 160 done"), "{out}");
    let peak: usize = out
        .split("at most ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the peak");
    assert!(peak <= 4, "{out}");
}

#[test]
fn cut_recovery_delivers_every_message_once_across_cuts() {
    let out = run(
        "cut_recovery",
        &["--cuts", "3", "--per-cut", "200", "--size", "4096"],
    );
    // 3 rounds of one idle message and 200 busy ones.
    assert!(out.contains("603 messages delivered exactly once"), "{out}");
    assert!(out.contains("monitor saw"), "{out}");
}

#[test]
fn sim_counter_converges_under_heavy_faults() {
    let out = run("sim_counter", &["--sites", "8", "--seeds", "2"]);
    assert!(out.contains("2 of 2 seeds converged"), "{out}");
    assert!(out.contains("restarts"), "{out}");
}

#[test]
fn sim_stream_ships_chunks_in_order_under_a_small_output_bound() {
    let out = run("sim_stream", &["--sites", "8", "--seeds", "2"]);
    assert!(out.contains("2 of 2 seeds held"), "{out}");
    assert!(out.contains("sends waited for room"), "{out}");
    assert!(
        !out.contains(" 0 sends waited"),
        "the bound never made a send wait: {out}"
    );
}

#[test]
fn sim_quorum_commits_writes_under_heavy_faults() {
    let out = run("sim_quorum", &["--sites", "8", "--seeds", "2"]);
    assert!(out.contains("2 of 2 seeds held"), "{out}");
    assert!(out.contains("committed"), "{out}");
}

#[test]
fn custom_transport_carries_messages_and_replies_over_pipes() {
    let out = run("custom_transport", &["--adds", "20"]);
    for line in [
        "server listens at [\"pipe:server\"]",
        "refused: address \"carrier-pigeon:coop\" has scheme \"carrier-pigeon\", which no transport is registered under",
        "server got: hello over a pipe",
        "20 additions answered over pipe:server: total 210 (expected 210)",
        "channel transport: pipe",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
}
