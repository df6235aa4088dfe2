//! Where a ComObject hands what its session delivers. The handlers and
//! the stream sinks are layers above the actor (docs/architecture.md, "The
//! runtime's layers"): they implement [`Inbox`], and the node's start
//! makes one per ComObject (`ComHost::inbox`). Each ComObject owns one, made
//! for its node and its site.

use sitenet_protocols::Deliver;

/// One site's inbound side: the session's `Deliver` calls (the inbox knows
/// its node and the sending site's entry), and the end of the site's actor.
/// It holds what lives between the calls (the streams open on each lane).
pub(crate) trait Inbox: Deliver {
    /// The site's actor stops: nothing more comes on the streams still
    /// open.
    fn abort_all(&mut self);

    /// True if no stream is open (the site may park only then).
    fn is_idle(&self) -> bool;
}
