//! Who encodes or decodes a typed message on this thread: the context a
//! user type inside a message sees, as a [`SiteRef`] does.
//!
//! A layer above sitenet (a language runtime's distribution layer) puts
//! its own references in messages — a dataflow variable, a port, a cell,
//! each named by the site that holds it. Serde cannot pass such a type
//! anything, so sitenet lends it the context on the encoding or decoding
//! thread, for the duration of the call:
//!
//! - [`encoding`]: while sitenet encodes a typed header — a send, a
//!   request (also in a batch or a cooperation), a reply (to the
//!   requester; for a forwarded request, to its origin), a forward (to
//!   the site it is forwarded to) — the node that sends and the site the
//!   header goes to;
//! - [`decoding`]: while sitenet decodes a typed header — a handler's
//!   message, a reply (also in a batch or a cooperation), a typed error
//!   reply, a message handed back — the node that receives and the site
//!   whose word the message is (its sender; the forwarder of a forwarded
//!   request; the site asked, for a reply; the node's own site, for a
//!   message handed back by [`ReturnedMessage::decode`](crate::ReturnedMessage::decode)).
//!
//! Outside those calls both are `None` (a type encoded or decoded by hand
//! with `rmp_serde`, another thread).
//! Reading the context costs nothing until [`encoding`] or [`decoding`]
//! is called: the node lends two pointers, and the handles are made only
//! then.
//!
//! ```
//! use std::time::Duration;
//! use serde::{Deserialize, Deserializer, Serialize, Serializer};
//! use sitenet_runtime::{context, Message, Node, SiteId};
//!
//! /// A reference to an entity on a site: encoded as the sending node's
//! /// id, so the receiver knows whose entity it is.
//! struct Entity { home: SiteId }
//! impl Serialize for Entity {
//!     fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
//!         // The sending node and the destination, lent by sitenet.
//!         let e = context::encoding().expect("encoded by sitenet");
//!         assert!(e.to.is_some()); // one site: the one sent to
//!         s.serialize_str(&e.node.id().to_string())
//!     }
//! }
//! impl<'de> Deserialize<'de> for Entity {
//!     fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
//!         let home = SiteId::parse_hex(&String::deserialize(d)?)
//!             .ok_or_else(|| serde::de::Error::custom("not a site id"))?;
//!         // The receiving node and the sending site, lent by sitenet.
//!         let c = context::decoding().expect("decoded by sitenet");
//!         assert_eq!(c.from.id(), Some(home));
//!         Ok(Entity { home })
//!     }
//! }
//! #[derive(Serialize, Deserialize)]
//! struct Offer(Entity);
//! impl Message for Offer { const ID: u32 = 1; }
//!
//! let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
//! let (tx, rx) = std::sync::mpsc::channel();
//! let tx = std::sync::Mutex::new(tx);
//! server.handle(move |_ctx, Offer(e): Offer| { let _ = tx.lock().unwrap().send(e.home); })?;
//! let client = Node::builder().start()?;
//! let site = client.site(&server.listen_addresses()[0])?;
//! site.send(&Offer(Entity { home: client.id() })).blocking()?;
//! assert_eq!(rx.recv_timeout(Duration::from_secs(30))?, client.id());
//! assert!(context::encoding().is_none()); // outside sitenet's encode
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::node::{with_decoding_node, with_encoding_node, Node, SiteRef};

/// Who is encoding a typed header on this thread, and for which site:
/// what [`encoding`] returns while sitenet encodes a message.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Encoding {
    /// The node that sends the message. A handle like a handler's
    /// ([`Ctx::node`](crate::Ctx::node)): it neither keeps the node
    /// running nor stops it when dropped.
    pub node: Node,
    /// The site the header goes to: the `SiteRef` sent through (equal to
    /// it), the requester for a reply, the site forwarded to for a
    /// forward. `None` where the header goes to no one site (an async
    /// handler's output encoded only to be dropped, the request having
    /// been answered otherwise).
    pub to: Option<SiteRef>,
}

/// Who is decoding a typed header on this thread, and whose message it
/// is: what [`decoding`] returns while sitenet decodes a message.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Decoding {
    /// The node that received the message (a handle like a handler's, as
    /// [`Encoding::node`]).
    pub node: Node,
    /// The site whose word the message is, which the references in it are
    /// charged to: its sender; for a forwarded request, the site that
    /// forwarded it (as [`Ctx::forwarded_by`](crate::Ctx::forwarded_by)
    /// says); for a reply, the site asked — also when the reply is
    /// delegated, sent by the site the request was forwarded to.
    pub from: SiteRef,
}

/// The encoding context of this thread: `Some` while sitenet encodes a
/// typed header (in a user type's `Serialize`), `None` anywhere else.
pub fn encoding() -> Option<Encoding> {
    with_encoding_node(|e| {
        e.map(|(node, to)| Encoding {
            node: Node::from_inner(node.clone()),
            to: to.map(|to| SiteRef::to_entry(to, node)),
        })
    })
}

/// The decoding context of this thread: `Some` while sitenet decodes a
/// typed header (in a user type's `Deserialize`), `None` anywhere else.
pub fn decoding() -> Option<Decoding> {
    with_decoding_node(|d| {
        d.map(|(node, from)| Decoding {
            node: Node::from_inner(node.clone()),
            from: SiteRef::to_entry(from, node),
        })
    })
}
