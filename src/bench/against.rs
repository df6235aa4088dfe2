//! `sitenet bench --against OTHER`: this binary's figures against another
//! build's, on the same workloads, alternated in one sitting.
//!
//! This machine's wake-up cost moves between sittings (a raw TCP round trip
//! of 12 µs in one run, 70 µs in the next), so a figure compared with one
//! from another run says little, and a change compared only with its
//! parent can hide a regression both share. Here each round runs both
//! binaries back to back — the other first in even rounds, this one first
//! in odd ones, so neither always meets a warmer machine — each measuring
//! its own raw TCP baseline too. A row's speed-up is the median of the
//! per-round ratios, with their spread: a change is a gain or a loss only
//! where the spread stays on one side of 1.
//!
//! Each run is a child process (`BIN bench --json --rounds 1 …`), so the
//! other binary may be any build that prints `bench --json`'s rows.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::BenchError;

/// How `sitenet bench --against` runs.
#[derive(Debug, Clone)]
pub struct AgainstConfig {
    /// The binary measured against (an older build, say).
    pub other: PathBuf,
    /// This binary (the one whose figures are the numerators).
    pub this: PathBuf,
    /// Rounds: each runs both binaries once.
    pub rounds: usize,
    /// Passed to both runs: servers in their own processes.
    pub processes: bool,
    /// Passed to both runs: smaller counts.
    pub quick: bool,
    /// Passed to both runs: only these workloads (all when empty).
    pub only: Vec<String>,
    /// Passed to both runs: the bound on every wait.
    pub timeout: Duration,
}

/// One workload's figures for both binaries.
#[derive(Debug, Clone, Serialize)]
pub struct PairRow {
    /// The workload's name, as `bench --json` prints it.
    pub workload: String,
    /// Its unit (`us`, `ms`: lower is better; `msg/s`, `MB/s`: higher).
    pub unit: String,
    /// This binary's sitenet figure (median of the rounds).
    pub this: f64,
    /// The other binary's sitenet figure (median of the rounds).
    pub other: f64,
    /// The raw TCP baseline as this binary's runs measured it (median).
    pub this_raw_tcp: f64,
    /// The raw TCP baseline as the other binary's runs measured it.
    pub other_raw_tcp: f64,
    /// How much faster this binary is: the median over rounds of this
    /// round's speed over the other's (a time is inverted), so above 1 is a
    /// gain and below 1 a loss.
    pub speedup: f64,
    /// The smallest per-round speed-up.
    pub speedup_min: f64,
    /// The largest per-round speed-up.
    pub speedup_max: f64,
}

/// One run's row, as `bench --json` prints it.
#[derive(Debug, Deserialize)]
struct RunRow {
    workload: String,
    unit: String,
    sitenet: f64,
    raw_tcp: f64,
}

#[derive(Debug, Deserialize)]
struct RunOutput {
    rows: Vec<RunRow>,
}

/// True for a unit where a smaller figure is better (a time).
pub fn lower_is_better(unit: &str) -> bool {
    matches!(unit, "us" | "ms" | "s")
}

/// Runs both binaries `cfg.rounds` times, alternated, and pairs their rows
/// (the workloads both printed, in this binary's order). `progress` hears
/// of each run as it starts.
pub fn run(
    cfg: &AgainstConfig,
    mut progress: impl FnMut(&str),
) -> Result<Vec<PairRow>, BenchError> {
    if cfg.rounds == 0 {
        return Ok(Vec::new());
    }
    let mut this_runs = Vec::with_capacity(cfg.rounds);
    let mut other_runs = Vec::with_capacity(cfg.rounds);
    for round in 0..cfg.rounds {
        let other_first = round % 2 == 0;
        for first in [true, false] {
            let other = first == other_first;
            let exe = if other { &cfg.other } else { &cfg.this };
            progress(&format!(
                "round {} of {}: {}",
                round + 1,
                cfg.rounds,
                exe.display()
            ));
            let rows = run_once(exe, cfg)?;
            if other {
                other_runs.push(rows);
            } else {
                this_runs.push(rows);
            }
        }
    }
    Ok(pair(&this_runs, &other_runs))
}

/// One `bench --json --rounds 1` run of `exe`.
fn run_once(exe: &Path, cfg: &AgainstConfig) -> Result<Vec<RunRow>, BenchError> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "--json", "--rounds", "1", "--timeout"])
        .arg(cfg.timeout.as_secs_f64().to_string());
    if cfg.processes {
        cmd.arg("--processes");
    }
    if cfg.quick {
        cmd.arg("--quick");
    }
    for w in &cfg.only {
        cmd.args(["--only", w]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| against_error(exe, format!("cannot run it: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").to_owned();
        return Err(against_error(
            exe,
            format!("`bench --json` exited with {}: {last}", out.status),
        ));
    }
    let parsed: RunOutput = serde_json::from_slice(&out.stdout).map_err(|e| {
        against_error(
            exe,
            format!("its `bench --json` output is not the rows this build reads: {e}"),
        )
    })?;
    Ok(parsed.rows)
}

fn against_error(exe: &Path, why: String) -> BenchError {
    BenchError::Against {
        exe: exe.to_owned(),
        why,
    }
}

/// Pairs the runs' rows by workload.
fn pair(this_runs: &[Vec<RunRow>], other_runs: &[Vec<RunRow>]) -> Vec<PairRow> {
    let Some(first) = this_runs.first() else {
        return Vec::new();
    };
    let find = |run: &[RunRow], w: &str| {
        run.iter()
            .find(|r| r.workload == w)
            .map(|r| (r.sitenet, r.raw_tcp))
    };
    let mut rows = Vec::new();
    for r in first {
        let mut this = Vec::new();
        let mut other = Vec::new();
        let mut this_raw = Vec::new();
        let mut other_raw = Vec::new();
        let mut ratios = Vec::new();
        for (t, o) in this_runs.iter().zip(other_runs) {
            let (Some((t_v, t_raw)), Some((o_v, o_raw))) =
                (find(t, &r.workload), find(o, &r.workload))
            else {
                continue;
            };
            this.push(t_v);
            other.push(o_v);
            this_raw.push(t_raw);
            other_raw.push(o_raw);
            ratios.push(speedup(&r.unit, t_v, o_v));
        }
        if ratios.is_empty() {
            continue;
        }
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        rows.push(PairRow {
            workload: r.workload.clone(),
            unit: r.unit.clone(),
            this: median(&mut this),
            other: median(&mut other),
            this_raw_tcp: median(&mut this_raw),
            other_raw_tcp: median(&mut other_raw),
            speedup: median(&mut ratios),
            speedup_min: lo,
            speedup_max: hi,
        });
    }
    rows
}

/// This binary's speed over the other's for one round (0 where a figure
/// is 0: nothing measured).
fn speedup(unit: &str, this: f64, other: f64) -> f64 {
    let (num, den) = if lower_is_better(unit) {
        (other, this)
    } else {
        (this, other)
    };
    if den > 0.0 && num.is_finite() {
        num / den
    } else {
        0.0
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: &str, unit: &str, v: f64, raw: f64) -> RunRow {
        RunRow {
            workload: w.into(),
            unit: unit.into(),
            sitenet: v,
            raw_tcp: raw,
        }
    }

    #[test]
    fn a_speedup_is_above_one_when_this_binary_is_faster_whatever_the_unit() {
        assert_eq!(speedup("us", 50.0, 100.0), 2.0);
        assert_eq!(speedup("ms", 2.0, 1.0), 0.5);
        assert_eq!(speedup("msg/s", 3e6, 1.5e6), 2.0);
        assert_eq!(speedup("MB/s", 1000.0, 2000.0), 0.5);
        assert_eq!(speedup("us", 0.0, 10.0), 0.0, "nothing measured");
    }

    #[test]
    fn rows_pair_by_workload_with_the_median_and_spread_of_the_rounds() {
        let this = vec![
            vec![
                row("rtt_64", "us", 100.0, 70.0),
                row("bulk_8m", "MB/s", 2000.0, 3000.0),
            ],
            vec![
                row("rtt_64", "us", 80.0, 60.0),
                row("bulk_8m", "MB/s", 2100.0, 3100.0),
            ],
            vec![row("rtt_64", "us", 90.0, 65.0)],
        ];
        let other = vec![
            vec![
                row("rtt_64", "us", 100.0, 71.0),
                row("bulk_8m", "MB/s", 1000.0, 3000.0),
            ],
            vec![
                row("rtt_64", "us", 160.0, 61.0),
                row("bulk_8m", "MB/s", 2100.0, 3000.0),
            ],
            vec![
                row("rtt_64", "us", 90.0, 64.0),
                row("bulk_8m", "MB/s", 1.0, 1.0),
            ],
        ];
        let rows = pair(&this, &other);
        assert_eq!(rows.len(), 2);
        let rtt = &rows[0];
        assert_eq!((rtt.this, rtt.other), (90.0, 100.0));
        assert_eq!((rtt.this_raw_tcp, rtt.other_raw_tcp), (65.0, 64.0));
        assert_eq!(
            (rtt.speedup, rtt.speedup_min, rtt.speedup_max),
            (1.0, 1.0, 2.0)
        );
        // A round where one side printed no such row does not count.
        let bulk = &rows[1];
        assert_eq!((bulk.speedup_min, bulk.speedup_max), (1.0, 2.0));
        assert_eq!(bulk.speedup, 1.5);
    }
}
