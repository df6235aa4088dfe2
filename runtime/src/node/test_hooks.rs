//! The node's hooks for sitenet's own tests, compiled only with the
//! `test-hooks` feature (sitenet's test suite and examples turn it on; a
//! runtime built on sitenet never sees them). Each reaches into one site's
//! ComObject to put it in a state a test must observe and no public call
//! produces on demand. `SiteRef::hold_busy` is in `site/test_hooks.rs`;
//! `NodeBuilder::speak_for_tests` in `builder.rs`.

use super::{Node, SiteRef};
use crate::com_object::{ChannelLease, CloseHard, ComObject, Preempt};

impl Node {
    /// Makes this node's shutdown look to its peers like a crash: no
    /// LEAVING frame, so they take the closed channels for lost ones (tests
    /// of a process that dies and restarts as a new incarnation).
    pub fn crash_on_shutdown(&self) {
        self.inner.signals().crash_on_shutdown();
    }

    /// Closes the site's channel now with CLOSE_HARD, which the peer must
    /// grant, as the fd-slot controller's preemption does; the site
    /// reconnects when it needs to, and nothing is lost. Does nothing to a
    /// site whose ComObject does not run (never started, or parked: it
    /// has no channel).
    pub fn close_hard(&self, site: &SiteRef) {
        ComObject::if_running(site.entry.resolved(), |a| a.do_send(CloseHard));
    }

    /// The slot lease of the site's working channel (`None`: no channel,
    /// or one that takes no slot).
    pub async fn channel_lease(&self, site: &SiteRef) -> Option<sitenet_transport::LeaseId> {
        let a = ComObject::if_running(site.entry.resolved(), Clone::clone)?;
        a.send(ChannelLease).await.ok().flatten()
    }

    /// Delivers to the site's ComObject the slot controller's preemption of
    /// `lease`, as the controller's tick does (a call that may arrive after
    /// the channel holding that lease was replaced).
    pub fn deliver_preemption(&self, site: &SiteRef, lease: sitenet_transport::LeaseId) {
        ComObject::if_running(site.entry.resolved(), |a| {
            a.do_send(Preempt {
                lease,
                reason: sitenet_protocols::slots::PreemptReason::LeastRecentlyActive,
            })
        });
    }
}
