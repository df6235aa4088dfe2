//! The dataflow protocols as the simulator's application
//! (`sitenet_sim::Dataflow`): their checkers hold under heavy faults, the
//! workload reaches every protocol, and a run broken on purpose (inside
//! the test's own wrapper of each site's application) is caught.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sitenet_dataflow_protocols::Wire;
use sitenet_protocols::{FaultState, SiteId};
use sitenet_sim::{
    AppCtx, Application, Dataflow, Envelope, Faults, Report, Sim, SimConfig, Verdict,
};

fn cfg(seed: u64, faults: Faults) -> SimConfig {
    SimConfig {
        sites: 10,
        seed,
        faults,
        duration: Duration::from_secs(20),
        ..SimConfig::default()
    }
}

/// Heavy faults (cuts, partitions, crashes and restarts every couple of
/// seconds): every checker holds, on every seed, and the workload made,
/// passed, bound, waited, sent, read and exchanged, while sites failed.
#[test]
fn the_dataflow_protocols_keep_their_claims_under_heavy_faults() {
    let (mut conflicts, mut perm_fails) = (0, 0);
    for seed in 0..6 {
        let d = Dataflow::new();
        let r = Sim::with_app(cfg(seed, Faults::Heavy), d.factory()).run();
        let s = d.stats();
        assert_eq!(r.verdict, Verdict::Ok, "seed {seed}: {s:?}");
        assert!(r.restarts > 0, "seed {seed}: {r:?}");
        assert!(
            s.passes > 0 && s.binds_won > 0 && s.waits_bound > 0 && s.exchanges > 0,
            "seed {seed}: {s:?}"
        );
        assert!(s.items_read > 0 && s.reclaimed > 0, "seed {seed}: {s:?}");
        conflicts += s.conflicts;
        perm_fails += s.perm_fails;
    }
    assert!(
        conflicts > 0 && perm_fails > 0,
        "{conflicts} conflicts, {perm_fails} perm fails"
    );
}

/// The same seed runs the same way: the digest of a dataflow run is
/// reproducible, and the books the same.
#[test]
fn a_dataflow_run_is_reproducible() {
    let run = || {
        let d = Dataflow::new();
        let r = Sim::with_app(cfg(3, Faults::Heavy), d.factory()).run();
        (r.digest, d.stats())
    };
    assert_eq!(run(), run());
}

/// A site's application with what it receives rewritten by `forge`.
struct Forging {
    inner: Box<dyn Application>,
    forge: Rc<RefCell<dyn FnMut(Wire) -> Wire>>,
}

impl Application for Forging {
    fn start(&mut self, ctx: &mut AppCtx<'_>) {
        self.inner.start(ctx)
    }
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        self.inner.tick(ctx)
    }
    fn settle_tick(&mut self, ctx: &mut AppCtx<'_>) {
        self.inner.settle_tick(ctx)
    }
    fn received(&mut self, ctx: &mut AppCtx<'_>, from: SiteId, body: &[u8]) {
        let body = match Envelope::decode(body).expect("an envelope") {
            Envelope::Wire(w) => Envelope::Wire((self.forge.borrow_mut())(w)).encode(),
            _ => body.to_vec(),
        };
        self.inner.received(ctx, from, &body)
    }
    fn handed_back(&mut self, ctx: &mut AppCtx<'_>, to: SiteId, body: &[u8], maybe: bool) {
        self.inner.handed_back(ctx, to, body, maybe)
    }
    fn site_fault(&mut self, ctx: &mut AppCtx<'_>, site: SiteId, state: FaultState) {
        self.inner.site_fault(ctx, site, state)
    }
    fn check(&self, ctx: &AppCtx<'_>) -> Result<(), String> {
        self.inner.check(ctx)
    }
}

/// Runs `seed` (light faults) with every site's received messages
/// rewritten by `forge`.
fn forged(seed: u64, forge: impl FnMut(Wire) -> Wire + 'static) -> Report {
    let forge: Rc<RefCell<dyn FnMut(Wire) -> Wire>> = Rc::new(RefCell::new(forge));
    let d = Dataflow::new();
    let factory = d.factory_wrapped(move |inner| {
        Box::new(Forging {
            inner,
            forge: forge.clone(),
        })
    });
    Sim::with_app(cfg(seed, Faults::Light), factory).run()
}

fn violation(r: &Report) -> String {
    match &r.verdict {
        Verdict::Violation { what, .. } => what.clone(),
        Verdict::Ok => String::new(),
    }
}

/// A binding pushed to a proxy with another value (a home that bound a
/// variable twice, as its proxies see it): the single-assignment checker
/// stops the run.
#[test]
fn a_variable_seen_bound_to_two_values_fails_the_run() {
    let r = forged(1, |w| match w {
        Wire::Bound { var, mut value } => {
            value.bytes = bytes::Bytes::from_static(b"forged");
            Wire::Bound { var, value }
        }
        w => w,
    });
    let what = violation(&r);
    assert!(what.contains("single assignment broken"), "{r:?}");
}

/// A stationary cell's home that answers an old content twice (every
/// answer after a cell's first repeats it): the linearizability checker
/// stops the run.
#[test]
fn an_old_content_answered_twice_fails_the_run() {
    let mut first = std::collections::BTreeMap::new();
    let r = forged(4, move |w| match w {
        Wire::Exchanged {
            cell,
            op,
            old: Ok(v),
        } => {
            let old = first.entry(cell).or_insert_with(|| v.clone()).clone();
            Wire::Exchanged {
                cell,
                op,
                old: Ok(sitenet_dataflow_protocols::Value {
                    refs: v.refs,
                    ..old
                }),
            }
        }
        w => w,
    });
    let what = violation(&r);
    assert!(what.contains("an old content already answered"), "{r:?}");
}

/// Port items that arrive with their sender's numbers swapped (a network
/// that reorders one site's messages): the per-sender FIFO checker stops
/// the run.
#[test]
fn items_out_of_their_senders_order_fail_the_run() {
    let r = forged(1, |w| match w {
        Wire::PortSend {
            port,
            mut value,
            op,
        } => {
            // Item k of a sender arrives numbered as k's neighbour.
            let s = String::from_utf8_lossy(&value.bytes).to_string();
            let mut parts: Vec<String> = s.split(':').map(String::from).collect();
            let k: u64 = parts[2].parse().unwrap();
            parts[2] = (k ^ 1).to_string();
            value.bytes = bytes::Bytes::from(parts.join(":"));
            Wire::PortSend { port, value, op }
        }
        w => w,
    });
    let what = violation(&r);
    assert!(what.contains("per-sender FIFO broken"), "{r:?}");
}
