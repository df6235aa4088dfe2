//! A runtime author's stream under backpressure, simulated on sitenet's
//! network layer: every site ships its log to the next site in 24 KiB
//! chunks, more each second than a small output bound holds. In the
//! runtime `SiteRef::send` then waits for room; in the simulator the send
//! waits in line the same way (`Report::send_waits`), served in turn as
//! acknowledgements free room, and the shipper, like a runtime task that
//! awaits its sends, ships nothing more while a tick's worth still waits
//! (`AppCtx::waiting`). The protocol's claim: each replica gets
//! each shipper's chunks in order and without a gap, whatever the cuts,
//! partitions, slow readers and restarts (a restarted site is a new site,
//! with a stream of its own).
//!
//! The simulator's own checkers watch the rest: every chunk delivered once
//! or handed back, the node's output bytes within its bound, nobody waiting
//! for room that is free, nothing held once the run settles.
//!
//! ```sh
//! cargo run --release --example sim_stream -- --sites 20 --seeds 10 --bound 131072
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use sitenet::sim::{AppCtx, Application, Faults, Sim, SimConfig, Verdict};
use sitenet_protocols::{Priority, SiteId};

#[path = "common/args.rs"]
mod args;
use args::arg;

/// The size of a chunk's body.
const CHUNK: usize = 24 * 1024;
/// Chunks shipped per tick (a tick is a simulated second).
const PER_TICK: u64 = 6;

#[derive(Default)]
struct Shipper {
    /// The next chunk's number, per replica (each stream numbered alone).
    next: BTreeMap<SiteId, u64>,
    /// The last chunk received, per shipper.
    last: BTreeMap<SiteId, u64>,
    /// The first broken claim.
    broken: Option<String>,
}

impl Application for Shipper {
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        let Some(replica) = ctx.neighbour(1) else {
            return;
        };
        // A runtime shipper awaits each `send`: it ships no more while a
        // tick's worth of its chunks still waits for room
        // (`AppCtx::waiting`), so its backlog stays bounded however slow
        // the replica is.
        if ctx.waiting >= PER_TICK as usize {
            return;
        }
        let next = self.next.entry(replica).or_insert(0);
        for _ in 0..PER_TICK {
            let mut chunk = vec![0x5a; CHUNK];
            chunk[..8].copy_from_slice(&next.to_le_bytes());
            // Sent at once; it waits for room in the site's line if the
            // bound is full, as the runtime's `send` does.
            ctx.send(replica, Priority::Low, chunk);
            *next += 1;
        }
    }

    fn received(&mut self, _ctx: &mut AppCtx<'_>, from: SiteId, body: &[u8]) {
        let Some(seq) = body.get(..8).and_then(|b| b.try_into().ok()) else {
            return;
        };
        let seq = u64::from_le_bytes(seq);
        let expected = self.last.get(&from).map_or(0, |l| l + 1);
        if seq != expected && self.broken.is_none() {
            self.broken = Some(format!(
                "chunk {seq} from {from} came when {expected} was due"
            ));
        }
        self.last.insert(from, seq);
    }

    fn check(&self, _ctx: &AppCtx<'_>) -> Result<(), String> {
        self.broken.clone().map_or(Ok(()), Err)
    }
}

fn main() {
    let sites = arg("--sites", 20) as usize;
    let seeds = arg("--seeds", 10);
    let bound = arg("--bound", 128 * 1024);
    let mut failed = 0;
    for seed in 0..seeds {
        let sim = Sim::with_app(
            SimConfig {
                sites,
                seed,
                faults: Faults::Heavy,
                duration: Duration::from_secs(20),
                output_bound: Some(bound),
                ..SimConfig::default()
            },
            Box::new(|_| Box::new(Shipper::default())),
        );
        let r = sim.run();
        match &r.verdict {
            Verdict::Ok => println!(
                "seed {seed}: in order: {} chunks sent, {} delivered, {} handed back; \
                 {} sends waited for room (at most {} at once), at most {} bytes held by a site \
                 (bound {} per replica)",
                r.messages,
                r.delivered,
                r.handed_back,
                r.send_waits,
                r.waiting_peak,
                r.output_peak,
                bound
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
