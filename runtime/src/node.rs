//! [`Node`]: what a user holds. Starts listeners and actors, resolves
//! addresses to [`SiteRef`]s, registers handlers, reports faults and metrics,
//! and shuts down gracefully.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use parking_lot::Mutex;
use serde::Serialize;
use slab::Slab;
use tokio::sync::{oneshot, Notify};

use sitenet_protocols::{InMessage, LocalInfo, ReassemblyBudget, SiteId};
use sitenet_transport::{Address, BoundListener, Channel, Listener};

use crate::channel_io::accept_until_negotiate;
use crate::com_object::{Adopt, CloseHard, ComObject, Kill, Stop};
use crate::config::NodeConfig;
use crate::error::{NodeError, RequestError};
use crate::handlers::{check_user_id, erase, Ctx, Handlers, RemoteError};
use crate::message::Message;
use crate::metrics::{Counters, Metrics};
use crate::runtime::Runtime;
use crate::site::{SiteEntry, SiteRef};

/// Completes once the stop signal is set (at once if it already is).
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        let set = *rx.borrow_and_update();
        if set || rx.changed().await.is_err() {
            return;
        }
    }
}

/// How long `shutdown` waits for its listeners to close.
const LISTENER_STOP_LIMIT: Duration = Duration::from_secs(5);

/// How many fault reports a node keeps for [`Node::faults`].
const FAULT_HISTORY: usize = 256;

/// A fault observed by the node: a channel closed because its peer broke the
/// protocol, or a site that failed permanently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultReport {
    /// The site, if it had identified itself.
    pub site: Option<SiteId>,
    /// The peer's address.
    pub peer: String,
    /// What went wrong.
    pub reason: String,
    /// True if the site is gone for good.
    pub permanent: bool,
}

/// What a graceful shutdown left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShutdownReport {
    /// Bytes of messages that were not acknowledged by the deadline.
    pub unacknowledged_bytes: u64,
    /// Sites that still held such messages.
    pub sites_with_pending: usize,
}

struct Pending {
    site: usize,
    /// The site the request was sent to: only its reply completes it.
    entry: Arc<SiteEntry>,
    tx: oneshot::Sender<Result<InMessage, RequestError>>,
    /// Dropping it ends the request's timeout task at once.
    _cancel_timer: oneshot::Sender<()>,
}

#[derive(Default)]
struct SiteTable {
    entries: Slab<Arc<SiteEntry>>,
    by_id: HashMap<SiteId, usize>,
    by_address: HashMap<String, usize>,
}

/// State shared by the node's handles and actors.
pub(crate) struct NodeInner {
    pub(crate) id: SiteId,
    pub(crate) cfg: NodeConfig,
    pub(crate) rt: Runtime,
    listen: Vec<Address>,
    pub(crate) handlers: Handlers,
    sites: Mutex<SiteTable>,
    /// Requests awaiting replies, by correlation id (one insert and one
    /// removal per request: hashed with foldhash).
    pending: Mutex<HashMap<u64, Pending, foldhash::fast::RandomState>>,
    next_corr: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) budget: ReassemblyBudget,
    /// Notified whenever reassembly budget is given back: channels whose
    /// input waits for budget resume reading.
    pub(crate) budget_released: Arc<Notify>,
    shut_down: AtomicBool,
    /// Level-triggered stop signal of the accept loops: a loop between two
    /// accepts cannot miss it (a `Notify` could be missed there).
    stop_listeners: tokio::sync::watch::Sender<bool>,
    /// Notified whenever acknowledgements free bytes or a site fails.
    pub(crate) acked: Notify,
    faults: Mutex<VecDeque<FaultReport>>,
    pending_handshakes: AtomicUsize,
    pub(crate) sinks: crate::services::Sinks,
    /// Notified when a channel opens or closes or a fault state changes.
    pub(crate) changed: Notify,
    /// One receiver per listener, completed when its accept loop has ended
    /// and the socket is closed.
    listeners_done: Mutex<Vec<oneshot::Receiver<()>>>,
}

impl NodeInner {
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    pub(crate) fn local_info(&self) -> LocalInfo {
        LocalInfo {
            site: self.id,
            listen: self.listen.iter().map(ToString::to_string).collect(),
            buffer_size: self.cfg.buffer_size,
            max_message: self.cfg.max_message_size,
        }
    }

    pub(crate) fn max_message_to(&self, e: &SiteEntry) -> u64 {
        match e.peer_max.load(Ordering::Acquire) {
            0 => self.cfg.max_message_size,
            p => p.min(self.cfg.max_message_size),
        }
    }

    pub(crate) fn next_corr(&self) -> u64 {
        self.next_corr.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn record_fault(&self, f: FaultReport) {
        let mut q = self.faults.lock();
        if q.len() == FAULT_HISTORY {
            q.pop_front();
        }
        q.push_back(f);
    }

    fn new_entry(self: &Arc<Self>, t: &mut SiteTable, address: Option<Address>) -> Arc<SiteEntry> {
        let slot = t.entries.vacant_entry();
        let entry = Arc::new(SiteEntry::new(
            slot.key(),
            address.clone(),
            self.cfg.output_bound,
        ));
        slot.insert(entry.clone());
        let (node, e) = (self.clone(), entry.clone());
        let addr = ComObject::start_in_arbiter(self.rt.arbiter(), move |_| ComObject::new(node, e));
        let _ = entry.addr.set(addr);
        entry
    }

    /// The entry for an address, created (with its ComObject) if new.
    /// A permanently failed site stays failed; the address then names a new
    /// site (for example the restarted process, a new incarnation).
    fn entry_for_address(self: &Arc<Self>, a: Address) -> Arc<SiteEntry> {
        let mut t = self.sites.lock();
        if let Some(&k) = t.by_address.get(&a.to_string()) {
            let e = t.entries[k].clone();
            if e.failure().is_none() {
                return e;
            }
        }
        let e = self.new_entry(&mut t, Some(a.clone()));
        t.by_address.insert(a.to_string(), e.key);
        e
    }

    /// The entry for a site that connected to us: by id, else a new one.
    /// The listen addresses the peer claims are not trusted: the new entry
    /// may call the first back (the open protocol then checks who answers),
    /// but no address is bound to a site until we connect there ourselves
    /// and find it (`bind_site_id`), so a peer cannot take over traffic
    /// meant for the site at an address it lists.
    fn entry_for_accept(self: &Arc<Self>, id: SiteId, listen: &[String]) -> Arc<SiteEntry> {
        let mut t = self.sites.lock();
        if let Some(&k) = t.by_id.get(&id) {
            return t.entries[k].clone();
        }
        let address = listen.iter().find_map(|l| l.parse::<Address>().ok());
        let e = self.new_entry(&mut t, address);
        let _ = e.id.set(id);
        t.by_id.insert(id, e.key);
        e
    }

    /// Records that `entry` is site `id`; if another entry already is, returns
    /// that one (the caller merges into it).
    pub(crate) fn bind_site_id(
        &self,
        entry: &Arc<SiteEntry>,
        id: SiteId,
    ) -> Result<(), Arc<SiteEntry>> {
        let mut t = self.sites.lock();
        match t.by_id.get(&id) {
            Some(&k) if k == entry.key => Ok(()),
            Some(&k) => {
                let other = t.entries[k].clone();
                if let Some(a) = &entry.address {
                    t.by_address.insert(a.to_string(), k);
                }
                Err(other)
            }
            None => {
                let _ = entry.id.set(id);
                t.by_id.insert(id, entry.key);
                Ok(())
            }
        }
    }

    pub(crate) fn register_request(
        self: &Arc<Self>,
        corr: u64,
        entry: &Arc<SiteEntry>,
        timeout: Duration,
    ) -> oneshot::Receiver<Result<InMessage, RequestError>> {
        let (tx, rx) = oneshot::channel();
        let (cancel, cancelled) = oneshot::channel::<()>();
        self.pending.lock().insert(
            corr,
            Pending {
                site: entry.key,
                entry: entry.clone(),
                tx,
                _cancel_timer: cancel,
            },
        );
        let node = Arc::downgrade(self);
        let armed = self.rt.spawn(async move {
            // The reply (or a failure) drops the Pending entry, which ends
            // this task at once instead of keeping it for the whole timeout.
            let sleep = actix_rt::time::sleep(timeout);
            futures::pin_mut!(sleep);
            if let futures::future::Either::Right(_) =
                futures::future::select(sleep, cancelled).await
            {
                return;
            }
            if let Some(node) = node.upgrade() {
                if let Some(p) = node.pending.lock().remove(&corr) {
                    let _ = p.tx.send(Err(RequestError::Timeout(timeout)));
                }
            }
        });
        if !armed {
            // The runtime stopped: no timer would ever end this request.
            if let Some(p) = self.pending.lock().remove(&corr) {
                let _ = p.tx.send(Err(RequestError::Send(
                    crate::error::SendError::RuntimeStopped,
                )));
            }
        }
        rx
    }

    pub(crate) fn cancel_request(&self, corr: u64) {
        self.pending.lock().remove(&corr);
    }

    /// Completes the request `m` replies to — only if `from` is the site
    /// the request was sent to: another site cannot complete (or forge a
    /// reply to) a request it never received.
    pub(crate) fn complete_request(&self, from: &Arc<SiteEntry>, m: InMessage) {
        let p = {
            let mut pending = self.pending.lock();
            match pending.get(&m.prelude.corr) {
                Some(p) if Arc::ptr_eq(p.entry.resolved(), from.resolved()) => {
                    pending.remove(&m.prelude.corr)
                }
                Some(_) => {
                    Counters::add(&self.counters.replies_discarded, 1);
                    tracing::warn!(corr = m.prelude.corr, site = ?from.id.get(), "reply from a site the request was not sent to; discarded");
                    return;
                }
                None => None,
            }
        };
        let Some(p) = p else {
            Counters::add(&self.counters.replies_discarded, 1);
            tracing::debug!(corr = m.prelude.corr, "late or unknown reply discarded");
            return;
        };
        let r = if m.prelude.type_id == RemoteError::ID {
            let reason = rmp_serde::from_slice::<RemoteError>(&m.header)
                .map(|e| e.reason)
                .unwrap_or_else(|e| format!("undecodable error reply: {e}"));
            Err(RequestError::Remote(reason))
        } else {
            Ok(m)
        };
        let _ = p.tx.send(r);
    }

    pub(crate) fn fail_requests(&self, site: usize, reason: &str) {
        let mut pending = self.pending.lock();
        let keys: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.site == site)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(p) = pending.remove(&k) {
                let _ = p.tx.send(Err(RequestError::SiteFailed(reason.to_string())));
            }
        }
    }

    fn all_entries(&self) -> Vec<Arc<SiteEntry>> {
        self.sites
            .lock()
            .entries
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Stops listeners and actors; never blocks.
    fn stop_now(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stop_listeners.send_replace(true);
        for e in self.all_entries() {
            e.outbox.close();
            if let Some(a) = e.addr.get() {
                a.do_send(Stop);
            }
        }
        let pending: Vec<Pending> = self.pending.lock().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.tx.send(Err(RequestError::Shutdown));
        }
    }

    async fn accept_loop(self: Arc<Self>, listener: Listener) {
        let mut stop = self.stop_listeners.subscribe();
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                r = listener.accept() => match r {
                    Ok(ch) => self.clone().on_accepted(ch),
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        // e.g. out of file descriptors: back off a little.
                        actix_rt::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
            if self.is_shut_down() {
                return;
            }
        }
    }

    fn on_accepted(self: Arc<Self>, ch: Channel) {
        if self.pending_handshakes.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_pending_handshakes
        {
            self.pending_handshakes.fetch_sub(1, Ordering::AcqRel);
            Counters::add(&self.counters.handshakes_refused, 1);
            tracing::warn!(peer = %ch.peer(), "too many pending handshakes; refusing connection");
            return;
        }
        let peer = ch.peer();
        let ch = match &self.cfg.fault_injector {
            Some(f) => f.wrap(ch),
            None => ch,
        };
        actix_rt::spawn(async move {
            let r = accept_until_negotiate(ch, self.local_info(), self.cfg.handshake_timeout).await;
            self.pending_handshakes.fetch_sub(1, Ordering::AcqRel);
            match r {
                Ok((trans, neg)) => {
                    if self.is_shut_down() {
                        return;
                    }
                    let e = self.entry_for_accept(neg.site, &neg.listen);
                    if let Some(a) = e.addr.get() {
                        a.do_send(Adopt { trans, neg });
                    }
                }
                Err((ch, e)) => {
                    tracing::info!(%peer, error = %e, "accepted channel closed during the handshake");
                    if let crate::channel_io::OpenFailure::Open(oe) = &e {
                        if !matches!(oe, sitenet_protocols::OpenError::Timeout) {
                            Counters::add(&self.counters.protocol_errors, 1);
                        }
                    }
                    self.record_fault(FaultReport {
                        site: None,
                        peer,
                        reason: e.to_string(),
                        permanent: false,
                    });
                    // Closed only now: the fault is on record before the peer sees the close.
                    drop(ch);
                }
            }
        });
    }
}

/// Builds a [`Node`].
#[derive(Debug, Default)]
pub struct NodeBuilder {
    listen: Vec<String>,
    cfg: NodeConfig,
    runtime: Option<Runtime>,
}

impl NodeBuilder {
    /// Listens on `addr` (`tcp:HOST:PORT`; port 0 picks a free port). May be
    /// called several times. A node without listeners only connects out.
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen.push(addr.into());
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, cfg: NodeConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Changes the configuration in place.
    pub fn configure(mut self, f: impl FnOnce(&mut NodeConfig)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// Runs the node's actors on this runtime instead of the default.
    pub fn runtime(mut self, rt: Runtime) -> Self {
        self.runtime = Some(rt);
        self
    }

    /// Binds the listeners and starts the node. Works inside an actix system,
    /// inside any tokio runtime, and from a plain `main`; it never blocks on
    /// the runtime, so it is safe on the runtime's own thread.
    pub fn start(self) -> Result<Node, NodeError> {
        let cfg = self.cfg.normalised();
        let rt = self.runtime.unwrap_or_else(Runtime::current_or_shared);
        let mut bound = Vec::new();
        let mut listen = Vec::new();
        for a in &self.listen {
            let addr: Address = a.parse()?;
            let b = BoundListener::bind(&addr).map_err(|source| NodeError::Bind {
                addr: a.clone(),
                source,
            })?;
            listen.push(b.local_address().map_err(|source| NodeError::Bind {
                addr: a.clone(),
                source,
            })?);
            bound.push(b);
        }
        let id = SiteId(rand::random::<u128>());
        // Every handshake this node makes carries its listen list: check it
        // fits once, here, rather than failing every open later.
        LocalInfo {
            site: id,
            listen: listen.iter().map(ToString::to_string).collect(),
            buffer_size: cfg.buffer_size,
            max_message: cfg.max_message_size,
        }
        .validate()
        .map_err(|e| NodeError::Config(e.to_string()))?;
        let budget = ReassemblyBudget::new(cfg.reassembly_budget);
        let budget_released = Arc::new(Notify::new());
        let released = budget_released.clone();
        budget.set_release_hook(Arc::new(move || released.notify_waiters()));
        let inner = Arc::new(NodeInner {
            id,
            budget,
            budget_released,
            cfg,
            rt: rt.clone(),
            listen,
            handlers: Handlers::default(),
            sites: Mutex::new(SiteTable::default()),
            pending: Mutex::new(HashMap::default()),
            // Unpredictable: a third site cannot guess the ids in flight.
            next_corr: AtomicU64::new(rand::random::<u64>() >> 1 | 1),
            counters: Counters::default(),
            shut_down: AtomicBool::new(false),
            stop_listeners: tokio::sync::watch::Sender::new(false),
            acked: Notify::new(),
            faults: Mutex::new(VecDeque::new()),
            pending_handshakes: AtomicUsize::new(0),
            sinks: Default::default(),
            changed: Notify::new(),
            listeners_done: Mutex::new(Vec::new()),
        });
        if inner.cfg.builtin_services {
            crate::services::register(&inner)?;
        }
        for b in bound {
            let node = inner.clone();
            let (done_tx, done_rx) = oneshot::channel();
            inner.listeners_done.lock().push(done_rx);
            rt.spawn(async move {
                match b.into_listener() {
                    Ok(l) => node.accept_loop(l).await,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot register listener with the runtime")
                    }
                }
                // The listener is dropped (closed) by now.
                let _ = done_tx.send(());
            });
        }
        tracing::info!(site = %id, listen = ?inner.listen.iter().map(ToString::to_string).collect::<Vec<_>>(), "node started");
        Ok(Node {
            _stopper: Some(Arc::new(StopOnDrop(inner.clone()))),
            inner,
        })
    }
}

/// Stops the node (without blocking) when the last user handle drops.
struct StopOnDrop(Arc<NodeInner>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop_now();
    }
}

/// A sitenet node: one local site. Cheap to clone, `Send + Sync`. Dropping the
/// last user handle stops it without blocking; [`Node::shutdown`] stops it
/// gracefully, waiting for acknowledgements up to a deadline.
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
    /// `None` for the handle a handler gets from its context: that one
    /// neither keeps the node alive nor stops it.
    _stopper: Option<Arc<StopOnDrop>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.inner.id)
            .field("listen", &self.listen_addresses())
            .finish()
    }
}

impl Node {
    /// Starts building a node.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    pub(crate) fn from_inner(inner: Arc<NodeInner>) -> Self {
        Self {
            inner,
            _stopper: None,
        }
    }

    /// This node's site id (its incarnation).
    pub fn id(&self) -> SiteId {
        self.inner.id
    }

    /// The addresses this node listens on, with real ports.
    pub fn listen_addresses(&self) -> Vec<String> {
        self.inner.listen.iter().map(ToString::to_string).collect()
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &NodeConfig {
        &self.inner.cfg
    }

    /// The runtime the node's actors run on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// A reference to the site at `addr` (`tcp:HOST:PORT`). Cheap: the
    /// channel is opened when the first message is sent, and the same address
    /// always gives the same site.
    pub fn site(&self, addr: &str) -> Result<SiteRef, NodeError> {
        if self.inner.is_shut_down() {
            return Err(NodeError::Shutdown);
        }
        let a: Address = addr.parse()?;
        Ok(SiteRef::counted(
            self.inner.entry_for_address(a),
            self.inner.clone(),
        ))
    }

    /// The site with this id, if the node knows it (it connected to us, or
    /// we to it).
    pub fn site_by_id(&self, id: SiteId) -> Option<SiteRef> {
        let t = self.inner.sites.lock();
        let k = *t.by_id.get(&id)?;
        Some(SiteRef::counted(t.entries[k].clone(), self.inner.clone()))
    }

    /// Registers the handler for message type `M`. Registering a type id twice
    /// is an error, as is an id in sitenet's reserved range.
    pub fn handle<M, F>(&self, f: F) -> Result<(), NodeError>
    where
        M: Message,
        F: Fn(&mut Ctx<'_>, M) + Send + Sync + 'static,
    {
        check_user_id(M::ID)?;
        self.inner.handlers.insert(M::ID, erase(f))
    }

    /// Sets the hook that sees every message no handler took (no handler for
    /// its type, or a header that did not decode). Such messages are still
    /// acknowledged — an application fault never closes a channel — and
    /// counted in `Metrics::unhandled`. Replaces any earlier hook.
    pub fn on_unhandled(&self, f: impl Fn(crate::handlers::Unhandled) + Send + Sync + 'static) {
        *self.inner.handlers.unhandled.write() = Some(Arc::new(f));
    }

    /// Fails a site permanently on purpose: its channel is closed, and every
    /// message not acknowledged is handed back (see [`SiteRef::failure`]).
    pub fn kill(&self, site: &SiteRef) {
        if let Some(a) = site.entry.resolved().addr.get() {
            a.do_send(Kill);
        }
    }

    /// A stream of the site's fault-state changes: ok → temporarily failed
    /// → ok, or permanently failed. The first item is the current state.
    pub fn monitor(
        &self,
        site: &SiteRef,
    ) -> futures::channel::mpsc::UnboundedReceiver<crate::site::FaultEvent> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let entry = site.entry.resolved();
        let mut f = entry.fault.lock();
        let _ = tx.unbounded_send(crate::site::FaultEvent {
            state: f.0,
            reason: String::new(),
        });
        f.1.push(tx);
        rx
    }

    /// Closes the site's channel with CLOSE_HARD, which the peer must grant;
    /// the site reconnects when it needs to, and nothing is lost. This is
    /// the preemption the fd-slot controller uses; tests use it directly.
    #[doc(hidden)]
    pub fn close_hard(&self, site: &SiteRef) {
        if let Some(a) = site.entry.resolved().addr.get() {
            a.do_send(CloseHard);
        }
    }

    /// A snapshot of the node's counters.
    pub fn metrics(&self) -> Metrics {
        self.inner.counters.snapshot()
    }

    /// Recent fault reports (at most 256), oldest first.
    pub fn faults(&self) -> Vec<FaultReport> {
        self.inner.faults.lock().iter().cloned().collect()
    }

    /// Number of remote sites in the site table.
    pub fn site_count(&self) -> usize {
        self.inner.sites.lock().entries.len()
    }

    /// Stops gracefully: refuses new sends, waits up to `deadline` for every
    /// queued message to be acknowledged, then closes channels and listeners.
    /// Returns what was still unacknowledged.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let timer = self.inner.rt.delay(deadline);
        futures::pin_mut!(timer);
        loop {
            let notified = self.inner.acked.notified();
            futures::pin_mut!(notified);
            notified.as_mut().enable();
            let report = self.pending_report();
            if report.unacknowledged_bytes == 0 {
                break;
            }
            if let futures::future::Either::Right(_) =
                futures::future::select(notified, timer.as_mut()).await
            {
                break;
            }
        }
        let report = self.pending_report();
        self.inner.stop_now();
        // Listeners are closed when this returns (the port can be bound
        // again) — within a bound: a runtime that no longer runs them must
        // not hang the caller.
        let done: Vec<_> = self.inner.listeners_done.lock().drain(..).collect();
        let all = futures::future::join_all(done);
        let limit = self.inner.rt.delay(LISTENER_STOP_LIMIT);
        futures::pin_mut!(all);
        futures::pin_mut!(limit);
        if let futures::future::Either::Right(_) = futures::future::select(all, limit).await {
            tracing::warn!("listeners did not stop within {LISTENER_STOP_LIMIT:?}");
        }
        report
    }

    /// Waits until `pred` holds for the node's metrics, at most `timeout`;
    /// returns whether it held. Re-checked whenever a channel opens or closes,
    /// a fault state changes, a batch of messages is sent or delivered, or
    /// acknowledgements arrive, so tools and tests await conditions instead of
    /// polling.
    pub async fn wait_until(&self, pred: impl Fn(&Metrics) -> bool, timeout: Duration) -> bool {
        let timer = self.inner.rt.delay(timeout);
        futures::pin_mut!(timer);
        loop {
            let changed = self.inner.changed.notified();
            let acked = self.inner.acked.notified();
            futures::pin_mut!(changed);
            futures::pin_mut!(acked);
            changed.as_mut().enable();
            acked.as_mut().enable();
            if pred(&self.metrics()) {
                return true;
            }
            let either = futures::future::select(changed, acked);
            if let futures::future::Either::Right(_) =
                futures::future::select(either, timer.as_mut()).await
            {
                return pred(&self.metrics());
            }
        }
    }

    /// Blocking variant of [`wait_until`](Self::wait_until).
    ///
    /// # Panics
    ///
    /// On the node's own runtime thread, where it would deadlock: await
    /// `wait_until` there.
    pub fn wait_until_blocking(&self, pred: impl Fn(&Metrics) -> bool, timeout: Duration) -> bool {
        assert!(
            !self.inner.rt.is_current_thread(),
            "Node::wait_until_blocking called on the node's own runtime thread, where it would \
             deadlock; await Node::wait_until there"
        );
        futures::executor::block_on(self.wait_until(pred, timeout))
    }

    /// Blocking variant of [`shutdown`](Self::shutdown), for a plain `main`.
    ///
    /// # Panics
    ///
    /// On the node's own runtime thread, where it would deadlock (it waits
    /// for acknowledgements only that thread can process): use `shutdown`
    /// there, or drop the node (which stops it without blocking).
    pub fn shutdown_blocking(&self, deadline: Duration) -> ShutdownReport {
        assert!(
            !self.inner.rt.is_current_thread(),
            "Node::shutdown_blocking called on the node's own runtime thread, where it would \
             deadlock; await Node::shutdown there, or drop the node"
        );
        futures::executor::block_on(self.shutdown(deadline))
    }

    fn pending_report(&self) -> ShutdownReport {
        let mut r = ShutdownReport::default();
        for e in self.inner.all_entries() {
            if e.failure().is_some() {
                continue;
            }
            let b = e.outbox.bytes();
            if b > 0 {
                r.unacknowledged_bytes += b;
                r.sites_with_pending += 1;
            }
        }
        r
    }
}
