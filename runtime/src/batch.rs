//! Batches (the IBP asynchronous client's operation lists): build a
//! [`Batch`] of operations to any number of sites — one-way sends that
//! complete when acknowledged, requests that complete with their reply —
//! and submit it: every operation is in flight at once (many pipelined on
//! one channel, not one round trip each). Wait for all or for the next one,
//! get a callback per completion, and read the number and list of failures
//! with their errors. An operation whose site failed is retried, on the
//! site now at its address (a restarted process), up to `max_retry` times.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;
use tokio::sync::mpsc;

use sitenet_protocols::node::batch::{may_retry, BatchWait, Tried};
use sitenet_protocols::OutMessage;

use crate::error::{DeliveryError, RequestError, SendError};
use crate::message::{Message, SendOptions};
use crate::node::NodeInner;
use crate::site::SiteRef;

/// What a successful operation produced.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Done {
    /// A one-way send the peer acknowledged.
    Sent,
    /// A request's reply.
    Reply {
        /// The site the request was sent to.
        from: SiteRef,
        /// The reply's type id.
        type_id: u32,
        /// Its typed header, still serialised ([`Done::decode`]).
        header: Bytes,
        /// Its body.
        body: Bytes,
    },
}

impl Done {
    /// Decodes a reply's typed header as `R` (an error for a send, or a
    /// reply of another type).
    pub fn decode<R: Message>(&self) -> Result<R, crate::error::DecodeError> {
        match self {
            Done::Reply {
                from,
                type_id,
                header,
                ..
            } => crate::node::decode_reply(&from.node, &from.entry, *type_id, header),
            Done::Sent => Err(crate::error::DecodeError::NoReply),
        }
    }
}

/// Why an operation failed (after its retries).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OpError {
    /// It could not be queued.
    #[error("not queued: {0}")]
    Send(#[from] SendError),
    /// A send was not acknowledged.
    #[error("{0}")]
    Delivery(#[from] DeliveryError),
    /// A request got no reply.
    #[error("{0}")]
    Request(#[from] RequestError),
}

impl OpError {
    /// How this try ended, for the retry rule
    /// (`sitenet_protocols::node::batch::may_retry`: only what cannot have been
    /// applied at the failed site, or a request whose reply was not seen).
    fn tried(&self) -> Tried {
        match self {
            OpError::Send(SendError::SiteFailed { .. }) => Tried::NotQueuedSiteFailed,
            OpError::Delivery(DeliveryError::NotSent { .. }) => Tried::NotSent,
            OpError::Delivery(DeliveryError::MaybeDelivered { .. }) => Tried::MaybeDelivered,
            OpError::Request(RequestError::SiteFailed(_)) => Tried::RequestSiteFailed,
            _ => Tried::Other,
        }
    }
}

/// The outcome of one operation.
pub type OpResult = Result<Done, OpError>;

/// One operation, ready to be (re)issued.
#[derive(Clone)]
struct Op {
    site: SiteRef,
    /// The encoded message; a request's has `kind` Request.
    msg: OutMessage,
    /// A request's reply timeout; `None` for a send.
    timeout: Option<Duration>,
}

type Callback = Arc<dyn Fn(usize, &OpResult) + Send + Sync>;

/// See the module documentation. Operations are numbered in the order they
/// were added, from 0.
pub struct Batch {
    node: Arc<NodeInner>,
    ops: Vec<Op>,
    max_retry: u32,
    on_complete: Option<Callback>,
}

impl Batch {
    pub(crate) fn new(node: Arc<NodeInner>) -> Self {
        Self {
            node,
            ops: Vec::new(),
            max_retry: 0,
            on_complete: None,
        }
    }

    /// Retries an operation whose site failed up to `n` times (default 0).
    pub fn max_retry(mut self, n: u32) -> Self {
        self.max_retry = n;
        self
    }

    /// Calls `f(index, outcome)` as each operation completes (on the node's
    /// runtime: it must not block).
    pub fn on_complete(mut self, f: impl Fn(usize, &OpResult) + Send + Sync + 'static) -> Self {
        self.on_complete = Some(Arc::new(f));
        self
    }

    /// Adds a one-way send, done when the peer acknowledged it. Returns its
    /// index.
    pub fn send<M: Message>(&mut self, site: &SiteRef, msg: &M) -> Result<usize, SendError> {
        self.send_with(site, msg, SendOptions::new())
    }

    /// [`send`](Self::send) with options: a priority and a body.
    pub fn send_with<M: Message>(
        &mut self,
        site: &SiteRef,
        msg: &M,
        opts: SendOptions,
    ) -> Result<usize, SendError> {
        let msg = site.encode(msg, opts, sitenet_protocols::MessageKind::OneWay, 0)?;
        Ok(self.push(site, msg, None))
    }

    /// Adds a request, done with its reply (or failed after `timeout`).
    /// Returns its index.
    pub fn request<Q: Message>(
        &mut self,
        site: &SiteRef,
        req: &Q,
        timeout: Duration,
    ) -> Result<usize, SendError> {
        self.request_with(site, req, SendOptions::new(), timeout)
    }

    /// [`request`](Self::request) with options: a priority and a body.
    pub fn request_with<Q: Message>(
        &mut self,
        site: &SiteRef,
        req: &Q,
        opts: SendOptions,
        timeout: Duration,
    ) -> Result<usize, SendError> {
        let msg = site.encode(req, opts, sitenet_protocols::MessageKind::Request, 0)?;
        Ok(self.push(site, msg, Some(timeout)))
    }

    fn push(&mut self, site: &SiteRef, msg: OutMessage, timeout: Option<Duration>) -> usize {
        self.ops.push(Op {
            site: site.clone(),
            msg,
            timeout,
        });
        self.ops.len() - 1
    }

    /// Starts every operation at once and returns the handle to their
    /// outcomes.
    pub fn submit(self) -> Submitted {
        let (tx, rx) = mpsc::unbounded_channel();
        let n = self.ops.len();
        for (i, op) in self.ops.into_iter().enumerate() {
            let tx = tx.clone();
            let node = self.node.clone();
            let cb = self.on_complete.clone();
            let max_retry = self.max_retry;
            self.node.rt().spawn(async move {
                let r = run(&node, op, max_retry).await;
                if let Some(cb) = cb {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(i, &r))).is_err()
                    {
                        tracing::error!(op = i, "batch callback panicked");
                    }
                }
                let _ = tx.send((i, r));
            });
        }
        Submitted {
            node: self.node,
            rx,
            wait: BatchWait::new(n),
        }
    }
}

/// Runs one operation, retrying it on the site now at its address while
/// its failure allows and retries are left.
async fn run(node: &Arc<NodeInner>, mut op: Op, max_retry: u32) -> OpResult {
    let mut tries = 0;
    loop {
        let r = attempt(node, &op).await;
        match r {
            Err(e) if may_retry(e.tried(), tries, max_retry) => {
                tries += 1;
                tracing::debug!(error = %e, tries, "batch operation retried");
                let at = op.site.address().and_then(|a| a.parse().ok());
                if let Some(a) = at.filter(|_| !node.signals().is_shut_down()) {
                    op.site = node.site_at(a);
                }
            }
            r => return r,
        }
    }
}

/// One try of an operation: under a fresh token or request id each time.
async fn attempt(node: &NodeInner, op: &Op) -> OpResult {
    let mut m = op.msg.clone();
    match op.timeout {
        None => {
            op.site.post_tracked(m).await?.await?;
            Ok(Done::Sent)
        }
        Some(timeout) => {
            m.corr = node.next_corr();
            let r = op.site.request_message(m, timeout).await?;
            Ok(Done::Reply {
                from: op.site.clone(),
                type_id: r.prelude.type_id,
                header: r.header,
                body: r.body,
            })
        }
    }
}

/// A submitted batch: its outcomes as they come.
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node, SendOptions};
/// #[derive(Serialize, Deserialize)]
/// struct Work(u64);
/// impl Message for Work { const ID: u32 = 17; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|ctx, Work(n): Work| { let _ = ctx.reply(&Work(n * 2)); })?;
/// let client = Node::builder().start()?;
/// let site = client.site(&server.listen_addresses()[0])?;
/// let mut b = client.batch();
/// for n in 0..5 {
///     b.request(&site, &Work(n), Duration::from_secs(30))?;
/// }
/// let mut running = b.submit();
/// let mut sum = 0;
/// // Each completion as it comes, in whatever order.
/// futures::executor::block_on(async {
///     while let Some((_index, outcome)) = running.wait_any(Duration::from_secs(30)).await {
///         sum += outcome.expect("answered").decode::<Work>()?.0;
///     }
///     Ok::<_, sitenet_runtime::DecodeError>(())
/// })?;
/// assert_eq!(sum, 2 * (0 + 1 + 2 + 3 + 4));
/// assert_eq!(running.pending(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Submitted {
    node: Arc<NodeInner>,
    rx: mpsc::UnboundedReceiver<(usize, OpResult)>,
    /// What is done and what each produced; how long a wait lasts
    /// (`sitenet_protocols::node::batch`: this only awaits).
    wait: BatchWait<OpResult>,
}

/// What [`Submitted::wait_all`] found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Each operation's outcome, by index (`None`: not done by the
    /// deadline).
    pub results: Vec<Option<OpResult>>,
}

impl Report {
    /// The failed operations with their errors, by index.
    pub fn failures(&self) -> Vec<(usize, &OpError)> {
        self.results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Err(e)) => Some((i, e)),
                _ => None,
            })
            .collect()
    }

    /// True if every operation is done and none failed.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| matches!(r, Some(Ok(_))))
    }
}

/// No operation of a batch completed within the wait's timeout (see
/// [`Submitted::next_done`]); the others are still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no operation completed within {0:?}")]
pub struct WaitTimedOut(pub Duration);

impl Submitted {
    /// Operations not done yet.
    pub fn pending(&self) -> usize {
        self.wait.pending()
    }

    /// The next operation to complete, telling the two ends apart:
    /// `Ok(Some((index, outcome)))`, `Ok(None)` once every operation is
    /// done (nothing is left to wait for), or `Err(WaitTimedOut)` if none
    /// completed within `timeout` (some are still pending).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::{Node, SendOptions, batch::WaitTimedOut, services::Echo};
    /// let node = Node::builder().start()?;
    /// // Nothing listens there: the request neither completes nor fails yet.
    /// let site = node.site("tcp:127.0.0.1:9")?;
    /// let mut b = node.batch();
    /// b.request(&site, &Echo { seq: 1 }, Duration::from_secs(60))?;
    /// let mut running = b.submit();
    /// futures::executor::block_on(async {
    ///     let ms = Duration::from_millis(50);
    ///     assert_eq!(running.next_done(ms).await.unwrap_err(), WaitTimedOut(ms));
    ///     node.kill(&site); // the request fails with the site
    ///     let (i, outcome) = running.next_done(Duration::from_secs(60)).await.unwrap().unwrap();
    ///     assert!(i == 0 && outcome.is_err());
    ///     assert!(running.next_done(ms).await.unwrap().is_none()); // all done
    /// });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn next_done(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<(usize, OpResult)>, WaitTimedOut> {
        if self.pending() == 0 {
            return Ok(None);
        }
        match self.wait_any(timeout).await {
            Some(done) => Ok(Some(done)),
            None if self.pending() == 0 => Ok(None),
            None => Err(WaitTimedOut(timeout)),
        }
    }

    /// The next operation to complete: its index and outcome (`None` once
    /// all are done, or if none completes within `timeout` — the two look
    /// alike here; [`next_done`](Self::next_done) tells them apart).
    pub async fn wait_any(&mut self, timeout: Duration) -> Option<(usize, OpResult)> {
        let timeout = self.wait.wait_any(timeout)?;
        let timer = self.node.rt().delay(timeout);
        futures::pin_mut!(timer);
        let next = self.rx.recv();
        futures::pin_mut!(next);
        match futures::future::select(next, timer).await {
            futures::future::Either::Left((Some((i, r)), _)) => {
                if let Err(e) = self.wait.completed(i, r.clone()) {
                    tracing::error!(error = %e, "batch outcome not recorded");
                }
                Some((i, r))
            }
            _ => None,
        }
    }

    /// Waits until every operation is done, at most `timeout`; the report
    /// has every outcome known by then (those already taken by
    /// [`wait_any`](Self::wait_any) included).
    pub async fn wait_all(mut self, timeout: Duration) -> Report {
        let all = self.wait.wait_all(std::time::Instant::now(), timeout);
        while let Some(left) = all.next_wait(std::time::Instant::now(), &self.wait) {
            if self.wait_any(left).await.is_none() {
                break;
            }
        }
        Report {
            results: self.wait.into_results(),
        }
    }
}

/// Making a batch.
impl crate::Node {
    /// A new batch of operations (IBP's operation lists): see
    /// [`batch`](crate::batch).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Put(u32);
    /// impl Message for Put { const ID: u32 = 10; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Get;
    /// impl Message for Get { const ID: u32 = 11; }
    ///
    /// // Three servers that store a number and give it back.
    /// let servers: Vec<Node> = (0..3)
    ///     .map(|_| {
    ///         let n = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    ///         let stored = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    ///         let s = stored.clone();
    ///         n.handle(move |_ctx, Put(v): Put| s.store(v, std::sync::atomic::Ordering::SeqCst))?;
    ///         n.handle(move |ctx, _: Get| {
    ///             let _ = ctx.reply(&Put(stored.load(std::sync::atomic::Ordering::SeqCst)));
    ///         })?;
    ///         Ok(n)
    ///     })
    ///     .collect::<Result<_, sitenet_runtime::NodeError>>()?;
    /// let node = Node::builder().start()?;
    /// let sites = servers
    ///     .iter()
    ///     .map(|s| node.site(&s.listen_addresses()[0]))
    ///     .collect::<Result<Vec<_>, _>>()?;
    ///
    /// // All in flight at once; a failed site's operation is retried twice.
    /// let mut b = node.batch().max_retry(2);
    /// for (i, s) in sites.iter().enumerate() {
    ///     b.send(s, &Put(i as u32 + 1))?;
    ///     b.request(s, &Get, Duration::from_secs(30))?;
    /// }
    /// let report = futures::executor::block_on(b.submit().wait_all(Duration::from_secs(30)));
    /// assert!(report.all_ok(), "{:?}", report.failures());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn batch(&self) -> crate::batch::Batch {
        crate::batch::Batch::new(self.inner.clone())
    }
}
