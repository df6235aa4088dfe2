//! Hooks for sitenet's own tests, compiled only with the `test-hooks`
//! feature (sitenet's test suite and examples turn it on; a runtime built on
//! sitenet never sees them). Each reaches into one site's ComObject to put
//! it in a state a test must observe and no public call produces on demand.

use parking_lot::Mutex;

use crate::com_object::{ChannelLease, CloseHard, ComObject, HoldBusy, Preempt};
use crate::node::{Node, NodeBuilder};
use crate::site::SiteRef;

impl SiteRef {
    /// Blocks this site's ComObject (and the runtime thread it runs on)
    /// until the returned guard is dropped, to observe the data path while
    /// the actor is busy. Returns once the actor is blocked. A remote
    /// site's: the local site has no ComObject.
    pub fn hold_busy(&self) -> BusyGuard {
        assert!(
            !self.is_local(),
            "hold_busy holds a remote site's ComObject"
        );
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        ComObject::send(
            &self.node,
            self.entry.resolved(),
            HoldBusy {
                release: Mutex::new(Some(rx)),
                started: started_tx,
            },
        );
        let _ = started_rx.recv();
        BusyGuard { _release: tx }
    }
}

/// Releases a [`SiteRef::hold_busy`] when dropped.
pub struct BusyGuard {
    _release: std::sync::mpsc::Sender<()>,
}

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

impl NodeBuilder {
    /// Makes the node offer `speaks` in its handshakes instead of this
    /// build's versions and capabilities: a test plays a node of an older
    /// build (fewer capabilities) or a newer one (a higher version, a
    /// capability this build does not know) against current nodes.
    pub fn speak_for_tests(mut self, speaks: sitenet_protocols::Speaks) -> Self {
        self.speaks = speaks;
        self
    }
}
