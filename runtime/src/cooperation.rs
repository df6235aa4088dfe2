//! Cooperations at the API (Paradis-Net): [`Node::cooperation`] makes a
//! [`Cooperation`], a set of expected replies described by receive
//! descriptors ([`Expect`]); requests sent through it ([`Cooperation::request`])
//! have their replies fill the descriptors, and it completes when every
//! descriptor is filled. Wait for it with a timeout, check it without
//! blocking, or cancel it (every waiter wakes). Replies that arrive after it
//! ended — completed, cancelled, timed out, failed — are discarded and
//! counted (`Metrics::replies_discarded`), as are replies that match no
//! descriptor. Besides the replies to its requests, a cooperation takes the
//! one-way messages of the types declared cooperation replies
//! (`Node::cooperation_reply`): answers a site sends on its own, such as a
//! vote, fill the first open cooperation with a matching descriptor. The matching rules are the protocol's, in
//! `sitenet_protocols::node::cooperation`; this module routes replies to them.
//!
//! [`Node::cooperation`]: crate::Node::cooperation

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use thiserror::Error;
use tokio::sync::Notify;

use sitenet_protocols::node::cooperation::{self as machine, End, Offered};
use sitenet_protocols::{InMessage, MessageKind, SiteId};

use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::metrics::Counters;
use crate::node::{Coop, NodeInner};
use crate::site::SiteRef;
use crate::site_entry::SiteEntry;

/// A site as the cooperation machine compares it: the entry it resolves
/// to (two references to one site are the same site). The key of a reply
/// that filled a descriptor holds a counted reference (`held`), so the site
/// its [`Answer`] names is not reclaimed before the answer is read.
#[derive(Clone)]
pub(crate) struct SiteKey {
    entry: Arc<SiteEntry>,
    held: Option<SiteRef>,
}

impl SiteKey {
    /// A key to compare with (a descriptor's site, a failed site).
    fn of(entry: &Arc<SiteEntry>) -> Self {
        Self {
            entry: entry.clone(),
            held: None,
        }
    }

    /// The key of a reply from `entry`, holding the site while it is kept.
    fn holding(entry: &Arc<SiteEntry>, node: &Arc<NodeInner>) -> Self {
        Self {
            entry: entry.clone(),
            held: Some(SiteRef::counted(entry.clone(), node.clone())),
        }
    }
}

impl PartialEq for SiteKey {
    fn eq(&self, other: &Self) -> bool {
        self.entry.same_site(&other.entry)
    }
}

/// A receive descriptor (see the module documentation): from one site or
/// any, of one type or any, with a body limit.
///
/// ```
/// # use std::time::Duration;
/// # use bytes::Bytes;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Expect, Message, Node, SendOptions};
/// #[derive(Serialize, Deserialize)]
/// struct Fetch;
/// impl Message for Fetch { const ID: u32 = 14; }
/// #[derive(Serialize, Deserialize)]
/// struct Page;
/// impl Message for Page { const ID: u32 = 15; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|ctx, _: Fetch| { let _ = ctx.reply_with(&Page, SendOptions::new().body(vec![1u8; 10_000])); })?;
/// let client = Node::builder().start()?;
/// let site = client.site(&server.listen_addresses()[0])?;
/// let coop = client.cooperation();
/// // From this site, of type Page, keeping at most 1 KiB of its body.
/// coop.expect(Expect::from_site(&site).of::<Page>().max_body(1024));
/// let answers = futures::executor::block_on(async {
///     coop.request(&site, &Fetch).await?;
///     Ok::<_, Box<dyn std::error::Error>>(coop.wait(Duration::from_secs(30)).await?)
/// })?;
/// assert!(answers[0].truncated());
/// assert_eq!((answers[0].body.len(), answers[0].size), (1024, 10_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Expect(machine::Expect<SiteKey>);

impl Expect {
    /// A reply from any site, of any type, whole.
    pub fn any() -> Self {
        Self(machine::Expect::any())
    }

    /// A reply from `site`.
    pub fn from_site(site: &SiteRef) -> Self {
        Self::any().and_from(site)
    }

    /// A reply from `site`: the old name of [`from_site`](Self::from_site),
    /// which read like `From::from`.
    #[deprecated(since = "0.1.0", note = "use Expect::from_site")]
    pub fn from(site: &SiteRef) -> Self {
        Self::from_site(site)
    }

    /// ... from `site` only.
    pub fn and_from(mut self, site: &SiteRef) -> Self {
        self.0.from = Some(SiteKey::of(&site.entry));
        self
    }

    /// ... of type `R` only.
    pub fn of<R: Message>(mut self) -> Self {
        self.0.type_id = Some(R::ID);
        self
    }

    /// ... keeping at most `n` body bytes: a longer body is truncated and
    /// its real size reported ([`Answer::size`]); a shorter one is fine.
    pub fn max_body(mut self, n: usize) -> Self {
        self.0.max_body = Some(n);
        self
    }
}

/// A reply that filled a descriptor.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The site that sent it.
    pub from: SiteRef,
    /// Its message type's wire id.
    pub type_id: u32,
    /// Its typed header, still serialised ([`decode`](Self::decode)).
    pub header: Bytes,
    /// Its body, truncated to the descriptor's limit.
    pub body: Bytes,
    /// The body's real size.
    pub size: u64,
}

impl Answer {
    /// Decodes the typed header as `R`.
    pub fn decode<R: Message>(&self) -> Result<R, crate::error::DecodeError> {
        crate::node::decode_reply(
            &self.from.node,
            &self.from.entry,
            self.type_id,
            &self.header,
        )
    }

    /// True if the body was longer than the descriptor allowed.
    pub fn truncated(&self) -> bool {
        self.size > self.body.len() as u64
    }
}

/// Why a cooperation ended without every descriptor filled.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum CoopError {
    /// The wait timed out; `answers` has each descriptor's reply, if it
    /// came (in the order the descriptors were added).
    #[error("the cooperation timed out with {missing} of its replies missing")]
    TimedOut {
        /// Each descriptor's reply so far.
        answers: Vec<Option<Answer>>,
        /// How many are missing.
        missing: usize,
    },
    /// It was cancelled.
    #[error("the cooperation was cancelled")]
    Cancelled,
    /// It was waited for with nothing to expect ([`Cooperation::expect`]
    /// was never called): it could never complete, so the wait ends at
    /// once.
    #[error("the cooperation expects nothing: add descriptors with expect() before waiting")]
    NothingExpected,
    /// A site a descriptor waits for failed, or answered with an error.
    #[error("site {site:?} failed: {reason}")]
    Failed {
        /// The site, if its id is known.
        site: Option<SiteId>,
        /// Why.
        reason: String,
    },
    /// The node was shut down.
    #[error("the node was shut down")]
    Shutdown,
}

/// A cooperation's state, shared by its handles and its pending requests.
pub(crate) struct CoopState {
    /// The machine, which also records its requests (removed from the
    /// node's table when it ends: `Cooperation::take_requests`).
    machine: Mutex<machine::Cooperation<SiteKey>>,
    changed: Notify,
    shut_down: std::sync::atomic::AtomicBool,
    /// Live `Cooperation` handles (the node's table holds the state too).
    handles: std::sync::atomic::AtomicUsize,
}

/// The node calls these (its request table and open list, `node::Coop`).
impl Coop for CoopState {
    fn offer(&self, node: &Arc<NodeInner>, from: &Arc<SiteEntry>, m: InMessage) {
        if !self.take(node, from, m.prelude.type_id, m.header, m.body) {
            Counters::add(&node.counters().replies_discarded, 1);
            tracing::debug!(site = ?from.id(), "reply matches no descriptor of its cooperation; discarded");
        }
    }

    fn take(
        &self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        type_id: u32,
        header: Bytes,
        body: Bytes,
    ) -> bool {
        let r = self
            .machine
            .lock()
            .offer(SiteKey::holding(from, node), type_id, header, body);
        match r {
            Offered::Filled { complete, .. } => {
                if complete {
                    self.ended(node);
                } else {
                    self.changed.notify_waiters();
                }
                true
            }
            Offered::Unexpected | Offered::Ended => false,
        }
    }

    fn site_failed(&self, node: &NodeInner, site: &Arc<SiteEntry>, reason: &str) {
        if self.machine.lock().site_failed(&SiteKey::of(site), reason) {
            self.ended(node);
        }
    }

    fn shut_down(&self) {
        self.shut_down
            .store(true, std::sync::atomic::Ordering::Release);
        self.machine.lock().cancel();
        self.changed.notify_waiters();
    }

    fn is_open(&self) -> bool {
        self.machine.lock().end().is_none()
    }
}

impl CoopState {
    /// It ended: its other requests are forgotten (their replies will be
    /// discarded and counted) and every waiter wakes.
    fn ended(&self, node: &NodeInner) {
        let corrs = self.machine.lock().take_requests();
        node.forget_requests(&corrs);
        self.changed.notify_waiters();
    }
}

/// See the module documentation. Cheap to clone: clones share the
/// cooperation (several tasks may wait for it; a cancel wakes them all).
/// When the last handle is dropped it is cancelled.
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{CoopError, Expect, Message, Node, SendOptions};
/// #[derive(Serialize, Deserialize)]
/// struct Ask;
/// impl Message for Ask { const ID: u32 = 16; }
///
/// // A site that never answers (it keeps every responder: one dropped
/// // would answer "no reply" at once): the cooperation is checked without
/// // blocking, waited for with a timeout, and cancelled.
/// let silent = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// let kept = std::sync::Mutex::new(Vec::new());
/// silent.handle(move |ctx, _: Ask| kept.lock().unwrap().extend(ctx.responder()))?;
/// let client = Node::builder().start()?;
/// let site = client.site(&silent.listen_addresses()[0])?;
/// let coop = client.cooperation();
/// coop.expect(Expect::from_site(&site));
/// futures::executor::block_on(coop.request(&site, &Ask))?;
/// assert!(coop.check().is_none()); // still open
/// let waited = futures::executor::block_on(coop.wait(Duration::from_millis(50)));
/// assert!(matches!(waited, Err(CoopError::TimedOut { missing: 1, .. })));
/// coop.cancel(); // wakes every waiter; a late reply is discarded and counted
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Cooperation {
    node: Arc<NodeInner>,
    state: Arc<CoopState>,
}

impl std::fmt::Debug for Cooperation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.state.machine.lock();
        f.debug_struct("Cooperation")
            .field("missing", &m.missing())
            .field("ended", &m.end().is_some())
            .finish()
    }
}

impl Cooperation {
    pub(crate) fn new(node: Arc<NodeInner>) -> Self {
        let state = Arc::new(CoopState {
            machine: Mutex::new(machine::Cooperation::new()),
            changed: Notify::new(),
            shut_down: Default::default(),
            handles: std::sync::atomic::AtomicUsize::new(1),
        });
        node.cooperations()
            .add(Arc::downgrade(&state) as std::sync::Weak<dyn Coop>);
        Self { node, state }
    }

    /// Adds a receive descriptor (before the replies it should take are
    /// sent for); returns its index in the answers. Declare every
    /// descriptor before sending any request: the cooperation completes as
    /// soon as every descriptor declared so far is filled, so a reply that
    /// comes back before the next `expect` would end it early.
    pub fn expect(&self, e: Expect) -> usize {
        self.state.machine.lock().expect(e.0)
    }

    /// Sends `req` to `site` as a request of this cooperation: its reply
    /// fills the first unfilled descriptor it matches (or is discarded and
    /// counted if none does). Waits for room like `SiteRef::send`.
    pub async fn request<Q: Message>(&self, site: &SiteRef, req: &Q) -> Result<(), SendError> {
        self.request_with(site, req, SendOptions::new()).await
    }

    /// [`request`](Self::request) with options: a priority and a body.
    pub async fn request_with<Q: Message>(
        &self,
        site: &SiteRef,
        req: &Q,
        opts: SendOptions,
    ) -> Result<(), SendError> {
        let corr = self.node.next_corr();
        let m = site.encode(req, opts, MessageKind::Request, corr)?;
        self.node
            .register_coop_request(corr, site.entry.resolved(), self.state.clone());
        let recorded = self.state.machine.lock().sent(corr);
        if let Err(e) = site.post(m).await {
            self.node.cancel_request(corr);
            return Err(e);
        }
        // Ended before (not recorded) or meanwhile: its reply will find
        // nothing.
        if !recorded || self.state.machine.lock().end().is_some() {
            self.node.forget_requests(&[corr]);
        }
        Ok(())
    }

    /// The outcome if it is known now, without waiting: `Some(Ok(answers))`
    /// once every descriptor is filled, `Some(Err(_))` once it ended
    /// otherwise, `None` while replies are missing.
    pub fn check(&self) -> Option<Result<Vec<Answer>, CoopError>> {
        let m = self.state.machine.lock();
        let answers = || {
            m.filled()
                .map(|f| {
                    f.map(|f| Answer {
                        from: f.from.held.clone().unwrap_or_else(|| {
                            SiteRef::counted(f.from.entry.clone(), self.node.clone())
                        }),
                        type_id: f.type_id,
                        header: f.header.clone(),
                        body: f.body.clone(),
                        size: f.size,
                    })
                })
                .collect::<Vec<_>>()
        };
        Some(match m.end()? {
            End::Complete => Ok(answers().into_iter().flatten().collect()),
            _ if self
                .state
                .shut_down
                .load(std::sync::atomic::Ordering::Acquire) =>
            {
                Err(CoopError::Shutdown)
            }
            End::Cancelled => Err(CoopError::Cancelled),
            End::NothingExpected => Err(CoopError::NothingExpected),
            End::TimedOut => Err(CoopError::TimedOut {
                answers: answers(),
                missing: m.missing(),
            }),
            End::Failed { site, reason } => Err(CoopError::Failed {
                site: site.entry.id(),
                reason: reason.clone(),
            }),
        })
    }

    /// Waits until every descriptor is filled, at most `timeout`; a timeout
    /// ends the cooperation ([`CoopError::TimedOut`] has the replies that
    /// came). A cooperation that expects nothing ends at once with
    /// [`CoopError::NothingExpected`].
    pub async fn wait(&self, timeout: Duration) -> Result<Vec<Answer>, CoopError> {
        if self.state.machine.lock().wait_starts() {
            self.state.ended(&self.node);
        }
        let timer = self.node.rt().delay(timeout);
        futures::pin_mut!(timer);
        loop {
            let changed = self.state.changed.notified();
            futures::pin_mut!(changed);
            changed.as_mut().enable();
            if let Some(r) = self.check() {
                return r;
            }
            if let futures::future::Either::Right(_) =
                futures::future::select(changed, timer.as_mut()).await
            {
                if self.state.machine.lock().time_out() {
                    self.state.ended(&self.node);
                }
                return self.check().expect("ended");
            }
        }
    }

    /// Cancels it: every waiter wakes with [`CoopError::Cancelled`], and
    /// replies that come later are discarded and counted. No effect once it
    /// ended.
    pub fn cancel(&self) {
        if self.state.machine.lock().cancel() {
            self.state.ended(&self.node);
        }
    }
}

impl Clone for Cooperation {
    fn clone(&self) -> Self {
        self.state
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            node: self.node.clone(),
            state: self.state.clone(),
        }
    }
}

impl Drop for Cooperation {
    fn drop(&mut self) {
        // The last handle gone: no one will read its replies.
        if self
            .state
            .handles
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.cancel();
        }
    }
}

/// Cooperations, and the types declared their replies.
impl crate::Node {
    /// Declares `M` a cooperation reply: a one-way message of type `M` is
    /// not handled by a handler but fills the first open cooperation with
    /// an unfilled descriptor it matches (its sender, its type) — answers
    /// a site sends on its own, not as a reply to a request (a vote, a
    /// notification a cooperation waits for). One that no cooperation
    /// takes is discarded and counted (`Metrics::replies_discarded`). A
    /// type has one role: handler, streaming handler, or cooperation reply.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Expect, Message, Node};
    /// #[derive(Serialize, Deserialize)]
    /// struct Vote(bool);
    /// impl Message for Vote { const ID: u32 = 12; }
    ///
    /// let coordinator = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// coordinator.cooperation_reply::<Vote>()?;
    /// let round = coordinator.cooperation();
    /// round.expect(Expect::any().of::<Vote>());
    /// round.expect(Expect::any().of::<Vote>());
    /// // Two voters send on their own: nobody asked them.
    /// let mut voters = Vec::new();
    /// for yes in [true, false] {
    ///     let voter = Node::builder().start()?;
    ///     voter.site(&coordinator.listen_addresses()[0])?.send(&Vote(yes)).try_now()?;
    ///     voters.push(voter); // (a node dropped shuts down)
    /// }
    /// let votes = futures::executor::block_on(round.wait(std::time::Duration::from_secs(30)))?;
    /// assert_eq!(votes.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cooperation_reply<M: Message>(&self) -> Result<(), crate::NodeError> {
        crate::handlers::check_user_id(M::ID)?;
        self.inner.handlers().insert(
            M::ID,
            Arc::new(|ctx: &mut crate::Ctx<'_>, header: &bytes::Bytes| {
                let node = ctx.node;
                if !node
                    .cooperations()
                    .offer(node, ctx.from, M::ID, header, &ctx.body)
                {
                    Counters::add(&node.counters().replies_discarded, 1);
                    tracing::debug!(
                        type_id = M::ID,
                        "cooperation reply no cooperation took; discarded"
                    );
                }
                Ok(())
            }),
        )
    }

    /// A new cooperation (Paradis-Net): expected replies described by
    /// receive descriptors, filled by the replies to the requests sent
    /// through it; see [`Cooperation`](crate::Cooperation). Scatter/gather:
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Expect, Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Count;
    /// impl Message for Count { const ID: u32 = 8; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Total(u64);
    /// impl Message for Total { const ID: u32 = 9; }
    ///
    /// // Three sites, each holding 10 things.
    /// let servers: Vec<Node> = (0..3)
    ///     .map(|_| {
    ///         let n = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    ///         n.handle(|ctx, _: Count| { let _ = ctx.reply(&Total(10)); })?;
    ///         Ok(n)
    ///     })
    ///     .collect::<Result<_, sitenet_runtime::NodeError>>()?;
    /// let node = Node::builder().start()?;
    /// let sum = futures::executor::block_on(async {
    ///     let coop = node.cooperation();
    ///     let sites = servers.iter().map(|s| node.site(&s.listen_addresses()[0]))
    ///         .collect::<Result<Vec<_>, _>>()?;
    ///     for site in &sites { // every descriptor first, then the requests
    ///         coop.expect(Expect::from_site(site).of::<Total>());
    ///     }
    ///     for site in &sites {
    ///         coop.request(site, &Count).await?;
    ///     }
    ///     let answers = coop.wait(std::time::Duration::from_secs(30)).await?;
    ///     let sum: u64 = answers.iter().map(|a| a.decode::<Total>().unwrap().0).sum();
    ///     Ok::<_, Box<dyn std::error::Error>>(sum)
    /// })?;
    /// assert_eq!(sum, 30);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cooperation(&self) -> crate::Cooperation {
        crate::Cooperation::new(self.inner.clone())
    }
}
