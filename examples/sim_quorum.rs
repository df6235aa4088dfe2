//! Quorum writes with cooperations, simulated on sitenet's network layer.
//!
//! Every site keeps a register per writer. A write goes to the writer's
//! next four sites as requests of one cooperation that expects three
//! acknowledgements from any of them: it commits when three replicas have
//! stored it, and times out or fails otherwise (a replica crashed, a
//! partition, a cut). The protocol's claims, checked by each site once the
//! run settles:
//!
//! * a committed write was acknowledged by three different replicas, each
//!   acknowledging this very write — never an older write's late answer
//!   (the request table routes an answer to the request it answers, and an
//!   ended cooperation's requests are forgotten);
//! * every write ended exactly once (committed, timed out or failed).
//!
//! The simulator's own checkers watch every message meanwhile (FIFO,
//! exactly once, delivered or handed back), and each cooperation's end.
//!
//! ```sh
//! cargo run --release --example sim_quorum -- --sites 30 --seeds 20
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use sitenet::sim::{AppCtx, Application, Faults, Request, Sim, SimConfig, Verdict, SIM_TYPE};
use sitenet_protocols::node::cooperation::{Cooperation, End, Expect};
use sitenet_protocols::{Priority, SiteId};

#[path = "common/args.rs"]
mod args;
use args::arg;

/// Replicas a write goes to, and acknowledgements it needs.
const REPLICAS: usize = 4;
const QUORUM: usize = 3;

#[derive(Default)]
struct Replica {
    /// Per writer, the newest version stored.
    stored: BTreeMap<SiteId, u64>,
    /// This site's writes not ended yet: cooperation → version.
    writing: BTreeMap<u64, u64>,
    version: u64,
    /// The first broken claim, if any.
    wrong: Option<String>,
}

/// A write's body and its acknowledgement's: the writer and the version.
fn record(writer: SiteId, version: u64) -> Vec<u8> {
    let mut v = writer.0.to_le_bytes().to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    v
}

impl Application for Replica {
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        if !ctx.rng.gen_bool(0.3) {
            return;
        }
        let replicas: Vec<SiteId> = (1..=REPLICAS).filter_map(|k| ctx.neighbour(k)).collect();
        if replicas.len() < QUORUM {
            return;
        }
        self.version += 1;
        let ack = Expect {
            type_id: Some(SIM_TYPE),
            ..Expect::any()
        };
        let coop = ctx.cooperation(vec![ack; QUORUM], Duration::from_secs(5));
        for r in replicas {
            ctx.coop_request(coop, r, Priority::High, record(ctx.me, self.version));
        }
        self.writing.insert(coop, self.version);
    }

    fn requested(&mut self, ctx: &mut AppCtx<'_>, req: Request) {
        let (Some(w), Some(v)) = (req.body.get(..16), req.body.get(16..24)) else {
            return;
        };
        let writer = SiteId(u128::from_le_bytes(w.try_into().expect("16 bytes")));
        let version = u64::from_le_bytes(v.try_into().expect("8 bytes"));
        let newest = self.stored.entry(writer).or_default();
        *newest = (*newest).max(version);
        ctx.reply(&req, record(writer, version));
    }

    fn cooperation_ended(&mut self, ctx: &mut AppCtx<'_>, coop: u64, c: &Cooperation<SiteId>) {
        let Some(version) = self.writing.remove(&coop) else {
            self.wrong = Some(format!("write {coop} ended twice"));
            return;
        };
        if c.end() == Some(&End::Complete) {
            let acks: Vec<_> = c.filled().flatten().collect();
            let mut from: Vec<SiteId> = acks.iter().map(|a| a.from).collect();
            from.sort();
            from.dedup();
            if from.len() != QUORUM {
                self.wrong = Some(format!("write {version} committed by {from:?}"));
            }
            if let Some(a) = acks
                .iter()
                .find(|a| a.body[..] != record(ctx.me, version)[..])
            {
                self.wrong = Some(format!(
                    "write {version} filled by another's answer from {}",
                    a.from
                ));
            }
        }
    }

    fn check(&self, _ctx: &AppCtx<'_>) -> Result<(), String> {
        if let Some(w) = &self.wrong {
            return Err(w.clone());
        }
        match self.writing.len() {
            0 => Ok(()),
            n => Err(format!("{n} writes never ended")),
        }
    }
}

fn main() {
    let sites = arg("--sites", 20) as usize;
    let seeds = arg("--seeds", 10);
    let mut failed = 0;
    for seed in 0..seeds {
        let cfg = SimConfig {
            sites,
            seed,
            faults: Faults::Heavy,
            duration: Duration::from_secs(20),
            ..SimConfig::default()
        };
        let r = Sim::with_app(cfg, Box::new(|_| Box::new(Replica::default()))).run();
        match &r.verdict {
            Verdict::Ok => println!(
                "seed {seed}: {} writes: {} committed, {} timed out, {} failed; \
                 {} acknowledgements came after their write ended; {} cuts, {} restarts",
                r.cooperations,
                r.coops_completed,
                r.coops_timed_out,
                r.coops_failed,
                r.late_replies,
                r.cuts,
                r.restarts
            ),
            Verdict::Violation { step, what, .. } => {
                failed += 1;
                println!("seed {seed}: VIOLATION at step {step}: {what}");
            }
        }
    }
    println!("{} of {seeds} seeds held", seeds - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
