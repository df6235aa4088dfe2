//! Where a ComObject hands what its session delivers. The handlers and
//! the stream sinks are layers above the actor (docs/architecture.md, "The
//! runtime's layers"): they implement [`Inbox`], and the node's start
//! installs its maker (`NodeInner::inbox`). Each ComObject owns one.

use std::sync::Arc;

use bytes::Bytes;
use sitenet_protocols::{Deliver, InMessage, Prelude, Priority, StreamAbort};

use crate::node::NodeInner;
use crate::site_entry::SiteEntry;

/// One site's inbound side: `sitenet_protocols::Deliver`'s calls, with the
/// node and the sending site's entry, and the end of the site's actor.
/// It holds what lives between the calls (the streams open on each lane).
pub(crate) trait Inbox {
    /// A complete message.
    fn message(&mut self, node: &Arc<NodeInner>, from: &Arc<SiteEntry>, m: InMessage);

    /// Whether the message `prelude` announces on `lane` is streamed.
    fn stream(
        &mut self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        lane: Priority,
        prelude: &Prelude,
    ) -> bool;

    /// A streamed message's typed header has arrived.
    fn stream_start(
        &mut self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        lane: Priority,
        prelude: &Prelude,
        header: Bytes,
    );

    /// The streamed message's body from `offset` on.
    fn stream_chunk(
        &mut self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        lane: Priority,
        offset: u64,
        data: Bytes,
    );

    /// The streamed message on `lane` is complete.
    fn stream_end(
        &mut self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        lane: Priority,
        number: u64,
    );

    /// The streamed message on `lane` ends without its end.
    fn stream_abort(
        &mut self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        lane: Priority,
        why: StreamAbort,
    );

    /// The site's actor stops: nothing more comes on the streams still
    /// open.
    fn abort_all(&mut self);
}

/// Makes a ComObject's [`Inbox`] (installed in `NodeInner::inbox` when the
/// node starts).
pub(crate) type MakeInbox = fn() -> Box<dyn Inbox>;

/// What a ComObject hands its session: its inbox, with the node and the
/// site it is the actor of.
pub(super) struct Delivery<'a> {
    pub(super) node: &'a Arc<NodeInner>,
    pub(super) from: &'a Arc<SiteEntry>,
    pub(super) inbox: &'a mut dyn Inbox,
}

impl Deliver for Delivery<'_> {
    fn message(&mut self, m: InMessage) {
        self.inbox.message(self.node, self.from, m);
    }

    fn stream(&mut self, lane: Priority, prelude: &Prelude) -> bool {
        self.inbox.stream(self.node, self.from, lane, prelude)
    }

    fn stream_start(&mut self, lane: Priority, prelude: &Prelude, header: Bytes) {
        self.inbox
            .stream_start(self.node, self.from, lane, prelude, header);
    }

    fn stream_chunk(&mut self, lane: Priority, offset: u64, data: Bytes) {
        self.inbox
            .stream_chunk(self.node, self.from, lane, offset, data);
    }

    fn stream_end(&mut self, lane: Priority, number: u64) {
        self.inbox.stream_end(self.node, self.from, lane, number);
    }

    fn stream_abort(&mut self, lane: Priority, why: StreamAbort) {
        self.inbox.stream_abort(self.node, self.from, lane, why);
    }
}
