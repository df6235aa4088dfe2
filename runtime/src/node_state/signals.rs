//! [`Signals`]: what wakes whom in a node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::events::EventHub;

/// The node's notifications, its shutdown flags and its event
/// subscribers: what its ComObjects, handles and waiters tell each other.
pub(crate) struct Signals {
    /// Notified whenever acknowledgements free bytes or a site fails.
    acked: Notify,
    /// Notified when a channel opens or closes or a fault state changes.
    changed: Notify,
    /// Notified whenever reassembly budget is given back: channels whose
    /// input waits for budget resume reading. Shared with the budget's
    /// release hook ([`budget_release_hook`](Self::budget_release_hook)).
    budget_released: Arc<Notify>,
    /// The node has stopped: no actor starts any more.
    shut_down: AtomicBool,
    /// The shutdown tells connected peers the site is leaving (a LEAVING
    /// frame); only sitenet's tests that stand a shutdown in for a crash
    /// turn it off (`Node::crash_on_shutdown`, feature `test-hooks`).
    leave_on_shutdown: AtomicBool,
    /// Subscribers to the node's events (`Node::events`).
    events: EventHub,
}

impl Default for Signals {
    fn default() -> Self {
        Self {
            acked: Notify::new(),
            changed: Notify::new(),
            budget_released: Arc::new(Notify::new()),
            shut_down: AtomicBool::new(false),
            leave_on_shutdown: AtomicBool::new(true),
            events: EventHub::default(),
        }
    }
}

impl Signals {
    /// Acknowledgements freed bytes, or a site failed: wakes whoever
    /// waits for that.
    pub(crate) fn acked(&self) {
        self.acked.notify_waiters();
    }

    /// Completes at the next [`acked`](Self::acked).
    pub(crate) fn when_acked(&self) -> Notified<'_> {
        self.acked.notified()
    }

    /// A channel opened or closed, a fault state or a site's standing
    /// changed: wakes whoever waits for that.
    pub(crate) fn changed(&self) {
        self.changed.notify_waiters();
    }

    /// Completes at the next [`changed`](Self::changed).
    pub(crate) fn when_changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// What the reassembly budget calls whenever it is given back: wakes
    /// the channels whose input waits for budget.
    pub(crate) fn budget_release_hook(&self) -> Arc<dyn Fn() + Send + Sync> {
        let released = self.budget_released.clone();
        Arc::new(move || released.notify_waiters())
    }

    /// Completes when reassembly budget is next given back.
    pub(crate) fn when_budget_released(&self) -> Notified<'_> {
        self.budget_released.notified()
    }

    /// True once the node has stopped: no actor starts any more.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// Marks the node stopped; true if it was already.
    pub(crate) fn shut_down(&self) -> bool {
        self.shut_down.swap(true, Ordering::AcqRel)
    }

    /// Whether the shutdown tells connected peers the site is leaving.
    pub(crate) fn leaves_on_shutdown(&self) -> bool {
        self.leave_on_shutdown.load(Ordering::Relaxed)
    }

    /// The shutdown sends no LEAVING frame: peers take the closed channels
    /// for lost ones (`Node::crash_on_shutdown`, feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn crash_on_shutdown(&self) {
        self.leave_on_shutdown.store(false, Ordering::Relaxed);
    }

    /// The node's event subscribers (`Node::events`).
    pub(crate) fn events(&self) -> &EventHub {
        &self.events
    }
}
