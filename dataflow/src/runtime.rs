//! The dataflow layer of one node: the protocols' [`Site`] machine driven
//! over sitenet.
//!
//! Every protocol message is one sitenet message type ([`DfMsg`]) at one
//! priority, so two sites' messages stay in order (the protocols rely on
//! FIFO between two sites). The machine is behind one lock; what it asks
//! to send is queued to sitenet under that lock, in order (a site whose
//! output bound is full gets a backlog that a task drains in order), and
//! operations are completed, producers run and values decoded outside it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sitenet::{FaultState, Message, Node, NodeEvent, Priority, SendError, SiteId, SiteRef};
use sitenet_dataflow_protocols::{Action, Answer, EntityId, OpError, OpId, Site, Value, Wire};

use crate::error::DataflowError;

/// The priority of every protocol message: one priority keeps them in
/// order between two sites.
pub const DATAFLOW_PRIORITY: Priority = Priority::High;

/// A protocol message on the wire: the message, and references to the
/// sites it names that the receiver may have to reach (the homes of the
/// entities its value names, the next site of a mobile cell's chain); a
/// `SiteRef` travels as its site's descriptor.
#[derive(Serialize, Deserialize)]
pub(crate) struct DfMsg {
    wire: Wire,
    homes: Vec<SiteRef>,
}

impl Message for DfMsg {
    /// `DF` and the protocol's version.
    const ID: u32 = 0x4446_0001;
}

type Waiter = oneshot::Sender<Result<Answer, OpError>>;
type Producer = Box<dyn FnOnce(&Dataflow, EntityId) + Send>;

struct State {
    site: Site,
    /// Where to reach other sites, by id.
    sites: HashMap<SiteId, SiteRef>,
    /// Messages waiting for room in a site's output bound, in order.
    backlog: HashMap<SiteId, VecDeque<DfMsg>>,
}

pub(crate) struct Inner {
    node: Node,
    state: Mutex<State>,
    waiters: Mutex<HashMap<OpId, Waiter>>,
    producers: Mutex<HashMap<EntityId, Producer>>,
    /// Offered entities: a handle on each (the layer above's type).
    offers: Mutex<HashMap<EntityId, Box<dyn std::any::Any + Send + Sync>>>,
    next_op: AtomicU64,
    stats: Counters,
    /// The node shut down.
    closed: std::sync::atomic::AtomicBool,
    /// The audit period, in milliseconds ([`Dataflow::set_audit_period`]).
    audit_ms: AtomicU64,
}

/// How often a site asks the quiet sites it keeps books for whether they
/// still hold what it keeps for them, and still take it for a live peer
/// (see [`Dataflow::set_audit_period`]).
pub const AUDIT_PERIOD: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    moves: AtomicU64,
}

/// What a node's dataflow layer did: protocol messages and mobile-cell
/// moves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataflowStats {
    /// Protocol messages queued to other sites.
    pub sent: u64,
    /// Protocol messages received.
    pub received: u64,
    /// Mobile cells' contents received (a state migration to this site).
    pub moves: u64,
}

/// A node's dataflow layer: makes variables, ports and cells, and takes
/// tickets. One per node ([`Dataflow::on`]); cheap to clone.
#[derive(Clone)]
pub struct Dataflow {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Dataflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataflow")
            .field("site", &self.id())
            .finish()
    }
}

/// Keeps `site` to reach it by id later (unless it is this site `me`,
/// or already kept).
fn remember(st: &mut State, me: SiteId, site: SiteRef) {
    if let Some(id) = site.id().filter(|&id| id != me) {
        st.sites.entry(id).or_insert(site);
    }
}

/// A protocol message sitenet refused to queue. One that can never be
/// sent (too large for `to`, or not encodable) goes back to the protocols,
/// which end the operation it carried; otherwise the site failed or the
/// node stops, and what the message carried is given back when the
/// failure is told.
fn not_sent(site: &mut Site, to: SiteId, wire: Wire, e: &SendError) {
    match e {
        SendError::TooLarge { .. } | SendError::Encode { .. } => {
            tracing::warn!(%to, error = %e, "a dataflow message can never be sent");
            site.unsendable(to, wire);
        }
        _ => tracing::debug!(%to, error = %e, "a dataflow message was not sent"),
    }
}

/// The layer as its node keeps it (a node extension). The node drops it
/// when it stops: what waits here then ends with
/// [`DataflowError::Shutdown`], and so does every later operation.
struct Extension(Dataflow);

impl Drop for Extension {
    fn drop(&mut self) {
        let inner = &self.0.inner;
        inner.closed.store(true, Ordering::Release);
        let waiters = std::mem::take(&mut *inner.waiters.lock());
        drop(waiters);
    }
}

impl Dataflow {
    /// The dataflow layer of `node`, started the first time: it registers
    /// the protocol's message handler and follows the node's events (a
    /// site unreachable or down fails the operations that depend on it).
    pub fn on(node: &Node) -> Dataflow {
        node.extension_or_init(|node| Extension(Dataflow::start(node)))
            .0
            .clone()
    }

    fn start(node: &Node) -> Dataflow {
        let inner = Arc::new(Inner {
            node: node.clone(),
            state: Mutex::new(State {
                site: Site::new(node.id()),
                sites: HashMap::new(),
                backlog: HashMap::new(),
            }),
            waiters: Mutex::new(HashMap::new()),
            producers: Mutex::new(HashMap::new()),
            offers: Mutex::new(HashMap::new()),
            next_op: AtomicU64::new(1),
            stats: Counters::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            audit_ms: AtomicU64::new(AUDIT_PERIOD.as_millis() as u64),
        });
        let weak = Arc::downgrade(&inner);
        let handler = weak.clone();
        if let Err(e) = node.handle(move |ctx, m: DfMsg| {
            if let Some(inner) = handler.upgrade() {
                Dataflow { inner }.on_message(ctx.sender(), m);
            }
        }) {
            tracing::error!(error = %e, "the dataflow protocol's handler could not be registered");
        }
        let audits = weak.clone();
        let rt = node.runtime().clone();
        node.runtime().spawn(async move {
            // Wakes at least once a second, so that a new period applies
            // soon; a round runs once a period has passed since the last.
            let mut last = Instant::now();
            loop {
                let period = match audits.upgrade() {
                    Some(inner) => Duration::from_millis(inner.audit_ms.load(Ordering::Relaxed)),
                    None => break,
                };
                let due = period.saturating_sub(last.elapsed());
                rt.delay(due.min(Duration::from_secs(1))).await;
                let Some(inner) = audits.upgrade() else { break };
                if inner.closed.load(Ordering::Acquire) {
                    break;
                }
                let period = Duration::from_millis(inner.audit_ms.load(Ordering::Relaxed));
                if last.elapsed() >= period {
                    last = Instant::now();
                    Dataflow { inner }.with_site(|s| s.audit());
                }
            }
        });
        let mut events = node.events();
        node.runtime().spawn(async move {
            while let Some(e) = events.next().await {
                let Some(inner) = weak.upgrade() else { break };
                if let NodeEvent::HandedBack {
                    site: Some(site), ..
                } = e
                {
                    Dataflow { inner }.handed_back_live(site);
                    continue;
                }
                let (site, state) = match e {
                    NodeEvent::SiteUp { site, .. } => (site, FaultState::Ok),
                    NodeEvent::SiteUnreachable {
                        site: Some(site), ..
                    } => (site, FaultState::TempFailed),
                    NodeEvent::SiteDown {
                        site: Some(site), ..
                    } => (site, FaultState::PermFailed),
                    _ => continue,
                };
                let df = Dataflow { inner };
                df.with_site(|s| s.site_fault(site, state));
                if state == FaultState::PermFailed {
                    df.handed_back(site);
                }
            }
        });
        Dataflow { inner }
    }

    /// Sets how often this site audits its books ([`AUDIT_PERIOD`] by
    /// default): each round asks every site it heard nothing from since
    /// the last round and keeps books for (listed as holding one of this
    /// site's entities, a copy pinned for it, a mobile cell's content with
    /// it, an operation waiting on its entity) about each such entity.
    /// Failure detectors disagree — a site may give this one up during a
    /// partition, drop what it held, and never be able to say so — and the
    /// audit is how this site learns it (`Clean`, or `Forgotten`: it then
    /// takes that site for failed too); the period bounds how long such
    /// books outlive the peer's give-up. Shorter costs one small message
    /// per quiet entry per round. Takes effect within a second.
    pub fn set_audit_period(&self, period: Duration) {
        let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
        self.inner.audit_ms.store(ms, Ordering::Relaxed);
    }

    /// The node this layer runs on.
    pub fn node(&self) -> &Node {
        &self.inner.node
    }

    /// This site's id (the node's).
    pub fn id(&self) -> SiteId {
        self.inner.node.id()
    }

    /// Entities made here that are still referred to somewhere, and
    /// proxies of entities made elsewhere: what this site keeps.
    pub fn entities(&self) -> (usize, usize) {
        let st = self.inner.state.lock();
        (st.site.homes(), st.site.proxies())
    }

    /// What this layer did so far.
    pub fn stats(&self) -> DataflowStats {
        let c = &self.inner.stats;
        DataflowStats {
            sent: c.sent.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            moves: c.moves.load(Ordering::Relaxed),
        }
    }

    /// The fault states of entity `e`'s home, as sitenet learns them
    /// (Mozart's fault watchers): `None` if this node cannot reach it.
    pub fn watch(
        &self,
        e: EntityId,
    ) -> Option<futures::channel::mpsc::UnboundedReceiver<sitenet::FaultEvent>> {
        let home = self.site_ref(e.home)?;
        Some(self.inner.node.monitor(&home))
    }

    pub(crate) fn keep_offer(&self, id: EntityId, h: Box<dyn std::any::Any + Send + Sync>) {
        let old = self.inner.offers.lock().insert(id, h);
        drop(old);
    }

    pub(crate) fn drop_offer(&self, id: EntityId) -> bool {
        let old = self.inner.offers.lock().remove(&id);
        old.is_some()
    }

    pub(crate) fn op(&self) -> (OpId, oneshot::Receiver<Result<Answer, OpError>>) {
        let op = OpId(self.inner.next_op.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if !self.inner.closed.load(Ordering::Acquire) {
            self.inner.waiters.lock().insert(op, tx);
        }
        (op, rx)
    }

    pub(crate) fn set_producer(&self, var: EntityId, p: Producer) {
        self.inner.producers.lock().insert(var, p);
    }

    /// Remembers how to reach `site`.
    pub(crate) fn know(&self, site: &SiteRef) {
        let me = self.id();
        remember(&mut self.inner.state.lock(), me, site.clone());
    }

    /// The reference to `site` this layer keeps, if any.
    pub(crate) fn site_ref(&self, site: SiteId) -> Option<SiteRef> {
        self.reach(&self.inner.state.lock(), site)
    }

    /// This node's own reference to `site` if it is this site, else the
    /// one this layer keeps.
    fn known(&self, st: &State, site: SiteId) -> Option<SiteRef> {
        if site == self.id() {
            Some(self.inner.node.local_site())
        } else {
            st.sites.get(&site).cloned()
        }
    }

    /// [`known`](Self::known), else the node's entry for `site`.
    fn reach(&self, st: &State, site: SiteId) -> Option<SiteRef> {
        self.known(st, site)
            .or_else(|| self.inner.node.site_by_id(site))
    }

    /// Runs `f` on the machine, then does what it asked.
    pub(crate) fn with_site<T>(&self, f: impl FnOnce(&mut Site) -> T) -> T {
        let mut done = Vec::new();
        let mut needs = Vec::new();
        let out = {
            let mut st = self.inner.state.lock();
            let out = f(&mut st.site);
            self.pump(&mut st, &mut done, &mut needs);
            out
        };
        self.complete(done, needs);
        out
    }

    fn pump(
        &self,
        st: &mut State,
        done: &mut Vec<(OpId, Result<Answer, OpError>)>,
        needs: &mut Vec<EntityId>,
    ) {
        while let Some(a) = st.site.poll_action() {
            match a {
                Action::Send { to, msg } => self.send(st, to, msg),
                Action::Done { op, outcome } => done.push((op, outcome)),
                Action::Need { var } => needs.push(var),
                Action::Reclaimed { entity } => {
                    tracing::trace!(?entity, "collected");
                }
                Action::HomeUnused { site } => {
                    st.sites.remove(&site);
                }
            }
        }
    }

    /// Queues `wire` to `to`, after what is queued to it already.
    fn send(&self, st: &mut State, to: SiteId, wire: Wire) {
        let mut homes: Vec<SiteRef> = Vec::new();
        // A mobile cell's holder must reach the next site in the chain,
        // which it may never have heard of.
        if let Wire::Forward { to: next, .. } = &wire {
            if *next != to {
                homes.extend(self.known(st, *next));
            }
        }
        if let Some(v) = wire.value() {
            for r in &v.refs {
                if r.home != to && !homes.iter().any(|h| h.id() == Some(r.home)) {
                    homes.extend(self.known(st, r.home));
                }
            }
        }
        let msg = DfMsg { wire, homes };
        self.inner.stats.sent.fetch_add(1, Ordering::Relaxed);
        let Some(site) = self.reach(st, to) else {
            tracing::warn!(%to, "no way to reach a site the dataflow protocol sends to");
            return;
        };
        if let Some(q) = st.backlog.get_mut(&to) {
            q.push_back(msg);
            return;
        }
        match site.send(&msg).priority(DATAFLOW_PRIORITY).try_now() {
            Ok(()) => {}
            Err(SendError::QueueFull { .. }) => {
                st.backlog.entry(to).or_default().push_back(msg);
                let df = self.clone();
                self.inner.node.runtime().spawn(async move {
                    df.drain_backlog(to, site).await;
                });
            }
            Err(e) => not_sent(&mut st.site, to, msg.wire, &e),
        }
    }

    async fn drain_backlog(&self, to: SiteId, site: SiteRef) {
        loop {
            let next = {
                let mut st = self.inner.state.lock();
                let Some(q) = st.backlog.get_mut(&to) else {
                    return;
                };
                match q.pop_front() {
                    Some(m) => m,
                    None => {
                        st.backlog.remove(&to);
                        return;
                    }
                }
            };
            // Waits for room; order is kept: later messages to `to` wait
            // in the backlog behind this one.
            if let Err(e) = site.send(&next).priority(DATAFLOW_PRIORITY).await {
                self.with_site(|s| not_sent(s, to, next.wire, &e));
            }
        }
    }

    fn complete(&self, done: Vec<(OpId, Result<Answer, OpError>)>, needs: Vec<EntityId>) {
        for (op, outcome) in done {
            let waiter = self.inner.waiters.lock().remove(&op);
            let unanswered = match waiter {
                Some(tx) => tx.send(outcome).err(),
                None => Some(outcome),
            };
            // Nobody waits for it any more: give its value back.
            if let Some(Ok(Answer::Value(v))) = unanswered {
                self.with_site(|s| s.release_value(&v));
            }
        }
        for var in needs {
            let producer = self.inner.producers.lock().remove(&var);
            if let Some(p) = producer {
                p(self, var);
            }
        }
    }

    fn on_message(&self, from: SiteRef, m: DfMsg) {
        let Some(from_id) = from.id() else { return };
        self.inner.stats.received.fetch_add(1, Ordering::Relaxed);
        if matches!(m.wire, Wire::Put { .. }) {
            self.inner.stats.moves.fetch_add(1, Ordering::Relaxed);
        }
        {
            let me = self.id();
            let mut st = self.inner.state.lock();
            for site in std::iter::once(from).chain(m.homes) {
                remember(&mut st, me, site);
            }
        }
        self.with_site(|s| s.received(from_id, m.wire));
    }

    /// Gives the protocols what sitenet handed back when `site` failed
    /// for good: what never left releases what it carried, and a mobile
    /// cell's content that never left goes back to its manager.
    fn handed_back(&self, site: SiteId) {
        let Some((_, back)) = self.site_ref(site).and_then(|r| r.failure()) else {
            return;
        };
        let mut returned = Vec::new();
        for (list, maybe) in [(&back.not_sent, false), (&back.maybe_delivered, true)] {
            for m in list {
                if m.type_id() == DfMsg::ID {
                    if let Ok(msg) = m.decode::<DfMsg>() {
                        returned.push((msg.wire, maybe));
                    }
                }
            }
        }
        if !returned.is_empty() {
            self.with_site(|s| {
                for (wire, maybe) in returned {
                    s.undelivered(site, wire, maybe);
                }
            });
        }
    }

    /// Gives the protocols what sitenet handed back while `site` lives:
    /// messages it forgot before acknowledging (maybe delivered), or that
    /// can never be sent to it.
    fn handed_back_live(&self, site: SiteId) {
        let Some(r) = self.site_ref(site) else {
            return;
        };
        let returned: Vec<(Wire, sitenet::Refusal)> = r
            .take_handed_back_of(DfMsg::ID)
            .into_iter()
            .filter_map(|(why, m)| m.decode::<DfMsg>().ok().map(|msg| (msg.wire, why)))
            .collect();
        if !returned.is_empty() {
            self.with_site(|s| {
                for (wire, why) in returned {
                    match why {
                        sitenet::Refusal::PeerForgot { .. } => s.undelivered(site, wire, true),
                        sitenet::Refusal::SiteFailed => s.undelivered(site, wire, false),
                        _ => s.unsendable(site, wire),
                    }
                }
            });
        }
    }

    /// Waits for `rx` (an operation's end).
    pub(crate) async fn answer(
        &self,
        rx: oneshot::Receiver<Result<Answer, OpError>>,
    ) -> Result<Answer, DataflowError> {
        match rx.await {
            Ok(r) => r.map_err(DataflowError::from),
            Err(_) => Err(DataflowError::Shutdown),
        }
    }

    /// Gives back a value's holds.
    pub(crate) fn release_value(&self, v: &Value) {
        self.with_site(|s| s.release_value(v));
    }
}
