//! The dataflow protocols (`sitenet-dataflow-protocols`) as the simulated
//! sites' application: each site runs one [`Site`] machine over the
//! simulator's network, under its faults, with checkers for what the
//! protocols promise (`sitenet sim --app dataflow`).
//!
//! * **Messages**: every message is an [`Envelope`] (rmp-serde): a
//!   protocol message ([`Wire`]), an application message carrying a
//!   reference ([`Envelope::Pass`]: lent at the sender before it goes,
//!   received and acquired where it arrives), or a probe. All go at one
//!   priority, so that two sites' messages keep their order (the
//!   protocols rely on it). A message handed back goes to
//!   [`Site::undelivered`]; a change of a site's fault state to
//!   [`Site::site_fault`].
//! * **The workload** (on each tick of the fault phase, from the run's
//!   random source): makes variables (some by-need), ports and cells
//!   (mobile and stationary), passes references to random peers, binds
//!   (racing, sometimes with equal values), waits, sends on ports (each
//!   port's home reads its stream), exchanges, keeps references found in
//!   values, and drops handles.
//! * **The settle phase** ([`Application::settle_tick`]): each site binds
//!   every variable it made (so that every wait ends), drops every handle
//!   and starts nothing else; a port's home closes its stream once the
//!   port is collected. While its machine still holds anything, a site
//!   sends a probe to each site it heard of that is no longer up: as a
//!   runtime's held reference would, the probe meets the new incarnation
//!   at the address, and the machine learns the old one failed for good.
//! * **Checkers**, in books all the sites of one run share (a violation
//!   panics in the callback, which ends the run as a violation at that
//!   step; the rest is each site's [`check`](Application::check), whose
//!   findings the last live site checked reports together, so that an
//!   entity kept at one site because another's keeps it shows with its
//!   root):
//!   single assignment (every site that sees a variable bound sees the
//!   same value, and at most one distinct value's bind succeeds);
//!   linearizable exchanges (every old content answered was written, or
//!   is the initial content, and none is answered twice); per-sender FIFO
//!   (the items a port's home reads from each sender come in send order,
//!   without a gap while the sender is up); and once the run has settled,
//!   every operation ended and no entity is kept (no home, no proxy) on
//!   any live site.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use serde::{Deserialize, Serialize};
use sitenet_dataflow_protocols::{
    Action, Answer, EntityId, FailMode, Kind, OpError, OpId, Site, Value, Wire,
};
use sitenet_protocols::base::priority::Priority;
use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::FaultState;

use crate::app::{AppCtx, AppFactory, Application};

mod books;
use books::{Books, HandedBack};

/// The one priority every message goes at: FIFO between two sites.
const PRIORITY: Priority = Priority::Medium;

/// The most handles a site's workload holds at once.
const MAX_HELD: usize = 32;

/// The most operations a site's workload has under way at once (besides
/// its ports' readers).
const MAX_OPS: usize = 16;

/// How often, in the settle phase, a site probes each site it depends on
/// that is no longer up, until its machine knows it failed.
const PROBE_EVERY: Duration = Duration::from_secs(3);

/// How often each site runs an audit round ([`Site::audit`]): shorter
/// than the settle phase, so a listing a give-up left behind is asked
/// about before the run's end is checked.
const AUDIT_EVERY: Duration = Duration::from_secs(5);

/// The bytes that close a stream once its port is collected (a value
/// that names no entity, so no stream cell).
const END_OF_STREAM: &[u8] = b"end of stream";

/// One message between two simulated dataflow sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Envelope {
    /// A protocol message.
    Wire(Wire),
    /// An application message carrying a reference to `entity`: the
    /// sender lent it ([`Site::lend`]) before sending; the receiver
    /// receives and acquires it, once: sitenet may hand a message back as
    /// maybe delivered to a site that is up (it forgot the sender's
    /// session), and the sender then sends it again, with the same
    /// number, which the receiver takes only if it is new.
    Pass {
        /// The entity referred to.
        entity: EntityId,
        /// Unique among the sender's passes.
        number: u64,
    },
    /// Nothing to read: sent to a site that is no longer up, so that the
    /// sender's ComObject finds out it failed for good.
    Probe,
}

/// A body that is no dataflow [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a dataflow envelope ({0}): every message of a dataflow run is one")]
pub struct EnvelopeError(String);

impl Envelope {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).expect("an envelope always encodes")
    }

    /// The message `body` holds.
    pub fn decode(body: &[u8]) -> Result<Envelope, EnvelopeError> {
        rmp_serde::from_slice(body).map_err(|e| EnvelopeError(e.to_string()))
    }
}

/// What the sites of one dataflow run did, summed (for tests and the
/// command line's figures).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataflowStats {
    /// Incarnations whose application started.
    pub sites_started: u64,
    /// Variables, ports and cells made.
    pub entities_made: u64,
    /// References passed inside application messages.
    pub passes: u64,
    /// Binds that succeeded.
    pub binds_won: u64,
    /// Binds refused: the variable was bound to a different value.
    pub conflicts: u64,
    /// Waits that ended with the binding.
    pub waits_bound: u64,
    /// Exchanges that answered an old content.
    pub exchanges: u64,
    /// Port sends made.
    pub port_sends: u64,
    /// Items the ports' homes read from their streams.
    pub items_read: u64,
    /// Operations that ended with a temporary failure.
    pub temp_fails: u64,
    /// Operations that ended with a permanent failure.
    pub perm_fails: u64,
    /// Operations that ended with `Gone`.
    pub gone: u64,
    /// Entities their homes collected.
    pub reclaimed: u64,
    /// Probes sent in the settle phase.
    pub probes: u64,
    /// References sent again after sitenet handed them back as maybe
    /// delivered to a site that is up.
    pub passes_again: u64,
    /// Protocol messages sitenet handed back as maybe delivered to a site
    /// that is up (it forgot the sender's session): the protocols take
    /// every message handed back as its site's failure for good.
    pub maybe_delivered_to_live: u64,
    /// Times a site was told another failed for good while it was up
    /// (given up on, `SimConfig::give_up`): the protocols take it as dead
    /// for ever, though it may talk again in a fresh session.
    pub given_up_while_up: u64,
}

/// The dataflow application of one run: makes each site's application,
/// all sharing the run's books.
///
/// ```
/// use std::time::Duration;
/// use sitenet_sim::{Dataflow, Faults, Sim, SimConfig, Verdict};
///
/// let cfg = SimConfig {
///     sites: 6,
///     seed: 1,
///     duration: Duration::from_secs(10),
///     faults: Faults::Light,
///     ..SimConfig::default()
/// };
/// let dataflow = Dataflow::new();
/// let report = Sim::with_app(cfg, dataflow.factory()).run();
/// assert_eq!(report.verdict, Verdict::Ok, "{report:?}");
/// assert!(dataflow.stats().exchanges > 0);
/// ```
#[derive(Clone, Default)]
pub struct Dataflow {
    books: Rc<RefCell<Books>>,
}

impl Dataflow {
    /// A run's application, with empty books.
    pub fn new() -> Dataflow {
        Dataflow::default()
    }

    /// Makes each site's application (every incarnation's, sharing the
    /// books of this run).
    pub fn factory(&self) -> AppFactory {
        self.factory_wrapped(|app| app)
    }

    /// [`factory`](Self::factory), each site's application handed to
    /// `wrap` first: a test wraps it to break what it sees or does, and
    /// shows that a checker catches it.
    pub fn factory_wrapped(
        &self,
        mut wrap: impl FnMut(Box<dyn Application>) -> Box<dyn Application> + 'static,
    ) -> AppFactory {
        let books = self.books.clone();
        Box::new(move |me| wrap(Box::new(DataflowSite::new(me, books.clone()))))
    }

    /// What the run's sites did so far, summed.
    pub fn stats(&self) -> DataflowStats {
        self.books.borrow().stats.clone()
    }
}

impl crate::Sim {
    /// A simulation of `cfg` whose sites run the dataflow protocols
    /// ([`Dataflow`]).
    ///
    /// # Panics
    ///
    /// As [`with_app`](Self::with_app).
    pub fn dataflow(cfg: crate::SimConfig) -> crate::Sim {
        crate::Sim::with_app(cfg, Dataflow::new().factory())
    }
}

/// An operation a site's workload started.
#[derive(Debug, Clone)]
enum Op {
    Wait {
        var: EntityId,
    },
    Bind {
        var: EntityId,
        bytes: Bytes,
    },
    Send,
    Exchange {
        cell: EntityId,
    },
    /// The port's home reads its stream: a wait on the stream's next
    /// variable.
    Read {
        port: EntityId,
        var: EntityId,
    },
}

/// One site's application: its [`Site`] machine and its workload.
struct DataflowSite {
    me: SiteId,
    site: Site,
    books: Rc<RefCell<Books>>,
    /// The settle phase began: nothing new starts, nothing is kept.
    settling: bool,
    next_op: u64,
    /// Makes every value written unique.
    counter: u64,
    /// The workload's handles (one entry per handle).
    held: Vec<EntityId>,
    /// Variables made here (not streams), bound in the settle phase.
    made_vars: Vec<EntityId>,
    ops: BTreeMap<OpId, Op>,
    /// Each port made here: the operation reading its stream.
    readers: BTreeMap<EntityId, OpId>,
    /// The last item sent per port.
    sent: BTreeMap<EntityId, u64>,
    /// Every site heard of.
    known: BTreeSet<SiteId>,
    /// Sites the machine knows failed for good.
    failed: BTreeSet<SiteId>,
    /// When each site was last probed.
    probed: BTreeMap<SiteId, Duration>,
    /// When this site's last audit round ran.
    audited: Duration,
    /// The passes received, by sender and number.
    passes: BTreeSet<(SiteId, u64)>,
    /// Every entity made elsewhere this site heard of (for the checks'
    /// reports).
    seen: BTreeSet<EntityId>,
}

fn mode(ctx: &mut AppCtx<'_>) -> FailMode {
    if ctx.rng.gen_ratio(1, 4) {
        FailMode::Fail
    } else {
        FailMode::Wait
    }
}

/// A port item's bytes: its sender and number.
fn item(sender: SiteId, seq: u64) -> String {
    format!("item:{:x}:{seq}", sender.0)
}

fn parse_item(bytes: &[u8]) -> Option<(SiteId, u64)> {
    let s = std::str::from_utf8(bytes).ok()?;
    let mut parts = s.split(':');
    if parts.next()? != "item" {
        return None;
    }
    let sender = u128::from_str_radix(parts.next()?, 16).ok()?;
    let seq = parts.next()?.parse().ok()?;
    Some((SiteId(sender), seq))
}

/// A protocol message's name, for the checks' reports.
fn wire_kind(w: &Wire) -> &'static str {
    match w {
        Wire::Dirty { .. } => "Dirty",
        Wire::DirtyAck { .. } => "DirtyAck",
        Wire::Clean { .. } => "Clean",
        Wire::Release { .. } => "Release",
        Wire::Gone { .. } => "Gone",
        Wire::Audit { .. } => "Audit",
        Wire::Forgotten { .. } => "Forgotten",
        Wire::Register { .. } => "Register",
        Wire::Bind { .. } => "Bind",
        Wire::BindAck { .. } => "BindAck",
        Wire::Bound { .. } => "Bound",
        Wire::PortSend { .. } => "PortSend",
        Wire::PortAck { .. } => "PortAck",
        Wire::Exchange { .. } => "Exchange",
        Wire::Exchanged { .. } => "Exchanged",
        Wire::Get { .. } => "Get",
        Wire::Forward { .. } => "Forward",
        Wire::Put { .. } => "Put",
        Wire::Got { .. } => "Got",
        Wire::Return { .. } => "Return",
        Wire::ReturnAck { .. } => "ReturnAck",
        Wire::Lost { .. } => "Lost",
        Wire::MaybeLost { .. } => "MaybeLost",
    }
}

/// The value every "equal" bind of `var` uses.
fn equal_value(var: EntityId) -> Bytes {
    Bytes::from(format!("equal:{:x}:{}", var.home.0, var.serial))
}

impl DataflowSite {
    fn new(me: SiteId, books: Rc<RefCell<Books>>) -> DataflowSite {
        DataflowSite {
            me,
            site: Site::new(me),
            books,
            settling: false,
            next_op: 0,
            counter: 0,
            held: Vec::new(),
            made_vars: Vec::new(),
            ops: BTreeMap::new(),
            readers: BTreeMap::new(),
            sent: BTreeMap::new(),
            known: BTreeSet::new(),
            failed: BTreeSet::new(),
            probed: BTreeMap::new(),
            audited: Duration::ZERO,
            passes: BTreeSet::new(),
            seen: BTreeSet::new(),
        }
    }

    fn op(&mut self, op: Op) -> OpId {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.ops.insert(id, op);
        id
    }

    fn unique(&mut self, what: &str) -> Bytes {
        self.counter += 1;
        Bytes::from(format!("{what}:{:x}:{}", self.me.0, self.counter))
    }

    /// A value of `bytes`, naming one of the held entities now and then:
    /// for a value stored in entity `into`, only one made before it, so
    /// that no entity ever holds itself through values (reference
    /// counting collects no cycle).
    fn value(&mut self, ctx: &mut AppCtx<'_>, bytes: Bytes, into: Option<EntityId>) -> Value {
        let books = self.books.borrow();
        let bound = into.map_or(u64::MAX, |e| books.rank(e));
        let older: Vec<EntityId> = self
            .held
            .iter()
            .copied()
            .filter(|e| books.rank(*e) < bound)
            .collect();
        drop(books);
        let refs = match older.len() {
            0 => Vec::new(),
            n if ctx.rng.gen_ratio(1, 4) => vec![older[ctx.rng.gen_range(0..n)]],
            _ => Vec::new(),
        };
        self.site.make_value(bytes, refs)
    }

    /// Books entity `e`, just made, as the newest of the run.
    fn made(&mut self, e: EntityId) {
        let mut books = self.books.borrow_mut();
        let rank = books.ranks.len() as u64;
        books.ranks.insert(e, rank);
        books.stats.entities_made += 1;
    }

    /// A held entity of one of `kinds`, at random.
    fn pick(&self, ctx: &mut AppCtx<'_>, kinds: &[Kind]) -> Option<EntityId> {
        let of: Vec<EntityId> = self
            .held
            .iter()
            .copied()
            .filter(|e| kinds.contains(&e.kind))
            .collect();
        (!of.is_empty()).then(|| of[ctx.rng.gen_range(0..of.len())])
    }

    fn busy(&self) -> bool {
        self.ops.len() - self.readers.len() >= MAX_OPS
    }

    /// One act of the workload.
    fn act(&mut self, ctx: &mut AppCtx<'_>) {
        let roll = ctx.rng.gen_range(0..100);
        tracing::trace!(site = %self.me, now = ?ctx.now, roll, held = ?self.held, "dataflow act");
        let full = self.held.len() >= MAX_HELD;
        match roll {
            0..=7 if !full => {
                let by_need = ctx.rng.gen_ratio(1, 4);
                let v = self.site.new_var(by_need);
                self.made(v);
                self.held.push(v);
                self.made_vars.push(v);
            }
            8..=11 if !full => {
                let (port, stream) = self.site.new_port();
                self.made(port);
                self.held.push(port);
                let op = self.op(Op::Read { port, var: stream });
                self.readers.insert(port, op);
                self.site.wait(op, stream, FailMode::Wait);
                // The reading holds the stream from here on.
                self.site.release(stream);
                self.site.settle_now();
            }
            12..=17 if !full => {
                let mobile = ctx.rng.gen_bool(0.5);
                let bytes = self.unique("init");
                let init = self.value(ctx, bytes.clone(), None);
                let cell = self.site.new_cell(mobile, init);
                self.made(cell);
                let mut books = self.books.borrow_mut();
                books.cells.entry(cell).or_default().written.insert(bytes);
                drop(books);
                self.held.push(cell);
            }
            18..=34 => {
                let (Some(e), Some(to)) = (self.pick(ctx, &ALL), ctx.random_peer()) else {
                    return;
                };
                self.site.lend(e, to);
                self.site.settle_now();
                // The lend's message leaves first.
                self.pump(ctx);
                self.known.insert(to);
                self.counter += 1;
                let pass = Envelope::Pass {
                    entity: e,
                    number: self.counter,
                }
                .encode();
                self.books
                    .borrow_mut()
                    .carried(self.me, to, &pass, &[e], "Pass");
                ctx.send(to, PRIORITY, pass);
                self.books.borrow_mut().stats.passes += 1;
            }
            35..=49 if !self.busy() => {
                let Some(var) = self.pick(ctx, &[Kind::Var]) else {
                    return;
                };
                let (bytes, value) = if ctx.rng.gen_ratio(1, 3) {
                    let b = equal_value(var);
                    (b.clone(), self.site.make_value(b, Vec::new()))
                } else {
                    let b = self.unique("bind");
                    (b.clone(), self.value(ctx, b, Some(var)))
                };
                let op = self.op(Op::Bind { var, bytes });
                let m = mode(ctx);
                self.site.bind(op, var, value, m);
            }
            50..=59 if !self.busy() => {
                let Some(var) = self.pick(ctx, &[Kind::Var]) else {
                    return;
                };
                let op = self.op(Op::Wait { var });
                let m = mode(ctx);
                self.site.wait(op, var, m);
            }
            60..=74 if !self.busy() => {
                let Some(port) = self.pick(ctx, &[Kind::Port]) else {
                    return;
                };
                let seq = self.sent.entry(port).or_insert(0);
                *seq += 1;
                let bytes = Bytes::from(item(self.me, *seq));
                // An item is read and let go: it may name any entity.
                let value = self.value(ctx, bytes, None);
                // Every send waits out a temporary failure: one refused
                // for it would leave a gap in the sender's items.
                let op = ctx.rng.gen_bool(0.5).then(|| self.op(Op::Send));
                self.site.send(op, port, value, FailMode::Wait);
                self.books.borrow_mut().stats.port_sends += 1;
            }
            75..=87 if !self.busy() => {
                let Some(cell) = self.pick(ctx, &[Kind::MobileCell, Kind::StationaryCell]) else {
                    return;
                };
                let bytes = self.unique("exchange");
                let value = self.value(ctx, bytes.clone(), Some(cell));
                self.books
                    .borrow_mut()
                    .cells
                    .entry(cell)
                    .or_default()
                    .written
                    .insert(bytes);
                let op = self.op(Op::Exchange { cell });
                let m = mode(ctx);
                self.site.exchange(op, cell, value, m);
            }
            88..=99 if !self.held.is_empty() => {
                let k = ctx.rng.gen_range(0..self.held.len());
                let e = self.held.swap_remove(k);
                self.site.release(e);
                self.site.settle_now();
            }
            _ => {}
        }
    }

    /// Carries out everything the machine asked for, in order.
    fn pump(&mut self, ctx: &mut AppCtx<'_>) {
        while let Some(a) = self.site.poll_action() {
            tracing::trace!(site = %self.me, now = ?ctx.now, action = ?a, "dataflow action");
            match a {
                Action::Send { to, msg } => {
                    self.known.insert(to);
                    // What it carries copies of, or counts copies of.
                    let refs = match &msg {
                        Wire::Dirty { entity, .. }
                        | Wire::Clean { entity }
                        | Wire::Release { entity } => vec![*entity],
                        m => m.value().map(|v| v.refs.clone()).unwrap_or_default(),
                    };
                    let what = wire_kind(&msg);
                    let body = Envelope::Wire(msg).encode();
                    self.books
                        .borrow_mut()
                        .carried(self.me, to, &body, &refs, what);
                    ctx.send(to, PRIORITY, body);
                }
                Action::Done { op, outcome } => self.done(ctx, op, outcome),
                Action::Need { var } => {
                    // The producer: binds it here, at its home.
                    let bytes = self.unique("needed");
                    let value = self.site.make_value(bytes.clone(), Vec::new());
                    let op = self.op(Op::Bind { var, bytes });
                    self.site.bind(op, var, value, FailMode::Wait);
                }
                Action::Reclaimed { entity } => {
                    self.books.borrow_mut().stats.reclaimed += 1;
                    if let Some(&read) = self.readers.get(&entity) {
                        // No site refers to the port any more: nothing
                        // more can come; the stream ends.
                        let Some(Op::Read { var, .. }) = self.ops.get(&read).cloned() else {
                            panic!("{}: port {entity:?}'s reader is not reading", self.me);
                        };
                        let end = Bytes::from_static(END_OF_STREAM);
                        let op = self.op(Op::Bind {
                            var,
                            bytes: end.clone(),
                        });
                        let value = self.site.make_value(end, Vec::new());
                        self.site.bind(op, var, value, FailMode::Wait);
                    }
                }
                Action::HomeUnused { .. } => {}
            }
        }
    }

    /// Keeps (in the fault phase, now and then) a handle on the entities
    /// of `keep` (some of those `v` names), then gives back the value's
    /// own.
    fn take_value(&mut self, ctx: &mut AppCtx<'_>, v: &Value, keep: &[EntityId]) {
        if !self.settling {
            for &r in keep {
                if self.held.len() < MAX_HELD && ctx.rng.gen_bool(0.5) {
                    self.site.acquire(r);
                    self.held.push(r);
                }
            }
        }
        self.site.release_value(v);
        self.site.settle_now();
    }

    fn done(&mut self, ctx: &mut AppCtx<'_>, id: OpId, outcome: Result<Answer, OpError>) {
        let me = self.me;
        let Some(op) = self.ops.remove(&id) else {
            panic!("{me}: operation {id:?} ended, but none such is under way: {outcome:?}");
        };
        if let Err(e) = &outcome {
            let mut books = self.books.borrow_mut();
            match e {
                OpError::TempFail => books.stats.temp_fails += 1,
                OpError::PermFail => books.stats.perm_fails += 1,
                OpError::Gone => books.stats.gone += 1,
                OpError::Conflict => books.stats.conflicts += 1,
                OpError::WrongKind | OpError::Unsendable => {}
            }
        }
        match (op, outcome) {
            (Op::Wait { var }, Ok(Answer::Value(v))) => {
                let mut books = self.books.borrow_mut();
                books.saw_bound(me, var, &v.bytes, "waited and saw");
                books.stats.waits_bound += 1;
                drop(books);
                self.take_value(ctx, &v, &v.refs);
            }
            (Op::Bind { var, bytes }, Ok(_)) => {
                let mut books = self.books.borrow_mut();
                books.saw_bound(me, var, &bytes, "bound");
                books.stats.binds_won += 1;
            }
            (Op::Exchange { cell }, Ok(Answer::Value(v))) => {
                let mut books = self.books.borrow_mut();
                books.answered(me, cell, &v.bytes);
                books.stats.exchanges += 1;
                drop(books);
                self.take_value(ctx, &v, &v.refs);
            }
            (Op::Read { port, var }, Ok(Answer::Value(cell))) => {
                self.books
                    .borrow_mut()
                    .saw_bound(me, var, &cell.bytes, "read");
                match cell.split_stream_cell() {
                    Some((it, rest)) => {
                        let Some((sender, seq)) = parse_item(&it.bytes) else {
                            panic!("{me}: {port:?}'s stream holds {it:?}, no item");
                        };
                        let mut books = self.books.borrow_mut();
                        books.read(port, sender, seq, ctx.sites);
                        books.stats.items_read += 1;
                        drop(books);
                        let next = self.op(Op::Read { port, var: rest });
                        self.readers.insert(port, next);
                        self.site.wait(next, rest, FailMode::Wait);
                        // Never the stream's rest: only its home binds it.
                        self.take_value(ctx, &cell, &it.refs);
                    }
                    None => {
                        if cell.bytes != END_OF_STREAM {
                            panic!("{me}: {port:?}'s stream ends with {cell:?}");
                        }
                        self.readers.remove(&port);
                        self.site.release_value(&cell);
                        self.site.settle_now();
                    }
                }
            }
            (Op::Read { port, .. }, Err(e)) => {
                panic!("{me}: reading {port:?}'s stream at its home failed: {e}");
            }
            (Op::Wait { var }, Ok(Answer::Done)) => {
                panic!("{me}: a wait on {var:?} ended without a value");
            }
            (Op::Exchange { cell }, Ok(Answer::Done)) => {
                panic!("{me}: an exchange on {cell:?} ended without the old content");
            }
            (Op::Wait { var } | Op::Bind { var, .. }, Err(OpError::WrongKind)) => {
                panic!("{me}: {var:?} is a variable, yet refused as the wrong kind");
            }
            _ => {}
        }
    }

    /// In the settle phase: probes every site heard of that is no longer
    /// up and not known failed, while the machine holds anything.
    fn probe(&mut self, ctx: &mut AppCtx<'_>) {
        let s = &self.site;
        if s.homes() + s.proxies() + s.pending_ops() == 0 {
            return;
        }
        let now = ctx.now;
        let due: Vec<SiteId> = self
            .known
            .iter()
            .copied()
            .filter(|k| *k != self.me && !self.failed.contains(k) && !ctx.sites.contains(k))
            .filter(|k| self.probed.get(k).is_none_or(|t| now >= *t + PROBE_EVERY))
            .collect();
        for k in due {
            self.probed.insert(k, now);
            ctx.send(k, PRIORITY, Envelope::Probe.encode());
            self.books.borrow_mut().stats.probes += 1;
        }
    }

    /// An audit round, once per [`AUDIT_EVERY`].
    fn audit(&mut self, ctx: &mut AppCtx<'_>) {
        if ctx.now >= self.audited + AUDIT_EVERY {
            self.audited = ctx.now;
            self.site.audit();
            self.pump(ctx);
        }
    }

    /// What a message tells of other sites.
    fn hear(&mut self, w: &Wire) {
        self.known.insert(w.entity().home);
        self.seen.insert(w.entity());
        if let Some(v) = w.value() {
            self.seen.extend(v.refs.iter().copied());
        }
        if let Wire::Forward { to, .. } = w {
            self.known.insert(*to);
        }
        if let Some(v) = w.value() {
            self.known.extend(v.refs.iter().map(|r| r.home));
        }
    }
}

const ALL: [Kind; 4] = [
    Kind::Var,
    Kind::Port,
    Kind::MobileCell,
    Kind::StationaryCell,
];

impl Application for DataflowSite {
    fn start(&mut self, _ctx: &mut AppCtx<'_>) {
        self.books.borrow_mut().stats.sites_started += 1;
    }

    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        for _ in 0..ctx.rng.gen_range(1..=3) {
            self.act(ctx);
            self.pump(ctx);
        }
        self.audit(ctx);
    }

    fn settle_tick(&mut self, ctx: &mut AppCtx<'_>) {
        if !self.settling {
            self.settling = true;
            // Every variable made here gets a binding, so that every wait
            // on it ends; then every handle goes.
            for var in std::mem::take(&mut self.made_vars) {
                if self.site.books(var).is_none() {
                    continue;
                }
                let bytes = equal_value(var);
                let value = self.site.make_value(bytes.clone(), Vec::new());
                let op = self.op(Op::Bind { var, bytes });
                self.site.bind(op, var, value, FailMode::Wait);
                self.pump(ctx);
            }
            for e in std::mem::take(&mut self.held) {
                self.site.release(e);
            }
            self.site.settle_now();
            self.pump(ctx);
        }
        self.probe(ctx);
        self.audit(ctx);
    }

    fn received(&mut self, ctx: &mut AppCtx<'_>, from: SiteId, body: &[u8]) {
        self.known.insert(from);
        let envelope = match Envelope::decode(body) {
            Ok(e) => e,
            Err(e) => panic!("{} cannot read a message from {from}: {e}", self.me),
        };
        tracing::trace!(site = %self.me, now = ?ctx.now, %from, ?envelope, "dataflow received");
        self.books.borrow_mut().landed(from, self.me, body);
        match envelope {
            Envelope::Wire(w) => {
                self.hear(&w);
                self.site.received(from, w);
            }
            Envelope::Pass { entity, number } => {
                if !self.passes.insert((from, number)) {
                    // Sent again after a hand-back, yet it had arrived.
                    return;
                }
                self.known.insert(entity.home);
                self.seen.insert(entity);
                self.site.receive(entity, from);
                self.site.acquire(entity);
                if self.settling || self.held.len() >= MAX_HELD {
                    self.site.release(entity);
                } else {
                    self.held.push(entity);
                }
                self.site.settle_now();
            }
            Envelope::Probe => {}
        }
        self.pump(ctx);
    }

    fn handed_back(&mut self, ctx: &mut AppCtx<'_>, to: SiteId, body: &[u8], maybe: bool) {
        let envelope = match Envelope::decode(body) {
            Ok(e) => e,
            Err(e) => panic!("{} got back a message it cannot read: {e}", self.me),
        };
        tracing::trace!(site = %self.me, now = ?ctx.now, %to, maybe, ?envelope, "dataflow handed back");
        let names = match &envelope {
            Envelope::Wire(w) => {
                let mut n = vec![w.entity()];
                n.extend(w.value().map(|v| v.refs.clone()).unwrap_or_default());
                n
            }
            Envelope::Pass { entity, .. } => vec![*entity],
            Envelope::Probe => Vec::new(),
        };
        let mut books = self.books.borrow_mut();
        books.landed(self.me, to, body);
        if !names.is_empty() && books.handed_back.len() < 10_000 {
            books.handed_back.push(HandedBack {
                at: ctx.now,
                from: self.me,
                to,
                maybe,
                names,
                what: format!("{envelope:?}"),
            });
        }
        drop(books);
        match envelope {
            Envelope::Wire(w) => {
                if maybe && ctx.sites.contains(&to) {
                    // The site is up, and may have had it (it forgot this
                    // site's session). (The directory only counts it: the
                    // machine is not told.)
                    let mut books = self.books.borrow_mut();
                    books.stats.maybe_delivered_to_live += 1;
                    // A port item lost this way leaves a gap its sender
                    // was told of.
                    if let Wire::PortSend { port, value, .. } = &w {
                        if let Some((sender, seq)) = parse_item(&value.bytes) {
                            books.maybe_lost.insert((*port, sender, seq));
                        }
                    }
                }
                self.site.undelivered(to, w, maybe);
                self.pump(ctx);
            }
            // A reference that may not have arrived: sent again (the
            // receiver takes it once). A site that failed for good hands
            // the copy back at once, as never sent (its failure is told
            // after what it held is handed back, so it may not be known
            // yet): nothing then, its count goes at the home once the home
            // learns the failure.
            Envelope::Pass { entity, .. } if maybe && !self.failed.contains(&to) => {
                let mut books = self.books.borrow_mut();
                books.carried(self.me, to, body, &[entity], "Pass");
                books.stats.passes_again += 1;
                drop(books);
                ctx.send(to, PRIORITY, body.to_vec());
            }
            // A copy that never left: its pin for `to` goes.
            Envelope::Pass { entity, .. } if !maybe => {
                self.site.unlend(entity, to);
                self.site.settle_now();
                self.pump(ctx);
            }
            Envelope::Pass { .. } | Envelope::Probe => {}
        }
    }

    fn site_fault(&mut self, ctx: &mut AppCtx<'_>, site: SiteId, state: FaultState) {
        tracing::trace!(site = %self.me, now = ?ctx.now, peer = %site, ?state, "dataflow fault");
        if state == FaultState::PermFailed {
            self.failed.insert(site);
            if ctx.sites.contains(&site) {
                let mut books = self.books.borrow_mut();
                books.stats.given_up_while_up += 1;
                books.given_up.push((ctx.now, self.me, site));
            }
        }
        self.site.site_fault(site, state);
        self.pump(ctx);
    }

    fn check(&self, ctx: &AppCtx<'_>) -> Result<(), String> {
        let books = self.books.borrow();
        let why = |e: EntityId| books.explain(e, ctx.sites);
        let mut wrong = Vec::new();
        if !self.ops.is_empty() || self.site.pending_ops() > 0 {
            let ops: Vec<String> = self
                .ops
                .iter()
                .take(8)
                .map(|(id, op)| {
                    let e = match op {
                        Op::Wait { var } | Op::Bind { var, .. } => *var,
                        // A stream ends once its port is collected.
                        Op::Read { port, .. } => *port,
                        Op::Exchange { cell } => *cell,
                        Op::Send => return format!("{id:?} {op:?}"),
                    };
                    format!("{id:?} {op:?}{}", why(e))
                })
                .collect();
            wrong.push(format!(
                "{} operations never ended ({} in the machine): {}",
                self.ops.len(),
                self.site.pending_ops(),
                ops.join(", ")
            ));
        }
        if self.site.homes() > 0 || self.site.proxies() > 0 {
            let homes: Vec<String> = self
                .site
                .home_ids()
                .take(8)
                .map(|e| format!("{e:?} {:?}{}", self.site.books(e), why(e)))
                .collect();
            let proxies: Vec<String> = self
                .seen
                .iter()
                .filter(|e| e.home != self.me)
                .filter_map(|&e| self.site.books(e).map(|b| (e, b)))
                .take(8)
                .map(|(e, b)| format!("{e:?} {b:?}{}", why(e)))
                .collect();
            wrong.push(format!(
                "entities kept after their last reference: {} homes (as (handles here, \
                 holding sites)): {}; {} proxies: {}",
                self.site.homes(),
                homes.join(", "),
                self.site.proxies(),
                proxies.join(", ")
            ));
        }
        drop(books);
        // One site's kept entity may be held by another's (a value in
        // it names it): every live site's findings are gathered, and the
        // last site checked (the simulator checks them in the
        // directory's order) reports them all, so that the report shows
        // the root as well as what it keeps.
        let mut books = self.books.borrow_mut();
        if !wrong.is_empty() {
            books
                .failed_checks
                .push(format!("at {}: {}", self.me, wrong.join("; and ")));
        }
        if ctx.sites.last() != Some(&self.me) || books.failed_checks.is_empty() {
            return Ok(());
        }
        let n = books.failed_checks.len();
        let shown: Vec<&str> = books
            .failed_checks
            .iter()
            .take(4)
            .map(|s| s.as_str())
            .collect();
        Err(format!(
            "{n} sites broke the dataflow claims once the run settled: {}{}",
            shown.join(" || "),
            if n > 4 { " || …" } else { "" }
        ))
    }
}
