//! Building and starting a [`Node`]: its configuration, runtime and
//! listeners, bound before anything runs so an address in use is an error
//! of `start`, not a log line later.

use super::*;
use crate::error::ConfigError;
use crate::node_state::{Identity, Security};

/// Builds a [`Node`].
///
/// ```
/// use std::time::Duration;
/// use sitenet_runtime::{Node, Runtime};
///
/// // Listens on loopback (port 0: the kernel picks one) and in-process,
/// // with a faster reconnect than the default and a thread of its own.
/// let node = Node::builder()
///     .listen("tcp:127.0.0.1:0")
///     .listen("mem:builder-doc")
///     .configure(|c| c.reconnect_min = Duration::from_millis(10))
///     .runtime(Runtime::dedicated("builder-doc"))
///     .start()?;
/// assert_eq!(node.listen_addresses().len(), 2);
/// assert!(node.listen_addresses()[0].starts_with("tcp:127.0.0.1:"));
/// # Ok::<(), sitenet_runtime::NodeError>(())
/// ```
#[derive(Debug, Default)]
pub struct NodeBuilder {
    listen: Vec<String>,
    cfg: NodeConfig,
    /// Transports plugged in by [`transport`](Self::transport), added to
    /// the configuration's when the node starts (so `config` may come
    /// before or after), and the first refusal, reported then.
    transports: sitenet_transport::TransportRegistry,
    transport_error: Option<sitenet_transport::RegisterError>,
    runtime: Option<Runtime>,
    /// The versions and capabilities the node offers: this build's, but
    /// in sitenet's own tests that play an older or newer build.
    pub(crate) speaks: sitenet_protocols::Speaks,
}

impl NodeBuilder {
    /// Listens on `addr` (`tcp:HOST:PORT`; port 0 picks a free port;
    /// `unix:PATH`, `mem:NAME`, `tls:HOST:PORT`, or `SCHEME:ADDRESS` of a
    /// plugged transport). May be called several times. A node without
    /// listeners only connects out.
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen.push(addr.into());
        self
    }

    /// Plugs in `transport` under `scheme` (without the colon): the node
    /// then parses, dials and listens at `SCHEME:ADDRESS` through it
    /// (`node.site("pipe:b")`, `.listen("pipe:a")`), and keeps peers'
    /// addresses of that scheme, tried after tcp and tls. Accepted
    /// channels go through the same admission as TCP ones: the node's
    /// slot limits, handshake caps and silence deadline apply. A built-in
    /// scheme, a name that is not a scheme, or one plugged in twice is
    /// [`NodeError::Transport`] from [`start`](Self::start). Adds to
    /// [`NodeConfig::transports`], whichever of this and
    /// [`config`](Self::config) comes first.
    ///
    /// See `examples/custom_transport.rs` for a whole transport (pipes
    /// between nodes of one process) and
    /// [`sitenet_transport::plug::Transport`] for the trait.
    pub fn transport(
        mut self,
        scheme: &str,
        transport: std::sync::Arc<dyn sitenet_transport::Transport>,
    ) -> Self {
        if let Err(e) = self.transports.register(scheme, transport) {
            self.transport_error.get_or_insert(e);
        }
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

    /// Who gives a channel slot up while peers wait in line, and so who is
    /// served next (`NodeConfig::admission`): `Share`, short
    /// turns in rotation, or `Fifo`, first come stays until preempted.
    ///
    /// ```
    /// use sitenet_protocols::slots::Admission;
    /// use sitenet_runtime::Node;
    ///
    /// let node = Node::builder().admission(Admission::Fifo).start()?;
    /// assert_eq!(node.stats().slots.admission, "fifo");
    /// # let _ = node.shutdown_blocking(std::time::Duration::from_secs(1));
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn admission(mut self, a: sitenet_protocols::slots::Admission) -> Self {
        self.cfg.admission = Some(a);
        self
    }

    /// Chooses the open level explicitly ([`NodeConfig::allow_open`]): a
    /// node with no cookie and no certificate may then listen where other
    /// hosts reach it, and ANYONE WHO REACHES IT CAN BE ANY SITE. Without
    /// this, such a listen is refused at start
    /// ([`NodeError::OpenToNetwork`]); loopback, `unix:` and `mem:`
    /// listens need no choice.
    ///
    /// ```
    /// use sitenet_runtime::{Node, NodeError};
    ///
    /// let e = Node::builder().listen("tcp:0.0.0.0:0").start().unwrap_err();
    /// assert!(matches!(e, NodeError::OpenToNetwork { .. }));
    /// let node = Node::builder().listen("tcp:0.0.0.0:0").open().start()?;
    /// # let _ = node.shutdown_blocking(std::time::Duration::from_secs(1));
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn open(mut self) -> Self {
        self.cfg.allow_open = true;
        self
    }

    /// Runs the node's actors on the process-wide pool of `threads`
    /// threads (see [`NodeConfig::threads`]), its sites spread over them.
    /// A runtime given with [`runtime`](Self::runtime) takes precedence.
    ///
    /// ```
    /// use sitenet_runtime::Node;
    ///
    /// let node = Node::builder().threads(2).start()?;
    /// assert_eq!(node.runtime().threads(), 2);
    /// # let _ = node.shutdown_blocking(std::time::Duration::from_secs(1));
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn threads(mut self, threads: usize) -> Self {
        self.cfg.threads = Some(threads);
        self
    }

    /// Runs the node's actors on this runtime instead of the default.
    pub fn runtime(mut self, rt: Runtime) -> Self {
        self.runtime = Some(rt);
        self
    }

    /// Makes the node offer `speaks` in its handshakes instead of this
    /// build's versions and capabilities: a test plays a node of an older
    /// build (fewer capabilities) or a newer one (a higher version, a
    /// capability this build does not know) against current nodes.
    #[cfg(feature = "test-hooks")]
    pub fn speak_for_tests(mut self, speaks: sitenet_protocols::Speaks) -> Self {
        self.speaks = speaks;
        self
    }

    /// The first half of [`start`](Self::start) (in `start.rs`, the top
    /// layer, which registers the built-in services between the halves):
    /// checks the configuration, binds the listeners and makes the node's
    /// state; nothing listens yet.
    /// `inbox` makes each ComObject's inbox (delivery to the handlers);
    /// `drain_local` delivers the local site's messages to them.
    pub(crate) fn bind(
        mut self,
        inbox: super::MakeInbox,
        drain_local: super::DrainLocal,
    ) -> Result<Bound, NodeError> {
        if let Some(e) = self.transport_error {
            return Err(e.into());
        }
        self.cfg.transports.extend(&self.transports)?;
        let cfg = self.cfg.normalised();
        cfg.check()?;
        let output = crate::outbox::OutputBound {
            site: cfg.output_bound,
            node: crate::outbox::NodeOutput::new(cfg.node_output_bound),
        };
        // Each node on a pool takes its home thread in turn (its sites
        // spread over every thread from there).
        let rt = match (self.runtime, cfg.threads) {
            (Some(rt), _) => rt,
            (None, Some(n)) => Runtime::shared_with_threads(n),
            (None, None) => Runtime::current_or_shared(),
        }
        .spread();
        let mut bound = Vec::new();
        let mut listen = Vec::new();
        for a in &self.listen {
            let addr: Address = cfg.transports.parse(a)?;
            // A node with a certificate demands one of every peer: a
            // listener where peers cannot prove one would refuse them all.
            if cfg.tls.is_some() && !addr.is_tls() {
                return Err(ConfigError::PlainListenWithCertificate { addr: a.clone() }.into());
            }
            // And a tls: listener without one would run no TLS while
            // peers dial it with TLS.
            if cfg.tls.is_none() && addr.is_tls() {
                return Err(ConfigError::TlsListenWithoutCertificate { addr: a.clone() }.into());
            }
            let b = cfg
                .transports
                .bind(&addr)
                .map_err(|source| NodeError::Bind {
                    addr: a.clone(),
                    source,
                })?;
            let local = b.local_address().map_err(|source| NodeError::Bind {
                addr: a.clone(),
                source,
            })?;
            // Open to other hosts only by choice. Judged on the address as
            // bound: a host name resolved, the wildcard kept as such.
            if reachable_from_other_hosts(&local)
                && cfg.cookies.is_empty()
                && cfg.tls.is_none()
                && !cfg.allow_open
            {
                return Err(NodeError::OpenToNetwork {
                    addr: local.to_string(),
                });
            }
            listen.push(local);
            bound.push(b);
        }
        // Under TLS the site is the one its certificate names.
        let id = match &cfg.tls {
            Some(t) => t.site(),
            None => SiteId(rand::random::<u128>()),
        };
        // Every handshake this node makes carries its listen list: check it
        // fits once, here, rather than failing every open later.
        LocalInfo {
            site: id,
            listen: listen.iter().map(ToString::to_string).collect(),
            buffer_size: cfg.buffer_size,
            max_message: cfg.max_message_size,
            speaks: self.speaks,
        }
        .validate()
        .map_err(ConfigError::Handshake)?;
        let budget = ReassemblyBudget::new(cfg.reassembly_budget);
        let slots = cfg
            .trans_controller
            .clone()
            .unwrap_or_else(sitenet_transport::TransController::process);
        if let Some(a) = cfg.admission {
            slots.set_admission(a);
        }
        let mut com_cfg = cfg.com(id);
        // Peers can call this node back only if it listens.
        com_cfg.callable = !listen.is_empty();
        let com_cfg = Arc::new(com_cfg);
        let cfg_admission = cfg.admission();
        let security = Security::new(
            sitenet_protocols::Keyring::new(cfg.cookies.clone()),
            cfg.remembered_pairs,
        );
        let sites = Mutex::new(SiteTable::new(
            cfg.forward_claims_per_peer,
            cfg.site_ref_claims_per_peer,
            cfg.dial_bounds(),
            cfg.plugged_schemes(),
        ));
        let shared = NodeShared::new(
            Identity::new(id, cfg, listen, self.speaks),
            security,
            rt.clone(),
            slots,
            com_cfg,
            budget,
        );
        let inner = Arc::new(NodeInner {
            shared,
            handlers: Handlers::default(),
            inbox,
            drain_local,
            sites,
            requests: Arc::default(),
            parked: Arc::default(),
            cooperations: Default::default(),
            closing: AtomicBool::new(false),
            stop_listeners: tokio::sync::watch::Sender::new(false),
            async_idle: Notify::new(),
            faults: Mutex::new(VecDeque::new()),
            handshakes: super::accept::Handshakes::new(cfg_admission),
            output,
            listeners_done: Mutex::new(Vec::new()),
            local: std::sync::OnceLock::new(),
            extensions: Default::default(),
            stopper: std::sync::OnceLock::new(),
        });
        inner.start_request_timer();
        inner.start_parked_timer();
        // The summaries of the log lines peers caused that the limits
        // dropped, when no line comes to carry them.
        let mut stop = inner.stop_listeners.subscribe();
        inner.rt().spawn(
            inner
                .peer_logs()
                .clone()
                .summaries(async move { super::accept::stopped(&mut stop).await }),
        );
        Ok(Bound { inner, bound, rt })
    }
}

/// Whether a bound listen address can be reached from other hosts: a
/// `tcp:` address on anything but loopback (the wildcard `0.0.0.0` or `::`
/// included). `tls:` needs a certificate anyway; `unix:` and `mem:` never
/// leave the host; a plugged transport's addresses are its own to judge.
fn reachable_from_other_hosts(addr: &Address) -> bool {
    match addr {
        Address::Tcp { host, .. } => host
            .parse::<std::net::IpAddr>()
            .map_or(host != "localhost", |ip| !ip.is_loopback()),
        _ => false,
    }
}

/// A node bound but not yet listening (see [`NodeBuilder::bind`]).
pub(crate) struct Bound {
    pub(crate) inner: Arc<NodeInner>,
    bound: Vec<BoundListener>,
    rt: Runtime,
}

impl Bound {
    /// The second half of `start`: spawns the accept loops and hands out
    /// the node.
    pub(crate) fn run(self) -> Node {
        let Self { inner, bound, rt } = self;
        let id = inner.identity().id();
        if !bound.is_empty() {
            rt.spawn(inner.clone().handshake_deadlines());
        }
        for b in bound {
            let node = inner.clone();
            let (done_tx, done_rx) = oneshot::channel();
            inner.listeners_done.lock().push(done_rx);
            let lanes_rt = rt.clone();
            rt.spawn(async move {
                match b.into_listener() {
                    Ok(l) => {
                        // A mem listener accepts on every thread the
                        // connections made there (`accept_lane`).
                        if let (sitenet_transport::Listener::Mem(m), true) =
                            (&l, lanes_rt.threads() > 1)
                        {
                            for i in 0..lanes_rt.threads() {
                                let lanes = m.lanes();
                                let node = node.clone();
                                lanes_rt.arbiter_at(i).spawn(node.accept_lane(lanes));
                            }
                        }
                        node.accept_loop(l).await
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot register listener with the runtime")
                    }
                }
                // The listener is dropped (closed) by now.
                let _ = done_tx.send(());
            });
        }
        let slots = inner.slots().stats();
        tracing::info!(
            site = %id,
            listen = ?inner.identity().listen_addresses(),
            slots_weak = slots.weak,
            slots_hard = slots.hard,
            transport_bytes_bound = slots.hard as u64 * 2 * inner.identity().cfg().buffer_size as u64,
            "node started"
        );
        let stopper = Arc::new(StopOnDrop(inner.clone()));
        let _ = inner.stopper.set(Arc::downgrade(&stopper));
        Node {
            _stopper: Some(stopper),
            inner,
        }
    }
}

/// Stops the node (without blocking) when the last user handle drops.
pub(super) struct StopOnDrop(pub(super) Arc<NodeInner>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop_now();
    }
}
