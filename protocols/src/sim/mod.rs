//! A deterministic simulator of many sites: each the real [`ComObject`]
//! and handshake machines and a [`SlotTable`](crate::slots::SlotTable) —
//! the code the runtime's actors drive — over a virtual network, in one
//! thread, on a virtual clock that jumps to the next deadline.
//!
//! * **The network** ([`net`]): per-link latency and bandwidth, socket
//!   buffers, bytes in order within a connection (reordering only across
//!   connections, as with a real stream transport), FIN and reset.
//! * **Faults** (by [`Faults`] level, in the fault phase): connections cut
//!   at a random byte (a frame may be cut in the middle), partitions
//!   between two sets of sites, site crashes and restarts as new
//!   incarnations, slow readers; and preemption, from the slot limits.
//! * **Applications** ([`Application`]): each site runs one, the default a
//!   random [`Workload`]; a runtime author plugs in their own protocol.
//! * **Checkers**, during every run: per-priority FIFO and exactly-once
//!   delivery, every message delivered or handed back, bodies intact, no
//!   protocol fault between honest sites, slots never above the hard
//!   limit, rings within their bound, no ComObject stuck in an opening or
//!   closing state without the timer or attempt that ends it; and after a
//!   settle phase without faults, every pair converged (nothing queued or
//!   unacknowledged between live sites). A violation stops the run and
//!   reports its step.
//! * **Same seed, same run**: every random choice comes from one ChaCha8
//!   generator seeded by [`SimConfig::seed`]; events are ordered by time,
//!   then by the order they were scheduled; every table iterated is a
//!   `BTreeMap`. The trace of events is hashed with SHA-256
//!   ([`Report::digest`]); [`Sim::set_trace`] prints it.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use sitenet_protocols::sim::{Faults, Sim, SimConfig, Verdict};
//!
//! let cfg = SimConfig {
//!     sites: 8,
//!     seed: 7,
//!     duration: Duration::from_secs(5),
//!     faults: Faults::Heavy,
//!     ..SimConfig::default()
//! };
//! let report = Sim::new(cfg.clone()).run();
//! assert_eq!(report.verdict, Verdict::Ok);
//! assert!(report.delivered > 0);
//! // The same seed runs the same way, event for event.
//! assert_eq!(Sim::new(cfg).run().digest, report.digest);
//! ```

mod app;
mod check;
mod faults;
mod io;
mod net;
mod node;
mod trace;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use app::{AppCtx, AppFactory, Application, Workload};
pub use faults::Faults;

use crate::address_book::AddressBook;
use crate::com_object::{ComConfig, ComState};
use crate::handshake::{Nonce, PairMemory};
use crate::message::{InMessage, OutMessage};
use crate::priority::Priority;
use crate::reassembly::ReassemblyBudget;
use crate::site::SiteId;
use crate::slots::{DefaultPolicy, SlotConfig, SlotTable};

use self::check::Oracle;
use self::node::{Node, Slot};
use self::trace::Trace;

/// The message type id the simulator's envelopes carry.
pub const SIM_TYPE: u32 = 0x5153;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of sites.
    pub sites: usize,
    /// Seeds every random choice of the run.
    pub seed: u64,
    /// The fault phase: applications tick and faults happen.
    pub duration: Duration,
    /// The must-converge phase after it: no faults, no new ticks; every
    /// pair of live sites must end with nothing queued or unacknowledged.
    pub settle: Duration,
    /// How many faults.
    pub faults: Faults,
    /// Each site's weak slot limit (connects beyond it wait in line).
    pub weak_slots: usize,
    /// Each site's hard slot limit (never exceeded).
    pub hard_slots: usize,
    /// The applications' tick.
    pub tick: Duration,
    /// An application holds its reference to a site this long after it
    /// last sent to it, then lets go (checked on its ticks).
    pub hold_references: Duration,
    /// Each site's ByteBuffer size.
    pub buffer_size: u32,
    /// A link's one-way latency is drawn between these.
    pub latency: (Duration, Duration),
    /// Each link's bandwidth, bytes per second.
    pub bandwidth: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            sites: 50,
            seed: 0,
            duration: Duration::from_secs(30),
            settle: Duration::from_secs(60),
            faults: Faults::Light,
            weak_slots: 8,
            hard_slots: 12,
            tick: Duration::from_secs(1),
            hold_references: Duration::from_secs(5),
            buffer_size: 16 * 1024,
            latency: (Duration::from_micros(100), Duration::from_millis(2)),
            bandwidth: 100_000_000,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every checker held.
    Ok,
    /// A checker failed at this step of the run.
    Violation {
        /// The event's number (1 = the first event).
        step: u64,
        /// Simulated time.
        at: Duration,
        /// What broke.
        what: String,
    },
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Number of sites.
    pub sites: usize,
    /// The checkers' verdict.
    pub verdict: Verdict,
    /// SHA-256 of the event trace, hex.
    pub digest: String,
    /// Application messages sent.
    pub messages: u64,
    /// Application messages delivered.
    pub delivered: u64,
    /// Messages handed back to their senders.
    pub handed_back: u64,
    /// Connections cut.
    pub cuts: u64,
    /// Partitions.
    pub partitions: u64,
    /// Channels preempted for want of slots.
    pub preemptions: u64,
    /// Sites crashed and restarted as new incarnations.
    pub restarts: u64,
    /// Messages resent on a new channel.
    pub retransmitted: u64,
    /// Open attempts.
    pub opens: u64,
    /// Accepted channels refused at the hard slot limit.
    pub accepts_refused: u64,
    /// Sites forgotten by the reclaim rule.
    pub reclaimed: u64,
    /// Simulated seconds run.
    pub sim_s: f64,
    /// Events processed.
    pub events: u64,
}

/// Something scheduled: ordered by time, then by scheduling order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
    ComTimer {
        node: usize,
        inc: u32,
        peer: SiteId,
    },
    SlotTimer {
        node: usize,
        inc: u32,
    },
    Grant {
        node: usize,
        inc: u32,
        peer: SiteId,
        holder: u64,
    },
    Syn {
        conn: u64,
    },
    Arrive {
        conn: u64,
        dir: usize,
    },
    Read {
        conn: u64,
        end: usize,
    },
    Writable {
        conn: u64,
        end: usize,
    },
    HsTimeout {
        conn: u64,
        end: usize,
    },
    Tick {
        node: usize,
        inc: u32,
    },
    Fault,
    Heal,
    Restart {
        node: usize,
    },
    Resume {
        node: usize,
        inc: u32,
    },
    Audit,
}

#[derive(Debug, Default)]
pub(super) struct Counts {
    cuts: u64,
    partitions: u64,
    restarts: u64,
    preemptions: u64,
    opens: u64,
    accepts_refused: u64,
    reclaimed: u64,
    claims_refused: u64,
}

/// A simulation in progress. See the module documentation.
pub struct Sim {
    cfg: SimConfig,
    t0: Instant,
    now: Duration,
    end: Duration,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Duration, u64, Ev)>>,
    seq: u64,
    step: u64,
    nodes: Vec<Node>,
    conns: BTreeMap<u64, net::Conn>,
    next_conn: u64,
    /// Every address → its node.
    by_address: BTreeMap<String, usize>,
    /// Every incarnation ever → its address.
    addresses: BTreeMap<SiteId, String>,
    /// The sites up now, in node order.
    directory: Vec<SiteId>,
    /// Side of each node while a partition lasts, and when it heals.
    partition: Option<(Vec<bool>, Duration)>,
    oracle: Oracle,
    trace: Trace,
    counts: Counts,
    factory: AppFactory,
    /// Application sends made during a callback, carried out after it.
    sends: Vec<(usize, u32, SiteId, Priority, Bytes)>,
    verdict: Option<Verdict>,
    /// When the last open attempt started.
    last_open: Option<Duration>,
}

impl Sim {
    /// A simulation of `cfg.sites` sites, each running a [`Workload`].
    pub fn new(cfg: SimConfig) -> Self {
        Self::with_app(
            cfg,
            Box::new(|_| Box::new(Workload::default()) as Box<dyn Application>),
        )
    }

    /// A simulation whose sites run the applications `factory` makes.
    ///
    /// The one clock read of the simulator is here: an origin for the
    /// `Instant`s the machines take. Only differences from it are used,
    /// so nothing of the run depends on its value.
    pub fn with_app(cfg: SimConfig, factory: AppFactory) -> Self {
        let mut sim = Self {
            end: cfg.duration + cfg.settle,
            t0: Instant::now(),
            now: Duration::ZERO,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            queue: BinaryHeap::new(),
            seq: 0,
            step: 0,
            nodes: Vec::with_capacity(cfg.sites),
            conns: BTreeMap::new(),
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
            verdict: None,
            last_open: None,
            cfg,
        };
        for n in 0..sim.cfg.sites {
            let address = format!("mem:sim-{n}");
            sim.by_address.insert(address.clone(), n);
            let node = sim.new_node(0, address);
            sim.nodes.push(node);
        }
        sim.directory = sim.nodes.iter().map(|n| n.id).collect();
        for n in 0..sim.nodes.len() {
            sim.start_node(n);
        }
        sim.schedule_fault();
        sim.at(Duration::from_secs(1), Ev::Audit);
        sim
    }

    /// Prints every event of the run through `sink`, one line each.
    pub fn set_trace(&mut self, sink: impl FnMut(&str) + 'static) {
        self.trace.set_sink(Box::new(sink));
    }

    /// Simulated time now.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// When the run ends (fault phase plus settle phase).
    pub fn end(&self) -> Duration {
        self.end
    }

    /// Runs every event up to simulated time `until`. False once the run is
    /// over (its end reached, nothing left to happen, or a violation).
    pub fn run_until(&mut self, until: Duration) -> bool {
        while self.verdict.is_none() {
            let Some(Reverse((at, _, _))) = self.queue.peek() else {
                return false;
            };
            if *at > self.end {
                return false;
            }
            if *at > until {
                return true;
            }
            let Reverse((at, _, ev)) = self.queue.pop().expect("peeked");
            self.now = at;
            self.step += 1;
            self.handle(ev);
            self.run_sends();
        }
        false
    }

    /// Runs to the end and reports.
    pub fn run(mut self) -> Report {
        self.run_until(Duration::MAX);
        self.finish()
    }

    /// Ends the run: the final checks (if it ran to its end) and the report.
    pub fn finish(mut self) -> Report {
        if self.verdict.is_none() {
            self.now = self.now.max(self.end);
            self.final_checks();
        }
        let retransmitted = self
            .nodes
            .iter()
            .map(|n| {
                n.retransmitted
                    + n.peers
                        .values()
                        .map(|p| p.com.session().stats_ref().retransmitted)
                        .sum::<u64>()
            })
            .sum();
        Report {
            seed: self.cfg.seed,
            sites: self.cfg.sites,
            verdict: self.verdict.clone().unwrap_or(Verdict::Ok),
            digest: self.trace.digest(),
            messages: self.oracle.messages(),
            delivered: self.oracle.delivered,
            handed_back: self.oracle.handed_back,
            cuts: self.counts.cuts,
            partitions: self.counts.partitions,
            preemptions: self.counts.preemptions,
            restarts: self.counts.restarts,
            retransmitted,
            opens: self.counts.opens,
            accepts_refused: self.counts.accepts_refused,
            reclaimed: self.counts.reclaimed,
            sim_s: self.now.min(self.end).as_secs_f64(),
            events: self.step,
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::ComTimer { node, inc, peer } => {
                if !self.alive(node, inc) {
                    return;
                }
                let Some(mut p) = self.nodes[node].peers.remove(&peer) else {
                    return;
                };
                if p.armed == Some(self.now) {
                    p.armed = None;
                    let now = self.instant();
                    if p.com.poll_timeout().is_some_and(|t| t <= now) {
                        p.com.handle_timeout(now);
                        self.drive_peer(node, peer, &mut p);
                    }
                }
                self.put_back(node, peer, p);
            }
            Ev::SlotTimer { node, inc } => {
                if self.alive(node, inc) && self.nodes[node].slot_armed == Some(self.now) {
                    self.on_slot_timer(node);
                }
            }
            Ev::Grant {
                node,
                inc,
                peer,
                holder,
            } => {
                if self.alive(node, inc) {
                    self.on_grant(node, peer, holder);
                }
            }
            Ev::Syn { conn } => self.on_syn(conn),
            Ev::Arrive { conn, dir } => self.on_arrive(conn, dir),
            Ev::Read { conn, end } => self.read(conn, end),
            Ev::Writable { conn, end } => self.on_writable(conn, end),
            Ev::HsTimeout { conn, end } => self.on_handshake_timeout(conn, end),
            Ev::Tick { node, inc } => {
                if self.alive(node, inc) {
                    self.release_references(node);
                    if self.now < self.cfg.duration {
                        self.trace(node, "tick", &[]);
                        self.app_call(node, |app, ctx| app.tick(ctx));
                    }
                    self.at(self.now + self.cfg.tick, Ev::Tick { node, inc });
                }
            }
            Ev::Fault => self.fault(),
            Ev::Heal => self.heal(),
            Ev::Restart { node } => self.restart(node),
            Ev::Resume { node, inc } => self.resume(node, inc),
            Ev::Audit => {
                self.audit();
                if self.now < self.end {
                    self.at(self.now + Duration::from_secs(1), Ev::Audit);
                }
            }
        }
    }

    /// The application lets go of the sites it has not sent to for
    /// [`SimConfig::hold_references`] (as a runtime drops its last
    /// `SiteRef`): the linger, weak close and reclaim rules then apply.
    fn release_references(&mut self, n: usize) {
        let Some(since) = self.now.checked_sub(self.cfg.hold_references) else {
            return;
        };
        let idle: Vec<SiteId> = self.nodes[n]
            .peers
            .iter()
            .filter(|(_, p)| p.last_send.is_some_and(|t| t <= since))
            .map(|(id, _)| *id)
            .collect();
        for peer in idle {
            let mut p = self.nodes[n].peers.remove(&peer).expect("listed");
            p.last_send = None;
            p.com.set_has_refs(false, self.instant());
            self.trace(n, "unref", &[peer.0]);
            self.drive_peer(n, peer, &mut p);
            self.put_back(n, peer, p);
        }
    }

    fn alive(&self, n: usize, inc: u32) -> bool {
        let node = &self.nodes[n];
        node.up && node.incarnation == inc
    }

    pub(super) fn instant(&self) -> Instant {
        self.t0 + self.now
    }

    pub(super) fn at(&mut self, t: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
    }

    pub(super) fn rand_u64(&mut self) -> u64 {
        self.rng.gen()
    }

    pub(super) fn rand_nonce(&mut self) -> Nonce {
        self.rng.gen()
    }

    pub(super) fn trace(&mut self, n: usize, kind: &str, values: &[u128]) {
        let mut v = [0u128; 5];
        v[0] = n as u128;
        let k = values.len().min(4);
        v[1..=k].copy_from_slice(&values[..k]);
        self.trace.event(self.step, self.now, kind, &v[..=k]);
    }

    pub(super) fn violation(&mut self, what: String) {
        if self.verdict.is_none() {
            self.trace.event(self.step, self.now, "violation", &[]);
            self.verdict = Some(Verdict::Violation {
                step: self.step,
                at: self.now,
                what,
            });
        }
    }

    /// A link's latency and bandwidth: fixed per pair of sites for the
    /// run, drawn from the seed and the pair (not from the run's generator,
    /// so that a link's draw does not depend on when it is first used).
    pub(super) fn link(&self, a: usize, b: usize) -> (Duration, u64) {
        let (lo, hi) = (a.min(b) as u64, a.max(b) as u64);
        let mut r = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ (lo << 32 | hi).rotate_left(17));
        let (min, max) = self.cfg.latency;
        let latency = if max > min {
            r.gen_range(min..=max)
        } else {
            min
        };
        (latency, self.cfg.bandwidth)
    }

    fn new_node(&mut self, incarnation: u32, address: String) -> Node {
        let id = SiteId(self.rng.gen::<u128>() | 1);
        self.addresses.insert(id, address.clone());
        let cfg = ComConfig {
            buffer_size: self.cfg.buffer_size,
            local: id,
            // Every simulated site listens.
            callable: true,
            ..ComConfig::default()
        };
        let slots = SlotConfig::new(self.cfg.weak_slots.max(1), self.cfg.hard_slots.max(2))
            .expect("limits made valid above");
        Node {
            id,
            incarnation,
            up: true,
            address,
            cfg: Arc::new(cfg),
            budget: ReassemblyBudget::new(64 << 20),
            peers: BTreeMap::new(),
            slots: SlotTable::new(slots, Box::new(DefaultPolicy::default())),
            holders: BTreeMap::new(),
            waiters: BTreeMap::new(),
            slot_armed: None,
            pairs: PairMemory::new(1024),
            next_opener: 0,
            paused_until: Duration::ZERO,
            app: (self.factory)(id),
            retransmitted: 0,
        }
    }

    /// Starts node `n`'s application and its ticks (at a random phase).
    fn start_node(&mut self, n: usize) {
        let inc = self.nodes[n].incarnation;
        self.trace(n, "start", &[self.nodes[n].id.0, inc as u128]);
        self.app_call(n, |app, ctx| app.start(ctx));
        let phase = self
            .rng
            .gen_range(Duration::ZERO..self.cfg.tick.max(Duration::from_nanos(1)));
        self.at(self.now + phase, Ev::Tick { node: n, inc });
    }

    /// Calls node `n`'s application; what it sends leaves afterwards.
    fn app_call(&mut self, n: usize, f: impl FnOnce(&mut dyn Application, &mut AppCtx<'_>)) {
        let node = &mut self.nodes[n];
        let mut out = Vec::new();
        let mut ctx = AppCtx {
            me: node.id,
            now: self.now,
            sites: &self.directory,
            rng: &mut self.rng,
            out: &mut out,
        };
        f(node.app.as_mut(), &mut ctx);
        let inc = node.incarnation;
        self.sends
            .extend(out.into_iter().map(|(to, p, b)| (n, inc, to, p, b)));
    }

    fn run_sends(&mut self) {
        while !self.sends.is_empty() {
            for (n, inc, to, p, body) in std::mem::take(&mut self.sends) {
                if self.alive(n, inc) {
                    self.send(n, to, p, body);
                }
            }
        }
    }

    /// An application's send, through the ComObject as the runtime's.
    fn send(&mut self, n: usize, to: SiteId, priority: Priority, body: Bytes) {
        let me = self.nodes[n].id;
        let Some(address) = self.addresses.get(&to).cloned() else {
            return self.violation(format!("{me} sent to {to}, a site that never existed"));
        };
        if to == me {
            return;
        }
        let id = self.oracle.sent(me, to, priority as u8, &body);
        self.trace(n, "send", &[to.0, id as u128, priority as u128]);
        let msg = OutMessage::new(
            priority,
            SIM_TYPE,
            Bytes::copy_from_slice(&id.to_le_bytes()),
            smallvec::smallvec![body],
        );
        let mut p = self.peer_or_new(n, to, AddressBook::given(&address));
        // The application holds a reference to a site it sends to.
        p.com.set_has_refs(true, self.instant());
        p.last_send = Some(self.now);
        if let Err(refused) = p.com.queue(msg) {
            let (err, m) = *refused;
            let maybe = err.handed_back() == crate::error::HandedBack::MaybeDelivered;
            self.trace(n, "refused_send", &[id as u128]);
            if let Err(e) = self.oracle.hand_back(id, maybe) {
                self.violation(e);
            }
            let body = m
                .body
                .iter()
                .flat_map(|b| b.iter().copied())
                .collect::<Vec<_>>();
            self.app_call(n, |app, ctx| app.handed_back(ctx, to, &body, maybe));
        }
        self.drive_peer(n, to, &mut p);
        self.put_back(n, to, p);
    }

    /// A message delivered at node `n` on the channel from `peer`.
    pub(super) fn delivered(&mut self, n: usize, peer: SiteId, m: InMessage) {
        let Some(id) = envelope_id(&m.header) else {
            return self.violation(format!("a message without an envelope arrived: {m:?}"));
        };
        self.trace(n, "deliver", &[peer.0, id as u128]);
        if let Err(e) = self.oracle.deliver(id, self.nodes[n].id, peer, &m.body) {
            return self.violation(e);
        }
        self.app_call(n, |app, ctx| app.received(ctx, peer, &m.body));
    }

    /// The checks made once a simulated second: slots, rings, stuck
    /// ComObjects.
    fn audit(&mut self) {
        let hard = self.cfg.hard_slots.max(2);
        let ring_max =
            2 * (self.cfg.buffer_size as usize).max(crate::handshake::MIN_BUFFER as usize);
        let mut held = vec![0usize; self.nodes.len()];
        for (c, conn) in &self.conns {
            for end in &conn.ends {
                if end.holder.is_some() {
                    held[end.node] += 1;
                }
                if end.ring_bytes() > ring_max {
                    let what = format!("connection {c} holds {} ring bytes", end.ring_bytes());
                    return self.violation(what);
                }
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            if !node.up {
                continue;
            }
            if held[n] > hard || node.slots.in_use() > hard {
                let what = format!(
                    "{} holds {} slots, above its hard limit {hard}",
                    node.id, held[n]
                );
                return self.violation(what);
            }
            for (peer, p) in &node.peers {
                let stuck = match p.com.state() {
                    ComState::Opening => p.opening.is_none(),
                    ComState::WaitingForSlot => !matches!(p.slot, Slot::Waiting(_)),
                    ComState::ClosingWeak
                    | ComState::ClosingHard
                    | ComState::WaitingForDisconnect => p.com.poll_timeout().is_none(),
                    _ => false,
                };
                if stuck {
                    let what = format!(
                        "{}'s ComObject for {peer} is stuck in {:?}",
                        node.id,
                        p.com.state()
                    );
                    return self.violation(what);
                }
            }
        }
    }

    /// After the settle phase: every message accounted for, every pair of
    /// live sites converged.
    fn final_checks(&mut self) {
        self.audit();
        if self.verdict.is_some() {
            return;
        }
        if let Err(e) = self.oracle.finish() {
            return self.violation(e);
        }
        // Quiet at the end: the last third of the settle phase opens no
        // channel (everything owed was delivered long before; an open then
        // is churn, as when sites reopened preempted channels without need).
        let quiet_from = self.cfg.duration + self.cfg.settle * 2 / 3;
        if let Some(at) = self.last_open.filter(|at| *at > quiet_from) {
            let what = format!(
                "channels still opening {:.1}s after the faults stopped, with nothing to send",
                (at - self.cfg.duration).as_secs_f64()
            );
            return self.violation(what);
        }
        for node in &self.nodes {
            for (peer, p) in &node.peers {
                let s = p.com.session();
                if !p.com.is_failed() && (s.pending_messages() > 0 || s.unacked() > 0) {
                    let what = format!(
                        "{} and {peer} did not converge: {:?}, {} queued, {} unacknowledged",
                        node.id,
                        p.com.state(),
                        s.pending_messages(),
                        s.unacked()
                    );
                    return self.violation(what);
                }
            }
        }
    }
}

/// The message id an envelope's header carries.
pub(super) fn envelope_id(header: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(header.try_into().ok()?))
}
