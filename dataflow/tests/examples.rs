//! Every dataflow example runs and says what it should, in one process and
//! with `--processes` (the debug builds the test command made, with small
//! arguments). `cargo run --release -p sitenet-dataflow --example NAME`
//! runs them for real.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("examples").join(name)
}

/// Runs `name` with `args` and `--json`; returns its JSON (it must succeed).
fn run(name: &str, args: &[&str]) -> serde_json::Value {
    let path = example(name);
    assert!(path.exists(), "{} was not built", path.display());
    let out = Command::new(&path)
        .args(args)
        .arg("--json")
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {stdout}"))
}

#[test]
fn the_pipeline_sums_its_stream_in_one_process_and_across_processes() {
    for procs in [false, true] {
        let mut args = vec!["--items", "2000"];
        if procs {
            args.push("--processes");
        }
        let j = run("pipeline", &args);
        assert_eq!(j["sum_ok"], true, "{j}");
        assert_eq!(j["received"], 2000, "{j}");
        assert!(j["fault"].is_null(), "{j}");
        assert!(j["items_per_s"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn the_pipeline_ends_with_perm_fail_when_the_filter_is_killed() {
    for procs in [false, true] {
        let mut args = vec!["--items", "20000", "--kill", "filter", "--give-up", "1"];
        if procs {
            args.push("--processes");
        }
        let j = run("pipeline", &args);
        assert_eq!(j["fault"], "PermFail", "{j}");
        assert!(j["received"].as_u64().unwrap() < 20_000, "{j}");
        assert_eq!(j["sum_ok"], false);
    }
}

#[test]
fn the_bank_keeps_its_total_and_its_exchanges_linearizable() {
    for mode in ["mobile", "stationary"] {
        for procs in [false, true] {
            let mut args = vec!["--sites", "3", "--ops", "300", "--mode", mode];
            if procs {
                args.push("--processes");
            }
            let j = run("bank", &args);
            assert_eq!(j["final"], j["expected"], "{j}");
            assert_eq!(j["linearizable"], true, "{j}");
            assert_eq!(j["mode"], mode);
            if mode == "stationary" {
                assert_eq!(j["moves"], 0, "{j}");
            }
        }
    }
}

#[test]
fn churn_leaves_only_the_ports_and_streams() {
    let j = run("churn", &["--vars", "3000", "--warm-up", "300"]);
    for site in j["entities_left"].as_array().unwrap() {
        assert_eq!(site[1], 0, "no proxy left: {j}");
        assert!(site[0].as_u64().unwrap() <= 3, "{j}");
    }
}
