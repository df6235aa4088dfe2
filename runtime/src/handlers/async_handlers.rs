//! Async handlers ([`Node::handle_async`](crate::Node::handle_async)): the
//! handler returns a future, run on the node's runtime, whose output
//! answers the request ([`Outcome`]). The future owns its context
//! ([`AsyncCtx`]); the request's [`Responder`] is shared between that
//! context (which may forward the request or hand the responder out) and
//! the task running the future (which answers with the output if the
//! responder is still there). Every request still gets exactly one
//! answer: the output, a forward, the responder's, an error if the future
//! panics, or "no reply" if it is dropped unanswered.
//!
//! Bounded: the node runs at most `NodeConfig::max_async_handlers` such
//! futures at once (`node::AsyncSlot`); beyond, a request is refused at
//! once (`RequestError::Busy`). Ended by the node: every future still
//! running when the node stops is dropped (`NodeInner::stopped`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use parking_lot::Mutex;

use sitenet_protocols::{Priority, SiteId};

use super::outcome::Outcome;
use super::{decode_header, Ctx, Erased, Responder};
use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::metrics::Counters;
use crate::node::{AsyncSlot, Node, NodeInner};
use crate::site::SiteRef;

/// A request's answer while an async handler may give it: taken by
/// whoever answers first (the context's `forward` or `responder`, or the
/// task with the future's output). Dropped still here, the responder
/// answers "no reply".
type AnswerSlot = Arc<Mutex<Option<Responder>>>;

/// What an async handler's future gets besides the message: who sent it,
/// its body and priority, and how to forward the request or answer it
/// elsewhere. Unlike [`Ctx`], which borrows the node's delivery state for
/// the handler's call, it owns what it holds (`Send + 'static`): the
/// future takes it along across its awaits.
///
/// The future's output answers the request ([`Outcome`]); the context
/// answers it otherwise — [`forward`](Self::forward) it, or take its
/// [`responder`](Self::responder) — and then the output should be
/// nothing (`()`, `None`): an answer in it is dropped.
pub struct AsyncCtx {
    node: Arc<NodeInner>,
    from: SiteRef,
    via: Option<SiteRef>,
    type_id: u32,
    corr: u64,
    priority: Priority,
    body: Bytes,
    /// A forwarded request's origin, as its descriptor came.
    origin: Option<String>,
    /// `None` for a one-way message.
    answer: Option<AnswerSlot>,
}

impl std::fmt::Debug for AsyncCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCtx")
            .field("from", &self.from.id())
            .field("type_id", &self.type_id)
            .field("corr", &self.corr)
            .field("is_request", &self.is_request())
            .finish()
    }
}

impl AsyncCtx {
    /// The sending site (for a forwarded request its origin: see
    /// [`Ctx::sender`]).
    pub fn sender(&self) -> SiteRef {
        self.from.clone()
    }

    /// For a forwarded request, the site that forwarded it to this node;
    /// `None` for a message its sender sent itself (see
    /// [`Ctx::forwarded_by`]).
    pub fn forwarded_by(&self) -> Option<SiteRef> {
        self.via.clone()
    }

    /// The sending site's id.
    pub fn sender_id(&self) -> Option<SiteId> {
        self.from.id()
    }

    /// The message's wire type id.
    pub fn type_id(&self) -> u32 {
        self.type_id
    }

    /// The message's body (empty if it had none). Cheap to clone.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The level it was sent at (the answer goes at it too).
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The request's correlation id (0 for a one-way message).
    pub fn correlation_id(&self) -> u64 {
        self.corr
    }

    /// True if the sender awaits a reply.
    pub fn is_request(&self) -> bool {
        self.answer.is_some()
    }

    /// The node, to reach other sites (a handle that neither keeps the
    /// node alive nor stops it).
    pub fn node(&self) -> Node {
        Node::from_inner(self.node.clone())
    }

    /// Takes the request's [`Responder`], to answer from elsewhere (a
    /// thread, another task) or with a body
    /// ([`Responder::reply_with`]); the future's output is then dropped.
    /// `None` for a one-way message, or a request already forwarded or
    /// whose responder was taken.
    pub fn responder(&self) -> Option<Responder> {
        self.answer.as_ref()?.lock().take()
    }

    /// Delegates the request to `to`, as `msg` at the request's priority:
    /// `to`'s handler answers the original sender directly (see
    /// [`Ctx::forward`], which this is, from a future). The future's
    /// output is then dropped: return `()` or `None` after a forward (an
    /// `Option<R>`, or `Result<Option<R>, E>`, lets one handler answer
    /// some requests itself and forward others).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{AsyncCtx, Message, Node, SendError, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Get(u64);
    /// impl Message for Get { const ID: u32 = 41; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Value(String);
    /// impl Message for Value { const ID: u32 = 42; }
    ///
    /// let owner = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// owner.handle(|ctx, Get(k): Get| { let _ = ctx.reply(&Value(format!("owner's {k}"))); })?;
    /// let front = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let to_owner = front.site(&owner.listen_addresses()[0])?;
    /// // Even keys are the front's own; odd ones go to their owner.
    /// front.handle_async(move |ctx: AsyncCtx, Get(k): Get| {
    ///     let to_owner = to_owner.clone();
    ///     async move {
    ///         if k % 2 == 0 {
    ///             return Ok(Some(Value(format!("front's {k}"))));
    ///         }
    ///         ctx.forward(&to_owner, &Get(k)).map_err(|e| e.to_string())?;
    ///         Ok::<_, String>(None) // the owner answers
    ///     }
    /// })?;
    /// let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let site = client.site(&front.listen_addresses()[0])?;
    /// let get = |k| site.request::<Get, Value>(&Get(k)).timeout(Duration::from_secs(30)).blocking();
    /// assert_eq!(get(2)?.msg.0, "front's 2");
    /// assert_eq!(get(3)?.msg.0, "owner's 3");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forward<M: Message>(&self, to: &SiteRef, msg: &M) -> Result<(), SendError> {
        self.forward_with(to, msg, SendOptions::new())
    }

    /// [`forward`](Self::forward) with options: a priority (unset: the
    /// request's) and a body.
    pub fn forward_with<M: Message>(
        &self,
        to: &SiteRef,
        msg: &M,
        opts: SendOptions,
    ) -> Result<(), SendError> {
        let Some(responder) = self.responder() else {
            return Err(SendError::NothingToAnswer {
                type_id: self.type_id(),
            });
        };
        let origin = self
            .origin
            .clone()
            .or_else(|| self.from.descriptor().map(|d| d.to_string()));
        match super::ctx::post_forward(to, origin, self.corr, msg, opts, self.priority) {
            Ok(()) => {
                // `to` answers it now.
                responder.abandon();
                Ok(())
            }
            Err(e) => {
                // Still this node's to answer.
                if let Some(slot) = &self.answer {
                    *slot.lock() = Some(responder);
                }
                Err(e)
            }
        }
    }
}

/// A handler of `Q` returning a future, type-erased as a synchronous one
/// is: the call decodes, takes a slot and the request's responder, makes
/// the future and spawns the task that runs it.
pub(crate) fn erase_async<Q, O, F, Fut>(f: F) -> Erased
where
    Q: Message,
    O: Outcome,
    F: Fn(AsyncCtx, Q) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
{
    Arc::new(move |ctx: &mut Ctx<'_>, header: &Bytes| {
        let q: Q = decode_header(ctx.node, ctx.via, header)?;
        let Some(slot) = ctx.node.async_slot() else {
            refuse_busy(ctx, header);
            return Ok(());
        };
        let answer = ctx.responder().map(|r| Arc::new(Mutex::new(Some(r))));
        let (node, type_id) = (ctx.node.clone(), ctx.type_id);
        let actx = AsyncCtx {
            node: node.clone(),
            from: ctx.sender(),
            via: ctx.forwarded_by(),
            type_id,
            corr: ctx.corr,
            priority: ctx.priority,
            body: ctx.body.clone(),
            origin: ctx.origin.clone(),
            answer: answer.clone(),
        };
        // Caught here, not by `call`: the context, dropped by the unwind,
        // would answer "no reply" before `call` could say "panicked".
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(actx, q))) {
            Ok(fut) => {
                // A runtime that no longer runs drops the task: its
                // responder answers "no reply" if anything still can.
                // In the request's `sitenet.handle` span, entered by the
                // caller of this handler.
                let run = run(node.clone(), slot, type_id, answer, fut);
                node.rt().spawn(tracing::Instrument::instrument(
                    run,
                    tracing::Span::current(),
                ));
            }
            Err(_) => panicked(&node, type_id, answer.as_ref()),
        }
        Ok(())
    })
}

/// Runs an async handler's future `fut` to its answer: its output, an
/// error if it panics; dropped (unanswered) if the node stops first.
async fn run<O: Outcome>(
    node: Arc<NodeInner>,
    slot: AsyncSlot,
    type_id: u32,
    answer: Option<AnswerSlot>,
    fut: impl Future<Output = O>,
) {
    let _slot = slot;
    let work = AssertUnwindSafe(fut).catch_unwind();
    let stopped = node.stopped();
    futures::pin_mut!(work, stopped);
    match futures::future::select(work, stopped).await {
        futures::future::Either::Left((Ok(output), _)) => deliver(&node, type_id, answer, output),
        futures::future::Either::Left((Err(_), _)) => panicked(&node, type_id, answer.as_ref()),
        futures::future::Either::Right(_) => {
            // The future is dropped with this task; its responder, if
            // still unanswered, tries "no reply" (the stopped node's
            // channels are closing: the caller hears of the shutdown).
            tracing::debug!(type_id, "node stopped: async handler dropped");
        }
    }
}

/// Answers with an async handler's output, unless the request was
/// answered otherwise (or was one-way): then the output is dropped (it is
/// encoded, for no one site, only to say what was dropped).
fn deliver<O: Outcome>(node: &Arc<NodeInner>, type_id: u32, answer: Option<AnswerSlot>, output: O) {
    let Some(responder) = answer.and_then(|slot| slot.lock().take()) else {
        let a = crate::node::encoding_on(node, None, || output.into_answer());
        if !a.is_nothing() {
            tracing::debug!(
                type_id,
                answer = a.describe(),
                "async handler's output dropped: a one-way message, or a request answered already"
            );
        }
        return;
    };
    let why = "the async handler's output answers nothing, and it neither forwarded the \
               request nor took its responder";
    if let Err(e) = responder.answer_output_or_no_reply(output, why) {
        tracing::debug!(type_id, error = %e, "async handler's answer not sent");
    }
}

/// An async handler (making its future, or the future) panicked: counted
/// as a handler's panic, and its request answered with the error.
fn panicked(node: &NodeInner, type_id: u32, answer: Option<&AnswerSlot>) {
    Counters::add(&node.counters().handler_panics, 1);
    tracing::error!(
        type_id,
        "async handler panicked; the message counts as delivered"
    );
    if let Some(responder) = answer.and_then(|slot| slot.lock().take()) {
        let _ = responder.fail(format!("async handler for type {type_id} panicked"));
    }
}

/// The node runs all the async handlers it allows: the request is refused
/// unrun (`RequestError::Busy`), a one-way message dropped and passed to
/// the unhandled hook. (Counted by `async_slot`.)
fn refuse_busy(ctx: &mut Ctx<'_>, header: &Bytes) {
    let reason = format!(
        "{} async handlers are running, the most this node runs at once \
         (NodeConfig::max_async_handlers); the handler was not run",
        ctx.node.identity().cfg().max_async_handlers
    );
    if let Some(suppressed) = ctx.node.peer_logs().site(
        ctx.from,
        crate::peer_logs::LogKind::Unhandled,
        ctx.node.counters(),
    ) {
        tracing::warn!(type_id = ctx.type_id, suppressed, "{reason}");
    }
    match ctx.responder() {
        Some(responder) => {
            let _ = responder.busy(reason);
        }
        None => super::call_unhandled(
            ctx.node,
            ctx.from,
            ctx.type_id,
            reason,
            header.clone(),
            ctx.body.clone(),
        ),
    }
}
