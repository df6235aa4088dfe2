//! Searching seeds on several threads at once.
//!
//! A run is one thread's work and its own world: nothing it computes
//! depends on another run, on the thread that runs it or on the order in
//! which runs finish (same seed, same run). So a search for failing seeds
//! parallelises by seed, with no effect on any run's outcome: the seeds a
//! search tries are consecutive from the first, each run exactly as it
//! would be alone, and only how many fit in the caller's budget depends on
//! the number of threads. A user with eight cores tries eight times the
//! seeds in the same wall time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{Report, Sim, SimConfig, Swarm};

/// One seed's run, as a search hands it back.
#[derive(Debug, Clone)]
pub struct SearchRun {
    /// The run's report (its seed is `report.seed`).
    pub report: Report,
    /// Wall time the run took, on its thread.
    pub wall: Duration,
}

/// The most threads a search runs: a run is a thread's work for seconds,
/// and more threads than cores only share them. More asked for are this
/// many (at `usize::MAX` a search spawned threads for ever).
pub const MAX_JOBS: usize = 1024;

/// Runs seeds `cfg.seed`, `cfg.seed + 1`, … on `jobs` threads (at least
/// one, at most [`MAX_JOBS`]) while `more(taken)` says to go on, where
/// `taken` counts the seeds handed out so far; the first seed always runs.
/// Each run is made by `make` on the thread that runs it (a test plants a
/// bug there: the switch is per thread) and reported to `each` on the
/// caller's thread, in the order runs end. Every seed handed out is run,
/// so the seeds reported are exactly `cfg.seed .. cfg.seed + n` for the
/// `n` returned.
///
/// `each` sees runs as they end, not in seed order: a caller that prints
/// a summary sorts them by seed first, so that the summary depends only on
/// which seeds ran.
pub fn search_with(
    cfg: &SimConfig,
    jobs: usize,
    more: impl Fn(u64) -> bool + Sync,
    make: impl Fn(SimConfig) -> Sim + Sync,
    mut each: impl FnMut(SearchRun),
) -> u64 {
    let taken = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, MAX_JOBS) {
            let tx = tx.clone();
            let (taken, more, make) = (&taken, &more, &make);
            s.spawn(move || loop {
                // Decide, then take: a seed taken is a seed run.
                let n = taken.load(Ordering::SeqCst);
                if n > 0 && !more(n) {
                    return;
                }
                if taken
                    .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    continue;
                }
                let start = Instant::now();
                let report = make(SimConfig {
                    seed: cfg.seed.wrapping_add(n),
                    ..cfg.clone()
                })
                .run();
                let run = SearchRun {
                    report,
                    wall: start.elapsed(),
                };
                if tx.send(run).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for run in rx {
            each(run);
        }
    });
    taken.load(Ordering::SeqCst)
}

/// [`search_with`] with the default workload ([`Sim::new`]) and a wall
/// time budget: seeds are taken until `budget` has passed since the call.
pub fn search(cfg: &SimConfig, jobs: usize, budget: Duration, each: impl FnMut(SearchRun)) -> u64 {
    let start = Instant::now();
    search_with(cfg, jobs, |_| start.elapsed() < budget, Sim::new, each)
}

/// [`search`] with each seed's settings drawn by `swarm`
/// ([`Swarm::config`]): seeds `swarm.base.seed`, `swarm.base.seed + 1`, …
/// until `budget` has passed. A failing seed's settings are
/// `swarm.config(report.seed)`, and that run replays alone.
pub fn search_swarm(
    swarm: &Swarm,
    jobs: usize,
    budget: Duration,
    each: impl FnMut(SearchRun),
) -> u64 {
    let start = Instant::now();
    search_with(
        &swarm.base,
        jobs,
        |_| start.elapsed() < budget,
        |c| Sim::new(swarm.config(c.seed)),
        each,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Faults, Verdict};

    fn small(seed: u64) -> SimConfig {
        SimConfig {
            sites: 4,
            seed,
            duration: Duration::from_secs(2),
            settle: Duration::from_secs(15),
            faults: Faults::Heavy,
            ..SimConfig::default()
        }
    }

    fn digests(jobs: usize) -> Vec<(u64, String, bool)> {
        let mut runs = Vec::new();
        let n = search_with(
            &small(40),
            jobs,
            |taken| taken < 6,
            Sim::new,
            |r| {
                runs.push((
                    r.report.seed,
                    r.report.digest,
                    r.report.verdict == Verdict::Ok,
                ))
            },
        );
        assert_eq!(n, 6);
        runs.sort();
        runs
    }

    /// Regression: `jobs` past what the system gives was taken as asked
    /// (a thread spawned per job, for ever at `usize::MAX`); it is at most
    /// `MAX_JOBS`, and every seed handed out still runs once.
    #[test]
    fn more_jobs_than_the_bound_are_the_bound() {
        let mut seeds = Vec::new();
        let n = search_with(
            &small(7),
            usize::MAX,
            |taken| taken < 3,
            Sim::new,
            |r| seeds.push(r.report.seed),
        );
        seeds.sort_unstable();
        assert_eq!((n, seeds), (3, vec![7, 8, 9]));
    }

    /// The seeds tried are consecutive from the first, each run once, and
    /// each run is the one it is alone: the same digests on one thread
    /// and on three.
    #[test]
    fn a_search_on_several_threads_runs_the_same_seeds_as_on_one() {
        let one = digests(1);
        assert_eq!(
            one.iter().map(|r| r.0).collect::<Vec<_>>(),
            (40..46).collect::<Vec<_>>()
        );
        assert_eq!(digests(3), one);
        let alone = Sim::new(small(43)).run();
        assert_eq!(one[3].1, alone.digest);
    }

    /// The first seed runs even when the budget is spent before it.
    #[test]
    fn the_first_seed_always_runs() {
        let mut seeds = Vec::new();
        let n = search(&small(7), 2, Duration::ZERO, |r| seeds.push(r.report.seed));
        assert_eq!((n, seeds), (1, vec![7]));
    }
}
