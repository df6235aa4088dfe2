//! `sitenet bench`: sitenet against a raw tokio TCP baseline, every
//! workload in the same run (see `sitenet::bench`).

use std::process::ExitCode;

use clap::Args as ClapArgs;
use sitenet::bench::against::{self, AgainstConfig};
use sitenet::bench::{BenchConfig, Row};

/// The `bench` command's options.
#[derive(ClapArgs)]
pub(crate) struct Args {
    /// Print {"rows": [{"workload", "unit", "sitenet", "raw_tcp", "ratio", and for round trips "sitenet_p99", "raw_tcp_p99"}, …]}.
    #[arg(long)]
    json: bool,
    /// Run each server in its own OS process, the way users deploy.
    #[arg(long)]
    processes: bool,
    /// Runs per workload; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Smaller counts: a quick check of the harness, noisier figures.
    #[arg(long)]
    quick: bool,
    /// Seconds any single wait may take before the bench fails.
    #[arg(long, default_value_t = 120.0)]
    timeout: f64,
    /// Run only this workload (repeat for several), e.g. `--only
    /// hol_64_behind_64m`; every workload when absent.
    #[arg(long, value_name = "WORKLOAD")]
    only: Vec<String>,
    /// Measure this binary against another build (an older release, say):
    /// both run every round, alternated in one sitting, and each row gives
    /// this one's speed-up over the other with its spread across rounds.
    #[arg(long, value_name = "OTHER_BINARY")]
    against: Option<std::path::PathBuf>,
    /// Serve one side for the processes mode (`sitenet` or `raw`) and print
    /// its address; used by `--processes` itself.
    #[arg(long, hide = true)]
    serve: Option<String>,
    /// The certificates of `--serve sitenet-tls` (made by the bench).
    #[arg(long, hide = true)]
    tls_dir: Option<std::path::PathBuf>,
}

pub(crate) fn run(a: Args) -> ExitCode {
    if let Some(kind) = a.serve {
        return match sitenet::bench::serve(&kind, a.tls_dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => crate::failure(e),
        };
    }
    if a.rounds == 0 {
        return crate::usage("--rounds must be at least 1");
    }
    let timeout = match crate::seconds("timeout", a.timeout) {
        Ok(t) => t,
        Err(e) => return crate::usage(e),
    };
    if let Some(other) = a.against {
        return against(
            other,
            a.rounds,
            a.processes,
            a.quick,
            a.only,
            timeout,
            a.json,
        );
    }
    let cfg = BenchConfig {
        processes: a.processes,
        rounds: a.rounds,
        quick: a.quick,
        server_exe: None,
        only: a.only,
        timeout,
    };
    let rows = match sitenet::bench::run(&cfg, |w| eprintln!("sitenet bench: {w}…")) {
        Ok(r) => r,
        Err(e) => return crate::failure(e),
    };
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "rows": rows, "processes": a.processes, "rounds": a.rounds })
        );
    } else {
        print_table(&rows, a.processes, a.rounds);
    }
    ExitCode::SUCCESS
}

/// `--against OTHER`: both binaries alternated, a row per workload.
fn against(
    other: std::path::PathBuf,
    rounds: usize,
    processes: bool,
    quick: bool,
    only: Vec<String>,
    timeout: std::time::Duration,
    json: bool,
) -> ExitCode {
    let this = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return crate::failure(format!("cannot find this binary: {e}")),
    };
    if !other.is_file() {
        return crate::usage(format!(
            "--against {}: no such file (give the path of another sitenet binary)",
            other.display()
        ));
    }
    let cfg = AgainstConfig {
        other: other.clone(),
        this,
        rounds,
        processes,
        quick,
        only,
        timeout,
    };
    let rows = match against::run(&cfg, |w| eprintln!("sitenet bench --against: {w}…")) {
        Ok(r) => r,
        Err(e) => return crate::failure(e),
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "against": other.display().to_string(),
                "rows": rows,
                "processes": processes,
                "rounds": rounds,
            })
        );
        return ExitCode::SUCCESS;
    }
    println!(
        "this binary against {}, alternated, {rounds} round(s); speed-up > 1: this one is faster",
        other.display()
    );
    println!(
        "{:<20} {:>6} {:>12} {:>12} {:>12} {:>12} {:>8} {:>15}",
        "workload", "unit", "this", "other", "raw (this)", "raw (other)", "speed-up", "spread"
    );
    for r in &rows {
        println!(
            "{:<20} {:>6} {:>12} {:>12} {:>12} {:>12} {:>7.2}x {:>6.2}–{:<6.2}",
            r.workload,
            r.unit,
            fmt(r.this),
            fmt(r.other),
            fmt(r.this_raw_tcp),
            fmt(r.other_raw_tcp),
            r.speedup,
            r.speedup_min,
            r.speedup_max
        );
    }
    ExitCode::SUCCESS
}

fn print_table(rows: &[Row], processes: bool, rounds: usize) {
    let how = if processes {
        "servers in their own processes"
    } else {
        "servers on threads of this process"
    };
    println!("sitenet against raw tokio TCP, {how}, median of {rounds}");
    println!(
        "{:<20} {:>6} {:>14} {:>14} {:>7}   {:>12} {:>12}",
        "workload", "unit", "sitenet", "raw tcp", "ratio", "sitenet p99", "raw p99"
    );
    for r in rows {
        let p99s = match (r.sitenet_p99, r.raw_tcp_p99) {
            (Some(s), Some(t)) => format!("   {:>12} {:>12}", fmt(s), fmt(t)),
            _ => String::new(),
        };
        println!(
            "{:<20} {:>6} {:>14} {:>14} {:>6.2}x{p99s}",
            r.workload,
            r.unit,
            fmt(r.sitenet),
            fmt(r.raw_tcp),
            r.ratio
        );
    }
}

/// Figures with thousands separators and a precision that suits them.
fn fmt(v: f64) -> String {
    if v >= 1000.0 {
        let s = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{v:.1}")
    }
}
