//! What a permanently failed site hands back ([`HandedBack`]) and each
//! message in it ([`ReturnedMessage`]): read, decoded and sent again
//! without the application's own serde.

use std::sync::Weak;

use bytes::Bytes;
use sitenet_protocols::{MessageKind, OutMessage, Priority};

use crate::node::NodeInner;

/// What a permanently failed site handed back: nothing is silently
/// dropped. Each message can be read ([`ReturnedMessage::decode`],
/// [`body`](ReturnedMessage::body)) and sent again elsewhere
/// ([`SiteRef::resend`](crate::SiteRef::resend)) without the application's own serde.
#[derive(Debug, Clone, Default)]
pub struct HandedBack {
    /// Never completely sent, so never delivered: safe to send elsewhere.
    pub not_sent: Vec<ReturnedMessage>,
    /// Completely sent, never acknowledged: may or may not have been
    /// delivered (sending it elsewhere may apply it twice).
    pub maybe_delivered: Vec<ReturnedMessage>,
}

/// One message a failed site handed back ([`HandedBack`]), as it was
/// queued: its type id, its typed header (empty for a message sent raw)
/// and its body. [`decode`](Self::decode) reads a typed one back as its
/// type — `SiteRef`s inside included, while the node lives — and
/// [`SiteRef::resend`](crate::SiteRef::resend) sends a one-way message again, to any site.
#[derive(Clone)]
pub struct ReturnedMessage {
    pub(crate) message: OutMessage,
    /// The node that queued it: `SiteRef`s in its header decode on it.
    /// Weak: a failure record kept by the node's own site table must not
    /// keep the node.
    pub(crate) node: Weak<NodeInner>,
}

impl ReturnedMessage {
    /// The message's wire type id (`M::ID` of a typed message, the id a
    /// raw one was sent with).
    pub fn type_id(&self) -> u32 {
        self.message.type_id
    }

    /// Its role in request/reply: only a one-way message can be resent
    /// as it is.
    pub fn kind(&self) -> MessageKind {
        self.message.kind
    }

    /// The level it was sent at.
    pub fn priority(&self) -> Priority {
        self.message.priority
    }

    /// Its typed header, serialised (empty for a message sent raw; a
    /// forwarded request's without its origin block).
    pub fn header(&self) -> Bytes {
        let h = &self.message.header;
        if self.message.kind == MessageKind::Forward {
            if let Some((_, typed)) = sitenet_protocols::wire::message::unwrap_origin(h) {
                return typed;
            }
        }
        h.clone()
    }

    /// Its body: the bytes of a message sent raw. A body sent in one part
    /// is shared, not copied; several parts are joined into one.
    pub fn body(&self) -> Bytes {
        match &self.message.body[..] {
            [] => Bytes::new(),
            [one] => one.clone(),
            parts => parts.concat().into(),
        }
    }

    /// The length of its body in bytes.
    pub fn body_len(&self) -> u64 {
        self.message.body_len()
    }

    /// The message as the protocol queued it.
    pub fn as_out_message(&self) -> &OutMessage {
        &self.message
    }

    /// The message as the protocol queued it, taken.
    pub fn into_out_message(self) -> OutMessage {
        self.message
    }
}

impl std::fmt::Debug for ReturnedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReturnedMessage")
            .field("type_id", &self.message.type_id)
            .field("kind", &self.message.kind)
            .field("priority", &self.message.priority)
            .field("header_len", &self.message.header.len())
            .field("body_len", &self.message.body_len())
            .finish()
    }
}
