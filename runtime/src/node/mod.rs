//! [`Node`]: what a user holds. Starts listeners and actors, resolves
//! addresses to [`SiteRef`]s, registers handlers, reports faults and metrics,
//! and shuts down gracefully.
//!
//! Which file holds what:
//! - `NodeInner`, the state behind every handle, is here; its parts it
//!   shares with its ComObjects are `NodeShared` (`com_object/host.rs`,
//!   made of `node_state/`'s `Identity`, `Signals` and `Security`).
//!   Its methods are in this folder, by concern: the site table
//!   (`site_table.rs`, the local site's entry too), requests
//!   (`requests.rs`), parked sites' deadlines (`parked.rs`), accepting
//!   (`accept.rs`) and the waiting line (`line.rs`), async handlers in
//!   flight (`in_flight.rs`), descriptors (`decoding.rs`), stopping
//!   (here). What delivers to the handlers, a layer above, is handed in
//!   by `start`: the ComObjects' inbox (`streams.rs`) and the local
//!   site's drain (`local.rs`).
//! - `Node`'s own methods are here (sites, shutdown), in `descriptor.rs`,
//!   `watch.rs` (monitors, metrics, stats), `extensions.rs` (the values
//!   layers above keep with the node), `weak.rs` (`WeakNode`) and
//!   `test_hooks.rs` (feature `test-hooks`). Those that register what lives in a layer above the
//!   node are with it: handlers in `handlers/register.rs` and
//!   `handlers/raw.rs`, stream handlers in `streams.rs`, cooperations in
//!   `cooperation.rs`, batches in `batch.rs`.
//! - The `SiteRef` handle is `site_ref.rs`; its methods are in `site/`.

mod accept;
mod builder;
mod cooperations;
mod decoding;
mod descriptor;
mod extensions;
mod handler_table;
mod in_flight;
mod line;
mod parked;
mod requests;
mod site_ref;
mod site_table;
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod to_address;
mod watch;
mod weak;

use crate::com_object::FaultReport;
use crate::events::PeerRefusal;
pub use builder::NodeBuilder;
use builder::StopOnDrop;
pub(crate) use cooperations::{Coop, OpenCooperations};
pub(crate) use decoding::{
    decode_reply, decoding_on, encoding_on, with_decoding_node, with_encoding_node,
};
pub(crate) use handler_table::{error_detail, error_reply, ErrorReply};
pub use handler_table::{BodySink, Ctx, Unhandled};
pub(crate) use handler_table::{Erased, ErasedStream, Handlers, NoReply, RemoteError};
pub(crate) use in_flight::AsyncSlot;
pub use site_ref::SiteRef;
pub(crate) use site_table::Named;
use site_table::SiteTable;
pub use to_address::ToAddress;
pub use weak::WeakNode;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::{oneshot, Notify};

use sitenet_protocols::{LocalInfo, ReassemblyBudget, SiteId};
use sitenet_transport::{Address, BoundListener};

use crate::com_object::{ComHost, Inbox, Kill, NodeShared, Stop};
use crate::config::NodeConfig;
use crate::error::{NodeError, RequestError};
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::site_entry::SiteEntry;

/// How long `shutdown` waits for its listeners to close.
const LISTENER_STOP_LIMIT: Duration = Duration::from_secs(5);

/// How many fault reports a node keeps for [`Node::faults`].
const FAULT_HISTORY: usize = 256;

/// What a graceful shutdown left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShutdownReport {
    /// Bytes of messages that were not acknowledged by the deadline.
    pub unacknowledged_bytes: u64,
    /// Sites that still held such messages.
    pub sites_with_pending: usize,
}

/// State shared by the node's handles and actors.
pub(crate) struct NodeInner {
    /// What the node shares with its ComObjects (read here through
    /// `Deref`).
    shared: NodeShared,
    handlers: Handlers,
    /// Makes each ComObject's inbox (the handlers' and the stream sinks'
    /// side of delivery, layers above the actor), given by `start`.
    inbox: MakeInbox,
    /// Delivers what is queued to the local site to the handlers (a layer
    /// above), given by `start`.
    drain_local: DrainLocal,
    sites: Mutex<SiteTable>,
    /// Requests awaiting replies, by correlation id, and their deadlines
    /// (see `requests`).
    requests: Arc<requests::Requests>,
    /// The deadlines of parked sites, and whether the runtime runs (see
    /// `parked`).
    parked: Arc<parked::ParkedTimers>,
    /// The open cooperations, for the declared reply types.
    cooperations: OpenCooperations,
    /// `shutdown` began (see [`is_closing`](Self::is_closing)).
    closing: AtomicBool,
    /// Level-triggered stop signal of the accept loops and the running
    /// async handlers (`in_flight`): a loop between two accepts cannot
    /// miss it (a `Notify` could be missed there).
    stop_listeners: tokio::sync::watch::Sender<bool>,
    /// Notified when the last running async handler ends (`in_flight`).
    async_idle: Notify,
    faults: Mutex<VecDeque<FaultReport>>,
    /// The accepted connections in their handshake, and the rules that
    /// close them.
    handshakes: accept::Handshakes,
    /// The output bounds every entry's outbox counts against: the site's
    /// and the node's (shared by all of them).
    output: crate::outbox::OutputBound,
    /// One receiver per listener, completed when its accept loop has ended
    /// and the socket is closed.
    listeners_done: Mutex<Vec<oneshot::Receiver<()>>>,
    /// This node as a site (`Node::local_site`), made on first need.
    local: std::sync::OnceLock<Arc<crate::site_entry::SiteEntry>>,
    /// The values layers above sitenet keep with the node, by type
    /// (`Node::extension`); dropped when the node stops.
    extensions: crate::node_state::Extensions,
    /// What the user handles share (set once, when the node starts): a
    /// `WeakNode` of any handle upgrades while it lives.
    stopper: std::sync::OnceLock<std::sync::Weak<StopOnDrop>>,
}

/// Makes a ComObject's inbox for its node and site (installed in
/// [`NodeInner::inbox`] when the node starts; see [`ComHost::inbox`]).
pub(crate) type MakeInbox = fn(Arc<NodeInner>, Arc<SiteEntry>) -> Box<dyn Inbox>;

/// Delivers everything queued to the local site to the node's own
/// handlers (`local.rs`; installed in [`NodeInner`] when the node starts,
/// run on its runtime by [`NodeInner::wake_site`]).
pub(crate) type DrainLocal = fn(&Arc<NodeInner>, &Arc<SiteEntry>);

impl std::ops::Deref for NodeInner {
    type Target = NodeShared;

    fn deref(&self) -> &NodeShared {
        &self.shared
    }
}

/// The node's tables as its ComObjects ask them: each call is the node's
/// own method of the same name.
impl ComHost for NodeInner {
    fn bind_site_id(&self, entry: &Arc<SiteEntry>, id: SiteId) -> Result<(), Arc<SiteEntry>> {
        NodeInner::bind_site_id(self, entry, id)
    }

    fn adoption(
        &self,
        entry: &SiteEntry,
        merged: bool,
        claimed: SiteId,
    ) -> sitenet_protocols::node::site_index::Adoption {
        NodeInner::adoption(self, entry, merged, claimed)
    }

    fn route_accepted(self: Arc<Self>, adopt: crate::com_object::Adopt) {
        NodeInner::route_accepted(&self, adopt)
    }

    fn claim_proven(&self, entry: &Arc<SiteEntry>) {
        NodeInner::claim_proven(self, entry)
    }

    fn reclaim(&self, entry: &Arc<SiteEntry>) -> bool {
        NodeInner::reclaim(self, entry)
    }

    fn retire(&self, entry: &Arc<SiteEntry>) {
        NodeInner::retire(self, entry)
    }

    fn dial_on_word(
        &self,
        entry: &SiteEntry,
        address: &str,
    ) -> Result<
        Option<sitenet_protocols::slots::dial_bound::DialTicket>,
        sitenet_protocols::slots::dial_bound::DialRefused,
    > {
        NodeInner::dial_on_word(self, entry, address)
    }

    fn dial_ended(&self, key: usize, ticket: sitenet_protocols::slots::dial_bound::DialTicket) {
        NodeInner::dial_ended(self, key, ticket)
    }

    fn asker_gone(&self, entry: &Arc<SiteEntry>) {
        NodeInner::asker_gone(self, entry)
    }

    fn fail_requests(&self, site: &Arc<SiteEntry>, failure: &sitenet_protocols::SiteFailure) {
        NodeInner::fail_requests(self, site, failure)
    }

    fn record_fault(&self, f: FaultReport) {
        NodeInner::record_fault(self, f)
    }

    fn park_deadline(&self, key: usize, at: std::time::Instant) {
        NodeInner::park_deadline(self, key, at)
    }

    fn unpark_deadline(&self, key: usize, at: std::time::Instant) {
        NodeInner::unpark_deadline(self, key, at)
    }

    fn wake(self: Arc<Self>, entry: &Arc<SiteEntry>) {
        self.wake_site(entry)
    }

    fn start_unstarted(self: Arc<Self>, entry: &Arc<SiteEntry>) {
        NodeInner::start_unstarted(&self, entry)
    }

    fn inbox(self: Arc<Self>, entry: Arc<SiteEntry>) -> Box<dyn Inbox> {
        (self.inbox)(self.clone(), entry)
    }

    fn hold(self: Arc<Self>, entry: Arc<SiteEntry>) -> Box<dyn std::any::Any + Send> {
        Box::new(SiteRef::counted(entry, self))
    }
}

impl NodeInner {
    pub(crate) fn max_message_to(&self, e: &SiteEntry) -> u64 {
        match e.peer_max() {
            0 => self.identity().cfg().max_message_size,
            p => p.min(self.identity().cfg().max_message_size),
        }
    }

    /// A fresh request id: 64 random bits (a CSPRNG), so that only the
    /// sites a request went through know it — what lets the origin accept
    /// a delegated reply from a site it never asked (docs/protocol.md
    /// §2.6). Two pending requests share one with probability 2^-64 per
    /// pair.
    pub(crate) fn next_corr(&self) -> u64 {
        loop {
            let c: u64 = rand::random();
            if c != 0 {
                return c;
            }
        }
    }

    pub(crate) fn record_fault(&self, f: FaultReport) {
        let mut q = self.faults.lock();
        if q.len() == FAULT_HISTORY {
            q.pop_front();
        }
        q.push_back(f);
    }

    /// Stops listeners and actors; never blocks.
    fn stop_now(&self) {
        for a in self.begin_stop() {
            a.do_send(Stop);
        }
        self.extensions.close();
    }

    /// Stops everything but the ComObjects, whose addresses it returns for
    /// the caller to stop (empty if the node was stopped already).
    fn begin_stop(&self) -> Vec<actix::Addr<crate::com_object::ComObject>> {
        if self.signals().shut_down() {
            return Vec::new();
        }
        self.stop_listeners.send_replace(true);
        let mut actors = Vec::new();
        for e in self.entries_and_local() {
            e.outbox().close();
            // Parked sites have no channel to close and nothing pending:
            // nothing to stop (and nothing starts them again now).
            actors.extend(crate::com_object::ComObject::if_running(&e, Clone::clone));
        }
        for waiter in self.requests.drain() {
            match waiter {
                requests::Waiter::Request(tx) => {
                    let _ = tx.send(Err(RequestError::Shutdown));
                }
                requests::Waiter::Coop(c) => c.shut_down(),
            }
        }
        // The deadline tasks see the node stopped, and end.
        self.requests.poke();
        self.poke_parked_timer();
        // What was not acknowledged by now never will be (a node dropped
        // without `shutdown` too: its tracked sends must not wait for ever).
        self.deliveries()
            .fail_all(crate::error::DeliveryError::Shutdown);
        actors
    }

    /// The node's handlers, by message type (`Node::handle` and its
    /// kind register them; delivery looks them up).
    pub(crate) fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// The open cooperations, for the declared reply types.
    pub(crate) fn cooperations(&self) -> &OpenCooperations {
        &self.cooperations
    }

    /// True once [`Node::shutdown`] began: new sends are refused (replies
    /// to requests being handled still go).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
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
            .field("id", &self.inner.identity().id())
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
        self.inner.identity().id()
    }

    /// The addresses this node listens on, with real ports.
    pub fn listen_addresses(&self) -> Vec<String> {
        self.inner.identity().listen_addresses()
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &NodeConfig {
        self.inner.identity().cfg()
    }

    /// The runtime the node's actors run on.
    pub fn runtime(&self) -> &Runtime {
        self.inner.rt()
    }

    /// A reference to the site at `addr` (`tcp:HOST:PORT`, `unix:PATH`,
    /// `mem:NAME`, a plugged transport's scheme; as text or as a parsed
    /// [`Address`], see [`ToAddress`]). Cheap: the site's ComObject starts and its channel opens
    /// when the first message is sent (until then the site costs its entry
    /// in the site table, about half a kilobyte, forgotten when the last
    /// reference goes), and the same address always gives the same site.
    /// After the first handshake the site is also reached at the other
    /// addresses it listens on, the best transport first (see
    /// [`site_from_descriptor`](Self::site_from_descriptor)). One of this
    /// node's own listen addresses, as [`listen_addresses`](Self::listen_addresses)
    /// gives it, is its [`local_site`](Self::local_site); another name for
    /// this node (a wildcard address it listens on, say) is found out by
    /// the handshake, and the site fails as a connection to self.
    ///
    /// ```
    /// let node = sitenet_runtime::Node::builder().start()?;
    /// let a = node.site("tcp:127.0.0.1:7000")?; // no channel yet: opened by the first message
    /// let b = node.site("tcp:127.0.0.1:7000")?;
    /// assert_eq!(a, b); // one address, one site, one queue
    /// assert!(node.site("carrier-pigeon:coop").is_err()); // says which forms are valid
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn site(&self, addr: impl ToAddress) -> Result<SiteRef, NodeError> {
        if self.inner.signals().is_shut_down() {
            return Err(NodeError::Shutdown);
        }
        let a: Address = addr.to_address(&self.inner.identity().cfg().transports)?;
        if self.inner.identity().listens_on(&a) {
            return Ok(self.local_site());
        }
        Ok(self.inner.site_at(a))
    }

    /// The site with this id, if the node knows it (it connected to us, or
    /// we to it); this node's own id gives [`local_site`](Self::local_site).
    pub fn site_by_id(&self, id: SiteId) -> Option<SiteRef> {
        self.inner.site_with_id(id)
    }

    /// This node as a site: messages sent to it go to this node's own
    /// handlers, without touching the network, and everything else works
    /// as with any site — requests and their replies, tracked deliveries,
    /// cooperations, forwarding, a reference in a message. A runtime keeps
    /// lists of sites (the members of a group, the shards of a table) that
    /// include itself; the same code then serves all of them. A reference
    /// received for this node's id, and a descriptor of it, give this site.
    ///
    /// Messages are delivered on the node's runtime, in the order sent,
    /// after the sending call returned; one counts as delivered once its
    /// handler returned. The local site never fails.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, Runtime, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Add(u64);
    /// impl Message for Add { const ID: u32 = 1; }
    ///
    /// let node = Node::builder().runtime(Runtime::dedicated("local-doc")).start()?;
    /// node.handle(|ctx, Add(n): Add| { let _ = ctx.reply(&Add(n + 1)); })?;
    /// let me = node.local_site();
    /// assert_eq!(me.id(), Some(node.id()));
    /// let r = me.request::<Add, Add>(&Add(41)).timeout(std::time::Duration::from_secs(30)).blocking()?;
    /// assert_eq!(r.msg.0, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn local_site(&self) -> SiteRef {
        self.inner.local_site()
    }

    /// Stops gracefully: refuses new sends, waits up to `deadline` for the
    /// running async handlers ([`handle_async`](Self::handle_async)) to
    /// answer and for every queued message to be acknowledged, then drops
    /// the async handlers still running, closes channels and listeners.
    /// Returns what was still unacknowledged.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        self.inner.closing.store(true, Ordering::Release);
        let timer = self.inner.rt().delay(deadline);
        futures::pin_mut!(timer);
        // Running async handlers finish first: their answers are queued
        // like any message, and acknowledged below. Those still running at
        // the deadline are dropped when the node stops.
        let handlers = self.inner.async_handlers_done();
        futures::pin_mut!(handlers);
        let in_time = matches!(
            futures::future::select(handlers, timer.as_mut()).await,
            futures::future::Either::Left(_)
        );
        // Site by site, each woken only by its own acknowledgements: linear
        // in the number of sites, however many acks arrive. (The local site
        // too: its messages count once handled.)
        if in_time {
            'sites: for e in self.inner.entries_and_local() {
                loop {
                    let released = e.outbox().released();
                    futures::pin_mut!(released);
                    released.as_mut().enable();
                    if e.outbox().bytes() == 0 || e.failure().is_some() {
                        break;
                    }
                    if let futures::future::Either::Right(_) =
                        futures::future::select(released, timer.as_mut()).await
                    {
                        break 'sites;
                    }
                }
            }
        }
        let report = self.pending_report();
        // Each ComObject writes its final acknowledgement and closes its
        // channel before this returns (within a bound): a process that
        // exits right after `shutdown` leaves no peer holding a message we
        // received but never acknowledged.
        let stops = self.inner.begin_stop();
        let stopped = futures::future::join_all(stops.iter().map(|a| a.send(Stop)));
        let limit = self.inner.rt().delay(LISTENER_STOP_LIMIT);
        futures::pin_mut!(stopped);
        futures::pin_mut!(limit);
        if let futures::future::Either::Right(_) = futures::future::select(stopped, limit).await {
            tracing::warn!("site actors did not stop within {LISTENER_STOP_LIMIT:?}");
        }
        // Listeners are closed when this returns (the port can be bound
        // again) — within a bound: a runtime that no longer runs them must
        // not hang the caller.
        let done: Vec<_> = self.inner.listeners_done.lock().drain(..).collect();
        let all = futures::future::join_all(done);
        let limit = self.inner.rt().delay(LISTENER_STOP_LIMIT);
        futures::pin_mut!(all);
        futures::pin_mut!(limit);
        if let futures::future::Either::Right(_) = futures::future::select(all, limit).await {
            tracing::warn!("listeners did not stop within {LISTENER_STOP_LIMIT:?}");
        }
        // Stopped: what layers above kept with the node goes (an extension
        // holding a `Node` no longer keeps its state).
        self.inner.extensions.close();
        report
    }

    /// Blocking variant of [`shutdown`](Self::shutdown), for a plain `main`.
    ///
    /// On the node's own runtime thread, where it would deadlock (it waits
    /// for acknowledgements only that thread can process), it returns
    /// [`WouldDeadlock`](crate::WouldDeadlock) at once and shuts nothing
    /// down: await `shutdown` there, or drop the node (which stops it
    /// without blocking).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Save(u32);
    /// impl Message for Save { const ID: u32 = 8; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|_ctx, _: Save| {})?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// for i in 0..100 {
    ///     site.send(&Save(i)).blocking()?;
    /// }
    /// // Waits for every acknowledgement, up to the deadline, then closes.
    /// let report = client.shutdown_blocking(Duration::from_secs(30))?;
    /// assert_eq!(report.unacknowledged_bytes, 0);
    /// assert!(server.wait_until_blocking(|m| m.messages_delivered >= 100, Duration::from_secs(30))?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shutdown_blocking(
        &self,
        deadline: Duration,
    ) -> Result<ShutdownReport, crate::error::WouldDeadlock> {
        if self.inner.rt().is_current_thread() {
            return Err(crate::error::WouldDeadlock);
        }
        Ok(futures::executor::block_on(self.shutdown(deadline)))
    }

    fn pending_report(&self) -> ShutdownReport {
        let mut r = ShutdownReport::default();
        for e in self.inner.entries_and_local() {
            if e.failure().is_some() {
                continue;
            }
            let b = e.outbox().bytes();
            if b > 0 {
                r.unacknowledged_bytes += b;
                r.sites_with_pending += 1;
            }
        }
        r
    }
}
