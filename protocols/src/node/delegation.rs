//! What a delivered message means to the node (one of the node's rules,
//! sans-IO; the wire form is docs/protocol.md §2.6):
//!
//! * a reply completes the request it answers — a plain one only from the
//!   site asked, a delegated one from any site (the request table decides:
//!   [`crate::node::requests`]);
//! * a one-way message or a request goes to its type's handler, from the
//!   site that delivered it;
//! * a forwarded request goes to its type's handler as if its origin had
//!   sent it: the origin is the forwarder's claim (the node charges it to
//!   the forwarder), the handler's header is the one inside the origin
//!   block, and its answer goes to the origin directly, as a delegated
//!   reply;
//! * what nobody can handle is unhandled, with a reason: a forwarded
//!   request whose origin block does not parse, or a type with no handler
//!   (a forwarded one then says which origin it claimed, so the node can
//!   answer an origin it already knows and make no entry for one it does
//!   not).
//!
//! The runtime asks [`classify`] and carries the answer out.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use sitenet_protocols::node::delegation::{classify, reply_kind, Delivered, Unhandled};
//! use sitenet_protocols::wire::message::wrap_origin;
//! use sitenet_protocols::MessageKind;
//!
//! let inner = Bytes::from_static(b"typed header");
//! let origin = "00000000000000000000000000000abc@tcp:10.0.0.1:7000";
//! let forwarded = wrap_origin(origin, &inner).unwrap();
//! match classify(MessageKind::Forward, &forwarded, true) {
//!     Delivered::Forwarded { origin, header } => {
//!         assert_eq!(origin.to_string(), "00000000000000000000000000000abc@tcp:10.0.0.1:7000");
//!         assert_eq!(header, inner);
//!     }
//!     other => panic!("{other:?}"),
//! }
//! // Its answer goes to the origin, as a delegated reply.
//! assert_eq!(reply_kind(MessageKind::Forward), Some(MessageKind::DelegatedReply));
//! assert!(matches!(
//!     classify(MessageKind::Forward, &Bytes::from_static(b"\x09"), true),
//!     Delivered::Unhandled(Unhandled::MalformedOrigin)
//! ));
//! ```

use bytes::Bytes;

use crate::base::site::SiteDescriptor;
use crate::wire::message::{unwrap_origin, MessageKind};

/// What the node does with a delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// A reply: complete the request it answers (`delegated`: any site may
    /// send it, see [`crate::node::requests`]).
    Reply {
        /// A delegated reply (to a forwarded request).
        delegated: bool,
    },
    /// Call the type's handler, as sent by the site that delivered it.
    Handle,
    /// A forwarded request: call the type's handler as if `origin` had
    /// sent it, with the typed `header` inside the origin block.
    Forwarded {
        /// The origin the forwarder names (its claim, not a proof).
        origin: SiteDescriptor,
        /// The typed header.
        header: Bytes,
    },
    /// Nobody handles it.
    Unhandled(Unhandled),
}

/// Why a message is not handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unhandled {
    /// A forwarded request whose origin block does not parse: answered to
    /// nobody (there is no one to answer).
    MalformedOrigin,
    /// No handler is registered for its type. `origin`: the origin a
    /// forwarded request names — the error reply goes to it only if the
    /// node already knows it (no entry is made just to say so); `None`:
    /// the site that delivered it sent it.
    NoHandler {
        /// The claimed origin of a forwarded request.
        origin: Option<SiteDescriptor>,
    },
}

impl Unhandled {
    /// The reason, as the unhandled hook and an error reply say it.
    pub fn reason(&self, type_id: u32) -> String {
        match self {
            Self::MalformedOrigin => "forwarded request with a malformed origin block".into(),
            Self::NoHandler { .. } => format!("no handler for message type {type_id}"),
        }
    }
}

/// What a message of `kind` with `header` means, given whether a handler
/// is registered for its type (`has_handler`).
pub fn classify(kind: MessageKind, header: &Bytes, has_handler: bool) -> Delivered {
    match kind {
        MessageKind::Reply => Delivered::Reply { delegated: false },
        MessageKind::DelegatedReply => Delivered::Reply { delegated: true },
        MessageKind::OneWay | MessageKind::Request if has_handler => Delivered::Handle,
        MessageKind::OneWay | MessageKind::Request => {
            Delivered::Unhandled(Unhandled::NoHandler { origin: None })
        }
        MessageKind::Forward => {
            let unwrapped = unwrap_origin(header).and_then(|(o, h)| {
                let d: SiteDescriptor = o.parse().ok()?;
                Some((d, h))
            });
            match unwrapped {
                None => Delivered::Unhandled(Unhandled::MalformedOrigin),
                Some((origin, _)) if !has_handler => Delivered::Unhandled(Unhandled::NoHandler {
                    origin: Some(origin),
                }),
                Some((origin, header)) => Delivered::Forwarded { origin, header },
            }
        }
    }
}

/// The kind of the answer a message of `kind` awaits: a request's is a
/// reply, a forwarded request's a delegated reply (it goes to the origin
/// directly); anything else awaits none.
pub fn reply_kind(kind: MessageKind) -> Option<MessageKind> {
    match kind {
        MessageKind::Request => Some(MessageKind::Reply),
        MessageKind::Forward => Some(MessageKind::DelegatedReply),
        MessageKind::OneWay | MessageKind::Reply | MessageKind::DelegatedReply => None,
    }
}

/// Whether a streaming handler may take a message of `kind` (its body in
/// chunks as they arrive): one-way messages and requests. Replies complete
/// requests, and a forwarded request carries its origin in front of its
/// header: it goes to the type's handler whole.
pub fn may_stream(kind: MessageKind) -> bool {
    matches!(kind, MessageKind::OneWay | MessageKind::Request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::message::wrap_origin;

    const KINDS: [MessageKind; 5] = [
        MessageKind::OneWay,
        MessageKind::Request,
        MessageKind::Reply,
        MessageKind::Forward,
        MessageKind::DelegatedReply,
    ];

    fn forwarded() -> Bytes {
        let origin = "00000000000000000000000000000abc@tcp:10.0.0.1:7000";
        wrap_origin(origin, &Bytes::from_static(b"inner")).unwrap()
    }

    /// Every kind, with and without a handler: replies never reach a
    /// handler, and only requests (plain or forwarded) await an answer.
    #[test]
    fn every_kind_is_classified() {
        for kind in KINDS {
            for has_handler in [false, true] {
                let header = if kind == MessageKind::Forward {
                    forwarded()
                } else {
                    Bytes::from_static(b"h")
                };
                let d = classify(kind, &header, has_handler);
                match (kind, has_handler) {
                    (MessageKind::Reply, _) => {
                        assert_eq!(d, Delivered::Reply { delegated: false })
                    }
                    (MessageKind::DelegatedReply, _) => {
                        assert_eq!(d, Delivered::Reply { delegated: true })
                    }
                    (MessageKind::OneWay | MessageKind::Request, true) => {
                        assert_eq!(d, Delivered::Handle)
                    }
                    (MessageKind::OneWay | MessageKind::Request, false) => assert_eq!(
                        d,
                        Delivered::Unhandled(Unhandled::NoHandler { origin: None })
                    ),
                    (MessageKind::Forward, true) => match d {
                        Delivered::Forwarded { origin, header } => {
                            assert_eq!(origin.id.0, 0xabc);
                            assert_eq!(header, Bytes::from_static(b"inner"));
                        }
                        other => panic!("{other:?}"),
                    },
                    (MessageKind::Forward, false) => match d {
                        Delivered::Unhandled(Unhandled::NoHandler { origin: Some(o) }) => {
                            assert_eq!(o.id.0, 0xabc)
                        }
                        other => panic!("{other:?}"),
                    },
                }
                assert_eq!(
                    may_stream(kind),
                    matches!(kind, MessageKind::OneWay | MessageKind::Request)
                );
                let awaits = reply_kind(kind);
                assert_eq!(
                    awaits.is_some(),
                    matches!(kind, MessageKind::Request | MessageKind::Forward)
                );
            }
        }
    }

    #[test]
    fn a_forward_with_a_bad_origin_block_is_unhandled_whatever_the_handlers() {
        let bad = [
            Bytes::new(),
            Bytes::from_static(b"\x09"),
            // A length past the end.
            Bytes::from_static(b"\x40\x00short"),
            // Not a descriptor.
            wrap_origin("tcp:10.0.0.1:7000", &Bytes::new()).unwrap(),
        ];
        for header in bad {
            for has_handler in [false, true] {
                assert_eq!(
                    classify(MessageKind::Forward, &header, has_handler),
                    Delivered::Unhandled(Unhandled::MalformedOrigin),
                    "{header:?}"
                );
            }
        }
        assert!(Unhandled::MalformedOrigin
            .reason(7)
            .contains("malformed origin"));
        assert!(Unhandled::NoHandler { origin: None }
            .reason(42)
            .contains("type 42"));
    }
}
