//! `SiteRef`'s hook for sitenet's own tests, compiled only with the
//! `test-hooks` feature (sitenet's test suite and examples turn it on; a
//! runtime built on sitenet never sees it): it reaches into one site's
//! ComObject to hold it busy, a state a test must observe and no public
//! call produces on demand. The node's hooks are in `node/test_hooks.rs`.

use parking_lot::Mutex;

use super::SiteRef;
use crate::com_object::{ComObject, HoldBusy};

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
