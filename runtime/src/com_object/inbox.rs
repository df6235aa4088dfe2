//! Where a ComObject hands what its session delivers. The handlers and
//! the stream sinks are layers above the actor (docs/architecture.md, "The
//! runtime's layers"): they implement [`Inbox`], and the node's start
//! installs its maker (`NodeInner::inbox`). Each ComObject owns one, made
//! for its node and its site.

use std::sync::Arc;

use sitenet_protocols::Deliver;

use crate::node::NodeInner;
use crate::site_entry::SiteEntry;

/// One site's inbound side: the session's `Deliver` calls (the inbox knows
/// its node and the sending site's entry), and the end of the site's actor.
/// It holds what lives between the calls (the streams open on each lane).
pub(crate) trait Inbox: Deliver {
    /// The site's actor stops: nothing more comes on the streams still
    /// open.
    fn abort_all(&mut self);

    /// True if no stream is open (the site may park: issue 21).
    fn is_idle(&self) -> bool;
}

/// Makes a ComObject's [`Inbox`] for its node and site (installed in
/// `NodeInner::inbox` when the node starts).
pub(crate) type MakeInbox = fn(Arc<NodeInner>, Arc<SiteEntry>) -> Box<dyn Inbox>;
