//! Shrinking a failing run: fewer sites, fewer faults, a shorter fault
//! phase — whatever still fails — so that the schedule a reader must
//! follow to understand a violation is as small as it can be made.

use std::time::Duration;

use crate::{Faults, Sim, SimConfig, Verdict};

/// Smaller variants of `cfg` to try, most reducing first.
fn candidates(cfg: &SimConfig) -> Vec<SimConfig> {
    let mut out = Vec::new();
    let mut sites = vec![cfg.sites / 2, cfg.sites * 3 / 4];
    if cfg.sites <= 16 {
        sites.push(cfg.sites - 1);
    }
    for s in sites {
        if s >= 2 && s < cfg.sites {
            out.push(SimConfig {
                sites: s,
                ..cfg.clone()
            });
        }
    }
    let fewer = match cfg.faults {
        Faults::Heavy => Some(Faults::Light),
        Faults::Light => Some(Faults::None),
        Faults::None => None,
    };
    if let Some(faults) = fewer {
        out.push(SimConfig {
            faults,
            ..cfg.clone()
        });
    }
    for d in [cfg.duration / 2, cfg.duration * 3 / 4] {
        if d >= Duration::from_secs(1) && d < cfg.duration {
            out.push(SimConfig {
                duration: d,
                ..cfg.clone()
            });
        }
    }
    out
}

/// Shrinks `cfg`, which `fails`, to a smaller configuration that still
/// fails: greedily takes the first smaller variant that fails, until none
/// does. `fails` decides what counts (usually: the run's verdict is a
/// violation; see [`shrink`]). Returns the smallest found and how many
/// runs it took.
pub fn shrink_with(cfg: &SimConfig, mut fails: impl FnMut(&SimConfig) -> bool) -> (SimConfig, u32) {
    let mut best = cfg.clone();
    let mut runs = 0;
    'outer: loop {
        for c in candidates(&best) {
            runs += 1;
            if fails(&c) {
                best = c;
                continue 'outer;
            }
        }
        return (best, runs);
    }
}

/// Shrinks a failing simulation (same seed) to a smaller one whose run the
/// checkers still reject. `progress` is called before each run.
pub fn shrink(cfg: &SimConfig, mut progress: impl FnMut(&SimConfig)) -> (SimConfig, u32) {
    shrink_with(cfg, |c| {
        progress(c);
        Sim::new(c.clone()).run().verdict != Verdict::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_each_dimension_to_what_still_fails() {
        let cfg = SimConfig {
            sites: 100,
            faults: Faults::Heavy,
            duration: Duration::from_secs(40),
            ..SimConfig::default()
        };
        // Fails with at least 7 sites and some faults, whatever the duration.
        let (small, runs) = shrink_with(&cfg, |c| c.sites >= 7 && c.faults != Faults::None);
        assert_eq!(small.sites, 7);
        assert_eq!(small.faults, Faults::Light);
        assert!(
            small.duration < Duration::from_secs(2),
            "{:?}",
            small.duration
        );
        assert!(runs < 60, "{runs} runs");
    }

    #[test]
    fn a_run_that_fails_only_whole_stays_whole() {
        let cfg = SimConfig {
            sites: 10,
            faults: Faults::None,
            duration: Duration::from_secs(1),
            ..SimConfig::default()
        };
        let (same, _) = shrink_with(&cfg, |c| c.sites == 10 && c.duration == cfg.duration);
        assert_eq!((same.sites, same.duration), (10, cfg.duration));
    }
}
