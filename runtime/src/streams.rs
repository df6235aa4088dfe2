//! Streaming handlers: Madeleine's deferred receive at the API. A type
//! registered with [`Node::handle_stream`](crate::Node::handle_stream) is
//! handed over as soon as its typed header has arrived; the handler returns
//! a [`BodySink`] that takes the body as chunks, in order, as their frames
//! arrive — a 1 GiB body never has to fit in memory. The rules (when a
//! stream starts, ends, or is aborted and comes again from offset 0) are
//! the protocol's, in `sitenet_protocols::connection::deliver`; this module only routes
//! them to the handler and its sink.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;

use sitenet_protocols::{Deliver, InMessage, MessageKind, Prelude, Priority, StreamAbort};

use crate::com_object::Inbox;
use crate::handlers::{decode_header, dispatch, handler_outcome, Ctx};
use crate::message::Message;
use crate::metrics::Counters;
use crate::node::NodeInner;
use crate::site_entry::SiteEntry;

pub use crate::handlers::BodySink;
pub(crate) use crate::handlers::ErasedStream;

pub(crate) fn erase_stream<M, F>(f: F) -> ErasedStream
where
    M: Message,
    F: Fn(&mut Ctx<'_>, M) -> Box<dyn BodySink> + Send + Sync + 'static,
{
    Arc::new(move |ctx: &mut Ctx<'_>, header: &Bytes| {
        Ok(f(ctx, decode_header(ctx.node, ctx.via, header)?))
    })
}

/// One lane's open stream.
enum Open {
    /// Its sink, and what its end's context needs.
    Sink {
        sink: Box<dyn BodySink>,
        type_id: u32,
        kind: MessageKind,
        corr: u64,
        received: u64,
    },
    /// Its header did not decode, or its sink panicked: the rest is
    /// dropped.
    Discard,
}

/// The open streams of one site, by lane (allocated with the first).
#[derive(Default)]
pub(crate) struct LaneStreams(Option<Box<[Option<Open>; 4]>>);

impl LaneStreams {
    fn slot(&mut self, lane: Priority) -> &mut Option<Open> {
        &mut self.0.get_or_insert_with(Default::default)[lane.index()]
    }

    /// Aborts every open stream (the site's actor stops: nothing more will
    /// come on them).
    pub(crate) fn abort_all(&mut self) {
        for open in self.0.take().into_iter().flat_map(|b| *b) {
            if let Some(Open::Sink { sink, received, .. }) = open {
                abort(sink, StreamAbort::ChannelLost { received });
            }
        }
    }
}

/// A ComObject's inbox (`NodeInner::inbox`): its site's open streams, by
/// lane, delivered through a [`Delivery`] as the local site's are.
struct SiteInbox {
    node: Arc<NodeInner>,
    from: Arc<SiteEntry>,
    streams: LaneStreams,
}

/// Makes the inbox of the ComObject of site `from` (the node's
/// `MakeInbox`).
pub(crate) fn inbox(node: Arc<NodeInner>, from: Arc<SiteEntry>) -> Box<dyn Inbox> {
    Box::new(SiteInbox {
        node,
        from,
        streams: LaneStreams::default(),
    })
}

impl SiteInbox {
    fn delivery(&mut self) -> Delivery<'_> {
        Delivery {
            node: &self.node,
            from: &self.from,
            streams: &mut self.streams,
        }
    }
}

impl Deliver for SiteInbox {
    fn message(&mut self, m: InMessage) {
        self.delivery().message(m);
    }

    fn stream(&mut self, lane: Priority, prelude: &Prelude) -> bool {
        self.delivery().stream(lane, prelude)
    }

    fn stream_start(&mut self, lane: Priority, prelude: &Prelude, header: Bytes) {
        self.delivery().stream_start(lane, prelude, header);
    }

    fn stream_chunk(&mut self, lane: Priority, offset: u64, data: Bytes) {
        self.delivery().stream_chunk(lane, offset, data);
    }

    fn stream_end(&mut self, lane: Priority, number: u64) {
        self.delivery().stream_end(lane, number);
    }

    fn stream_abort(&mut self, lane: Priority, why: StreamAbort) {
        self.delivery().stream_abort(lane, why);
    }
}

impl Inbox for SiteInbox {
    fn abort_all(&mut self) {
        self.streams.abort_all();
    }

    fn is_idle(&self) -> bool {
        self.streams
            .0
            .as_deref()
            .is_none_or(|lanes| lanes.iter().all(Option::is_none))
    }
}

/// What the local site's drain and a ComObject's inbox hand the session's
/// calls to: whole messages go to their handlers, streamed ones to their
/// sinks.
pub(crate) struct Delivery<'a> {
    pub(crate) node: &'a Arc<NodeInner>,
    pub(crate) from: &'a Arc<SiteEntry>,
    pub(crate) streams: &'a mut LaneStreams,
}

impl Delivery<'_> {
    fn ctx(&self, type_id: u32, kind: MessageKind, corr: u64, priority: Priority) -> Ctx<'_> {
        Ctx {
            node: self.node,
            type_id,
            from: self.from,
            via: self.from,
            kind,
            corr,
            priority,
            body: Bytes::new(),
            replied: false,
            origin: None,
        }
    }

    /// Starts a stream of `prelude`'s type with `header`: its sink, or
    /// `Discard` (the failure reported as for a whole message).
    fn start(&mut self, lane: Priority, prelude: &Prelude, header: Bytes) -> Open {
        let Some(h) = self.node.handlers().get_stream(prelude.type_id) else {
            return Open::Discard;
        };
        let mut ctx = self.ctx(prelude.type_id, prelude.kind, prelude.corr, lane);
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| h(&mut ctx, &header)));
        let (node, from, none) = (self.node, self.from, Bytes::new());
        match handler_outcome(
            "stream handler",
            node,
            from,
            &header,
            &none,
            prelude.type_id,
            r,
        ) {
            Ok(sink) => Open::Sink {
                sink,
                type_id: prelude.type_id,
                kind: prelude.kind,
                corr: prelude.corr,
                received: 0,
            },
            Err(reason) => {
                ctx.fail_request(reason);
                Open::Discard
            }
        }
    }

    /// The stream on `lane` is complete: its sink's end.
    fn finish(&mut self, lane: Priority) {
        Counters::add(&self.node.counters().messages_delivered, 1);
        let Some(Open::Sink {
            sink,
            type_id,
            kind,
            corr,
            ..
        }) = self.streams.slot(lane).take()
        else {
            return;
        };
        let mut ctx = self.ctx(type_id, kind, corr, lane);
        if std::panic::catch_unwind(AssertUnwindSafe(|| sink.end(&mut ctx))).is_err() {
            Counters::add(&self.node.counters().handler_panics, 1);
            tracing::error!("stream sink panicked at its end; the message counts as delivered");
            ctx.fail_request("stream sink panicked".into());
        }
    }
}

fn abort(sink: Box<dyn BodySink>, why: StreamAbort) {
    if std::panic::catch_unwind(AssertUnwindSafe(|| sink.abort(why))).is_err() {
        tracing::error!("stream sink panicked in abort");
    }
}

impl Deliver for Delivery<'_> {
    fn message(&mut self, m: InMessage) {
        if !self.stream(m.priority, &m.prelude) {
            return dispatch(self.node, self.from, m);
        }
        // A streamed type whose message came whole: the same calls, at once.
        let lane = m.priority;
        let open = self.start(lane, &m.prelude, m.header);
        *self.streams.slot(lane) = Some(open);
        if !m.body.is_empty() {
            self.stream_chunk(lane, 0, m.body);
        }
        self.finish(lane);
    }

    fn stream(&mut self, _lane: Priority, prelude: &Prelude) -> bool {
        sitenet_protocols::node::delegation::may_stream(prelude.kind)
            && self.node.handlers().is_stream(prelude.type_id)
    }

    fn stream_start(&mut self, lane: Priority, prelude: &Prelude, header: Bytes) {
        let open = self.start(lane, prelude, header);
        *self.streams.slot(lane) = Some(open);
    }

    fn stream_chunk(&mut self, lane: Priority, offset: u64, data: Bytes) {
        let slot = self.streams.slot(lane);
        let Some(Open::Sink { sink, received, .. }) = slot else {
            return;
        };
        *received += data.len() as u64;
        if std::panic::catch_unwind(AssertUnwindSafe(|| sink.chunk(offset, data))).is_err() {
            Counters::add(&self.node.counters().handler_panics, 1);
            tracing::error!("stream sink panicked; the rest of its body is dropped");
            *slot = Some(Open::Discard);
        }
    }

    fn stream_end(&mut self, lane: Priority, _number: u64) {
        self.finish(lane);
    }

    fn stream_abort(&mut self, lane: Priority, why: StreamAbort) {
        if let Some(Open::Sink { sink, .. }) = self.streams.slot(lane).take() {
            abort(sink, why);
        }
    }
}

/// Registering a streaming handler.
impl crate::Node {
    /// Registers a streaming handler for message type `M` (Madeleine's
    /// deferred receive): `f` runs as soon as the typed header has arrived
    /// and returns the [`BodySink`](crate::BodySink) that takes the body as
    /// chunks, in order, as they arrive — a handler can consume a body far
    /// larger than memory. The sink's `end` delivers the message (a request
    /// is answered there); its `abort` says the channel was lost (the
    /// message comes again, as a new stream from offset 0) or it was a
    /// duplicate. A message of the type that fits one frame is handed over
    /// the same way, at once. Registering a type id twice (with `handle`
    /// or `handle_stream`) is an error.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use serde::{Deserialize, Serialize};
    /// use sitenet_runtime::{BodySink, Ctx, Message, Node};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Upload { name: String }
    /// impl Message for Upload { const ID: u32 = 40; }
    ///
    /// /// Counts the bytes of one upload without keeping them.
    /// struct Count(u64);
    /// impl BodySink for Count {
    ///     fn chunk(&mut self, _offset: u64, data: Bytes) { self.0 += data.len() as u64; }
    ///     fn end(self: Box<Self>, _ctx: &mut Ctx<'_>) { println!("{} bytes", self.0); }
    /// }
    ///
    /// let node = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// node.handle_stream(|_ctx: &mut Ctx<'_>, u: Upload| -> Box<dyn BodySink> {
    ///     println!("receiving {}", u.name);
    ///     Box::new(Count(0))
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_stream<M, F>(&self, f: F) -> Result<(), crate::NodeError>
    where
        M: Message,
        F: Fn(&mut Ctx<'_>, M) -> Box<dyn crate::BodySink> + Send + Sync + 'static,
    {
        crate::handlers::check_user_id(M::ID)?;
        self.inner
            .handlers()
            .insert_stream(M::ID, crate::streams::erase_stream(f))
    }
}
