//! Raw messages on the sending side: a type id and bytes, no serde
//! (`SiteRef::send_raw`, `request_raw`), and what a failed site handed
//! back, decoded and sent again (`ReturnedMessage::decode`,
//! `SiteRef::resend`). A language runtime has its own marshaler and its
//! own dispatch; it cannot declare a serde type per message.
//!
//! A raw message is an ordinary message on the wire (docs/protocol.md
//! §2.1): its type id, an empty typed header, and the bytes as its body —
//! the same frames, packing, priorities and acknowledgements as any other.
//! The receiving side (`Node::handle_raw`) is in `handlers/raw.rs`.

use bytes::Bytes;

use sitenet_protocols::{MessageKind, OutMessage};

use super::{RequestBuilder, ReturnedMessage, SendBuilder, SiteRef};
use crate::error::{DecodeError, SendError};
use crate::message::{Message, RawMessage, SendOptions, RESERVED_IDS};

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
    let (priority, body) = opts.into_parts(sitenet_protocols::Priority::default());
    Ok(OutMessage {
        priority,
        type_id,
        kind,
        corr,
        header: Bytes::new(),
        body,
        tracked: false,
    })
}

/// Raw messages: a type id and bytes, no serde.
impl SiteRef {
    /// A raw one-way message to this site — type id `type_id`, `body` as
    /// its bytes (a `Vec<u8>` or `Bytes`, not copied), no serde — at
    /// medium priority: a [`SendBuilder`] like [`send`](Self::send)'s
    /// (`.await`, `try_now`, `blocking`; more body parts, a priority,
    /// `tracked`). The receiver's raw handler
    /// ([`Node::handle_raw`](crate::Node::handle_raw)) gets it as a
    /// [`RawMessage`]. `type_id` must be a user id (below
    /// [`RESERVED_IDS`]): [`SendError::ReservedId`] otherwise.
    ///
    /// A typed handler registered for `type_id` at the receiver takes the
    /// message first, and finds no header to decode (it goes to the
    /// `on_unhandled` hook): keep the ids of raw messages apart.
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
    /// site.send_raw(3, vec![1u8, 2, 3]).try_now()?;
    /// assert_eq!(&rx.recv_timeout(Duration::from_secs(30))?[..], &[1u8, 2, 3][..]);
    /// // sitenet's own ids are refused.
    /// assert_eq!(site.send_raw(RESERVED_IDS, Vec::new()).try_now(), Err(SendError::ReservedId(RESERVED_IDS)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_raw(&self, type_id: u32, body: impl Into<Bytes>) -> SendBuilder<'_> {
        let body = SendOptions::one_part(body.into());
        SendBuilder::new(self, raw_message(type_id, body, MessageKind::OneWay, 0))
    }

    /// A raw request to this site — type id `type_id`, `body` as its
    /// bytes — answered with the reply's type id, header (empty for a raw
    /// reply, [`Ctx::reply_raw`](crate::Ctx::reply_raw)) and bytes, as
    /// they came: a [`RequestBuilder`] like [`request`](Self::request)'s
    /// (a timeout, default [`DEFAULT_REQUEST_TIMEOUT`](crate::DEFAULT_REQUEST_TIMEOUT);
    /// `.await` or `blocking`). Errors as a typed request's: no handler,
    /// a handler that failed or answered nothing, the timeout, the site's
    /// failure.
    ///
    /// ```
    /// # use sitenet_runtime::Node;
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_raw(10..20, |ctx, m| {
    ///     let _ = ctx.reply_raw(m.type_id, m.body.len().to_string());
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = futures::executor::block_on(site.request_raw(12, vec![0u8; 5]))?;
    /// assert_eq!((r.type_id, &r.body[..]), (12, &b"5"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_raw(&self, type_id: u32, body: impl Into<Bytes>) -> RequestBuilder<RawMessage> {
        let corr = self.node.next_corr();
        let body = SendOptions::one_part(body.into());
        self.raw_request(raw_message(type_id, body, MessageKind::Request, corr))
    }

    /// A message a failed site handed back ([`SiteRef::failure`]), to be
    /// sent to this site as it was sent — type id, header, body and
    /// priority, typed or raw: a [`SendBuilder`] (`.await`, `try_now`,
    /// `blocking`). No serde runs: the message goes as it was encoded.
    ///
    /// Only a one-way message can be sent again:
    /// [`SendError::NotResendable`] for a request (its caller was told of
    /// the failure already: send a new request, from
    /// [`ReturnedMessage::decode`] or its [`body`](ReturnedMessage::body)),
    /// a reply or a forwarded request. One from
    /// [`maybe_delivered`](crate::HandedBack::maybe_delivered) may have
    /// been handled already: sending it again may apply it twice.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node};
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// struct Job(u32);
    /// impl Message for Job { const ID: u32 = 5; }
    ///
    /// let client = Node::builder().start()?;
    /// // A site that never answers: its messages wait, and are handed back when it is killed.
    /// let gone = client.site("tcp:127.0.0.1:1")?;
    /// gone.send(&Job(7)).try_now()?;
    /// gone.send_raw(6, &b"raw"[..]).try_now()?;
    /// client.kill(&gone);
    /// assert!(client.wait_until_blocking(|_| gone.failure().is_some(), Duration::from_secs(30))?);
    /// let (_, back) = gone.failure().unwrap();
    /// assert_eq!(back.not_sent.len(), 2);
    /// let job = back.not_sent.iter().find(|m| m.type_id() == Job::ID).unwrap();
    /// assert_eq!(job.decode::<Job>()?, Job(7));
    /// let raw = back.not_sent.iter().find(|m| m.type_id() == 6).unwrap();
    /// assert_eq!(&raw.body()[..], b"raw");
    ///
    /// // Both go to another site, as they were.
    /// let other = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// other.handle(move |_ctx, j: Job| { let _ = tx.lock().unwrap().send(j.0); })?;
    /// other.handle_raw(6..=6, |_ctx, m| assert_eq!(&m.body[..], b"raw"))?;
    /// let to = client.site(&other.listen_addresses()[0])?;
    /// for m in back.not_sent {
    ///     to.resend(m).try_now()?;
    /// }
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(30))?, 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resend(&self, m: ReturnedMessage) -> SendBuilder<'_> {
        SendBuilder::new(self, resendable(m))
    }
}

/// `m` as a new one-way message, or why it cannot be sent again.
fn resendable(m: ReturnedMessage) -> Result<OutMessage, SendError> {
    let why = match m.message.kind {
        MessageKind::OneWay => None,
        MessageKind::Request => Some(
            "a request (its caller was told the site failed): send a new request with its decoded header or its body",
        ),
        MessageKind::Reply | MessageKind::DelegatedReply => {
            Some("a reply (its request ended with the site's failure)")
        }
        MessageKind::Forward => Some("a forwarded request (its origin waits on its own timeout)"),
    };
    if let Some(why) = why {
        return Err(SendError::NotResendable(why.into()));
    }
    let mut out = m.message;
    // Its delivery future, if it was tracked, ended with the failure; and
    // a one-way message's `corr` is that future's token, never sent.
    out.tracked = false;
    out.corr = 0;
    Ok(out)
}

impl ReturnedMessage {
    /// Decodes the message's typed header as `M`: what was sent with
    /// `send(&msg)`, back as a value. `SiteRef`s inside it decode on the
    /// node that queued it, as references of its own (while that node
    /// lives; after, they fail to decode).
    ///
    /// Fails with [`DecodeError::WrongType`] for a message of another type
    /// id, and [`DecodeError::Header`] for a header that is not an `M` (a
    /// message sent raw has an empty header: read its
    /// [`body`](Self::body)). Never panics, whatever the bytes.
    ///
    /// (See [`SiteRef::resend`] for an example.)
    pub fn decode<M: Message>(&self) -> Result<M, DecodeError> {
        let type_id = self.message.type_id;
        if type_id != M::ID {
            return Err(DecodeError::WrongType {
                expected: M::ID,
                got: type_id,
            });
        }
        let header = self.header();
        let decode = || rmp_serde::from_slice::<M>(&header);
        let decoded = match self.node.upgrade() {
            // The node's own messages: its references are its user's
            // words, not a peer's claims.
            Some(node) => {
                let local = node.local_site();
                crate::node::decoding_on(&node, &local.entry, decode)
            }
            None => decode(),
        };
        decoded.map_err(|e| DecodeError::Header {
            type_id,
            reason: e.to_string(),
        })
    }
}
