//! Answering a request later: the [`Responder`] a handler takes from its
//! context.
//!
//! A handler runs on the node's I/O thread and must not wait; a request
//! whose answer needs anything awaited (another site, a lock, a language
//! runtime's own thread) takes its responder, returns, and answers from
//! wherever the answer is ready — Erlang's `gen_server:reply(From, R)`.
//! Every request gets exactly one answer: the reply, an error
//! ([`fail`](Responder::fail)), or — if the responder is dropped
//! unanswered, or the handler neither answered nor took it — a "no reply"
//! sent at once, which the caller sees as
//! [`RequestError::NoReply`](crate::RequestError::NoReply) instead of
//! waiting out its timeout.

use bytes::Bytes;
use serde::Serialize;

use sitenet_protocols::{MessageKind, OutMessage, Priority};

use super::outcome::{Answer, Answered, Outcome};

use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::node::{NoReply, RemoteError};
use crate::site::SiteRef;

/// The answer a request is owed, taken from its handler's
/// [`Ctx::responder`](crate::Ctx::responder): `Send + 'static`, so it can
/// move to another thread or task and answer once, later.
///
/// Dropping it unanswered answers "no reply" at once (the caller's
/// request ends with [`RequestError::NoReply`](crate::RequestError::NoReply)).
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node, SendOptions};
/// #[derive(Serialize, Deserialize)]
/// struct Slow(u64);
/// impl Message for Slow { const ID: u32 = 31; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|ctx, Slow(n): Slow| {
///     let responder = ctx.responder().expect("a request");
///     // The handler returns at once; the answer comes from another thread.
///     std::thread::spawn(move || {
///         std::thread::sleep(Duration::from_millis(20));
///         let _ = responder.reply(&Slow(n * 2));
///     });
/// })?;
/// let client = Node::builder().start()?;
/// let site = client.site(&server.listen_addresses()[0])?;
/// let r = site.request::<Slow, Slow>(&Slow(21)).timeout(Duration::from_secs(30)).blocking()?;
/// assert_eq!(r.msg.0, 42);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Responder {
    to: SiteRef,
    /// The kind of the answer: a reply, or a delegated reply to a
    /// forwarded request's origin.
    kind: MessageKind,
    corr: u64,
    priority: Priority,
    answered: bool,
}

impl Responder {
    pub(crate) fn new(to: SiteRef, kind: MessageKind, corr: u64, priority: Priority) -> Self {
        Self {
            to,
            kind,
            corr,
            priority,
            answered: false,
        }
    }

    /// Answers with `reply` (at the request's priority). Never waits:
    /// fails with `QueueFull` if the site's output bound is reached — the
    /// caller is then told "no reply", as if the responder were dropped.
    pub fn reply<R: Message>(self, reply: &R) -> Result<(), SendError> {
        self.reply_with(reply, SendOptions::new())
    }

    /// [`reply`](Self::reply) with options: a body (`Bytes` are shared,
    /// not copied) and a priority (unset: the request's).
    pub fn reply_with<R: Message>(mut self, reply: &R, opts: SendOptions) -> Result<(), SendError> {
        self.answer_message(reply, opts)
    }

    /// Answers with a raw message: type id `type_id` (a user id) and
    /// `body` as its bytes, no serde (see
    /// [`Ctx::reply_raw`](crate::Ctx::reply_raw)). Never waits.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::Node;
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_raw(1..=1, |ctx, m| {
    ///     let responder = ctx.responder().expect("a request");
    ///     // Answered later, from a thread of the language runtime.
    ///     std::thread::spawn(move || { let _ = responder.reply_raw(2, m.body); });
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = site.request_raw(1, vec![7u8; 3]).timeout(Duration::from_secs(30)).blocking()?;
    /// assert_eq!((r.type_id, &r.body[..]), (2, &[7u8, 7, 7][..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reply_raw(mut self, type_id: u32, body: impl Into<Bytes>) -> Result<(), SendError> {
        post_raw_answer(
            &self.to,
            self.kind,
            self.corr,
            self.priority,
            type_id,
            body.into(),
        )?;
        self.answered = true;
        Ok(())
    }

    /// Answers with an error: the caller's request ends with
    /// [`RequestError::Remote`](crate::RequestError::Remote) carrying
    /// `reason`.
    pub fn fail(mut self, reason: impl Into<String>) -> Result<(), SendError> {
        self.answer_message(
            &RemoteError {
                reason: reason.into(),
            },
            SendOptions::new(),
        )
    }

    /// Answers with the handler's error value `err`, a type of the
    /// application's (for example an enum of the ways a lookup fails):
    /// the caller of
    /// [`RequestBuilder::or_error`](crate::RequestBuilder::or_error)
    /// decodes it as its own type and matches it; a plain `request` sees
    /// [`RequestError::Remote`](crate::RequestError::Remote) with `err`
    /// rendered as JSON in its reason. Never waits.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Take(u32);
    /// impl Message for Take { const ID: u32 = 32; }
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// enum Refused { SoldOut, TooMany { max: u32 } }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|ctx, Take(n): Take| {
    ///     let responder = ctx.responder().expect("a request");
    ///     std::thread::spawn(move || { let _ = responder.reply_error(&Refused::TooMany { max: 4 }); });
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = site.request::<Take, Take>(&Take(9)).timeout(Duration::from_secs(30)).or_error::<Refused>().blocking()?;
    /// assert_eq!(r.err(), Some(Refused::TooMany { max: 4 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reply_error<E: Serialize>(mut self, err: &E) -> Result<(), SendError> {
        let answered = self.encoding(|| super::outcome::error_answer(err));
        self.post(answered)
    }

    /// Answers with a handler's output (an [`Outcome`]: a reply, a
    /// `Result` whose error is the caller's typed error, `()` or `None`
    /// for no reply), as [`Node::handle_async`](crate::Node::handle_async)
    /// answers with its future's output. An output that answers nothing
    /// answers "no reply" at once, as a dropped responder does.
    pub fn answer<O: Outcome>(mut self, output: O) -> Result<(), SendError> {
        let answer = self.encoding(|| output.into_answer());
        self.post(answer)
    }

    /// Answers with a handler's output, encoded for the requester; "no
    /// reply" (`why`) if it answers nothing.
    pub(crate) fn answer_output_or_no_reply<O: Outcome>(
        self,
        output: O,
        why: &str,
    ) -> Result<(), SendError> {
        let answer = self.encoding(|| output.into_answer());
        self.answer_or_no_reply(answer, why)
    }

    /// Runs `f`, which encodes the answer, with this node and the
    /// requester lent as its encoding context
    /// ([`context::encoding`](crate::context::encoding)).
    fn encoding<T>(&self, f: impl FnOnce() -> T) -> T {
        crate::node::encoding_on(&self.to.node, Some(&self.to.entry), f)
    }

    /// Answers with `answer`; "no reply" (`why`) if it is nothing.
    pub(crate) fn answer_or_no_reply(
        mut self,
        answer: Answered,
        why: &str,
    ) -> Result<(), SendError> {
        match answer.0 {
            Answer::Nothing => self.no_reply(why),
            _ => self.post(answer),
        }
    }

    /// Answers "no reply", saying `why`.
    pub(crate) fn no_reply(mut self, why: &str) -> Result<(), SendError> {
        self.answer_message(&NoReply { reason: why.into() }, SendOptions::new())
    }

    /// Refuses the request unrun: the node runs all the async handlers it
    /// allows (the caller sees `RequestError::Busy`, whose reason is `why`).
    pub(crate) fn busy(mut self, why: String) -> Result<(), SendError> {
        let detail = Bytes::from_static(&[crate::node::error_detail::BUSY]);
        self.post(Answered(Answer::Error {
            reason: why,
            detail,
        }))
    }

    fn post(&mut self, answer: Answered) -> Result<(), SendError> {
        // Nothing to answer: dropped unanswered, "no reply" goes.
        if post_answered(&self.to, self.kind, self.corr, self.priority, answer)? {
            self.answered = true;
        }
        Ok(())
    }

    /// Gives up answering without telling the caller: its request ends by
    /// its own timeout (or its site's failure). For a server that must
    /// look silent — a test of timeouts, an answer deliberately withheld
    /// from a peer. Unlike a kept responder, an abandoned one holds no
    /// reference to the requester (which would keep its channel open).
    pub fn abandon(mut self) {
        self.answered = true;
    }

    /// The site the answer goes to: the requester (for a forwarded
    /// request, its origin, as the forwarder named it).
    pub fn site(&self) -> &SiteRef {
        &self.to
    }

    /// The request's correlation id, as
    /// [`Ctx::correlation_id`](crate::Ctx::correlation_id) gave it.
    pub fn correlation_id(&self) -> u64 {
        self.corr
    }

    fn answer_message<R: Message>(
        &mut self,
        reply: &R,
        opts: SendOptions,
    ) -> Result<(), SendError> {
        post_answer(&self.to, self.kind, self.corr, self.priority, reply, opts)?;
        self.answered = true;
        Ok(())
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered {
            let reason = "the handler dropped the request's responder unanswered".to_string();
            // Best effort: a full or failed site cannot be told either,
            // and the caller's timeout or the site's failure ends it.
            let _ = self.answer_message(&NoReply { reason }, SendOptions::new());
        }
    }
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("to", &self.to.id())
            .field("corr", &self.corr)
            .field("answered", &self.answered)
            .finish()
    }
}

/// Queues the answer `reply` (with `body`) of request `corr` to `to`, as
/// a message of `kind` at `priority` (never waits).
pub(crate) fn post_answer<R: Message>(
    to: &SiteRef,
    kind: MessageKind,
    corr: u64,
    priority: Priority,
    reply: &R,
    opts: SendOptions,
) -> Result<(), SendError> {
    let header = crate::node::encoding_on(&to.node, Some(&to.entry), || {
        crate::message::encode_header(reply)
    })
    .map_err(|e| SendError::Encode {
        type_id: R::ID,
        reason: e.to_string(),
    })?;
    let (priority, body) = opts.into_parts(priority);
    to.try_post(OutMessage {
        priority,
        type_id: R::ID,
        kind,
        corr,
        header,
        body,
        tracked: false,
    })
}

/// Queues a handler's output `answer` as the answer of request `corr` to
/// `to` (a message of `kind` at `priority`; never waits). False if the
/// output answers nothing (`Answered::Nothing`): nothing was queued.
pub(crate) fn post_answered(
    to: &SiteRef,
    kind: MessageKind,
    corr: u64,
    priority: Priority,
    answer: Answered,
) -> Result<bool, SendError> {
    let (type_id, header, body) = match answer.0 {
        Answer::Nothing => return Ok(false),
        Answer::Reply { type_id, header } => (type_id, header, Bytes::new()),
        Answer::Error { reason, detail } => {
            let header = crate::message::encode_header(&RemoteError { reason }).map_err(|e| {
                SendError::Encode {
                    type_id: RemoteError::ID,
                    reason: e.to_string(),
                }
            })?;
            (RemoteError::ID, header, detail)
        }
        Answer::Unencodable(reason) => {
            post_answer(
                to,
                kind,
                corr,
                priority,
                &RemoteError { reason },
                SendOptions::new(),
            )?;
            return Ok(true);
        }
    };
    to.try_post(OutMessage {
        priority,
        type_id,
        kind,
        corr,
        header,
        body: crate::message::one_part(body),
        tracked: false,
    })?;
    Ok(true)
}

/// Queues the raw answer (`type_id`, `body`; see `RawMessage`) of request
/// `corr` to `to`, as a message of `kind` at `priority` (never waits).
pub(crate) fn post_raw_answer(
    to: &SiteRef,
    kind: MessageKind,
    corr: u64,
    priority: Priority,
    type_id: u32,
    body: Bytes,
) -> Result<(), SendError> {
    if type_id >= crate::message::RESERVED_IDS {
        return Err(SendError::ReservedId(type_id));
    }
    to.try_post(OutMessage {
        priority,
        type_id,
        kind,
        corr,
        header: Bytes::new(),
        body: crate::message::one_part(body),
        tracked: false,
    })
}
