//! One way to send: [`SiteRef::send`], [`SiteRef::send_raw`] and
//! [`SiteRef::resend`] return a [`SendBuilder`], on which a priority and
//! body parts are set (and [`tracked`](SendBuilder::tracked) delivery
//! asked for), then awaited, tried ([`try_now`](SendBuilder::try_now)) or
//! blocked on ([`blocking`](SendBuilder::blocking)). Requests are in
//! `requests.rs`.
//!
//! The message is encoded when the builder is made, so a builder borrows
//! only the `SiteRef`, never the message; it lives on the caller's stack,
//! and so does the future it turns into: a send that finds room in the
//! site's output bound (the common case) allocates nothing beyond what
//! the message itself holds. Only a send that must wait for room boxes
//! its wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use sitenet_protocols::OutMessage;

use super::SiteRef;
use crate::delivery::Delivery;
use crate::error::SendError;

/// The options every builder of a send or a request takes: a priority
/// and body parts, set on the message it holds (an encoding error, kept
/// for the end, ignores them).
macro_rules! message_options {
    () => {
        /// Sends at `priority` (1 lowest, 5 highest; see
        /// [`Priority`](crate::Priority)). Unset: medium.
        pub fn priority(mut self, priority: sitenet_protocols::Priority) -> Self {
            if let Some(m) = self.out() {
                m.priority = priority;
            }
            self
        }

        /// Adds a body part: bytes sent after the typed header without
        /// being copied (a `Vec<u8>`, `Bytes`, `&'static [u8]`, …). The
        /// receiver gets one body, the parts in order.
        pub fn body(mut self, part: impl Into<bytes::Bytes>) -> Self {
            if let Some(m) = self.out() {
                m.body.push(part.into());
            }
            self
        }

        /// Adds several body parts, sent one after the other (BMI's list
        /// I/O): a message assembled from pieces the caller holds without
        /// concatenating them first.
        pub fn parts(mut self, parts: impl IntoIterator<Item = bytes::Bytes>) -> Self {
            if let Some(m) = self.out() {
                m.body.extend(parts);
            }
            self
        }

        /// Applies `opts`: its priority if it has one, and its body parts
        /// after any set already (for options built once and used for
        /// many messages, or handed down by a caller).
        pub fn options(mut self, opts: crate::message::SendOptions) -> Self {
            if let Some(m) = self.out() {
                let (priority, body) = opts.into_parts(m.priority);
                m.priority = priority;
                m.body.extend(body);
            }
            self
        }
    };
}
pub(crate) use message_options;

/// A one-way message to a site, not yet queued: what
/// [`SiteRef::send`], [`SiteRef::send_raw`] and [`SiteRef::resend`]
/// return. Set a [`priority`](Self::priority) or a [`body`](Self::body),
/// then queue it one of three ways:
///
/// - `.await` — waits while the site's output bound is reached, then
///   queues it (async code);
/// - [`try_now`](Self::try_now) — queues it now or fails with
///   [`SendError::QueueFull`]; never waits (handlers, actors, any code
///   that must not block);
/// - [`blocking`](Self::blocking) — waits on this thread (a plain `main`
///   or thread; [`SendError::WouldDeadlock`] on the node's own runtime
///   thread).
///
/// Each returns once the message is queued; delivery is asynchronous.
/// [`tracked`](Self::tracked) asks to learn when the peer acknowledges it.
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node, Priority};
/// #[derive(Serialize, Deserialize)]
/// struct Log(String);
/// impl Message for Log { const ID: u32 = 2; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|_ctx, Log(line): Log| println!("{line}"))?;
/// let client = Node::builder().start()?;
/// let site = client.site(&server.listen_addresses()[0])?;
/// site.send(&Log("now or never".into())).try_now()?;
/// futures::executor::block_on(site.send(&Log("when there is room".into())))?;
/// site.send(&Log("urgent".into()))
///     .priority(Priority::High)
///     .body(vec![0u8; 64])
///     .blocking()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a send does nothing until it is awaited, `try_now`-ed or `blocking`-ed"]
pub struct SendBuilder<'a> {
    site: &'a SiteRef,
    /// The message (`Post::Start`), or why it could not be made
    /// (`Post::Failed`); then its queuing, once polled.
    post: Post,
}

impl<'a> SendBuilder<'a> {
    pub(crate) fn new(site: &'a SiteRef, m: Result<OutMessage, SendError>) -> Self {
        let post = match m {
            Ok(m) => Post::Start(m),
            Err(e) => Post::Failed(e),
        };
        Self { site, post }
    }

    message_options!();

    /// The message, if it could be made (and has not been polled yet).
    fn out(&mut self) -> Option<&mut OutMessage> {
        match &mut self.post {
            Post::Start(m) => Some(m),
            _ => None,
        }
    }

    /// The message, or why it could not be made.
    fn take(self) -> Result<OutMessage, SendError> {
        match self.post {
            Post::Start(m) => Ok(m),
            Post::Failed(e) => Err(e),
            _ => panic!("a send used after it was polled"),
        }
    }

    /// Asks to learn when the peer acknowledges the message: the send
    /// then gives a [`Delivery`] (BMI's post and test). See
    /// [`TrackedSend`].
    pub fn tracked(self) -> TrackedSend<'a> {
        TrackedSend {
            send: self,
            delivery: None,
        }
    }

    /// Queues the message now, or fails at once with
    /// [`SendError::QueueFull`] at the site's output bound: never waits
    /// (use it from handlers).
    pub fn try_now(self) -> Result<(), SendError> {
        let site = self.site;
        site.try_post(self.take()?)
    }

    /// Queues the message, waiting on this thread while the site's output
    /// bound is reached: for a plain `main` or thread. On the node's own
    /// runtime thread (a handler, a task spawned there) it fails with
    /// [`SendError::WouldDeadlock`] rather than hang.
    pub fn blocking(self) -> Result<(), SendError> {
        if self.site.node.rt().is_current_thread() {
            return Err(SendError::WouldDeadlock);
        }
        futures::executor::block_on(self)
    }
}

/// A send is itself the future of its queuing: awaited, it waits while
/// the site's output bound is reached, then queues the message. Options
/// set after the first poll have no effect.
impl Future for SendBuilder<'_> {
    type Output = Result<(), SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.post.poll(this.site, cx)
    }
}

/// A send that must wait for room: the one allocation of a send, made
/// only on that path.
type Waiting = Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'static>>;

/// The queuing of one message, as a state machine a named future holds
/// (an `async fn`'s future cannot be a field of a named type): check the
/// site, take room in its output bound, push it, and then yield to the
/// site's actor once a batch is full, or spend a unit of the task's
/// cooperative budget every 8th send (`SiteRef::post` says why).
pub(crate) enum Post {
    /// Not tried yet.
    Start(OutMessage),
    /// No room at once: waiting in line, in `SiteRef::post`.
    Room(Waiting),
    /// Queued, a batch full: yields once, to let the site's actor run.
    Yield(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// Queued: spends a unit of the task's budget.
    Budget,
    /// The message could not be made.
    Failed(SendError),
    /// Done (or failed) already.
    Done,
}

impl Post {
    pub(crate) fn poll(
        &mut self,
        site: &SiteRef,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), SendError>> {
        match std::mem::replace(self, Post::Done) {
            Post::Start(m) => {
                let entry = site.entry.resolved();
                if let Err(e) = site.check(entry, &m) {
                    return Poll::Ready(Err(e));
                }
                let (class, n) = (m.share_class(), m.footprint());
                if !entry.outbox().try_reserve(class, n) {
                    // The slow path: wait in line for room (and check the
                    // site again once there is), in `post`.
                    let owned = site.clone();
                    *self = Post::Room(Box::pin(async move { owned.post(m).await }));
                    return self.poll(site, cx);
                }
                if site.push(entry, m) {
                    // A batch is queued for the actor: yield to it through
                    // tokio's `yield_now`, which defers this task until the
                    // I/O driver and the thread's other tasks have run (a
                    // plain self-wake would put it first in line again and
                    // halve a send loop's throughput). Once per batch, so
                    // its box is not per send.
                    *self = Post::Yield(Box::pin(tokio::task::yield_now()));
                    self.poll(site, cx)
                } else if super::spend_budget_now() {
                    *self = Post::Budget;
                    self.poll(site, cx)
                } else {
                    Poll::Ready(Ok(()))
                }
            }
            Post::Room(mut waiting) => match waiting.as_mut().poll(cx) {
                Poll::Pending => {
                    *self = Post::Room(waiting);
                    Poll::Pending
                }
                done => done,
            },
            Post::Yield(mut y) => match y.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Ok(())),
                Poll::Pending => {
                    *self = Post::Yield(y);
                    Poll::Pending
                }
            },
            Post::Budget => match tokio::task::coop::poll_proceed(cx) {
                Poll::Ready(restore) => {
                    restore.made_progress();
                    Poll::Ready(Ok(()))
                }
                Poll::Pending => {
                    *self = Post::Budget;
                    Poll::Pending
                }
            },
            Post::Failed(e) => Poll::Ready(Err(e)),
            Post::Done => panic!("a send polled after it completed"),
        }
    }
}

/// A one-way message whose acknowledgement the caller wants to know:
/// [`SendBuilder::tracked`]. Queued like the plain send (`.await`,
/// [`try_now`](Self::try_now), [`blocking`](Self::blocking)), it gives a
/// [`Delivery`] that completes when the peer has acknowledged the
/// message — its node took it in and dispatched it — or fails with the
/// site's permanent failure, telling whether the message was never sent or
/// may have been delivered (BMI's post and test). Many can be in flight at
/// once.
///
/// The acknowledgement is the channel's: a message of a type the peer has
/// no handler for is acknowledged too (the peer passes it to its
/// unhandled hook, [`Node::on_unhandled`](crate::Node::on_unhandled)); a
/// request ([`SiteRef::request`]) is what tells
/// [`RequestError::NoHandler`](crate::RequestError::NoHandler).
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node};
/// #[derive(Serialize, Deserialize)]
/// struct Put { key: u32 }
/// impl Message for Put { const ID: u32 = 7; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|_ctx, p: Put| println!("stored {}", p.key))?;
/// let node = Node::builder().start()?;
/// let site = node.site(&server.listen_addresses()[0])?;
/// futures::executor::block_on(async {
///     let mut d = site.send(&Put { key: 1 }).tracked().await?;
///     if d.test().is_none() {
///         // Still on its way: do other work, then wait. Once it
///         // completes, the server's handler has returned.
///         d.await?;
///     }
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a send does nothing until it is awaited, `try_now`-ed or `blocking`-ed"]
pub struct TrackedSend<'a> {
    send: SendBuilder<'a>,
    /// The message's token and handle, once polled.
    delivery: Option<(u64, Delivery)>,
}

impl TrackedSend<'_> {
    /// Queues the message now, or fails at once with
    /// [`SendError::QueueFull`] at the site's output bound: never waits
    /// (use it from handlers).
    pub fn try_now(self) -> Result<Delivery, SendError> {
        let site = self.send.site;
        let mut m = self.send.take()?;
        let delivery = site.track(&mut m);
        let corr = m.corr;
        let queued = site.try_post(m);
        site.settle(corr, queued, delivery)
    }

    /// Queues the message, waiting on this thread while the site's output
    /// bound is reached ([`SendError::WouldDeadlock`] on the node's own
    /// runtime thread).
    pub fn blocking(self) -> Result<Delivery, SendError> {
        if self.send.site.node.rt().is_current_thread() {
            return Err(SendError::WouldDeadlock);
        }
        futures::executor::block_on(self)
    }
}

/// A tracked send is itself the future of its queuing: awaited, it waits
/// while the site's output bound is reached, queues the message, and
/// gives its [`Delivery`].
impl Future for TrackedSend<'_> {
    type Output = Result<Delivery, SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let site = this.send.site;
        if this.delivery.is_none() {
            if let Post::Start(m) = &mut this.send.post {
                let delivery = site.track(m);
                this.delivery = Some((m.corr, delivery));
            }
        }
        let queued = std::task::ready!(Pin::new(&mut this.send).poll(cx));
        Poll::Ready(match this.delivery.take() {
            Some((corr, delivery)) => site.settle(corr, queued, delivery),
            None => Err(queued.err().unwrap_or(SendError::Shutdown)),
        })
    }
}

impl std::fmt::Debug for SendBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBuilder")
            .field("site", self.site)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for TrackedSend<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedSend")
            .field("send", &self.send)
            .finish()
    }
}
