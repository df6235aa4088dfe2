//! `SiteRef`'s requests: a request and its reply (typed, with the
//! handler's own error type, blocking), and the wait for the answer under
//! the request's span.

use sitenet_protocols::{MessageKind, OutMessage};

use super::SiteRef;
use crate::error::{RequestError, SendError};
use crate::message::{Message, Reply, SendOptions};
use crate::node::ErrorReply;

impl SiteRef {
    /// Sends a request at medium priority and waits for its reply, at most
    /// `timeout`. A late reply is discarded. The timeout covers the wait
    /// for room in a full output bound too: a request that times out
    /// before its message could be queued gives its place in line up, and
    /// its message is never sent.
    ///
    /// The request is encoded when this is called: the future borrows
    /// neither `req` nor this `SiteRef` (it holds a reference of its own to
    /// the site), so requests built in a loop can be awaited together.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, RequestError, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Square(u64);
    /// impl Message for Square { const ID: u32 = 3; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|ctx, Square(n): Square| { let _ = ctx.reply(&Square(n * n)); })?;
    /// let client = Node::builder().start()?; // (dropping its last handle shuts a node down)
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = futures::executor::block_on(
    ///     site.request::<Square, Square>(&Square(12), Duration::from_secs(30)),
    /// )?;
    /// assert_eq!(r.msg.0, 144);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request<Q: Message, R: Message>(
        &self,
        req: &Q,
        timeout: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<Reply<R>, RequestError>> + Send + 'static {
        self.request_with(req, SendOptions::new(), timeout)
    }

    /// [`request`](Self::request) with options: a priority and a body.
    pub fn request_with<Q: Message, R: Message>(
        &self,
        req: &Q,
        opts: SendOptions,
        timeout: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<Reply<R>, RequestError>> + Send + 'static {
        let corr = self.node.next_corr();
        let encoded = self.encode(req, opts, MessageKind::Request, corr);
        let site = self.clone();
        async move {
            let incoming = site.request_message(encoded?, timeout).await?;
            site.decode_reply(incoming)
        }
    }

    /// Sends a request whose handler may answer with an error value of the
    /// application's type `E` (a `Node::handle_result` or
    /// `Node::handle_async` handler returning `Err(e)`, or
    /// `Responder::reply_error(&e)`) and awaits the
    /// outcome, at most `timeout`: `Ok(Ok(reply))`, `Ok(Err(e))` — the
    /// handler's error, decoded as `E` to be matched — or `Err(_)` when no
    /// answer came ([`RequestError`]: timeout, site failure, no handler,
    /// a panic, "busy", …, as for [`request`](Self::request)). The outer
    /// `Result` is whether the request got an answer, the inner what the
    /// handler answered: `request_result(..).await??` when `E` converts to
    /// the caller's error.
    ///
    /// An error value that does not decode as `E` (the handler returned
    /// another type) is [`RequestError::Decode`], naming the handler's
    /// reason. Plain failures (`Responder::fail`, a panic) stay
    /// [`RequestError::Remote`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
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
    /// futures::executor::block_on(async {
    ///     let open = |p: &str| site.request_result::<Open, Handle, FsError>(&Open(p.into()),
    ///         Duration::from_secs(30));
    ///     match open("/nope").await? {
    ///         Ok(h) => panic!("opened {}", h.msg.0),
    ///         Err(FsError::NotFound { path }) => assert_eq!(path, "/nope"),
    ///         Err(FsError::Denied) => panic!("denied"),
    ///     }
    ///     assert_eq!(open("/tmp/a").await?.map(|h| h.msg.0), Ok(3));
    ///     assert_eq!(open("/etc/shadow").await?.err(), Some(FsError::Denied));
    ///     Ok::<(), Box<dyn std::error::Error>>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[allow(clippy::type_complexity)] // the two results say two things
    pub fn request_result<Q, R, E>(
        &self,
        req: &Q,
        timeout: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<Result<Reply<R>, E>, RequestError>> + Send + 'static
    where
        Q: Message,
        R: Message,
        E: serde::de::DeserializeOwned + 'static,
    {
        self.request_result_with(req, SendOptions::new(), timeout)
    }

    /// [`request_result`](Self::request_result) with options: a priority
    /// and a body.
    #[allow(clippy::type_complexity)] // the two results say two things
    pub fn request_result_with<Q, R, E>(
        &self,
        req: &Q,
        opts: SendOptions,
        timeout: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<Result<Reply<R>, E>, RequestError>> + Send + 'static
    where
        Q: Message,
        R: Message,
        E: serde::de::DeserializeOwned + 'static,
    {
        let corr = self.node.next_corr();
        let encoded = self.encode(req, opts, MessageKind::Request, corr);
        let site = self.clone();
        async move {
            let incoming = site.request_answer(encoded?, timeout).await?;
            let Some(error_reply) = crate::node::error_reply(
                incoming.prelude.type_id,
                &incoming.header,
                &incoming.body,
            ) else {
                return site.decode_reply(incoming).map(Ok);
            };
            match error_reply {
                ErrorReply::Failed(e) => Err(e),
                ErrorReply::Handler { reason, value } => {
                    crate::node::decoding_on(&site.node, site.entry.resolved(), || {
                        rmp_serde::from_slice::<E>(&value)
                    })
                    .map(Err)
                    .map_err(|e| {
                        RequestError::Decode(format!(
                            "the handler's error value does not decode as {} ({e}); \
                             the handler said: {reason}",
                            std::any::type_name::<E>()
                        ))
                    })
                }
            }
        }
    }

    /// Blocking variant of [`request_result`](Self::request_result). On
    /// the node's own runtime thread it fails with
    /// [`SendError::WouldDeadlock`] rather than hang.
    #[allow(clippy::type_complexity)] // the two results say two things
    pub fn request_result_blocking<Q, R, E>(
        &self,
        req: &Q,
        timeout: std::time::Duration,
    ) -> Result<Result<Reply<R>, E>, RequestError>
    where
        Q: Message,
        R: Message,
        E: serde::de::DeserializeOwned + 'static,
    {
        self.request_result_blocking_with(req, SendOptions::new(), timeout)
    }

    /// [`request_result_blocking`](Self::request_result_blocking) with
    /// options: a priority and a body.
    #[allow(clippy::type_complexity)] // the two results say two things
    pub fn request_result_blocking_with<Q, R, E>(
        &self,
        req: &Q,
        opts: SendOptions,
        timeout: std::time::Duration,
    ) -> Result<Result<Reply<R>, E>, RequestError>
    where
        Q: Message,
        R: Message,
        E: serde::de::DeserializeOwned + 'static,
    {
        if self.node.rt.is_current_thread() {
            return Err(SendError::WouldDeadlock.into());
        }
        futures::executor::block_on(self.request_result_with(req, opts, timeout))
    }

    /// The reply `incoming` as a `Reply<R>`: of `R`'s type, its header
    /// decoding as `R`. (A delegated reply comes from another site; its
    /// references are charged to the site asked.)
    fn decode_reply<R: Message>(
        &self,
        incoming: sitenet_protocols::InMessage,
    ) -> Result<Reply<R>, RequestError> {
        let msg = crate::node::decoding_on(&self.node, self.entry.resolved(), || {
            rmp_serde::from_slice::<R>(&incoming.header)
        })
        .map_err(|e| RequestError::Decode(e.to_string()))?;
        if incoming.prelude.type_id != R::ID {
            return Err(RequestError::Decode(format!(
                "reply has type id {}, expected {}",
                incoming.prelude.type_id,
                R::ID
            )));
        }
        Ok(Reply {
            msg,
            body: incoming.body,
        })
    }

    /// Sends the encoded request `m` (its `corr` set) and waits for its
    /// reply, at most `timeout`. A handler's error value is
    /// [`RequestError::Remote`] with its reason (`request_result` decodes
    /// it instead).
    pub(crate) async fn request_message(
        &self,
        m: OutMessage,
        timeout: std::time::Duration,
    ) -> Result<sitenet_protocols::InMessage, RequestError> {
        let incoming = self.request_answer(m, timeout).await?;
        match crate::node::error_reply(incoming.prelude.type_id, &incoming.header, &incoming.body) {
            Some(ErrorReply::Handler { reason, .. }) => Err(RequestError::Remote(reason)),
            Some(ErrorReply::Failed(e)) => Err(e),
            None => Ok(incoming),
        }
    }

    /// [`request_message`](Self::request_message), a handler's error value
    /// left in the message it came in (every other error reply is the
    /// `RequestError` it says).
    async fn request_answer(
        &self,
        m: OutMessage,
        timeout: std::time::Duration,
    ) -> Result<sitenet_protocols::InMessage, RequestError> {
        let corr = m.corr;
        // The caller's side of the request's id across sites (see
        // `RequestId`): the handle spans of every hop carry the same.
        let span = tracing::debug_span!(
            "sitenet.request",
            request = %crate::message::RequestId { origin: self.node.id, corr },
            type_id = m.type_id,
            to = ?self.entry.resolved().id.get(),
        );
        let mut rx = self
            .node
            .register_request(corr, self.entry.resolved(), timeout);
        tracing::Instrument::instrument(
            async move {
                // The wait for room in the outbox counts against the
                // timeout too: a request that ends first (its deadline,
                // its site's failure) stops waiting and gives its turn up,
                // its message never sent. Awaiting the send alone kept the
                // caller waiting for as long as the peer left the bound
                // full, whatever timeout it asked for.
                let posted = self.post(m);
                futures::pin_mut!(posted);
                match futures::future::select(posted, &mut rx).await {
                    futures::future::Either::Left((Ok(()), _)) => {}
                    futures::future::Either::Left((Err(e), _)) => {
                        self.node.cancel_request(corr);
                        return Err(e.into());
                    }
                    futures::future::Either::Right((ended, _)) => {
                        return ended.unwrap_or(Err(RequestError::Shutdown));
                    }
                }
                match rx.await {
                    Ok(r) => r,
                    Err(_) => Err(RequestError::Shutdown),
                }
            },
            span,
        )
        .await
    }

    /// Blocking variant of [`request`](Self::request). On the node's own
    /// runtime thread it fails with [`SendError::WouldDeadlock`] rather than
    /// hang (a handler replies with `Ctx::reply`, or awaits `request` in
    /// `Ctx::spawn`).
    pub fn request_blocking<Q: Message, R: Message>(
        &self,
        req: &Q,
        timeout: std::time::Duration,
    ) -> Result<Reply<R>, RequestError> {
        self.request_blocking_with(req, SendOptions::new(), timeout)
    }

    /// [`request_blocking`](Self::request_blocking) with options: a
    /// priority and a body.
    pub fn request_blocking_with<Q: Message, R: Message>(
        &self,
        req: &Q,
        opts: SendOptions,
        timeout: std::time::Duration,
    ) -> Result<Reply<R>, RequestError> {
        if self.node.rt.is_current_thread() {
            return Err(SendError::WouldDeadlock.into());
        }
        futures::executor::block_on(self.request_with(req, opts, timeout))
    }
}
