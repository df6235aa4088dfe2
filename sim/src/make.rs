//! Making a simulation: its configuration checked
//! ([`SimConfig::check`]), its sites made and their applications started,
//! and a site made again when it restarts as a new incarnation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::*;

impl Sim {
    /// A simulation of `cfg.sites` sites, each running a [`Workload`].
    ///
    /// # Panics
    ///
    /// As [`with_app`](Self::with_app).
    pub fn new(cfg: SimConfig) -> Self {
        let factory = Self::workloads(&cfg);
        Self::with_app(cfg, factory)
    }

    /// Every site's [`Workload`], as `cfg` sets it.
    fn workloads(cfg: &SimConfig) -> AppFactory {
        Workload::for_config(cfg).factory()
    }

    /// A simulation whose sites run the applications `factory` makes.
    ///
    /// The one clock read of the simulator is here: an origin for the
    /// `Instant`s the machines take. Only differences from it are used,
    /// so nothing of the run depends on its value.
    ///
    /// # Panics
    ///
    /// With a configuration no run can be made of ([`SimConfig::check`];
    /// [`try_with_app`](Self::try_with_app) returns the error instead).
    pub fn with_app(cfg: SimConfig, factory: AppFactory) -> Self {
        match Self::try_with_app(cfg, factory) {
            Ok(sim) => sim,
            Err(e) => panic!("{e} (Sim::try_with_app returns this as an error)"),
        }
    }

    /// [`new`](Self::new), or why no run can be made of `cfg`.
    pub fn try_new(cfg: SimConfig) -> Result<Self, SimConfigError> {
        let factory = Self::workloads(&cfg);
        Self::try_with_app(cfg, factory)
    }

    /// [`with_app`](Self::with_app), or why no run can be made of `cfg`.
    pub fn try_with_app(cfg: SimConfig, factory: AppFactory) -> Result<Self, SimConfigError> {
        cfg.check()?;
        Ok(Self::build(cfg, factory))
    }

    /// A simulation of a configuration already checked.
    fn build(cfg: SimConfig, factory: AppFactory) -> Self {
        // The decisions counted from here on are this run's (the report
        // takes them): a run is one thread's, from its start to its end.
        let _ = sitenet_protocols::base::coverage::take();
        let mut sim = Self {
            end: cfg.duration + cfg.settle,
            t0: Instant::now(),
            now: Duration::ZERO,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            queue: queue::EventQueue::default(),
            events: slab::Slab::new(),
            seq: 0,
            step: 0,
            nodes: Vec::with_capacity(cfg.sites),
            conns: conns::Conns::default(),
            next_conn: 1,
            by_address: BTreeMap::new(),
            addresses: BTreeMap::new(),
            directory: Vec::new(),
            partition: None,
            oracle: Oracle::default(),
            trace: Trace::new(),
            counts: Counts::default(),
            factory,
            sends: Vec::new(),
            serve: std::collections::BTreeSet::new(),
            verdict: None,
            last_open: None,
            last_message: None,
            cfg,
        };
        for n in 0..sim.cfg.sites {
            let address = format!("mem:sim-{n}");
            sim.by_address.insert(address.clone(), n);
            let node = sim.new_node(0, address);
            sim.nodes.push(node);
        }
        sim.directory = sim.nodes.iter().map(|n| n.id).collect();
        // The applications' `start` is their code: a panic there is a
        // violation at step 0 (`sim/panics.rs`), and the run does not go on.
        sim.guarded(|sim| {
            for n in 0..sim.nodes.len() {
                sim.start_node(n);
            }
        });
        sim.schedule_fault();
        sim.at(Duration::from_secs(1), Ev::Audit);
        sim
    }

    pub(crate) fn new_node(&mut self, incarnation: u32, address: String) -> Node {
        let id = SiteId(self.rng.gen::<u128>() | 1);
        self.addresses.insert(id, address.clone());
        let cfg = ComConfig {
            buffer_size: self.cfg.buffer_size,
            local: id,
            // Every simulated site listens.
            callable: true,
            give_up_after: self.cfg.give_up.or(ComConfig::default().give_up_after),
            ..ComConfig::default()
        };
        let slots = SlotConfig::new(self.cfg.weak_slots.max(1), self.cfg.hard_slots.max(2))
            .expect("limits made valid above");
        Node {
            id,
            incarnation,
            up: true,
            speaks: builds::mixed_build(id),
            address,
            cfg: Arc::new(cfg),
            budget: ReassemblyBudget::new(64 << 20),
            peers: crate::peer::Peers::default(),
            slots: SlotTable::new(slots, Box::new(DefaultPolicy::default())),
            holders: BTreeMap::new(),
            waiters: BTreeMap::new(),
            line: BTreeMap::new(),
            turning: std::collections::BTreeSet::new(),
            adopting: Default::default(),
            slot_armed: None,
            pairs: PairMemory::new(1024),
            requests: sitenet_protocols::node::requests::RequestTable::default(),
            coops: BTreeMap::new(),
            coop_deadlines: sitenet_protocols::base::timer::TimerQueue::default(),
            next_coop: 0,
            batches: BTreeMap::new(),
            tracked: BTreeMap::new(),
            batch_waits: sitenet_protocols::base::timer::TimerQueue::default(),
            aliases: BTreeMap::new(),
            req_armed: None,
            // The runtime's defaults for a process with 1,024 descriptors.
            admission: sitenet_protocols::slots::admission::Admission::new(
                sitenet_protocols::slots::admission::AdmissionConfig {
                    max_pending: sitenet_protocols::slots::admission::handshake_fds(1024),
                    max_per_source: 8,
                    silence: Duration::from_secs(2),
                    timeout: sitenet_protocols::connection::handshake::HANDSHAKE_TIMEOUT,
                }
                .normalised(),
            ),
            admitted: BTreeMap::new(),
            adm_armed: None,
            next_opener: 0,
            paused_until: Duration::ZERO,
            app: (self.factory)(id),
            retransmitted: 0,
            index: self.new_index(),
            keys: slab::Slab::new(),
            next_unbound: 0,
            release_at: Duration::MAX,
            table_changed: false,
            out: outbox::NodeOut::new(self.cfg.output_bound(), self.cfg.node_output_bound()),
        }
    }

    /// Starts node `n`'s application and its ticks (at a random phase).
    pub(crate) fn start_node(&mut self, n: usize) {
        let inc = self.nodes[n].incarnation;
        self.trace(n, "start", &[self.nodes[n].id.0, inc as u128]);
        self.app_call(n, |app, ctx| app.start(ctx));
        let phase = self
            .rng
            .gen_range(Duration::ZERO..self.cfg.tick.max(Duration::from_nanos(1)));
        self.at(self.now + phase, Ev::Tick { node: n, inc });
    }
}
