//! The handler's context: who sent the message being handled, its body and
//! priority, and how to reply, forward or spawn work from a handler.

use std::sync::Arc;

use bytes::Bytes;

use sitenet_protocols::{MessageKind, OutMessage, Priority, SiteId};

use super::responder::Responder;
use super::RemoteError;
use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::node::NoReply;
use crate::node::{Ctx, Node};
use crate::site::SiteRef;

impl Ctx<'_> {
    /// The sending site (reply to it, or keep it to talk later).
    ///
    /// For a forwarded request this is its *origin*, the site the
    /// forwarder names: a claim this node has not checked (without
    /// authentication, any peer can forward a request naming any site).
    /// Key trust, quotas or per-sender state on
    /// [`forwarded_by`](Self::forwarded_by) when it is `Some`, the site
    /// that actually delivered the message; the built-in sink does.
    pub fn sender(&self) -> SiteRef {
        SiteRef::counted(self.from.clone(), self.node.clone())
    }

    /// For a forwarded request ([`Ctx::forward`] at another site), the site
    /// that forwarded it to this node — the one whose channel delivered it;
    /// `None` for a message its sender sent itself. The request's origin,
    /// [`sender`](Self::sender), is only what this site claims.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Who;
    /// impl Message for Who { const ID: u32 = 21; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Seen { via: Option<String> }
    /// impl Message for Seen { const ID: u32 = 22; }
    ///
    /// let owner = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// owner.handle(|ctx, _: Who| {
    ///     let via = ctx.forwarded_by().and_then(|s| s.id()).map(|id| id.to_string());
    ///     let _ = ctx.reply(&Seen { via });
    /// })?;
    /// let relay = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let to_owner = relay.site(&owner.listen_addresses()[0])?;
    /// relay.handle(move |ctx, w: Who| { let _ = ctx.forward(&to_owner, &w); })?;
    /// let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let t = Duration::from_secs(30);
    /// let r = client.site(&relay.listen_addresses()[0])?
    ///     .request::<Who, Seen>(&Who).timeout(t).blocking()?;
    /// assert_eq!(r.msg.via, Some(relay.id().to_string()));
    /// let r = client.site(&owner.listen_addresses()[0])?
    ///     .request::<Who, Seen>(&Who).timeout(t).blocking()?;
    /// assert_eq!(r.msg.via, None); // asked directly
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forwarded_by(&self) -> Option<SiteRef> {
        (!Arc::ptr_eq(self.via, self.from))
            .then(|| SiteRef::counted(self.via.clone(), self.node.clone()))
    }

    /// The sending site's id.
    pub fn sender_id(&self) -> Option<SiteId> {
        self.from.id()
    }

    /// The message's wire type id: what a raw handler for a range of ids
    /// dispatches on (it is also its [`RawMessage`](crate::RawMessage)'s).
    pub fn type_id(&self) -> u32 {
        self.type_id
    }

    /// The message's body (empty if it had none). Cheap to clone.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The level it was sent at.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The request's correlation id (0 for a one-way message): the number
    /// its reply carries, for tracing a request across sites. Only a reply
    /// from the site the request was sent to completes it.
    pub fn correlation_id(&self) -> u64 {
        self.corr
    }

    /// The request's id across sites (its origin and correlation id, the
    /// same on every hop of a forward), or `None` for a one-way message or
    /// an origin whose id is not known yet. The `sitenet.handle` span the
    /// handler runs in carries it as its `request` field.
    pub fn request_id(&self) -> Option<crate::message::RequestId> {
        if !self.is_request() {
            return None;
        }
        Some(crate::message::RequestId {
            origin: self.from.id()?,
            corr: self.corr,
        })
    }

    /// True if the sender awaits a reply (`SiteRef::request`).
    pub fn is_request(&self) -> bool {
        sitenet_protocols::node::delegation::reply_kind(self.kind).is_some()
    }

    /// The node, to reach other sites from a handler.
    pub fn node(&self) -> Node {
        Node::from_inner(self.node.clone())
    }

    /// [`reply`](Self::reply) with options: a body and a priority (unset:
    /// the request's). Never waits; fails with `QueueFull` if the output
    /// bound is reached.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use bytes::Bytes;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Read { len: usize }
    /// impl Message for Read { const ID: u32 = 4; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Data;
    /// impl Message for Data { const ID: u32 = 5; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|ctx, r: Read| {
    ///     // The body goes as it is: a `Bytes` is shared, not copied.
    ///     let _ = ctx.reply_with(&Data, SendOptions::new().body(vec![7u8; r.len]));
    /// })?;
    /// let client = Node::builder().start()?; // (dropping its last handle shuts a node down)
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = site.request::<Read, Data>(&Read { len: 100_000 }).timeout(Duration::from_secs(30)).blocking()?;
    /// assert_eq!(r.body.len(), 100_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reply_with<R: Message>(
        &mut self,
        reply: &R,
        opts: SendOptions,
    ) -> Result<(), SendError> {
        if !self.is_request() || self.replied {
            return Err(SendError::NothingToAnswer {
                type_id: self.type_id,
            });
        }
        super::responder::post_answer(
            &self.sender(),
            // A forwarded request is answered to its origin directly.
            sitenet_protocols::node::delegation::reply_kind(self.kind)
                .unwrap_or(MessageKind::Reply),
            self.corr,
            self.priority,
            reply,
            opts,
        )?;
        self.replied = true;
        Ok(())
    }

    /// Takes the request's [`Responder`], to answer later from any thread
    /// or task (the handler may not wait). `None` for a one-way message,
    /// or a request already answered, forwarded or whose responder was
    /// taken. Dropped unanswered, it answers "no reply" at once.
    ///
    /// A handler that neither answers, forwards nor takes the responder
    /// answers "no reply" when it returns: no caller waits out its
    /// timeout for a handler that forgot.
    pub fn responder(&mut self) -> Option<Responder> {
        let kind = sitenet_protocols::node::delegation::reply_kind(self.kind)?;
        if self.replied {
            return None;
        }
        self.replied = true;
        Some(Responder::new(
            self.sender(),
            kind,
            self.corr,
            self.priority,
        ))
    }

    /// Replies to the request being handled with a raw message: type id
    /// `type_id` (a user id) and `body` as its bytes, no serde (see
    /// [`RawMessage`](crate::RawMessage)). At the request's priority;
    /// never waits. The caller of
    /// [`SiteRef::request_raw`](crate::SiteRef::request_raw) gets them as
    /// they are; a typed caller gets a reply that does not decode.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::Node;
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// // Ids 100..200 are the runtime's own; it answers each with its bytes reversed.
    /// server.handle_raw(100..200, |ctx, m| {
    ///     let reversed: Vec<u8> = m.body.iter().rev().copied().collect();
    ///     let _ = ctx.reply_raw(m.type_id + 1, reversed);
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = site.request_raw(150, &b"abc"[..]).timeout(Duration::from_secs(30)).blocking()?;
    /// assert_eq!((r.type_id, &r.body[..]), (151, &b"cba"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reply_raw(&mut self, type_id: u32, body: impl Into<Bytes>) -> Result<(), SendError> {
        if !self.is_request() || self.replied {
            return Err(SendError::NothingToAnswer {
                type_id: self.type_id,
            });
        }
        super::responder::post_raw_answer(
            &self.sender(),
            sitenet_protocols::node::delegation::reply_kind(self.kind)
                .unwrap_or(MessageKind::Reply),
            self.corr,
            self.priority,
            type_id,
            body.into(),
        )?;
        self.replied = true;
        Ok(())
    }

    /// Answers "no reply" (see [`responder`](Self::responder)) unless the
    /// request was answered; nothing for a one-way message. Called after
    /// every handler: checked here, before the reason is allocated, so a
    /// one-way message costs nothing (tests/allocations.rs).
    pub(crate) fn no_reply(&mut self, reason: &str) {
        if self.is_request() && !self.replied {
            let _ = self.reply(&NoReply {
                reason: reason.into(),
            });
        }
    }

    /// Answers the request being handled with the error `reason`, unless
    /// it was answered already (a one-way message gets nothing: `reply`
    /// refuses it).
    pub(crate) fn fail_request(&mut self, reason: String) {
        let _ = self.reply(&RemoteError { reason });
    }

    /// Replies to the request being handled, at its priority, without a
    /// body. Never waits; fails with `QueueFull` if the output bound is
    /// reached.
    pub fn reply<R: Message>(&mut self, reply: &R) -> Result<(), SendError> {
        self.reply_with(reply, SendOptions::new())
    }

    /// Delegates the request being handled to `to` (Paradis-Net's
    /// forward), as `msg` with the request's priority: `to`'s handler sees
    /// the original sender as its sender and answers it directly — three
    /// messages for the delegation, not four or six (docs/protocol.md
    /// §2.6). The origin must be reachable from `to` (it listens, or
    /// already has a channel to it): `to` tries each address the origin
    /// listens on once, and gives up if none answers (a forwarder may not
    /// make a node dial for ever). The request counts
    /// as answered here.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Lookup { key: String }
    /// impl Message for Lookup { const ID: u32 = 11; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Found { value: String }
    /// impl Message for Found { const ID: u32 = 12; }
    ///
    /// // The owner of the keys answers whoever it sees as the sender.
    /// let owner = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// owner.handle(|ctx, l: Lookup| {
    ///     let _ = ctx.reply(&Found { value: format!("value of {}", l.key) });
    /// })?;
    /// // A directory hands every lookup to the owner.
    /// let directory = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let to_owner = directory.site(&owner.listen_addresses()[0])?;
    /// directory.handle(move |ctx, l: Lookup| {
    ///     let _ = ctx.forward(&to_owner, &l);
    /// })?;
    /// // The client asks the directory; the owner's answer comes straight back.
    /// let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let r = client.site(&directory.listen_addresses()[0])?.request::<Lookup, Found>(&Lookup { key: "k".into() }).timeout(Duration::from_secs(30)).blocking()?;
    /// assert_eq!(r.msg.value, "value of k");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forward<M: Message>(&mut self, to: &SiteRef, msg: &M) -> Result<(), SendError> {
        self.forward_with(to, msg, SendOptions::new())
    }

    /// [`forward`](Self::forward) with options: a priority (unset: the
    /// request's) and a body.
    pub fn forward_with<M: Message>(
        &mut self,
        to: &SiteRef,
        msg: &M,
        opts: SendOptions,
    ) -> Result<(), SendError> {
        if !self.is_request() || self.replied {
            return Err(SendError::NothingToAnswer {
                type_id: self.type_id,
            });
        }
        post_forward(
            to,
            self.origin_descriptor(),
            self.corr,
            msg,
            opts,
            self.priority,
        )?;
        self.replied = true;
        // In the request's `sitenet.handle` span: the next hop's span
        // carries the same request id.
        tracing::debug!(to = ?to.id(), address = ?to.address(), "request forwarded");
        Ok(())
    }

    /// Answers the request being handled with a handler's output (see
    /// [`Outcome`](super::Outcome)), unless it answers nothing. An output
    /// of a request answered already, or of a one-way message, is dropped
    /// (logged at debug level: there is nobody to tell).
    pub(crate) fn answer(&mut self, answer: super::outcome::Answered) {
        if answer.is_nothing() {
            return;
        }
        if !self.is_request() || self.replied {
            tracing::debug!(
                type_id = self.type_id,
                answer = answer.describe(),
                "handler output dropped: a one-way message, or a request answered already"
            );
            return;
        }
        let kind = sitenet_protocols::node::delegation::reply_kind(self.kind)
            .unwrap_or(MessageKind::Reply);
        match super::responder::post_answered(
            &self.sender(),
            kind,
            self.corr,
            self.priority,
            answer,
        ) {
            Ok(answered) => self.replied = answered,
            Err(e) => {
                tracing::debug!(type_id = self.type_id, error = %e, "handler output not sent")
            }
        }
    }

    /// The requesting site as a descriptor: its id and the addresses it
    /// listens on, as this node learned them.
    fn origin_descriptor(&self) -> Option<String> {
        if let Some(o) = &self.origin {
            return Some(o.clone());
        }
        Some(self.node.describe(self.from)?.to_string())
    }

    /// Runs async work started by a handler on the node's runtime. The work
    /// runs after the handler returns, concurrently with later messages:
    /// ordering is given up explicitly.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Sum(u64);
    /// impl Message for Sum { const ID: u32 = 6; }
    ///
    /// // A front end that asks a back end before it answers: the handler may
    /// // not wait, so it spawns the work and sends the answer from there.
    /// let back = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// back.handle(|ctx, Sum(n): Sum| { let _ = ctx.reply(&Sum(n + 1)); })?;
    /// let front = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let to_back = front.site(&back.listen_addresses()[0])?;
    /// front.handle(move |ctx, Sum(n): Sum| {
    ///     let (to_back, client) = (to_back.clone(), ctx.sender());
    ///     ctx.spawn(async move {
    ///         let r = to_back.request::<Sum, Sum>(&Sum(n)).timeout(Duration::from_secs(30)).await;
    ///         if let Ok(r) = r {
    ///             let _ = client.send(&Sum(r.msg.0 * 10)).try_now();
    ///         }
    ///     });
    /// })?;
    /// let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// client.handle(move |_ctx, Sum(n): Sum| { let _ = tx.lock().unwrap().send(n); })?;
    /// client.site(&front.listen_addresses()[0])?.send(&Sum(1)).try_now()?;
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(30))?, 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.node.rt().spawn(fut);
    }
}

/// Queues `msg` to `to` as the forward of request `corr` whose origin is
/// the site `origin` describes (`None`: its id is not known yet), at
/// `opts`' priority, with its body (never waits).
pub(crate) fn post_forward<M: Message>(
    to: &SiteRef,
    origin: Option<String>,
    corr: u64,
    msg: &M,
    opts: SendOptions,
    default_priority: Priority,
) -> Result<(), SendError> {
    let origin = origin.ok_or_else(|| SendError::Encode {
        type_id: M::ID,
        reason: "the requesting site's id is not known yet".into(),
    })?;
    let header = crate::node::encoding_on(&to.node, Some(&to.entry), || {
        crate::message::encode_header(msg)
    })
    .map_err(|e| SendError::Encode {
        type_id: M::ID,
        reason: e.to_string(),
    })?;
    let header =
        sitenet_protocols::wire::message::wrap_origin(&origin, &header).ok_or_else(|| {
            SendError::Encode {
                type_id: M::ID,
                reason: "the requesting site's descriptor does not fit an origin block".into(),
            }
        })?;
    let (priority, body) = opts.into_parts(default_priority);
    to.try_post(OutMessage {
        priority,
        type_id: M::ID,
        kind: MessageKind::Forward,
        corr,
        header,
        body,
        tracked: false,
    })
}
