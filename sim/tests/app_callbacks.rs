//! The application callbacks beside messages: a site's fault state as its
//! ComObject changes it ([`Application::site_fault`]) and the ticks of the
//! settle phase ([`Application::settle_tick`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use sitenet_protocols::{FaultState, Priority, SiteId};
use sitenet_sim::{AppCtx, Application, Faults, Sim, SimConfig, Verdict};

#[derive(Default)]
struct Seen {
    /// (when, who, about whom, state)
    faults: Vec<(Duration, SiteId, SiteId, FaultState)>,
    ticks: Vec<Duration>,
    settle_ticks: Vec<Duration>,
    /// Every incarnation started.
    started: Vec<SiteId>,
    /// The sites up at the last settle tick.
    last_sites: Vec<SiteId>,
}

/// Sends to a random site now and then, and books what it is told.
struct Watcher(Rc<RefCell<Seen>>);

impl Application for Watcher {
    fn start(&mut self, ctx: &mut AppCtx<'_>) {
        self.0.borrow_mut().started.push(ctx.me);
    }
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        self.0.borrow_mut().ticks.push(ctx.now);
        if let Some(to) = ctx.random_peer() {
            ctx.send(to, Priority::Medium, b"hello".to_vec());
        }
    }
    fn settle_tick(&mut self, ctx: &mut AppCtx<'_>) {
        let mut seen = self.0.borrow_mut();
        seen.settle_ticks.push(ctx.now);
        seen.last_sites = ctx.sites.to_vec();
    }
    fn site_fault(&mut self, ctx: &mut AppCtx<'_>, site: SiteId, state: FaultState) {
        self.0
            .borrow_mut()
            .faults
            .push((ctx.now, ctx.me, site, state));
    }
}

fn run(faults: Faults) -> (Rc<RefCell<Seen>>, sitenet_sim::Report) {
    let seen = Rc::new(RefCell::new(Seen::default()));
    let cfg = SimConfig {
        sites: 8,
        seed: 5,
        faults,
        duration: Duration::from_secs(20),
        settle: Duration::from_secs(30),
        ..SimConfig::default()
    };
    let s = seen.clone();
    let r = Sim::with_app(cfg, Box::new(move |_| Box::new(Watcher(s.clone())))).run();
    assert_eq!(r.verdict, Verdict::Ok, "{r:?}");
    (seen, r)
}

/// A crashed site's peers that talk to it are told it failed for good
/// (a new incarnation answers at its address), a cut or a partition
/// fails a site for a while and it comes back; no site is told of itself
/// or of an incarnation that never was.
#[test]
fn a_site_is_told_its_peers_fault_states_as_its_com_objects_change_them() {
    let (seen, r) = run(Faults::Heavy);
    let seen = seen.borrow();
    assert!(r.restarts > 0, "{r:?}");
    let told = |st: FaultState| seen.faults.iter().filter(|f| f.3 == st).count();
    assert!(told(FaultState::PermFailed) > 0, "{:?}", seen.faults);
    assert!(told(FaultState::TempFailed) > 0 && told(FaultState::Ok) > 0);
    for (_, me, site, _) in &seen.faults {
        assert_ne!(me, site);
        assert!(
            seen.started.contains(site),
            "told of {site}, which never ran"
        );
    }
    // Failed for good: an incarnation no longer up once the run settled.
    for (_, _, site, st) in &seen.faults {
        if *st == FaultState::PermFailed {
            assert!(!seen.last_sites.contains(site), "{site} is up");
        }
    }
}

/// Without faults nothing fails: no fault state changes at all.
#[test]
fn without_faults_no_fault_state_changes() {
    let (seen, _) = run(Faults::None);
    assert_eq!(seen.borrow().faults, Vec::new());
}

/// The fault phase's ticks are `tick`, the settle phase's `settle_tick`,
/// at the same period, until the run's end.
#[test]
fn the_settle_phase_ticks_through_settle_tick() {
    let (seen, _) = run(Faults::Light);
    let seen = seen.borrow();
    let phase = Duration::from_secs(20);
    assert!(seen.ticks.iter().all(|t| *t < phase));
    assert!(seen.settle_ticks.iter().all(|t| *t >= phase));
    // Every site's settle ticks: 30 s at one a second.
    assert!(
        seen.settle_ticks.len() >= 8 * 29,
        "{}",
        seen.settle_ticks.len()
    );
}
