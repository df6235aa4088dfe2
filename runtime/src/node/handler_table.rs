//! The handler table and what its types are written in — `Ctx`'s
//! struct, `BodySink`, `Unhandled`, `RemoteError` — here in the node, which
//! owns the table (`NodeInner::handlers`). Registering, dispatch and
//! `Ctx`'s methods are in `handlers` (a layer above: docs/architecture.md,
//! "The runtime's layers"), which re-exports these.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use sitenet_protocols::{MessageKind, Priority, SiteId, StreamAbort};

use super::NodeInner;
use crate::error::NodeError;
use crate::message::{Message, RESERVED_IDS};
use crate::site_entry::SiteEntry;

// Here, not in `streams.rs`: the handler table holds streaming
// handlers, and `streams.rs` (a layer above) drives them.

/// Takes the body of one streamed message (see
/// [`Node::handle_stream`](crate::Node::handle_stream)). Its methods run on
/// the node's I/O thread, like handlers: they must not block.
pub trait BodySink: Send {
    /// `data` is the body from `offset` on. The first chunk is at offset 0
    /// and each starts where the previous one ended; a message whose body is
    /// empty gets no chunk.
    fn chunk(&mut self, offset: u64, data: Bytes);

    /// The whole body has arrived: the message is delivered, and
    /// acknowledged once this returns. `ctx` replies to a request.
    fn end(self: Box<Self>, ctx: &mut Ctx<'_>);

    /// The stream ends without its end: its channel was lost after
    /// `received` body bytes (the sender restarts the message on the next
    /// channel, so it comes again as a new stream from offset 0), or it
    /// turned out a duplicate. Drop what was received; the default does
    /// just that.
    fn abort(self: Box<Self>, why: StreamAbort) {
        let _ = why;
    }
}

/// A streaming handler, type-erased: decodes the header and returns the
/// sink, or says why the header did not decode.
pub(crate) type ErasedStream =
    Arc<dyn Fn(&mut Ctx<'_>, &Bytes) -> Result<Box<dyn BodySink>, String> + Send + Sync>;

/// The reply sent when a request cannot be handled (no handler, undecodable
/// header, handler panicked without replying).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RemoteError {
    pub(crate) reason: String,
}

impl Message for RemoteError {
    const ID: u32 = RESERVED_IDS;
}

/// What an error reply's body says besides its header's reason. Empty: a
/// plain failure (no handler, a header that did not decode, a panic,
/// `Responder::fail`) — the only error reply before typed errors, and
/// every sitenet reads the reason alone, ignoring the body. Otherwise a
/// tag byte, then the tag's payload. No frame, kind, type id or header
/// changed: a caller running an older sitenet sees each of these as the
/// plain failure its reason describes.
pub(crate) mod error_detail {
    /// The handler returned an error value of its own type (`Outcome`):
    /// the value follows, MessagePack (named fields), for
    /// `RequestBuilder::or_error` to decode.
    pub(crate) const HANDLER: u8 = 1;
    /// The handler was not run: the node ran `max_async_handlers` async
    /// handlers already (`RequestError::Busy`). No payload.
    pub(crate) const BUSY: u8 = 2;
}

/// An error reply (`RemoteError` or `NoReply`) as its caller reads it;
/// [`into_request_error`](Self::into_request_error) names the request's
/// type.
pub(crate) enum ErrorReply {
    /// A plain failure (`error_detail` empty or unknown): no handler, a
    /// header that did not decode, a panic, `Responder::fail`.
    Failed { reason: String },
    /// The handler was not run (`error_detail::BUSY`).
    Busy { reason: String },
    /// The handler answered nothing (`NoReply`).
    NoReply { reason: String },
    /// The handler's own error value (`error_detail::HANDLER`): its
    /// reason, and the value's encoding.
    Handler { reason: String, value: Bytes },
}

impl ErrorReply {
    /// The error a request of type `type_id` ends with. "No handler" is
    /// told by its reason, which the peer writes with the same
    /// `Unhandled::reason` (the wire has no code for it).
    pub(crate) fn into_request_error(self, type_id: u32) -> crate::error::RequestError {
        use crate::error::RequestError;
        match self {
            Self::Failed { reason }
                if reason
                    == (sitenet_protocols::node::delegation::Unhandled::NoHandler {
                        origin: None,
                    })
                    .reason(type_id) =>
            {
                RequestError::NoHandler { type_id }
            }
            Self::Failed { reason } => RequestError::Remote {
                type_id,
                reason,
                value: None,
            },
            Self::Handler { reason, value } => RequestError::Remote {
                type_id,
                reason,
                value: Some(value),
            },
            Self::Busy { reason } => RequestError::Busy { type_id, reason },
            Self::NoReply { reason } => RequestError::NoReply { type_id, reason },
        }
    }

    /// What the peer said, for a cooperation's failure.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Failed { reason } | Self::Handler { reason, .. } => {
                format!("the peer could not handle the request: {reason}")
            }
            Self::Busy { reason } => {
                format!("the peer is busy and did not handle the request: {reason}")
            }
            Self::NoReply { reason } => format!("the peer's handler gave no reply: {reason}"),
        }
    }
}

/// Reads the reply `type_id` with `header` and `body` as an error reply,
/// or `None` if it is not one.
pub(crate) fn error_reply(type_id: u32, header: &[u8], body: &Bytes) -> Option<ErrorReply> {
    let undecodable = |e: rmp_serde::decode::Error| format!("undecodable error reply: {e}");
    match type_id {
        RemoteError::ID => {
            let reason = rmp_serde::from_slice::<RemoteError>(header)
                .map(|e| e.reason)
                .unwrap_or_else(undecodable);
            Some(match body.first() {
                Some(&error_detail::HANDLER) => ErrorReply::Handler {
                    reason,
                    value: body.slice(1..),
                },
                Some(&error_detail::BUSY) => ErrorReply::Busy { reason },
                // Empty, or a tag this version does not know: the reason
                // says it all.
                _ => ErrorReply::Failed { reason },
            })
        }
        NoReply::ID => Some(ErrorReply::NoReply {
            reason: rmp_serde::from_slice::<NoReply>(header)
                .map(|e| e.reason)
                .unwrap_or_else(undecodable),
        }),
        _ => None,
    }
}

/// The reply sent when a request's handler answered nothing: it returned
/// without replying, forwarding or taking the request's `Responder`, or
/// the `Responder` was dropped unanswered. The caller's request ends at once
/// with `RequestError::NoReply` instead of waiting out its timeout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NoReply {
    pub(crate) reason: String,
}

impl Message for NoReply {
    const ID: u32 = RESERVED_IDS + 8;
}

pub(crate) type Erased = Arc<dyn Fn(&mut Ctx<'_>, &Bytes) -> Result<(), String> + Send + Sync>;

/// A message that reached no handler: what the `unhandled` hook sees.
#[derive(Debug, Clone)]
pub struct Unhandled {
    /// The sending site, if it identified itself.
    pub from: Option<SiteId>,
    /// The message's wire type id.
    pub type_id: u32,
    /// Why: no handler for the type, or a header that did not decode.
    pub reason: String,
    /// The serialised header.
    pub header: Bytes,
    /// The body.
    pub body: Bytes,
}

pub(crate) type UnhandledHook = Arc<dyn Fn(Unhandled) + Send + Sync>;

/// The registry of handlers by wire id.
#[derive(Default)]
pub(crate) struct Handlers {
    /// Looked up once per delivered message: hashed with foldhash.
    map: parking_lot::RwLock<HashMap<u32, Erased, foldhash::fast::RandomState>>,
    /// Streaming handlers (`streams.rs`); a type is in one map or the other.
    streams: parking_lot::RwLock<HashMap<u32, ErasedStream, foldhash::fast::RandomState>>,
    /// Whether `streams` has any: a node without streaming handlers looks
    /// nothing up for them.
    any_streams: std::sync::atomic::AtomicBool,
    pub(crate) unhandled: parking_lot::RwLock<Option<UnhandledHook>>,
    /// Raw handlers (`Node::handle_raw`): looked up only for a message
    /// whose type has no typed handler.
    raw: parking_lot::RwLock<RawHandlers>,
    /// Whether `raw` has any: a node without raw handlers looks nothing up
    /// for them (a message without a handler costs no lock more).
    any_raw: std::sync::atomic::AtomicBool,
}

/// The raw handlers: ranges of type ids, disjoint, and the fallback for
/// every user id no other handler takes.
#[derive(Default)]
struct RawHandlers {
    /// `(first, last, handler)`, sorted by `first`, never overlapping.
    ranges: Vec<(u32, u32, Erased)>,
    fallback: Option<Erased>,
}

impl RawHandlers {
    /// The index of the range holding `id`, if one does.
    fn find(&self, id: u32) -> Option<usize> {
        let i = self.ranges.partition_point(|r| r.0 <= id).checked_sub(1)?;
        (self.ranges[i].1 >= id).then_some(i)
    }

    fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.fallback.is_none()
    }
}

impl Handlers {
    pub(crate) fn insert(&self, id: u32, f: Erased) -> Result<(), NodeError> {
        let mut m = self.map.write();
        if m.contains_key(&id) || self.streams.read().contains_key(&id) {
            return Err(NodeError::DuplicateHandler(id));
        }
        m.insert(id, f);
        Ok(())
    }

    pub(crate) fn insert_stream(&self, id: u32, f: ErasedStream) -> Result<(), NodeError> {
        let m = self.map.read();
        let mut s = self.streams.write();
        if m.contains_key(&id) || s.contains_key(&id) {
            return Err(NodeError::DuplicateHandler(id));
        }
        s.insert(id, f);
        self.any_streams
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// True if type `id` has a streaming handler.
    pub(crate) fn is_stream(&self, id: u32) -> bool {
        self.any_streams.load(std::sync::atomic::Ordering::Acquire)
            && self.streams.read().contains_key(&id)
    }

    pub(crate) fn get_stream(&self, id: u32) -> Option<ErasedStream> {
        self.streams.read().get(&id).cloned()
    }

    pub(crate) fn get(&self, id: u32) -> Option<Erased> {
        self.map.read().get(&id).cloned()
    }

    /// Sets the handler of type `id`, replacing the one it had (true if
    /// it had one). One write under the map's lock: a message looked up
    /// meanwhile finds the old handler or the new one, never none. A
    /// streaming handler for `id` is not replaced (`DuplicateHandler`).
    pub(crate) fn replace(&self, id: u32, f: Erased) -> Result<bool, NodeError> {
        let mut m = self.map.write();
        if self.streams.read().contains_key(&id) {
            return Err(NodeError::DuplicateHandler(id));
        }
        Ok(m.insert(id, f).is_some())
    }

    /// Removes whatever takes type `id` — a typed or streaming handler or
    /// a cooperation reply declaration — true if something did. A stream
    /// already open keeps its sink to its end.
    pub(crate) fn remove(&self, id: u32) -> bool {
        let typed = self.map.write().remove(&id).is_some();
        let stream = self.streams.write().remove(&id).is_some();
        typed || stream
    }

    /// The raw handler of a message of `kind` and type `id` that has no
    /// typed handler: its range's, or the fallback's for a user id. A
    /// reply completes its request and takes no handler: none is looked
    /// up for it.
    #[inline]
    pub(crate) fn get_raw(&self, kind: MessageKind, id: u32) -> Option<Erased> {
        if matches!(kind, MessageKind::Reply | MessageKind::DelegatedReply)
            || !self.any_raw.load(std::sync::atomic::Ordering::Acquire)
        {
            return None;
        }
        let raw = self.raw.read();
        match raw.find(id) {
            Some(i) => Some(raw.ranges[i].2.clone()),
            None if id < RESERVED_IDS => raw.fallback.clone(),
            None => None,
        }
    }

    /// Registers (`replace` false) or replaces (true) the raw handler of
    /// the ids `first..=last` (user ids, `first <= last`): a new range may
    /// not overlap a registered one; a replacement names a registered
    /// range exactly, or one that overlaps none. True if a handler was
    /// replaced.
    pub(crate) fn insert_raw(
        &self,
        first: u32,
        last: u32,
        f: Erased,
        replace: bool,
    ) -> Result<bool, NodeError> {
        let mut raw = self.raw.write();
        let at = raw.ranges.partition_point(|r| r.0 < first);
        if replace {
            if let Some(r) = raw
                .ranges
                .get_mut(at)
                .filter(|r| (r.0, r.1) == (first, last))
            {
                r.2 = f;
                return Ok(true);
            }
        }
        // The ranges are disjoint and sorted: only the neighbours of the
        // insertion point can overlap.
        let before = at.checked_sub(1).map(|i| &raw.ranges[i]);
        let overlapping = before
            .filter(|r| r.1 >= first)
            .or_else(|| raw.ranges.get(at).filter(|r| r.0 <= last));
        if let Some(r) = overlapping {
            return Err(NodeError::OverlappingRange {
                range: first..=last,
                registered: r.0..=r.1,
            });
        }
        raw.ranges.insert(at, (first, last, f));
        self.any_raw
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(false)
    }

    /// Removes the raw handler of exactly `first..=last`; true if there
    /// was one.
    pub(crate) fn remove_raw(&self, first: u32, last: u32) -> bool {
        let mut raw = self.raw.write();
        let Some(i) = raw.ranges.iter().position(|r| (r.0, r.1) == (first, last)) else {
            return false;
        };
        raw.ranges.remove(i);
        self.any_raw
            .store(!raw.is_empty(), std::sync::atomic::Ordering::Release);
        true
    }

    /// Sets the raw fallback (`replace` false: only if there is none);
    /// true if one was replaced.
    pub(crate) fn set_raw_fallback(&self, f: Erased, replace: bool) -> Result<bool, NodeError> {
        let mut raw = self.raw.write();
        if raw.fallback.is_some() && !replace {
            return Err(NodeError::DuplicateFallback);
        }
        let replaced = raw.fallback.replace(f).is_some();
        self.any_raw
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(replaced)
    }

    /// Removes the raw fallback; true if there was one.
    pub(crate) fn remove_raw_fallback(&self) -> bool {
        let mut raw = self.raw.write();
        let removed = raw.fallback.take().is_some();
        self.any_raw
            .store(!raw.is_empty(), std::sync::atomic::Ordering::Release);
        removed
    }
}

/// What a handler sees besides the message: who sent it, the body, and how
/// to reply.
pub struct Ctx<'a> {
    pub(crate) node: &'a Arc<NodeInner>,
    /// The message's wire type id.
    pub(crate) type_id: u32,
    pub(crate) from: &'a Arc<SiteEntry>,
    /// The site that delivered the message: `from`, or for a forwarded
    /// request the forwarder (what the `SiteRef`s in its header are
    /// charged to).
    pub(crate) via: &'a Arc<SiteEntry>,
    pub(crate) kind: MessageKind,
    pub(crate) corr: u64,
    pub(crate) priority: Priority,
    pub(crate) body: Bytes,
    pub(crate) replied: bool,
    /// A forwarded request's origin, as its descriptor came (forwarded
    /// again as it is: this node may not know the origin's addresses).
    pub(crate) origin: Option<String>,
}
