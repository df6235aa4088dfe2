//! Raw messages on the sending side: a type id and bytes, no serde
//! (`SiteRef::send_raw`, `request_raw`). A language runtime has its own
//! marshaler and its own dispatch; it cannot declare a serde type per
//! message.
//!
//! A raw message is an ordinary message on the wire (docs/protocol.md
//! §2.1): its type id, an empty typed header, and the bytes as its body —
//! the same frames, packing, priorities and acknowledgements as any other.
//! The receiving side (`Node::handle_raw`) is in `handlers/raw.rs`.

use std::time::Duration;

use bytes::Bytes;

use sitenet_protocols::{MessageKind, OutMessage};

use crate::error::{RequestError, SendError};
use crate::message::{one_part, RawMessage, SendOptions, RESERVED_IDS};
use crate::site::SiteRef;

/// The raw message `type_id` with `opts`' priority and body, as a message
/// of `kind` (`corr`: its request id, or 0).
fn raw_message(
    type_id: u32,
    opts: SendOptions,
    kind: MessageKind,
    corr: u64,
) -> Result<OutMessage, SendError> {
    if type_id >= RESERVED_IDS {
        return Err(SendError::ReservedId(type_id));
    }
    Ok(OutMessage {
        priority: opts.priority,
        type_id,
        kind,
        corr,
        header: Bytes::new(),
        body: opts.body,
        tracked: false,
    })
}

/// Options sending `body` as one part, at medium priority.
fn body_only(body: Bytes) -> SendOptions {
    SendOptions {
        body: one_part(body),
        ..SendOptions::default()
    }
}

/// Raw messages: a type id and bytes, no serde.
impl SiteRef {
    /// Queues a raw message at medium priority — type id `type_id`, `body`
    /// as its bytes, no serde (a `Vec<u8>` or `Bytes`, not copied) —
    /// waiting while the site's output bound is reached. The receiver's
    /// raw handler ([`Node::handle_raw`](crate::Node::handle_raw)) gets
    /// them as a [`RawMessage`]. `type_id` must be a user id (below
    /// [`RESERVED_IDS`]): [`SendError::ReservedId`] otherwise.
    ///
    /// A typed handler registered for `type_id` at the receiver takes the
    /// message first, and finds no header to decode (it goes to the
    /// `on_unhandled` hook): keep the ids of raw messages apart.
    pub async fn send_raw(&self, type_id: u32, body: impl Into<Bytes>) -> Result<(), SendError> {
        self.send_raw_with(type_id, body_only(body.into())).await
    }

    /// [`send_raw`](Self::send_raw) with a priority, the body being
    /// `opts`' parts (sent one after the other, received as one).
    pub async fn send_raw_with(&self, type_id: u32, opts: SendOptions) -> Result<(), SendError> {
        let m = raw_message(type_id, opts, MessageKind::OneWay, 0)?;
        self.post(m).await
    }

    /// Queues a raw message at medium priority or fails at once with
    /// [`SendError::QueueFull`]; never waits (use it from handlers).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::{Node, SendError, RESERVED_IDS};
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// server.handle_raw(1..=9, move |_ctx, m| { let _ = tx.lock().unwrap().send(m.body); })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.try_send_raw(3, vec![1u8, 2, 3])?;
    /// assert_eq!(&rx.recv_timeout(Duration::from_secs(30))?[..], &[1u8, 2, 3][..]);
    /// // sitenet's own ids are refused.
    /// assert_eq!(site.try_send_raw(RESERVED_IDS, Vec::new()), Err(SendError::ReservedId(RESERVED_IDS)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_send_raw(&self, type_id: u32, body: impl Into<Bytes>) -> Result<(), SendError> {
        self.try_send_raw_with(type_id, body_only(body.into()))
    }

    /// [`try_send_raw`](Self::try_send_raw) with a priority, the body
    /// being `opts`' parts.
    pub fn try_send_raw_with(&self, type_id: u32, opts: SendOptions) -> Result<(), SendError> {
        let m = raw_message(type_id, opts, MessageKind::OneWay, 0)?;
        self.try_post(m)
    }

    /// Sends a raw request — type id `type_id`, `body` as its bytes — and
    /// waits for its reply, at most `timeout`: the reply's type id, header
    /// (empty for a raw reply, [`Ctx::reply_raw`](crate::Ctx::reply_raw))
    /// and bytes, as they came. Errors as a typed request's
    /// ([`request`](Self::request)): no handler, a handler that failed or
    /// answered nothing, the timeout, the site's failure.
    ///
    /// Like [`request`](Self::request), the request is built when this is
    /// called: the future owns it and a reference to the site
    /// (`Send + 'static`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::Node;
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_raw(10..20, |ctx, m| {
    ///     let _ = ctx.reply_raw(m.type_id, m.body.len().to_string());
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = futures::executor::block_on(
    ///     site.request_raw(12, vec![0u8; 5], Duration::from_secs(30)),
    /// )?;
    /// assert_eq!((r.type_id, &r.body[..]), (12, &b"5"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_raw(
        &self,
        type_id: u32,
        body: impl Into<Bytes>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<RawMessage, RequestError>> + Send + 'static {
        self.request_raw_with(type_id, body_only(body.into()), timeout)
    }

    /// [`request_raw`](Self::request_raw) with a priority, the body being
    /// `opts`' parts.
    pub fn request_raw_with(
        &self,
        type_id: u32,
        opts: SendOptions,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<RawMessage, RequestError>> + Send + 'static {
        let corr = self.node.next_corr();
        let m = raw_message(type_id, opts, MessageKind::Request, corr);
        let site = self.clone();
        async move {
            let reply = site.request_message(m?, timeout).await?;
            Ok(RawMessage {
                type_id: reply.prelude.type_id,
                header: reply.header,
                body: reply.body,
            })
        }
    }

    /// Blocking variant of [`request_raw`](Self::request_raw), for a plain
    /// thread. On the node's own runtime thread it fails with
    /// [`SendError::WouldDeadlock`] rather than hang.
    pub fn request_raw_blocking(
        &self,
        type_id: u32,
        body: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<RawMessage, RequestError> {
        if self.node.rt.is_current_thread() {
            return Err(SendError::WouldDeadlock.into());
        }
        futures::executor::block_on(self.request_raw(type_id, body, timeout))
    }
}
