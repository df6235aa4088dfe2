//! `sitenet bench`: both stacks on every documented workload, the JSON
//! contract (`rows` of `workload`, `unit`, `sitenet`, `raw_tcp`, `ratio`,
//! and for round trips `sitenet_p99`, `raw_tcp_p99`),
//! and the processes mode. Figures are not checked against targets here
//! (a debug build on a busy machine says nothing about speed): only that
//! each is measured.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sitenet");

fn bench(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["bench", "--quick", "--rounds", "1", "--json"])
        .args(extra)
        .stderr(Stdio::null())
        .output()
        .expect("sitenet bench runs");
    assert!(out.status.success(), "exit {:?}", out.status);
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn check_rows(v: &serde_json::Value) {
    let rows = v["rows"].as_array().expect("rows");
    let expected = [
        ("rtt_64", "us"),
        ("rtt_4k", "us"),
        ("rtt_64k", "us"),
        ("rtt_1m", "us"),
        ("throughput_64", "msg/s"),
        ("bulk_8m", "MB/s"),
        ("hol_64_behind_64m", "ms"),
        ("rtt_64_tls", "us"),
        ("bulk_8m_tls", "MB/s"),
    ];
    assert_eq!(rows.len(), expected.len(), "{v}");
    for (row, (workload, unit)) in rows.iter().zip(expected) {
        assert_eq!(row["workload"], workload, "{row}");
        assert_eq!(row["unit"], unit, "{row}");
        let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
        assert!(f("sitenet") > 0.0 && f("raw_tcp") > 0.0, "{row}");
        let ratio = f("sitenet") / f("raw_tcp");
        assert!((f("ratio") - ratio).abs() <= 1e-9 * ratio.max(1.0), "{row}");
        // Round trips also give their 99th percentiles, at least the median.
        if unit == "us" {
            assert!(
                f("sitenet_p99") >= f("sitenet") && f("raw_tcp_p99") >= f("raw_tcp"),
                "{row}"
            );
        } else {
            assert!(
                row.get("sitenet_p99").is_none() && row.get("raw_tcp_p99").is_none(),
                "{row}"
            );
        }
    }
}

#[test]
fn bench_measures_every_workload_on_both_stacks() {
    check_rows(&bench(&[]));
}

#[test]
fn bench_runs_each_server_in_its_own_process() {
    let v = bench(&["--processes"]);
    assert_eq!(v["processes"], true);
    check_rows(&v);
}

#[test]
fn bench_refuses_a_bad_option_and_an_unknown_server_kind() {
    for args in [
        vec!["bench", "--rounds", "0"],
        vec!["bench", "--timeout", "-1"],
    ] {
        let s = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(s.status.code(), Some(2), "{args:?}");
    }
    let s = Command::new(BIN)
        .args(["bench", "--serve", "carrier-pigeon"])
        .output()
        .unwrap();
    assert_eq!(s.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&s.stderr).contains("sitenet, sitenet-tls or raw"));
}

#[test]
fn bench_only_runs_the_named_workloads_and_refuses_an_unknown_one() {
    let v = bench(&["--only", "rtt_64", "--only", "hol_64_behind_64m"]);
    let names: Vec<&str> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rtt_64", "hol_64_behind_64m"]);
    let s = Command::new(BIN)
        .args(["bench", "--quick", "--only", "rtt_65"])
        .output()
        .unwrap();
    assert_eq!(s.status.code(), Some(1));
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(
        err.contains("no workload named \"rtt_65\"") && err.contains("rtt_64"),
        "{err}"
    );
}

/// `bench --against OTHER` runs both binaries alternated and prints, per
/// workload, each one's figure, each one's raw baseline and this one's
/// speed-up with its spread. Here the other binary is this one: every
/// figure is measured and the spread brackets the speed-up.
#[test]
fn bench_against_another_binary_pairs_every_row_with_its_speedup_and_spread() {
    let out = Command::new(BIN)
        .args([
            "bench", "--quick", "--rounds", "2", "--json", "--only", "rtt_64",
        ])
        .args(["--only", "throughput_64", "--against", BIN])
        .stderr(Stdio::null())
        .output()
        .expect("sitenet bench runs");
    assert!(out.status.success(), "exit {:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["against"], BIN);
    assert_eq!(v["rounds"], 2);
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<_> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rtt_64", "throughput_64"]);
    for r in rows {
        for key in ["this", "other", "this_raw_tcp", "other_raw_tcp", "speedup"] {
            let x = r[key].as_f64().unwrap_or(0.0);
            assert!(x > 0.0 && x.is_finite(), "{key} in {r}");
        }
        let (lo, mid, hi) = (
            r["speedup_min"].as_f64().unwrap(),
            r["speedup"].as_f64().unwrap(),
            r["speedup_max"].as_f64().unwrap(),
        );
        assert!(lo <= mid && mid <= hi, "{r}");
    }
}

/// `--against` a path that is no file is a usage error (exit 2), and a
/// binary whose `bench --json` fails is a failure (exit 1) naming it.
#[test]
fn bench_against_refuses_a_missing_binary_and_names_one_that_fails() {
    let out = Command::new(BIN)
        .args(["bench", "--quick", "--against", "/nonexistent/sitenet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/sitenet"));
    let out = Command::new(BIN)
        .args([
            "bench",
            "--quick",
            "--only",
            "rtt_64",
            "--against",
            "/bin/false",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/bin/false"));
}
