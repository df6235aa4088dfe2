//! A runtime author's own protocol, simulated on sitenet's network layer:
//! a replicated counter. Every site counts its own increments and tells the
//! others its count; every site keeps the highest count it heard from each.
//! The protocol's claim: once the faults stop and the run settles, every
//! live site knows every other live site's exact count — and no view is
//! ever ahead of the truth.
//!
//! The simulator runs the real connection machines under cuts, partitions,
//! crashes and restarts; its own checkers watch every message (FIFO,
//! exactly once, delivered or handed back), and the protocol's claim is the
//! application's `check`. A counter that trusted one message per increment
//! would fail here (a crash loses the messages in flight); this one resends
//! its latest count on every tick and when a message is handed back.
//!
//! ```sh
//! cargo run --release --example sim_counter -- --sites 30 --seeds 20
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use sitenet::sim::{AppCtx, Application, Faults, Sim, SimConfig, Verdict};
use sitenet_protocols::{Priority, SiteId};

#[path = "common/args.rs"]
mod args;
use args::arg;

/// What each site counted, and since when it is up: the truth the views
/// are checked against (shared by the sites of one run; the simulator runs
/// them all on this thread).
#[derive(Default)]
struct Truth {
    counts: BTreeMap<SiteId, u64>,
    started: BTreeMap<SiteId, Duration>,
}

struct Counter {
    truth: Rc<RefCell<Truth>>,
    mine: u64,
    view: BTreeMap<SiteId, u64>,
    /// Sites started this late may not have heard from all before the
    /// ticks stop: their views are checked for safety only.
    settled_by: Duration,
}

impl Counter {
    fn tell_everyone(&self, ctx: &mut AppCtx<'_>) {
        let (sites, me) = (ctx.sites, ctx.me);
        for &to in sites.iter().filter(|s| **s != me) {
            ctx.send(to, Priority::Medium, self.mine.to_le_bytes().to_vec());
        }
    }
}

impl Application for Counter {
    fn start(&mut self, ctx: &mut AppCtx<'_>) {
        let mut t = self.truth.borrow_mut();
        t.counts.insert(ctx.me, 0);
        t.started.insert(ctx.me, ctx.now);
    }

    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        if ctx.rng_bool(0.5) {
            self.mine += 1;
            self.truth.borrow_mut().counts.insert(ctx.me, self.mine);
        }
        self.tell_everyone(ctx);
    }

    fn received(&mut self, _ctx: &mut AppCtx<'_>, from: SiteId, body: &[u8]) {
        let Ok(bytes) = body.try_into() else { return };
        let n = u64::from_le_bytes(bytes);
        let v = self.view.entry(from).or_default();
        *v = (*v).max(n);
    }

    fn handed_back(&mut self, ctx: &mut AppCtx<'_>, to: SiteId, _body: &[u8], maybe: bool) {
        // A site that failed for good is gone (a restart is a new site);
        // a message that may not have arrived is replaced by the latest.
        if maybe && ctx.sites.contains(&to) {
            ctx.send(to, Priority::Medium, self.mine.to_le_bytes().to_vec());
        }
    }

    fn check(&self, ctx: &AppCtx<'_>) -> Result<(), String> {
        let t = self.truth.borrow();
        for &site in ctx.sites.iter().filter(|s| **s != ctx.me) {
            let truth = t.counts.get(&site).copied().unwrap_or(0);
            let seen = self.view.get(&site).copied().unwrap_or(0);
            if seen > truth {
                return Err(format!("sees {site} at {seen}, ahead of its count {truth}"));
            }
            let both_settled = [site, ctx.me]
                .iter()
                .all(|s| t.started.get(s).is_some_and(|at| *at <= self.settled_by));
            if both_settled && seen != truth {
                return Err(format!("sees {site} at {seen}, its count is {truth}"));
            }
        }
        Ok(())
    }
}

/// A tiny extension for the example: a coin from the run's generator.
trait Coin {
    fn rng_bool(&mut self, p: f64) -> bool;
}

impl Coin for AppCtx<'_> {
    fn rng_bool(&mut self, p: f64) -> bool {
        use rand::Rng;
        self.rng.gen_bool(p)
    }
}

fn main() {
    let sites = arg("--sites", 20) as usize;
    let seeds = arg("--seeds", 10);
    let duration = Duration::from_secs(20);
    let mut failed = 0;
    for seed in 0..seeds {
        let truth = Rc::new(RefCell::new(Truth::default()));
        let shared = truth.clone();
        let sim = Sim::with_app(
            SimConfig {
                sites,
                seed,
                faults: Faults::Heavy,
                duration,
                ..SimConfig::default()
            },
            Box::new(move |_| {
                Box::new(Counter {
                    truth: shared.clone(),
                    mine: 0,
                    view: BTreeMap::new(),
                    settled_by: duration.saturating_sub(Duration::from_secs(3)),
                })
            }),
        );
        let r = sim.run();
        let total: u64 = truth.borrow().counts.values().sum();
        match &r.verdict {
            Verdict::Ok => println!(
                "seed {seed}: converged: {} sites, {} increments, {} updates delivered, \
                 {} cuts, {} restarts",
                r.sites, total, r.delivered, r.cuts, r.restarts
            ),
            Verdict::Violation { step, what, .. } => {
                failed += 1;
                println!("seed {seed}: VIOLATION at step {step}: {what}");
            }
        }
    }
    println!("{} of {seeds} seeds converged", seeds - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
