//! Typed handlers and their context.
//!
//! Handlers are synchronous functions run on the node's I/O thread, called
//! directly by the ComObject that decoded the message (no actor message per
//! delivery). A send from a handler never waits: it queues, or fails with
//! [`SendError::QueueFull`](crate::SendError::QueueFull). A handler that panics is caught and logged, and
//! the message counts as delivered, so one bad message cannot loop. An
//! async handler (`async_handlers`) is such a function that makes a
//! future, run on the same thread as a task of its own, whose output
//! answers the request (`outcome`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;

use sitenet_protocols::node::delegation::{classify, Delivered, Unhandled as Why};
use sitenet_protocols::InMessage;

use crate::error::NodeError;
use crate::message::{Message, RESERVED_IDS};
use crate::metrics::Counters;
use crate::node::NodeInner;
use crate::site::SiteRef;
use crate::site_entry::SiteEntry;

mod async_handlers;
mod ctx;
mod outcome;
mod raw;
mod register;
mod responder;
pub use crate::node::{BodySink, Ctx, Unhandled};
pub(crate) use crate::node::{Erased, ErasedStream, RemoteError};
pub use async_handlers::AsyncCtx;
pub use outcome::Outcome;
pub use responder::Responder;

/// A raw handler, type-erased as a typed one is: it gets the message's
/// type id, header and body as they came, and never fails to decode.
pub(crate) fn erase_raw<F>(f: F) -> Erased
where
    F: Fn(&mut Ctx<'_>, crate::message::RawMessage) + Send + Sync + 'static,
{
    Arc::new(move |ctx: &mut Ctx<'_>, header: &Bytes| {
        let m = crate::message::RawMessage {
            type_id: ctx.type_id,
            header: header.clone(),
            body: ctx.body.clone(),
        };
        f(ctx, m);
        Ok(())
    })
}

pub(crate) fn erase<M, F>(f: F) -> Erased
where
    M: Message,
    F: Fn(&mut Ctx<'_>, M) + Send + Sync + 'static,
{
    Arc::new(move |ctx: &mut Ctx<'_>, header: &Bytes| {
        f(ctx, decode_header(ctx.node, ctx.via, header)?);
        Ok(())
    })
}

/// A handler that returns its answer ([`Outcome`]), type-erased: its
/// output answers the request through the context.
pub(crate) fn erase_result<M, O, F>(f: F) -> Erased
where
    M: Message,
    O: Outcome,
    F: Fn(&mut Ctx<'_>, M) -> O + Send + Sync + 'static,
{
    Arc::new(move |ctx: &mut Ctx<'_>, header: &Bytes| {
        let output = f(ctx, decode_header(ctx.node, ctx.via, header)?);
        // Encoded for the requester (the sender), whom `answer` answers.
        let answer = crate::node::encoding_on(ctx.node, Some(ctx.from), || output.into_answer());
        ctx.answer(answer);
        Ok(())
    })
}

/// A handler that is `FnMut` (and not `Sync`), made one the handler table
/// can hold: behind a mutex. The sites of a node run on several threads
///, so two may call it at once: the second waits its turn (a
/// handler is short; it runs on a pool thread, never on the caller's).
/// A handler re-entered on its own thread while it runs (it would wait
/// for itself for ever) fails the message instead.
pub(crate) fn erase_mut<M, F>(f: F) -> Erased
where
    M: Message,
    F: FnMut(&mut Ctx<'_>, M) + Send + 'static,
{
    let f = parking_lot::Mutex::new(f);
    let owner = std::sync::atomic::AtomicU64::new(0);
    erase(move |ctx: &mut Ctx<'_>, m: M| {
        let me = thread_token();
        let mut g = match f.try_lock() {
            Some(g) => g,
            None if owner.load(std::sync::atomic::Ordering::Acquire) == me => {
                tracing::error!(type_id = ctx.type_id, "handler re-entered while it ran");
                return ctx.fail_request(format!(
                    "the handler of type {} was called while it ran",
                    ctx.type_id
                ));
            }
            None => f.lock(),
        };
        let _running = Running::on(&owner, me);
        g(ctx, m);
    })
}

/// This thread's token: nonzero, unique in the process (what `erase_mut`
/// keeps of the thread running a handler).
fn thread_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

/// Marks a handler run by a thread until dropped (a panic included).
struct Running<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Running<'a> {
    fn on(owner: &'a std::sync::atomic::AtomicU64, me: u64) -> Self {
        owner.store(me, std::sync::atomic::Ordering::Release);
        Self(owner)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// Decodes a received typed header as `M`, or says why it does not (what
/// the `unhandled` hook and a request's error reply carry).
/// `SiteRef`s in it decode on `node`, as claims of `from`, the site that
/// delivered it (see `site/serialize.rs`).
#[inline]
pub(crate) fn decode_header<M: Message>(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    header: &Bytes,
) -> Result<M, String> {
    crate::node::decoding_on(node, from, || rmp_serde::from_slice(header))
        .map_err(|e| format!("header does not decode as type {}: {e}", M::ID))
}

/// Counts a message the node refused in the node's `unhandled` counter
/// and in this thread's count (`runtime::count_refusal`).
fn count_refused(node: &Arc<NodeInner>) {
    Counters::add(&node.counters().unhandled, 1);
    crate::runtime::count_refusal();
}

pub(crate) fn check_user_id(id: u32) -> Result<(), NodeError> {
    if id >= RESERVED_IDS {
        return Err(NodeError::ReservedId(id));
    }
    Ok(())
}

/// Delivers one complete message as `sitenet_protocols::node::delegation`
/// classifies it: replies complete their request; other messages go to
/// their type's handler, a forwarded request as if its origin had sent it.
#[inline] // its one caller is `Delivery::message`: no second move of the message
pub(crate) fn dispatch(node: &Arc<NodeInner>, from: &Arc<SiteEntry>, m: InMessage) {
    Counters::add(&node.counters().messages_delivered, 1);
    let type_id = m.prelude.type_id;
    // A typed handler first; a raw one is looked up only without it (a
    // typed message's lookup is unchanged).
    let handler = match node.handlers().get(type_id) {
        Some(h) => Some(h),
        None => node.handlers().get_raw(m.prelude.kind, type_id),
    };
    match classify(m.prelude.kind, &m.header, handler.is_some()) {
        Delivered::Reply { .. } => node.complete_request(from, m),
        Delivered::Handle => {
            if let Some(h) = handler {
                // Moved, not cloned: a clone is two atomic operations on
                // the arena chunk every small message of a frame shares.
                let mut m = m;
                let header = std::mem::take(&mut m.header);
                call(node, from, from, None, h, header, m);
            }
        }
        Delivered::Forwarded { origin, header } => {
            let Some(h) = handler else { return };
            // The origin is the forwarder's claim, charged to it.
            let Some(o) = forward_origin(node, from, &origin, type_id, &header, &m.body) else {
                return;
            };
            call(node, &o.entry, from, Some(origin.to_string()), h, header, m);
        }
        Delivered::Unhandled(why) => {
            count_refused(node);
            let reason = why.reason(type_id);
            match why {
                Why::MalformedOrigin => {
                    if let Some(suppressed) = node.peer_logs().site(
                        from,
                        crate::peer_logs::LogKind::Unhandled,
                        node.counters(),
                    ) {
                        tracing::warn!(type_id, suppressed, "{reason}");
                    }
                }
                Why::NoHandler { origin } => {
                    tracing::debug!(type_id, "no handler for message type");
                    // The error reply goes to the sender, or to a
                    // forwarded request's origin if this node knows it
                    // already (no entry is made just to say so).
                    let answer = match origin {
                        None => Some(from.clone()),
                        Some(d) => node.site_with_id(d.id).map(|o| o.entry.clone()),
                    };
                    if let Some(to) = answer {
                        let mut ctx = Ctx {
                            node,
                            type_id,
                            from: &to,
                            via: from,
                            kind: m.prelude.kind,
                            corr: m.prelude.corr,
                            priority: m.priority,
                            body: Bytes::new(),
                            replied: false,
                            origin: None,
                        };
                        ctx.fail_request(reason.clone());
                    }
                }
            }
            call_unhandled(node, from, type_id, reason, m.header, m.body);
        }
    }
}

/// Calls handler `h` for `m` (its typed `header`), as sent by `from` and
/// delivered by `via` (the same site unless forwarded; `origin`: the
/// forwarded request's origin descriptor). A failure answers the request
/// with the reason.
fn call(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    via: &Arc<SiteEntry>,
    origin: Option<String>,
    h: Erased,
    header: Bytes,
    m: InMessage,
) {
    let type_id = m.prelude.type_id;
    let forwarded = origin.is_some();
    let mut ctx = Ctx {
        node,
        type_id,
        from,
        via,
        kind: m.prelude.kind,
        corr: m.prelude.corr,
        priority: m.priority,
        body: m.body,
        replied: false,
        origin,
    };
    // A request's handler runs in a span naming the request across hops
    // (one-way messages, the hot path, get none). An async handler's
    // future carries it on (`erase_async`).
    let span = match ctx.request_id() {
        Some(id) => tracing::debug_span!(
            "sitenet.handle",
            request = %id,
            type_id,
            hop = if forwarded { "forwarded" } else { "direct" },
            via = ?via.id(),
        ),
        None => tracing::Span::none(),
    };
    let _entered = span.enter();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| h(&mut ctx, &header)));
    let outcome = handler_outcome("handler", node, from, &header, &ctx.body, type_id, result);
    match outcome {
        Err(reason) => ctx.fail_request(reason),
        Ok(()) => ctx.no_reply("the handler returned without answering the request"),
    }
}

/// The origin of a forwarded request `m` that site `via` delivered, as the
/// site its handler answers, or `None` if the request ends here (issue
/// 17): an origin this node does not know is a site `via` names, an entry
/// it holds a claim on (`NodeConfig::forward_claims_per_peer`), tried once
/// at each address named; beyond the bound the request is refused —
/// counted (`Metrics::claims_refused`), logged through the peer's rate
/// limit, passed to the unhandled hook, and answered to nobody.
fn forward_origin(
    node: &Arc<NodeInner>,
    via: &Arc<SiteEntry>,
    d: &sitenet_protocols::SiteDescriptor,
    type_id: u32,
    header: &Bytes,
    body: &Bytes,
) -> Option<SiteRef> {
    let by = crate::node::Named::ByPeer {
        peer: via,
        forward: true,
    };
    match node.site_described(d, by) {
        Ok(origin) => Some(origin),
        Err(refused) => {
            count_refused(node);
            let reason = format!("forwarded request naming origin {}: {refused}", d.id);
            if let Some(suppressed) =
                node.peer_logs()
                    .site(via, crate::peer_logs::LogKind::Unhandled, node.counters())
            {
                tracing::warn!(type_id, suppressed, "{reason}");
            }
            call_unhandled(node, via, type_id, reason, header.clone(), body.clone());
            None
        }
    }
}

/// What a handler's call (`result`, caught) came to: what it returned, or
/// why it failed — a header that did not decode (counted unhandled and
/// passed to the unhandled hook) or a panic (counted; the message counts
/// as delivered). `what` names the kind of handler.
#[inline]
pub(crate) fn handler_outcome<T>(
    what: &str,
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    header: &Bytes,
    body: &Bytes,
    type_id: u32,
    result: std::thread::Result<Result<T, String>>,
) -> Result<T, String> {
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(reason)) => {
            count_refused(node);
            if let Some(suppressed) =
                node.peer_logs()
                    .site(from, crate::peer_logs::LogKind::Unhandled, node.counters())
            {
                tracing::warn!(type_id, %reason, suppressed, "{what}: message not handled");
            }
            call_unhandled(
                node,
                from,
                type_id,
                reason.clone(),
                header.clone(),
                body.clone(),
            );
            Err(reason)
        }
        Err(_) => {
            Counters::add(&node.counters().handler_panics, 1);
            let kind = crate::peer_logs::LogKind::HandlerPanicked;
            if let Some(suppressed) = node.peer_logs().site(from, kind, node.counters()) {
                tracing::error!(
                    type_id,
                    suppressed,
                    "{what} panicked; the message counts as delivered"
                );
            }
            Err(format!("{what} for type {type_id} panicked"))
        }
    }
}

/// Passes a message nobody handled to the user's hook, if one is set (a
/// panicking hook is caught like a panicking handler).
pub(crate) fn call_unhandled(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    type_id: u32,
    reason: String,
    header: Bytes,
    body: Bytes,
) {
    let hook = node.handlers().unhandled.read().clone();
    if let Some(hook) = hook {
        let u = Unhandled {
            from: from.id(),
            type_id,
            reason,
            header,
            body,
        };
        if std::panic::catch_unwind(AssertUnwindSafe(|| hook(u))).is_err() {
            Counters::add(&node.counters().handler_panics, 1);
            tracing::error!(type_id, "unhandled hook panicked");
        }
    }
}
