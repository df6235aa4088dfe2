//! The local site: this node as a site of its own. A runtime keeps lists
//! of sites (the members of a group, the shards of a counter, the origin
//! of a forwarded request) and one of them is often the node itself; a
//! reference to it must work as any other, not fail to decode or send.
//!
//! Its messages never touch the network: a send queues in the entry's
//! bounded outbox as usual, and the first one queued to an empty outbox
//! schedules a drain on the node's runtime, which hands each message to
//! the node's own handlers, in the order queued (so each lane's order
//! holds), with this site as their origin. A message counts as delivered
//! (its tracked delivery completes, its bytes are released) once its
//! handler returned, as a peer's acknowledgement would say. The local
//! site never fails; it has no ComObject, no session, no channel.
//!
//! No rule here is worth a sans-IO type: the order is the
//! queue's, and "delivered" is simply after the handler returned; see
//! docs/architecture.md, "The node's rules in `protocols`".

use std::sync::Arc;

use sitenet_protocols::Deliver;

use crate::node::NodeInner;
use crate::site_entry::SiteEntry;
use crate::streams::{Delivery, LaneStreams};

/// Delivers everything queued to the local site, in order (the node
/// schedules it on its runtime when the first message is queued to an
/// empty outbox: `NodeInner::wake_site`; `start` installs it).
pub(crate) fn drain(node: &Arc<NodeInner>, entry: &Arc<SiteEntry>) {
    let mut batch = Vec::new();
    entry.outbox().drain_on_wake(&mut batch);
    if batch.is_empty() {
        return;
    }
    let mut streams = LaneStreams::default();
    let mut delivery = Delivery {
        node,
        from: entry,
        streams: &mut streams,
    };
    for m in batch {
        let (class, footprint) = (m.share_class(), m.footprint());
        let token = m.tracked.then_some(m.corr);
        delivery.message(m.into_received());
        entry.outbox().release(class, footprint);
        if let Some(token) = token {
            node.deliveries().complete(token, Ok(()));
        }
    }
    node.signals().acked();
}
