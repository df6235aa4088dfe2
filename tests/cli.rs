//! The `sitenet` binary as node and as ping, in separate processes.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::cli::{json_of, sitenet, start_node_with, Killed};

fn start_node() -> (Killed, serde_json::Value) {
    start_node_on(&["tcp:127.0.0.1:0"])
}

fn start_node_on(listen: &[&str]) -> (Killed, serde_json::Value) {
    let args: Vec<&str> = listen.iter().flat_map(|l| ["--listen", l]).collect();
    start_node_with(&args)
}

#[test]
fn node_prints_its_identity_and_ping_measures_round_trips() {
    let (_node, first) = start_node();
    let site_id = first["site_id"].as_str().unwrap();
    assert_eq!(site_id.len(), 32);
    assert!(site_id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(first["protocol"], sitenet_protocols::PROTOCOL_VERSION);
    let listen = first["listen"][0].as_str().unwrap();
    assert!(
        listen.starts_with("tcp:127.0.0.1:") && !listen.ends_with(":0"),
        "real port: {listen}"
    );

    // The library reaches the same site the node announced, proving the
    // cookie the node holds.
    let client = sitenet::Node::builder()
        .configure(|c| c.cookies = vec![common::cli::cookie()])
        .start()
        .unwrap();
    let site = client.site(listen).unwrap();
    let r = site
        .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
            &sitenet::services::Echo { seq: 1 },
        )
        .timeout(std::time::Duration::from_secs(60))
        .blocking()
        .unwrap();
    assert_eq!(r.msg.seq, 1);
    assert_eq!(site.id().unwrap().to_string(), site_id);

    for size in [64usize, 65536] {
        let v = json_of(&[
            "ping",
            listen,
            "--count",
            "50",
            "--size",
            &size.to_string(),
            "--json",
            "--timeout",
            "60",
        ]);
        assert_eq!(v["count"], 50);
        assert_eq!(v["size"], size);
        assert_eq!(v["site_id"], site_id, "ping reached the announced site");
        let f = |k: &str| {
            v[k].as_f64()
                .unwrap_or_else(|| panic!("{k} missing in {v}"))
        };
        assert!(f("min_us") > 0.0);
        assert!(
            f("min_us") <= f("p50_us") && f("p50_us") <= f("p99_us") && f("p99_us") <= f("max_us"),
            "{v}"
        );
    }
}

#[test]
fn ping_takes_a_descriptor_and_uses_the_unix_socket_it_lists() {
    let sock = std::env::temp_dir().join(format!("sitenet-cli-{}.sock", std::process::id()));
    let unix = format!("unix:{}", sock.display());
    let (_node, first) = start_node_on(&["tcp:127.0.0.1:0", &unix]);
    let site_id = first["site_id"].as_str().unwrap();
    let listen: Vec<&str> = first["listen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(listen.len(), 2, "{first}");
    // The descriptor is the identity line's id and listen list joined.
    let descriptor = format!("{site_id}@{}", listen.join(","));
    let v = json_of(&[
        "ping",
        &descriptor,
        "--count",
        "20",
        "--json",
        "--timeout",
        "60",
    ]);
    assert_eq!(v["site_id"], site_id);
    // Which transport: the node's own statistics say who connected how.
    let s = json_of(&["stats", &descriptor, "--json", "--timeout", "60"]);
    let channels: Vec<&str> = s["per_site"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["channel"].as_str())
        .collect();
    assert!(
        !channels.is_empty() && channels.iter().all(|c| c.starts_with("unix:")),
        "clients on this host came over the unix socket: {channels:?}"
    );
    // A malformed descriptor is a usage error.
    let out = sitenet()
        .args(["ping", "xyz@tcp:127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("site id"));
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn usage_errors_exit_2_and_failures_exit_1() {
    let out = sitenet().args(["ping", "127.0.0.1:7000"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcp:HOST:PORT"));
    let out = sitenet()
        .args(["node", "--listen", "tcp:127.0.0.1:notaport"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = sitenet().args(["ping"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Regression: a time past what a clock holds panicked (exit 101).
    for huge in [
        &["ping", "tcp:127.0.0.1:9", "--timeout", "1e30"][..],
        &["stress", "--duration", "1e300"],
    ] {
        let out = sitenet().args(huge).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{huge:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("at most"));
    }
    // Regression: a body past memory aborted the process (it is made
    // before anything is sent), and `send --count 0` sent one message and
    // then reported loss (exit 1).
    for bad in [
        &["ping", "tcp:127.0.0.1:9", "--size", "100000000000"][..],
        &["send", "tcp:127.0.0.1:9", "--size", "100000000000"],
        &["ping", "tcp:127.0.0.1:9", "--count", "0"],
        &["send", "tcp:127.0.0.1:9", "--count", "0"],
    ] {
        let out = sitenet().args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("memory allocation"), "{bad:?}: {err}");
    }
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = sitenet()
        .args([
            "ping",
            &format!("tcp:127.0.0.1:{port}"),
            "--count",
            "1",
            "--timeout",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unreachable"));
}

#[test]
fn demo_runs_alone() {
    let out = sitenet().args(["demo", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["messages_received"], 1000);
    assert_eq!(v["in_order"], true);
    assert_eq!(v["unacknowledged_at_shutdown"], 0);
}

/// `sitenet send` against a node that dies mid-stream: when a new
/// incarnation answers at the same address, or when the node stays away past
/// `--give-up`, it exits 1 naming the permanent failure and the counts of
/// not_sent and maybe_delivered. It never hangs.
#[test]
fn send_exits_1_on_a_new_incarnation_a_shutdown_or_after_give_up() {
    use std::time::Duration;
    // How the node ends: it dies and a new incarnation starts at its
    // address; it dies for good (the client gives up); or it shuts down
    // gracefully, saying it leaves.
    for (restart, graceful) in [(true, false), (false, false), (false, true)] {
        let node = sitenet::Node::builder()
            .listen("tcp:127.0.0.1:0")
            .start()
            .unwrap();
        let addr = node.listen_addresses()[0].clone();
        let child = sitenet()
            .args([
                "send",
                &addr,
                "--open",
                "--count",
                "20000000",
                "--size",
                "64",
                "--json",
                "--give-up",
                "2",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = Killed(child);
        // Mid-stream: the node's sink has received a good part.
        assert!(node
            .wait_until_blocking(|m| m.messages_delivered > 10_000, Duration::from_secs(120))
            .unwrap());
        // Unless graceful, it dies without saying so.
        if !graceful {
            node.crash_on_shutdown();
        }
        node.shutdown_blocking(Duration::from_millis(100)).unwrap();
        drop(node);
        let _restarted = restart.then(|| {
            sitenet::Node::builder()
                .listen(addr.clone())
                .start()
                .unwrap()
        });
        let status = child.0.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(child.0.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert_eq!(
            status.code(),
            Some(1),
            "restart={restart} graceful={graceful}: {err} {out}"
        );
        assert!(
            err.contains("failed permanently"),
            "restart={restart} graceful={graceful}: {err}"
        );
        assert!(
            err.contains("not_sent") && err.contains("maybe_delivered"),
            "{err}"
        );
        if restart {
            assert!(err.contains("expected site"), "a new incarnation: {err}");
        } else if graceful {
            assert!(err.contains("the site shut down"), "told it left: {err}");
        } else {
            assert!(err.contains("give-up"), "gave up: {err}");
        }
    }
}

/// `sitenet stress --json`: one JSON object with the documented keys, a run
/// that loses nothing and keeps its bounds, exit code 0; bad options exit 2.
#[test]
fn stress_reports_every_documented_key_and_exits_0_when_nothing_is_lost() {
    let out = sitenet()
        .args([
            "stress",
            "--clients",
            "12",
            "--slots",
            "4",
            "--duration",
            "1.5",
            "--cut-rate",
            "4",
            "--seed",
            "42",
            "--json",
        ])
        .stderr(Stdio::null())
        .output()
        .expect("sitenet stress runs");
    assert!(out.status.success(), "exit {:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "sent",
        "delivered",
        "lost",
        "duplicated",
        "reordered",
        "preemptions",
        "reconnects",
        "retransmitted",
        "peak_slots",
        "slot_limit",
        "peak_transport_bytes",
        "transport_bytes_bound",
        "rtt_p50_us",
        "rtt_p99_us",
        "idle_site_bytes",
        "unused_site_bytes",
        "accepts_refused",
        "grants",
        "rtt_min_us",
        "rtt_max_us",
    ] {
        assert!(v.get(key).is_some_and(|x| x.is_u64()), "key {key}: {v}");
    }
    for key in ["elapsed_s", "duration_s", "fairness_jain", "rtt_mean_us"] {
        assert!(v.get(key).is_some_and(|x| x.is_f64()), "key {key}: {v}");
    }
    // 12 clients on 4 slots wait in the server's line (room for
    // all of them) instead of being refused.
    assert_eq!(v["admission"], "share");
    assert_eq!(v["accepts_refused"], 0, "{v}");
    assert!(v["grants"].as_u64().unwrap() > 0, "{v}");
    let jain = v["fairness_jain"].as_f64().unwrap();
    assert!(jain > 0.0 && jain <= 1.0, "{v}");
    // Measured, not computed: a site whose ComObject runs costs more than
    // one only referenced, and both something.
    let (idle, unused) = (
        v["idle_site_bytes"].as_u64().unwrap(),
        v["unused_site_bytes"].as_u64().unwrap(),
    );
    assert!(idle > unused && unused > 0, "{v}");
    assert_eq!(v["lost"], 0);
    assert_eq!(v["sent"], v["delivered"]);
    assert_eq!(v["slot_limit"], 4);
    assert!(v["peak_slots"].as_u64().unwrap() <= 4);
    assert!(v["sent"].as_u64().unwrap() > 0);
    assert_eq!(v["seed"], 42);
    // The timeline is a sample every 100 ms (the last one when the run
    // ends). It once took one per client finishing its drain, microseconds
    // apart.
    let t: Vec<f64> = v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["t_s"].as_f64().unwrap())
        .collect();
    assert!(t.len() >= 2, "{v}");
    for w in t[..t.len() - 1].windows(2) {
        assert!(w[1] - w[0] >= 0.09, "samples {w:?} too close: {t:?}");
    }
    round_trips_and_fairness_are_sane(&v);

    for bad in [
        vec!["stress", "--policy", "lru"],
        vec!["stress", "--admission", "lifo"],
        vec!["stress", "--duration", "0"],
        vec!["stress", "--slots", "1"],
        vec!["stress", "--transport", "carrier-pigeon"],
        // Regression: more clients than memory holds aborted (their table
        // alone asked for 12.8 GB); in a sweep, only after running the
        // smaller counts first.
        vec!["stress", "--clients", "100000000"],
        vec!["stress", "--sweep", "100000,100000000"],
    ] {
        let s = sitenet()
            .args(&bad)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(s.code(), Some(2), "{bad:?}");
    }
}

/// `sitenet stats ADDR --json` asks a running node for its resources.
#[test]
fn stats_asks_a_running_node_for_its_resources() {
    let (_node, first) = start_node_with(&["--listen", "tcp:127.0.0.1:0", "--admission", "fifo"]);
    let listen = first["listen"][0].as_str().unwrap().to_string();
    let out = sitenet()
        .args(["stats", &listen, "--json"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["slots"]["hard"].as_u64().unwrap() >= 2);
    // The waiting line's counters, and the policy `--admission`
    // chose.
    assert_eq!(v["slots"]["admission"], "fifo", "{v}");
    for key in ["in_line", "line_limit", "peak_line", "line_waits", "grants"] {
        assert!(v["slots"][key].is_u64(), "{key}: {v}");
    }
    assert!(v["transport_bytes_bound"].as_u64().unwrap() > 0);
    assert!(v["transport_bytes"].as_u64().unwrap() <= v["transport_bytes_bound"].as_u64().unwrap());
    assert!(
        v["sites_live"].as_u64().unwrap() >= 1,
        "the asking site: {v}"
    );
    assert!(v["per_site"].is_array());
    // Text form, and the usual exit codes.
    let out = sitenet().args(["stats", &listen]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("slots:") && text.contains("admission fifo"),
        "{text}"
    );
    let bad = sitenet()
        .args(["stats", "nowhere"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(bad.code(), Some(2));
}

/// The round-trip and fairness keys of one `stress --json`
/// report: the mean between the fastest and slowest probe, p99 over p50 in
/// the report and in every timeline sample that had probes, the drain
/// marked from the end of sending on, the per-client percentiles sorted
/// and around the mean.
fn round_trips_and_fairness_are_sane(v: &serde_json::Value) {
    let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    let (min, p50, p99, max) = (
        u("rtt_min_us"),
        u("rtt_p50_us"),
        u("rtt_p99_us"),
        u("rtt_max_us"),
    );
    let mean = v["rtt_mean_us"].as_f64().unwrap();
    assert!(min > 0 && min <= p50 && p50 <= p99 && p99 <= max, "{v}");
    assert!(min as f64 <= mean && mean <= max as f64, "mean {mean}: {v}");
    let timeline = v["timeline"].as_array().unwrap();
    let mut draining = false;
    for s in timeline {
        let (p50, p99) = (s["rtt_p50_us"].as_u64(), s["rtt_p99_us"].as_u64());
        let (p50, p99) = (p50.unwrap(), p99.expect("rtt_p99_us in every sample"));
        assert_eq!(p50 == 0, p99 == 0, "both or neither: {s}");
        assert!(p99 >= p50, "{s}");
        let d = s["draining"].as_bool().expect("draining in every sample");
        assert!(d || !draining, "the drain does not end before the run: {s}");
        if d {
            let (t, sending) = (s["t_s"].as_f64(), v["duration_s"].as_f64());
            assert!(t.unwrap() >= sending.unwrap(), "{s}");
        }
        draining = d;
    }
    assert!(draining, "the last sample is the drain's end");
    let q: Vec<u64> = v["per_client_delivered_quantiles"]
        .as_array()
        .expect("per_client_delivered_quantiles")
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(q.len(), 101, "{v}");
    assert!(q.windows(2).all(|w| w[0] <= w[1]), "sorted: {q:?}");
    let per_client = u("delivered") as f64 / u("clients") as f64;
    assert!(
        q[0] as f64 <= per_client && per_client <= q[100] as f64,
        "{q:?}"
    );
}

/// `--plot` draws a run and `--sweep` runs several sizes and draws them.
#[test]
fn stress_draws_a_run_and_a_sweep_as_svg() {
    let dir = std::env::temp_dir().join(format!("sitenet-plot-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let run_svg = dir.join("run.svg");
    let status = sitenet()
        .args([
            "stress",
            "--clients",
            "6",
            "--slots",
            "3",
            "--duration",
            "1",
        ])
        .arg("--plot")
        .arg(&run_svg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let svg = std::fs::read_to_string(&run_svg).unwrap();
    assert!(svg.starts_with("<svg"));
    // Round trips on a log scale with p50 and p99, the drain
    // shaded, and a per-client panel captioned with the fairness.
    for caption in [
        "round trip of the probes per 100 ms (log scale)",
        "drain",
        "per-client completion",
        "(Jain ",
        "slots in use",
        "hard limit",
        "preemptions so far",
    ] {
        assert!(svg.contains(caption), "no {caption:?} in the run's plot");
    }

    let sweep_svg = dir.join("sweep.svg");
    let out = sitenet()
        .args([
            "stress", "--sweep", "2,5", "--slots", "3", "--rounds", "3", "--json",
        ])
        .arg("--plot")
        .arg(&sweep_svg)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["sweep"].as_array().expect("a sweep array");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["clients"], 5);
    assert_eq!(runs[1]["lost"], 0);
    for r in runs {
        round_trips_and_fairness_are_sane(r);
    }
    let svg = std::fs::read_to_string(&sweep_svg).unwrap();
    assert!(svg.starts_with("<svg"));
    for caption in [
        "round trip against clients (log scale)",
        "total time against clients",
    ] {
        assert!(svg.contains(caption), "no {caption:?} in the sweep's plot");
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The sweep's table has the mean round trip (the Mozart paper's
    // measure) beside p50 and p99.
    let out = sitenet()
        .args(["stress", "--sweep", "2", "--slots", "3", "--rounds", "2"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        head[..5],
        [
            "clients",
            "rtt_mean_ms",
            "rtt_p50_ms",
            "rtt_p99_ms",
            "total_s"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row.len(), head.len(), "{table}");
    assert_eq!(row[0], "2");
    let mean: f64 = row[1].parse().unwrap();
    assert!(mean > 0.0, "{table}");
}

/// `sitenet node` prints its transport-memory bound at start, on stderr
/// (stdout's first line stays the documented identity line).
#[test]
fn node_prints_its_transport_bound_on_stderr() {
    let mut child = sitenet()
        .args(["node", "--listen", "tcp:127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _k = Killed(child);
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("transport buffers at most"))
        .expect("the bound is printed");
    assert!(line.contains("channel slots weak"), "{line}");
}
