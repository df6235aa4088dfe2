//! One site's side of every dataflow protocol: a sans-IO state machine.
//!
//! The driver calls it with what the language does (make an entity, wait,
//! bind, send, exchange, hold or drop a reference), with what arrives from
//! other sites ([`Site::received`]) and with what sitenet learns of them
//! ([`Site::site_fault`]), then drains [`Site::poll_action`]: messages to
//! send, operations ended, producers to run, entities collected. It reads
//! no clock and draws no random number; the simulator and the sitenet
//! driver run the same code.
//!
//! The entities a site made live in `homes` (their managers); the ones
//! made elsewhere that it refers to live in `proxies`. Both count the
//! handles held here: the driver's typed references, the values held here
//! that name the entity, and the operations under way on it.

mod cell;
mod gc;
mod port;
mod var;

use std::collections::{HashMap, HashSet, VecDeque};

use sitenet_protocols::{FaultState, SiteId};

use crate::entity::{EntityId, Kind, OpId, Value};
use crate::outcome::{Action, Answer, FailMode, OpError};
use crate::wire::Wire;

use cell::{Manager, MobilePart};
use var::{VarHome, VarProxy};

/// The most sites a home lists as holding one of its entities, and the
/// most sites one entry pins copies for. A `Dirty` past it is answered
/// `Gone` (logged): a peer cannot grow a home's books without bound.
pub const MAX_HOLDERS: usize = 1 << 16;

/// The most `Audit` questions one round ([`Site::audit`]) sends: a home
/// with more listings spreads them over rounds.
pub const MAX_AUDITS: usize = 1 << 16;

/// An entity this site made.
#[derive(Debug)]
struct Home {
    kind: Kind,
    /// Handles held on this site.
    handles: u64,
    /// Sites listed as holding a proxy (`Dirty`, until `Clean`).
    holders: HashSet<SiteId>,
    /// Copies sent to each site and not released yet.
    pins: HashMap<SiteId, u64>,
    state: HomeState,
}

#[derive(Debug)]
enum HomeState {
    Var(VarHome),
    Port { tail: EntityId },
    Stationary { content: Value },
    Mobile { manager: Manager, part: MobilePart },
}

/// An entity made elsewhere, referred to here.
#[derive(Debug)]
struct Proxy {
    handles: u64,
    /// Whether the home lists this site.
    listed: Listing,
    /// Senders of copies to release once the home lists this site.
    releases: Vec<SiteId>,
    /// Copies sent to each site and not released yet.
    pins: HashMap<SiteId, u64>,
    /// The home answered `Gone`: every operation fails.
    gone: bool,
    state: ProxyState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// Not listed (no `Dirty` sent, or `Clean` sent).
    No,
    /// `Dirty` sent, no `DirtyAck` yet.
    Pending,
    /// Listed.
    Yes,
}

#[derive(Debug)]
enum ProxyState {
    Var(VarProxy),
    Port,
    Stationary,
    Mobile(MobilePart),
}

/// An operation under way: it holds a handle on its entity until it ends.
#[derive(Debug, Clone, Copy)]
struct Pending {
    entity: EntityId,
    mode: FailMode,
}

/// One site's dataflow protocols. See the module documentation.
#[derive(Debug)]
pub struct Site {
    me: SiteId,
    next_serial: u64,
    homes: HashMap<u64, Home>,
    proxies: HashMap<EntityId, Proxy>,
    /// Proxies per home site, to tell the driver when none is left.
    per_home: HashMap<SiteId, u64>,
    ops: HashMap<OpId, Pending>,
    /// Sites known not to be `Ok`.
    faults: HashMap<SiteId, FaultState>,
    actions: VecDeque<Action>,
    /// Messages this site sends itself (a home's own mobile-cell part and
    /// its manager talk through it), handled before an input returns.
    local: VecDeque<Wire>,
    /// Sites heard from since the last audit round.
    heard: HashSet<SiteId>,
    /// Where the next audit round starts (a serial), when a round stops at
    /// its budget.
    audit_from: u64,
    /// Entities whose handles reached zero, to look at once the current
    /// step is done (collection cascades through values without
    /// recursion).
    unheld: Vec<EntityId>,
}

impl Site {
    /// The protocols of site `me`.
    pub fn new(me: SiteId) -> Site {
        Site {
            me,
            next_serial: 1,
            homes: HashMap::new(),
            proxies: HashMap::new(),
            per_home: HashMap::new(),
            ops: HashMap::new(),
            faults: HashMap::new(),
            actions: VecDeque::new(),
            local: VecDeque::new(),
            heard: HashSet::new(),
            audit_from: 0,
            unheld: Vec::new(),
        }
    }

    /// This site's id.
    pub fn id(&self) -> SiteId {
        self.me
    }

    /// The next thing the driver must do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Every action pending, in order.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.actions.drain(..)
    }

    /// Entities this site made that it still manages.
    pub fn homes(&self) -> usize {
        self.homes.len()
    }

    /// Entities made elsewhere that this site still refers to.
    pub fn proxies(&self) -> usize {
        self.proxies.len()
    }

    /// Operations under way.
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// The ids of the entities this site manages (for checkers).
    pub fn home_ids(&self) -> impl Iterator<Item = EntityId> + '_ {
        let me = self.me;
        self.homes.iter().map(move |(&serial, h)| EntityId {
            home: me,
            serial,
            kind: h.kind,
        })
    }

    /// The entry of `e` if this site made it (and `e` names its kind).
    fn home_mut(&mut self, e: EntityId) -> Option<&mut Home> {
        if e.home != self.me {
            return None;
        }
        self.homes.get_mut(&e.serial).filter(|h| h.kind == e.kind)
    }

    /// Handles held here on `e`, and (for an entity made here) the number
    /// of sites counted as holding it. For tests and checkers.
    pub fn books(&self, e: EntityId) -> Option<(u64, usize)> {
        if e.home == self.me {
            self.homes
                .get(&e.serial)
                .filter(|h| h.kind == e.kind)
                .map(|h| (h.handles, h.holders.len()))
        } else {
            self.proxies.get(&e).map(|p| (p.handles, 0))
        }
    }

    // ---- entities ----

    fn next_id(&mut self, kind: Kind) -> EntityId {
        let serial = self.next_serial;
        self.next_serial += 1;
        EntityId {
            home: self.me,
            serial,
            kind,
        }
    }

    fn add_home(&mut self, kind: Kind, state: HomeState, handles: u64) -> EntityId {
        let id = self.next_id(kind);
        self.homes.insert(
            id.serial,
            Home {
                kind,
                handles,
                holders: HashSet::new(),
                pins: HashMap::new(),
                state,
            },
        );
        id
    }

    /// A new dataflow variable, unbound, with one handle for the caller.
    /// A `by_need` variable's producer runs ([`Action::Need`]) when some
    /// site first waits for it.
    pub fn new_var(&mut self, by_need: bool) -> EntityId {
        self.add_home(Kind::Var, HomeState::Var(VarHome::new(by_need)), 1)
    }

    /// A new port and the stream it appends to (an unbound variable), one
    /// handle on each for the caller.
    pub fn new_port(&mut self) -> (EntityId, EntityId) {
        let stream = self.new_var(false);
        // The port holds the stream's tail.
        self.acquire(stream);
        let port = self.add_home(Kind::Port, HomeState::Port { tail: stream }, 1);
        (port, stream)
    }

    /// A new cell holding `init` (whose handles the cell takes over), one
    /// handle for the caller.
    pub fn new_cell(&mut self, mobile: bool, init: Value) -> EntityId {
        if mobile {
            let me = self.me;
            self.add_home(
                Kind::MobileCell,
                HomeState::Mobile {
                    manager: Manager::new(me),
                    part: MobilePart::holding(init),
                },
                1,
            )
        } else {
            self.add_home(
                Kind::StationaryCell,
                HomeState::Stationary { content: init },
                1,
            )
        }
    }

    /// A value with bytes `bytes` naming `refs`, holding a handle on each
    /// (the driver gives the value to an operation, which takes them).
    pub fn make_value(&mut self, bytes: impl Into<bytes::Bytes>, refs: Vec<EntityId>) -> Value {
        for &r in &refs {
            self.acquire(r);
        }
        Value {
            bytes: bytes.into(),
            refs,
        }
    }

    // ---- operations ----

    fn start(&mut self, op: OpId, entity: EntityId, mode: FailMode) {
        if self.ops.contains_key(&op) {
            // A driver bug: the number is in use. The earlier one ends.
            tracing::warn!(?op, "operation number reused; the earlier one fails");
            self.finish(op, Err(OpError::Gone));
        }
        self.acquire(entity);
        self.ops.insert(op, Pending { entity, mode });
    }

    /// Ends `op` if it is still under way (an answer that comes after a
    /// `TempFail` ended it is dropped, its value given back).
    fn finish(&mut self, op: OpId, outcome: Result<Answer, OpError>) {
        match self.ops.remove(&op) {
            Some(p) => {
                self.actions.push_back(Action::Done { op, outcome });
                self.release(p.entity);
            }
            None => {
                if let Ok(Answer::Value(v)) = outcome {
                    self.release_value(&v);
                }
            }
        }
    }

    /// Whether an operation on `e` must end now for its home's state:
    /// `Some(error)` to end it, `None` to go on.
    fn refused_by_fault(&self, e: EntityId, mode: FailMode) -> Option<OpError> {
        if e.home == self.me {
            return None;
        }
        if self.proxies.get(&e).is_some_and(|p| p.gone) {
            return Some(OpError::Gone);
        }
        match self.faults.get(&e.home) {
            Some(FaultState::PermFailed) => Some(OpError::PermFail),
            Some(FaultState::TempFailed) if mode == FailMode::Fail => Some(OpError::TempFail),
            _ => None,
        }
    }

    fn wrong_kind(&mut self, op: OpId, e: EntityId, want: &[Kind]) -> bool {
        if want.contains(&e.kind) {
            return false;
        }
        self.start(op, e, FailMode::Wait);
        self.finish(op, Err(OpError::WrongKind));
        self.settle();
        true
    }

    /// Waits for variable `var`'s binding: `Done` with its value (a
    /// by-need variable's producer is triggered).
    pub fn wait(&mut self, op: OpId, var: EntityId, mode: FailMode) {
        if self.wrong_kind(op, var, &[Kind::Var]) {
            return;
        }
        self.start(op, var, mode);
        self.var_wait(op, var, mode);
        self.settle();
    }

    /// Binds variable `var` to `value` (the first bind wins; binding to
    /// an equal value again succeeds, to a different one fails with
    /// [`OpError::Conflict`]).
    pub fn bind(&mut self, op: OpId, var: EntityId, value: Value, mode: FailMode) {
        if self.wrong_kind(op, var, &[Kind::Var]) {
            self.release_value(&value);
            self.settle();
            return;
        }
        self.start(op, var, mode);
        self.var_bind(op, var, value, mode);
        self.settle();
    }

    /// Sends `value` to port `port`: appended to its stream at the port's
    /// home, after every earlier send from this site. With `op`, `Done`
    /// once appended.
    pub fn send(&mut self, op: Option<OpId>, port: EntityId, value: Value, mode: FailMode) {
        if port.kind != Kind::Port {
            if let Some(op) = op {
                self.wrong_kind(op, port, &[Kind::Port]);
            }
            self.release_value(&value);
            self.settle();
            return;
        }
        if let Some(op) = op {
            self.start(op, port, mode);
        }
        self.port_send(op, port, value, mode);
        self.settle();
    }

    /// Puts `new` in cell `cell` and answers its old content, atomically.
    pub fn exchange(&mut self, op: OpId, cell: EntityId, new: Value, mode: FailMode) {
        if self.wrong_kind(op, cell, &[Kind::MobileCell, Kind::StationaryCell]) {
            self.release_value(&new);
            self.settle();
            return;
        }
        self.start(op, cell, mode);
        self.cell_exchange(op, cell, new, mode);
        self.settle();
    }

    // ---- inputs from other sites ----

    /// A message from site `from`. A site this one took for failed for
    /// good is answered `Forgotten`, and what it says is not taken.
    pub fn received(&mut self, from: SiteId, msg: Wire) {
        if from == self.me {
            // A site's messages to itself never travel.
            return;
        }
        if !self.heard.contains(&from) && self.heard.len() < MAX_HOLDERS {
            self.heard.insert(from);
        }
        if self.is_dead(from) {
            // Taken for failed for good, yet it talks (sitenet gave it up
            // while it was up): nothing it says is taken, and it is told,
            // so that it keeps no books for this site either.
            if !matches!(msg, Wire::Forgotten { .. }) {
                self.post(
                    from,
                    Wire::Forgotten {
                        entity: msg.entity(),
                    },
                );
            }
            // A mobile cell's content refused so is lost: its manager must
            // know, or the chain waits for it for ever.
            if let Wire::Put { cell, .. } = msg {
                self.content_maybe_lost(cell);
                self.settle();
            }
            return;
        }
        if let Some(v) = msg.value() {
            self.receive_value(from, v);
        }
        self.dispatch(from, msg);
        self.settle();
    }

    /// A message to `to` that sitenet handed back: `maybe` if it may have
    /// arrived (sitenet cannot tell), else it never left. A message that
    /// never left gives back the copies it carried (their pins for `to`);
    /// a mobile cell's content that never left goes back to its manager,
    /// which passes it on (or declares it lost, if it is the manager and
    /// cannot reach `to`). A message that may have arrived keeps its
    /// copies pinned (`to` releases what it received, or fails for good);
    /// an operation it carried (`Bind`, `Exchange`, an acknowledged
    /// `PortSend`) ends with [`OpError::TempFail`] — it may have taken
    /// effect, and `to` may be up, having forgotten the session, so no
    /// answer may ever come — a `Register`, `Lost` or `MaybeLost` is sent
    /// again, and a mobile cell's content is declared lost if a message
    /// about it (`Put`, `Return`, `Get`, `Got`, `Forward`, `ReturnAck`)
    /// may be lost. A `Dirty` is sent again either way (listing twice is
    /// listing once).
    pub fn undelivered(&mut self, to: SiteId, msg: Wire, maybe: bool) {
        if to == self.me {
            return;
        }
        // A registration that may be lost is sent again (listing is
        // idempotent), unless the home failed for good.
        if let Wire::Dirty {
            entity,
            home_copies,
        } = msg
        {
            let pending = self
                .proxies
                .get(&entity)
                .is_some_and(|p| p.listed == Listing::Pending);
            if pending && !self.is_dead(to) {
                // A copy released twice would let the home go too soon: a
                // `Dirty` that may have arrived releases nothing again.
                let home_copies = if maybe { 0 } else { home_copies };
                self.post(
                    to,
                    Wire::Dirty {
                        entity,
                        home_copies,
                    },
                );
            }
            self.settle();
            return;
        }
        if maybe {
            // It may have arrived, or be lost with a session its peer
            // forgot while up: nothing else would end what waits on it.
            if let Some(op) = msg.op() {
                self.finish(op, Err(OpError::TempFail));
            }
            match msg {
                // A binder counts itself registered by its `Bind`.
                Wire::Register { var } | Wire::Bind { var, .. } => self.var_register_again(var),
                // Where a mobile cell's content is cannot be known now.
                Wire::Put { cell, .. }
                | Wire::Return { cell, .. }
                | Wire::Get { cell }
                | Wire::Got { cell }
                | Wire::Forward { cell, .. }
                | Wire::ReturnAck { cell } => self.content_maybe_lost(cell),
                // Saying it twice is saying it once.
                Wire::Lost { .. } | Wire::MaybeLost { .. } if !self.is_dead(to) => {
                    self.post(to, msg)
                }
                // A binding arrives once: one sent again is dropped if
                // the first came. The copies it names get their own holds.
                Wire::Bound { value, var } if !self.is_dead(to) => {
                    for &r in &value.refs {
                        self.acquire(r);
                    }
                    self.post(to, Wire::Bound { var, value });
                }
                _ => {}
            }
            self.settle();
            return;
        }
        if let Some(v) = msg.value() {
            for &r in &v.refs {
                self.unlend(r, to);
            }
        }
        if let Wire::Put { cell, content } = msg {
            // The value travelled with no holds: the part takes its own.
            for &r in &content.refs {
                self.acquire(r);
            }
            self.content_undelivered(cell, to, content);
        }
        self.settle();
    }

    /// A message to `to` can never reach it (larger than `to` accepts,
    /// or it cannot be encoded): it gives back what it carries, as one
    /// that never left ([`undelivered`](Site::undelivered)), and the
    /// operation it carried ends with [`OpError::Unsendable`].
    pub fn unsendable(&mut self, to: SiteId, msg: Wire) {
        let op = msg.op();
        // A `Dirty` is sent again by `undelivered`: never for one that
        // cannot be sent at all.
        if !matches!(msg, Wire::Dirty { .. }) {
            self.undelivered(to, msg, false);
        }
        if let Some(op) = op {
            self.finish(op, Err(OpError::Unsendable));
        }
        self.settle();
    }

    /// A copy of `e` meant for `to` never left (its message was handed
    /// back unsent): the pin for it goes.
    pub fn unlend(&mut self, e: EntityId, to: SiteId) {
        self.unpin(e, to);
    }

    /// What sitenet learned of site `site`: its operations fail by their
    /// mode, and a site failed for good holds nothing any more.
    pub fn site_fault(&mut self, site: SiteId, state: FaultState) {
        if site == self.me {
            return;
        }
        match state {
            FaultState::Ok => {
                if self.faults.get(&site) == Some(&FaultState::TempFailed) {
                    self.faults.remove(&site);
                }
            }
            FaultState::TempFailed => {
                if self.faults.get(&site) != Some(&FaultState::PermFailed) {
                    self.faults.insert(site, FaultState::TempFailed);
                }
                self.fail_ops(site, FailMode::Fail, OpError::TempFail);
            }
            FaultState::PermFailed => {
                self.faults.insert(site, FaultState::PermFailed);
                self.fail_ops(site, FailMode::Wait, OpError::PermFail);
                self.site_gone(site);
            }
        }
        self.settle();
    }

    fn fail_ops(&mut self, home: SiteId, at_least: FailMode, err: OpError) {
        let mut ended: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, p)| {
                p.entity.home == home && (at_least == FailMode::Wait || p.mode == FailMode::Fail)
            })
            .map(|(&op, _)| op)
            .collect();
        ended.sort();
        for op in ended {
            self.finish(op, Err(err));
        }
    }

    fn dispatch(&mut self, from: SiteId, msg: Wire) {
        match msg {
            Wire::Dirty {
                entity,
                home_copies,
            } => self.on_dirty(from, entity, home_copies),
            Wire::DirtyAck { entity } => self.on_dirty_ack(from, entity),
            Wire::Clean { entity } => self.on_clean(from, entity),
            Wire::Release { entity } => self.on_release(from, entity),
            Wire::Gone { entity } => self.on_gone(from, entity),
            Wire::Audit { entity } => self.on_audit(from, entity),
            Wire::Forgotten { .. } => self.on_forgotten(from),
            Wire::Register { var } => self.var_on_register(from, var),
            Wire::Bind { var, op, value } => self.var_on_bind(from, var, op, value),
            Wire::BindAck { var, op, refused } => {
                if from == var.home {
                    self.var_on_bind_ack(op, refused)
                }
            }
            Wire::Bound { var, value } => self.var_on_bound(from, var, value),
            Wire::PortSend { port, value, op } => self.port_on_send(from, port, value, op),
            Wire::PortAck { port, op, refused } => {
                if from == port.home {
                    let outcome = match refused {
                        None => Ok(Answer::Done),
                        Some(_) => Err(OpError::Gone),
                    };
                    self.finish(op, outcome);
                }
            }
            Wire::Exchange { cell, op, new } => self.stationary_on_exchange(from, cell, op, new),
            Wire::Exchanged { cell, op, old } => {
                if from == cell.home {
                    self.finish(op, old.map(Answer::Value).map_err(|_| OpError::Gone));
                } else if let Ok(v) = old {
                    self.release_value(&v);
                }
            }
            Wire::Get { cell } => self.manager_on_get(from, cell),
            Wire::Got { cell } => self.manager_on_got(from, cell),
            Wire::Return { cell, content } => self.manager_on_return(from, cell, content),
            Wire::Forward { cell, to } => {
                if from == cell.home {
                    self.part_on_forward(cell, to)
                }
            }
            Wire::Put { cell, content } => self.part_on_put(cell, content),
            Wire::ReturnAck { cell } => {
                if from == cell.home {
                    self.part_on_return_ack(cell)
                }
            }
            Wire::Lost { cell } => {
                if from == cell.home {
                    self.part_on_lost(cell)
                }
            }
            Wire::MaybeLost { cell } => self.manager_on_maybe_lost(from, cell),
        }
    }

    /// Sends `msg` to `to`: through the local queue when `to` is this
    /// site, else as an action. Each entity its value names is pinned for
    /// `to` first, and this site's holds on the value end (the pins keep
    /// the entities until `to` releases them).
    fn post(&mut self, to: SiteId, msg: Wire) {
        if to == self.me {
            // The value's holds travel with it.
            self.local.push_back(msg);
            return;
        }
        if let Some(v) = msg.value() {
            for &r in &v.refs {
                self.lend(r, to);
            }
            self.release_value(v);
        }
        self.actions.push_back(Action::Send { to, msg });
    }

    /// Runs what the current step left to do: local messages, then the
    /// entities whose handles ran out.
    fn settle(&mut self) {
        loop {
            if let Some(msg) = self.local.pop_front() {
                let me = self.me;
                self.dispatch(me, msg);
                continue;
            }
            if let Some(e) = self.unheld.pop() {
                self.collect(e);
                continue;
            }
            break;
        }
    }

    fn is_dead(&self, site: SiteId) -> bool {
        self.faults.get(&site) == Some(&FaultState::PermFailed)
    }
}

#[cfg(test)]
mod tests;
