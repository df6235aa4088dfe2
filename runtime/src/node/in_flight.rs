//! The node's running async handlers (`Node::handle_async`, in
//! `handlers`): how many, bounded by `NodeConfig::max_async_handlers`, and
//! what ends them — the node stopping drops every one still running, and
//! a graceful shutdown first waits for them (within its deadline).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::NodeInner;
use crate::metrics::Counters;

/// One running async handler's place among the node's, given back when
/// dropped (its future completed, panicked, or was dropped).
pub(crate) struct AsyncSlot(Arc<NodeInner>);

impl NodeInner {
    /// A place for one more async handler, or `None` (counted in
    /// `async_handlers_busy`) if `max_async_handlers` run already.
    pub(crate) fn async_slot(self: &Arc<Self>) -> Option<AsyncSlot> {
        let running = &self.counters().async_handlers;
        // (Sites on several threads may race here: the add and the undo
        // are exact, so at most `max_async_handlers` hold a place.)
        if running.fetch_add(1, Ordering::AcqRel) >= self.identity().cfg().max_async_handlers as u64
        {
            running.fetch_sub(1, Ordering::AcqRel);
            Counters::add(&self.counters().async_handlers_busy, 1);
            return None;
        }
        Some(AsyncSlot(self.clone()))
    }

    /// Completes once the node stops (shut down or dropped): what an async
    /// handler's future is raced against, so that none outlives its node.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stop = self.stop_listeners.subscribe();
        async move {
            // (An error: the sender is gone with the node — stopped too.)
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    }

    /// Waits until no async handler runs (`shutdown` bounds the wait).
    pub(crate) async fn async_handlers_done(&self) {
        loop {
            let idle = self.async_idle.notified();
            futures::pin_mut!(idle);
            idle.as_mut().enable();
            if self.counters().async_handlers.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for AsyncSlot {
    fn drop(&mut self) {
        if self
            .0
            .counters()
            .async_handlers
            .fetch_sub(1, Ordering::AcqRel)
            == 1
        {
            self.0.async_idle.notify_waiters();
        }
    }
}
