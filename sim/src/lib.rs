//! A deterministic simulator of many sites: each the real
//! [`ComObject`](sitenet_protocols::connection::com_object::ComObject) and handshake machines and a
//! [`SlotTable`] —
//! the code the runtime's actors drive — over a virtual network, in one
//! thread, on a virtual clock that jumps to the next deadline.
//!
//! * **The network** (`net`): per-link latency and bandwidth, socket
//!   buffers, bytes in order within a connection (reordering only across
//!   connections, as with a real stream transport), FIN and reset.
//! * **Faults** (by [`Faults`] level, in the fault phase): connections cut
//!   at a random byte (a frame may be cut in the middle), partitions
//!   between two sets of sites, site crashes and restarts as new
//!   incarnations, slow readers; and preemption, from the slot limits.
//! * **Parking**: after each input the driver parks every
//!   ComObject the rule allows ([`ComObject::park`](sitenet_protocols::connection::com_object::ComObject::park)) and starts it again
//!   for its next input or deadline ([`Report::parks`]), as the runtime
//!   does: every checker also checks that a park loses nothing.
//! * **Applications** ([`Application`]): each site runs one, the default a
//!   random [`Workload`]; a runtime author plugs in their own protocol:
//!   messages, requests (answered now or later, or forwarded), and
//!   cooperations ([`AppCtx::cooperation`], driven by the runtime's
//!   [`Cooperation`](sitenet_protocols::node::cooperation::Cooperation) machine: `coops`).
//! * **The dataflow protocols** ([`Dataflow`]): an application in which
//!   each site runs `sitenet-dataflow-protocols`' `Site` machine under a
//!   seeded workload, with checkers for single assignment, linearizable
//!   exchanges, per-sender FIFO and distributed collection
//!   (`sitenet sim --app dataflow`); [`Application::site_fault`] tells it
//!   its peers' fault states, [`Application::settle_tick`] lets it wind
//!   down in the settle phase.
//! * **Output bounds** (`outbox`): every send holds its bytes under the
//!   runtime's bounds until acknowledged or handed back; with a small
//!   [`SimConfig::output_bound`] senders wait in line, one line per
//!   priority ([`Turns`](sitenet_protocols::node::turns::Turns)), served in turn.
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
//!   `BTreeMap` or visited sorted, and the one hash map (a node's
//!   ComObjects) has a fixed hasher. The trace of events is hashed with SHA-256
//!   ([`Report::digest`]); [`Sim::set_trace`] prints it.
//! * **Searching**: [`search`] and [`search_with`] try consecutive seeds on
//!   several threads, each run on its own, so a search uses every core
//!   without changing any run; [`shrink`] makes a failing one small.
//! * **Swarm testing**: [`Swarm`] draws each seed's settings (sites, slot
//!   limits, tick, the workload's options, output bounds, faults) from
//!   streams of the seed apart from the run's own, so that a search
//!   reaches what one configuration leaves out ([`search_swarm`]); a
//!   drawn run is the run of its settings typed by hand.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use sitenet_sim::{Faults, Sim, SimConfig, Verdict};
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

mod adopt;
mod app;
mod audit;
mod batches;
mod builds;
mod check;
mod config;
mod conns;
mod coops;
mod dataflow_app;
mod drain;
mod envelope;
mod faults;
mod io;
#[cfg(test)]
mod layers;
mod make;
mod net;
mod node;
mod ops;
mod outbox;
mod panics;
mod peer;
mod queue;
mod report;
mod search;
mod shrink;
mod sites;
mod slots;
mod swarm;
mod trace;
mod traffic;
mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub use app::{Answer, AppCtx, AppFactory, Application, BatchOp, OpOutcome, Request};
pub use config::{Report, SimConfig, SimConfigError, Verdict, MAX_SIM_TIME, MAX_SITES, MIN_TICK};
pub use dataflow_app::{Dataflow, DataflowStats, Envelope, EnvelopeError};
pub use faults::Faults;
pub use search::{search, search_swarm, search_with, SearchRun, MAX_JOBS};
pub use shrink::{shrink, shrink_with};
/// How often a run reached each decision point of the protocol machines
/// ([`Report::coverage`]).
pub use sitenet_protocols::base::coverage::{Coverage, Point};
pub use swarm::{Knob, Swarm};
pub use workload::Workload;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::ComConfig;
use sitenet_protocols::connection::handshake::{Nonce, PairMemory};
use sitenet_protocols::connection::reassembly::ReassemblyBudget;
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig, SlotTable};

use self::check::Oracle;
use self::node::Node;
use self::report::Counts;
use self::trace::Trace;

/// The message type id the simulator's envelopes carry.
pub const SIM_TYPE: u32 = 0x5153;

/// The message type of cooperation replies ([`AppCtx::send_coop_reply`]):
/// the type a runtime declares with `Node::cooperation_reply`.
pub const COOP_REPLY_TYPE: u32 = 0x5154;

/// Something scheduled (the queue orders events by time, then by the order
/// they were scheduled in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ev {
    /// Node `node`'s pending handshakes' deadlines.
    Admission {
        node: usize,
        inc: u32,
    },
    /// Node `node`'s request deadlines.
    Requests {
        node: usize,
        inc: u32,
    },
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
    /// A slot freed for the accepted peer waiting in line with `ticket`.
    LineTurn {
        node: usize,
        inc: u32,
        ticket: u64,
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
    /// An accepted channel reaches its entry's ComObject
    /// ([`SimConfig::adopt_hop`]).
    Adopt {
        node: usize,
        inc: u32,
        id: u64,
    },
    /// Entry `peer`'s ComObject at node `n` takes its outbox queue.
    Drain {
        node: usize,
        inc: u32,
        peer: SiteId,
    },
}

/// Bits of a queue key that name the event's slot in the slab.
const SLOT_BITS: u32 = 24;
/// Bits of a queue key that hold the scheduling order (above the slot).
const SEQ_BITS: u32 = 64 - SLOT_BITS;

/// A simulation in progress. See the module documentation.
pub struct Sim {
    cfg: SimConfig,
    t0: Instant,
    now: Duration,
    end: Duration,
    rng: ChaCha8Rng,
    /// Keys of the scheduled events, earliest first: the time in
    /// nanoseconds (high 64 bits), then the scheduling order, then the
    /// event's slot in `events` (low bits). Ordered by time, then by the
    /// order they were scheduled in, never by the event itself; the queue
    /// moves 16-byte keys, not events.
    queue: queue::EventQueue,
    events: slab::Slab<Ev>,
    seq: u64,
    step: u64,
    nodes: Vec<Node>,
    conns: conns::Conns,
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
    sends: Vec<(usize, u32, ops::Op)>,
    /// Nodes where room may have freed for senders waiting in line.
    serve: std::collections::BTreeSet<usize>,
    verdict: Option<Verdict>,
    /// When the last open attempt started.
    last_open: Option<Duration>,
    /// When a message was last delivered or handed back (the final quiet
    /// check counts from it when it is late).
    last_message: Option<Duration>,
}

impl Sim {
    /// Prints every event of the run through `sink`, one line each.
    pub fn set_trace(&mut self, sink: impl FnMut(&str) + 'static) {
        self.trace.set_sink(Box::new(sink));
        // The lines name nodes by their index: which site each is now.
        for (n, node) in self.nodes.iter().enumerate() {
            let line = format!(
                "# node {n:x} is site {} (incarnation {})",
                node.id, node.incarnation
            );
            self.trace.note(&line);
        }
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
    ///
    /// A panic in a site's code — a machine's assertion, or an
    /// application's own `assert!` in a callback — ends the run as a
    /// violation at the step it happened in, with its message, rather than
    /// unwinding out of the simulator (`sim/panics.rs`): a search then
    /// names the seed that panicked, like any other failing one.
    pub fn run_until(&mut self, until: Duration) -> bool {
        self.verdict.is_none() && self.guarded(|s| s.run_events(until)).unwrap_or(false)
    }

    /// [`run_until`](Self::run_until)'s loop.
    fn run_events(&mut self, until: Duration) -> bool {
        while self.verdict.is_none() {
            let Some(key) = self.queue.peek() else {
                return false;
            };
            let at = Duration::from_nanos((key >> 64) as u64);
            if at > self.end {
                return false;
            }
            if at > until {
                return true;
            }
            self.queue.pop();
            let ev = self.events.remove((key as usize) & ((1 << SLOT_BITS) - 1));
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

    fn handle(&mut self, ev: Ev) {
        self.trace_event(&ev);
        match ev {
            Ev::ComTimer { node, inc, peer } => {
                if self.alive(node, inc) {
                    self.on_com_timer(node, peer);
                }
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
            Ev::LineTurn {
                node,
                inc,
                ticket,
                holder,
            } => {
                if self.alive(node, inc) {
                    self.on_line_turn(node, ticket, holder);
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
                        self.app_call(node, |app, ctx| app.tick(ctx));
                    } else {
                        self.app_call(node, |app, ctx| app.settle_tick(ctx));
                    }
                    self.at(self.now + self.cfg.tick, Ev::Tick { node, inc });
                }
            }
            Ev::Fault => self.fault(),
            Ev::Heal => self.heal(),
            Ev::Restart { node } => self.restart(node),
            Ev::Resume { node, inc } => self.resume(node, inc),
            Ev::Drain { node, inc, peer } => {
                if self.alive(node, inc) {
                    self.drain(node, peer);
                }
            }
            Ev::Requests { node, inc } => {
                if self.alive(node, inc) {
                    self.on_request_timer(node);
                }
            }
            Ev::Adopt { node, inc, id } => {
                if self.alive(node, inc) {
                    self.on_adopt(node, id);
                }
            }
            Ev::Admission { node, inc } => {
                if self.alive(node, inc) {
                    self.on_admission_timer(node);
                }
            }
            Ev::Audit => {
                self.audit();
                if self.now < self.end {
                    self.at(self.now + Duration::from_secs(1), Ev::Audit);
                }
            }
        }
    }

    fn alive(&self, n: usize, inc: u32) -> bool {
        let node = &self.nodes[n];
        node.up && node.incarnation == inc
    }

    pub(crate) fn instant(&self) -> Instant {
        self.t0 + self.now
    }

    pub(crate) fn at(&mut self, t: Duration, ev: Ev) {
        self.seq += 1;
        let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        let slot = self.events.insert(ev) as u128;
        assert!(
            slot < 1 << SLOT_BITS,
            "more than 16M events scheduled at once"
        );
        let seq = u128::from(self.seq) & ((1 << SEQ_BITS) - 1);
        let key = u128::from(nanos) << 64 | seq << SLOT_BITS | slot;
        self.queue.push(key);
    }

    pub(crate) fn rand_u64(&mut self) -> u64 {
        self.rng.gen()
    }

    pub(crate) fn rand_nonce(&mut self) -> Nonce {
        self.rng.gen()
    }

    pub(crate) fn trace(&mut self, n: usize, kind: &str, values: &[u128]) {
        let mut v = [0u128; 5];
        v[0] = n as u128;
        let k = values.len().min(4);
        v[1..=k].copy_from_slice(&values[..k]);
        self.trace.event(self.step, self.now, kind, &v[..=k]);
    }

    pub(crate) fn violation(&mut self, what: String) {
        if self.verdict.is_none() {
            self.trace.event(self.step, self.now, "violation", &[]);
            self.verdict = Some(Verdict::Violation {
                step: self.step,
                at: self.now,
                what,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long run's checkers kept a full record and a stream number for
    /// every message sent, and a stream for every pair of incarnations
    /// that ever talked: 50 sites with heavy faults peaked at 35 MB after
    /// 3,000 simulated seconds and 76 MB after 10,000, growing for ever.
    /// They now keep only what is not settled.
    #[test]
    fn the_checkers_keep_only_what_is_not_settled() {
        let mut sim = Sim::new(SimConfig {
            sites: 20,
            seed: 3,
            faults: Faults::Heavy,
            duration: Duration::from_secs(600),
            ..SimConfig::default()
        });
        // What is kept holds together all along, not only at the end.
        let mut until = Duration::ZERO;
        loop {
            until += Duration::from_secs(20);
            let more = sim.run_until(until);
            sim.oracle.check_kept();
            if !more {
                break;
            }
        }
        let sent = sim.oracle.messages() as usize;
        let (kept, numbers) = (sim.oracle.kept(), sim.oracle.kept_numbers());
        sim.oracle.check_kept();
        let r = sim.finish();
        assert_eq!(r.verdict, Verdict::Ok, "{r:?}");
        assert!(r.restarts > 100 && sent > 10_000, "{r:?}");
        assert!(
            kept * 20 < sent && numbers * 20 < sent,
            "{kept} records and {numbers} stream numbers kept of {sent} messages"
        );
    }
}
