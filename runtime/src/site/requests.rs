//! `SiteRef`'s requests: [`SiteRef::request`] and its builder, the future
//! that sends the request and waits for its answer under the request's
//! span, and the reading of the answer (typed, with the handler's own
//! error type, or raw).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use sitenet_protocols::{InMessage, MessageKind, OutMessage};
use tokio::sync::oneshot;

use super::send::{message_options, Post};
use super::SiteRef;
use crate::error::{DecodeError, RequestError, SendError};
use crate::message::{Message, RawMessage, Reply, SendOptions};
use crate::node::ErrorReply;

/// How long a request waits for its answer unless
/// [`RequestBuilder::timeout`] says otherwise: 30 seconds. Long enough for
/// a request that waits for room in a loaded site's output bound, or for
/// a slot on a busy peer; short enough that the caller of a peer that
/// vanished without a word learns it ([`RequestError::Timeout`] or
/// [`RequestError::Unreachable`]) within the same minute.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a request's answer is read: typed, raw, or with the handler's own
/// error type. `u32`: the request's type id.
type Read<T> = fn(&SiteRef, u32, InMessage) -> Result<T, RequestError>;

/// A request to a site, not yet sent: what [`SiteRef::request`] and
/// [`SiteRef::request_raw`] return, answered with a `T` — a [`Reply`], a
/// [`RawMessage`], or with [`or_error`](Self::or_error) the handler's
/// own error value. Set a [`timeout`](Self::timeout) (default
/// [`DEFAULT_REQUEST_TIMEOUT`]), a [`priority`](Self::priority) or a
/// [`body`](Self::body), then `.await` it, or
/// [`blocking`](Self::blocking) it from a plain thread.
///
/// The timeout covers the wait for room in a full output bound too: a
/// request that times out before its message could be queued gives its
/// place in line up, and its message is never sent. A late reply is
/// discarded.
///
/// The request was encoded when the builder was made, and the future it
/// becomes holds a reference of its own to the site: it borrows neither
/// the request nor the `SiteRef` (`Send + 'static`), so requests made in a
/// loop can be awaited together (`futures::future::join_all`), or
/// spawned. (The builder is itself the future of its answer.)
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node, Priority};
/// #[derive(Serialize, Deserialize)]
/// struct Square(u64);
/// impl Message for Square { const ID: u32 = 3; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|ctx, Square(n): Square| { let _ = ctx.reply(&Square(n * n)); })?;
/// let client = Node::builder().start()?; // (dropping its last handle shuts a node down)
/// let site = client.site(&server.listen_addresses()[0])?;
/// // From a plain thread, with the default timeout...
/// let r = site.request::<Square, Square>(&Square(12)).blocking()?;
/// assert_eq!(r.msg.0, 144);
/// // ...or awaited, with options.
/// let r = futures::executor::block_on(
///     site.request::<Square, Square>(&Square(3))
///         .timeout(Duration::from_secs(5))
///         .priority(Priority::High),
/// )?;
/// assert_eq!(r.msg.0, 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a request does nothing until it is awaited or `blocking`-ed"]
pub struct RequestBuilder<T> {
    site: SiteRef,
    /// The request (its `corr` set), or why it could not be made; taken
    /// when the request starts.
    m: Option<Result<OutMessage, SendError>>,
    timeout: Duration,
    read: Read<T>,
    /// The request on its way, once polled.
    started: Option<Started>,
}

impl<T> RequestBuilder<T> {
    fn new(site: &SiteRef, m: Result<OutMessage, SendError>, read: Read<T>) -> Self {
        Self {
            site: site.clone(),
            m: Some(m),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            read,
            started: None,
        }
    }

    message_options!();

    /// The request, if it could be made (and has not started).
    fn out(&mut self) -> Option<&mut OutMessage> {
        self.m.as_mut().and_then(|m| m.as_mut().ok())
    }

    /// Waits at most `timeout` for the answer (default
    /// [`DEFAULT_REQUEST_TIMEOUT`]); then the request ends with
    /// [`RequestError::Timeout`] (or [`RequestError::Unreachable`] if the
    /// site was unreachable at the deadline). Any duration is accepted:
    /// one too long for the clock waits for ever.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends the request and waits on this thread for its answer: for a
    /// plain `main` or thread. On the node's own runtime thread it fails
    /// with [`SendError::WouldDeadlock`] rather than hang (a handler
    /// replies with `Ctx::reply`, or awaits a request in `Ctx::spawn`).
    pub fn blocking(self) -> Result<T, RequestError> {
        if self.site.node.rt().is_current_thread() {
            return Err(SendError::WouldDeadlock.into());
        }
        futures::executor::block_on(self)
    }
}

impl<R: Message> RequestBuilder<Reply<R>> {
    /// Reads an error value of the application's type `E` the handler may
    /// answer with (a `Node::handle_result` or `Node::handle_async`
    /// handler returning `Err(e)`, or `Responder::reply_error(&e)`): the
    /// request then gives `Ok(Ok(reply))`, `Ok(Err(e))` — the handler's
    /// error, decoded as `E` to be matched — or `Err(_)` when no answer
    /// came ([`RequestError`]: timeout, site failure, no handler, a panic,
    /// "busy", …). The outer `Result` is whether the request got an
    /// answer, the inner what the handler answered:
    /// `site.request(&q).or_error::<E>().await??` when `E` converts to the
    /// caller's error.
    ///
    /// An error value that does not decode as `E` (the handler returned
    /// another type) is [`RequestError::Decode`] with
    /// [`DecodeError::ErrorValue`]. Plain failures (`Responder::fail`, a
    /// panic) stay [`RequestError::Remote`].
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node};
    /// #[derive(Serialize, Deserialize)]
    /// struct Open(String);
    /// impl Message for Open { const ID: u32 = 61; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Handle(u32);
    /// impl Message for Handle { const ID: u32 = 62; }
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// enum FsError { NotFound { path: String }, Denied }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_result(|_ctx, Open(path): Open| match path.as_str() {
    ///     "/etc/shadow" => Err(FsError::Denied),
    ///     "/tmp/a" => Ok(Handle(3)),
    ///     _ => Err(FsError::NotFound { path }),
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let open = |p: &str| site.request::<Open, Handle>(&Open(p.into())).or_error::<FsError>();
    /// match open("/nope").blocking()? {
    ///     Ok(h) => panic!("opened {}", h.msg.0),
    ///     Err(FsError::NotFound { path }) => assert_eq!(path, "/nope"),
    ///     Err(FsError::Denied) => panic!("denied"),
    /// }
    /// assert_eq!(open("/tmp/a").blocking()?.map(|h| h.msg.0), Ok(3));
    /// assert_eq!(open("/etc/shadow").blocking()?.err(), Some(FsError::Denied));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn or_error<E: serde::de::DeserializeOwned + 'static>(
        self,
    ) -> RequestBuilder<Result<Reply<R>, E>> {
        RequestBuilder {
            site: self.site,
            m: self.m,
            timeout: self.timeout,
            read: read_or::<R, E>,
            started: None,
        }
    }
}

impl<T> RequestBuilder<T> {
    /// Registers the request (its deadline starts), and sets it on its
    /// way: what the first poll does.
    fn start(&mut self) -> Started {
        let site = &self.site;
        match self.m.take().expect("a request polled after it completed") {
            Err(e) => Started {
                corr: 0,
                type_id: 0,
                post: None,
                rx: None,
                early: Some(e.into()),
                span: tracing::Span::none(),
            },
            Ok(m) => {
                let (corr, type_id) = (m.corr, m.type_id);
                // The caller's side of the request's id across sites (see
                // `RequestId`): the handle spans of every hop carry the
                // same.
                let span = tracing::debug_span!(
                    "sitenet.request",
                    request = %crate::message::RequestId { origin: site.node.identity().id(), corr },
                    type_id,
                    to = ?site.entry.resolved().id(),
                );
                let rx = site
                    .node
                    .register_request(corr, site.entry.resolved(), self.timeout);
                Started {
                    corr,
                    type_id,
                    post: Some(Post::Start(m)),
                    rx: Some(rx),
                    early: None,
                    span,
                }
            }
        }
    }
}

/// A request on its way: sent, then waiting for its answer.
struct Started {
    corr: u64,
    /// The request's type id (errors name it).
    type_id: u32,
    /// The request's queuing, until done. The wait for room in the
    /// outbox counts against the timeout: a request that ends first (its
    /// deadline, its site's failure) stops waiting and gives its turn up,
    /// its message never sent.
    post: Option<Post>,
    /// The answer, or how the request ended; `None` once taken.
    rx: Option<oneshot::Receiver<Result<InMessage, RequestError>>>,
    /// Why the request could not even be made.
    early: Option<RequestError>,
    span: tracing::Span,
}

/// A request is itself the future of its answer: awaited (or polled
/// once) it registers the request, sends it — waiting for room in the
/// site's output bound — and waits for the answer. It holds a reference
/// of its own to the site and owns the encoded request: `Send + 'static`.
/// Options set after the first poll have no effect.
impl<T> Future for RequestBuilder<T> {
    type Output = Result<T, RequestError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.started.is_none() {
            this.started = Some(this.start());
        }
        let started = this.started.as_mut().expect("started above");
        if let Some(e) = started.early.take() {
            return Poll::Ready(Err(e));
        }
        let _entered = started.span.enter();
        let rx = started
            .rx
            .as_mut()
            .expect("a request polled after it completed");
        if let Some(post) = &mut started.post {
            match post.poll(&this.site, cx) {
                Poll::Ready(Ok(())) => started.post = None,
                Poll::Ready(Err(e)) => {
                    started.post = None;
                    started.rx = None;
                    this.site.node.cancel_request(started.corr);
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Pending => {}
            }
        }
        let answer = match Pin::new(rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(answer)) => answer,
            Poll::Ready(Err(_)) => Err(RequestError::Shutdown),
        };
        started.post = None;
        started.rx = None;
        Poll::Ready(answer.and_then(|m| (this.read)(&this.site, started.type_id, m)))
    }
}

impl<T> std::fmt::Debug for RequestBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBuilder")
            .field("site", &self.site)
            .field("started", &self.started.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SiteRef {
    /// A request to this site: `req`, encoded now, at medium priority,
    /// answered with a reply of type `R`. Set options on the
    /// [`RequestBuilder`] it returns — a [`timeout`](RequestBuilder::timeout)
    /// (default [`DEFAULT_REQUEST_TIMEOUT`]), a priority, a body, the
    /// handler's own error type ([`or_error`](RequestBuilder::or_error)) —
    /// then `.await` it or [`blocking`](RequestBuilder::blocking) it.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, RequestError};
    /// #[derive(Serialize, Deserialize)]
    /// struct Get(String);
    /// impl Message for Get { const ID: u32 = 31; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Value(Option<String>);
    /// impl Message for Value { const ID: u32 = 32; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|ctx, Get(k): Get| { let _ = ctx.reply(&Value(Some(k))); })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let v = site.request::<Get, Value>(&Get("x".into())).blocking()?;
    /// assert_eq!(v.msg.0.as_deref(), Some("x"));
    /// // A type the peer has no handler for says so.
    /// let e = site.request::<Value, Value>(&Value(None)).blocking().err();
    /// assert_eq!(e, Some(RequestError::NoHandler { type_id: 32 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request<Q: Message, R: Message>(&self, req: &Q) -> RequestBuilder<Reply<R>> {
        let corr = self.node.next_corr();
        let m = self.encode(req, SendOptions::new(), MessageKind::Request, corr);
        RequestBuilder::new(self, m, read_typed::<R>)
    }

    /// The raw request `m` (its `corr` set), answered with its reply as it
    /// came: [`SiteRef::request_raw`].
    pub(crate) fn raw_request(
        &self,
        m: Result<OutMessage, SendError>,
    ) -> RequestBuilder<RawMessage> {
        RequestBuilder::new(self, m, read_raw)
    }

    /// Sends the encoded request `m` (its `corr` set) and waits for its
    /// reply, at most `timeout`: the reply as it came, an error reply as
    /// the [`RequestError`] it says (a batch's requests).
    pub(crate) async fn request_message(
        &self,
        m: OutMessage,
        timeout: Duration,
    ) -> Result<InMessage, RequestError> {
        RequestBuilder::new(self, Ok(m), read_message)
            .timeout(timeout)
            .await
    }

    /// The reply `incoming` as a `Reply<R>`: of `R`'s type, its header
    /// decoding as `R`. (A delegated reply comes from another site; its
    /// references are charged to the site asked.)
    fn decode_reply<R: Message>(&self, incoming: InMessage) -> Result<Reply<R>, RequestError> {
        let msg = crate::node::decode_reply::<R>(
            &self.node,
            self.entry.resolved(),
            incoming.prelude.type_id,
            &incoming.header,
        )
        .map_err(RequestError::Decode)?;
        Ok(Reply {
            msg,
            body: incoming.body,
        })
    }
}

/// The answer `m` to a request of type `type_id`, unless it is an error
/// reply: then the error it says.
fn read_message(_: &SiteRef, type_id: u32, m: InMessage) -> Result<InMessage, RequestError> {
    match crate::node::error_reply(m.prelude.type_id, &m.header, &m.body) {
        Some(e) => Err(e.into_request_error(type_id)),
        None => Ok(m),
    }
}

fn read_typed<R: Message>(
    site: &SiteRef,
    type_id: u32,
    m: InMessage,
) -> Result<Reply<R>, RequestError> {
    let m = read_message(site, type_id, m)?;
    site.decode_reply(m)
}

fn read_raw(site: &SiteRef, type_id: u32, m: InMessage) -> Result<RawMessage, RequestError> {
    let reply = read_message(site, type_id, m)?;
    Ok(RawMessage {
        type_id: reply.prelude.type_id,
        header: reply.header,
        body: reply.body,
    })
}

#[allow(clippy::type_complexity)] // the two results say two things
fn read_or<R: Message, E: serde::de::DeserializeOwned + 'static>(
    site: &SiteRef,
    type_id: u32,
    m: InMessage,
) -> Result<Result<Reply<R>, E>, RequestError> {
    match crate::node::error_reply(m.prelude.type_id, &m.header, &m.body) {
        None => site.decode_reply(m).map(Ok),
        Some(ErrorReply::Handler { reason, value }) => {
            crate::node::decoding_on(&site.node, site.entry.resolved(), || {
                rmp_serde::from_slice::<E>(&value)
            })
            .map(Err)
            .map_err(|e| {
                RequestError::Decode(DecodeError::ErrorValue {
                    expected: std::any::type_name::<E>(),
                    reason: e.to_string(),
                    handler_said: reason,
                })
            })
        }
        Some(other) => Err(other.into_request_error(type_id)),
    }
}
