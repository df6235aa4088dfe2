//! The deadlines of parked sites: a parked site has no actor,
//! hence no timer of its own, yet its machine may wait for something — the
//! reclaim rule's linger time, a give-up, the end of a backoff, the wait
//! for a peer to call back. The node keeps every such deadline in one
//! `TimerQueue` (`sitenet_protocols::base::timer`, keyed by the entry's key,
//! as the request table keeps its deadlines), and one task per node sleeps
//! until the earliest and starts each site whose deadline came again
//! (`com_object/slot.rs`), which handles it and parks again if it may.
//! 100,000 parked sites cost 100,000 set entries, not 100,000 timers.
//!
//! The same task tells whether the node's runtime still runs: it lives as
//! long as the node, so its end, with the node not shut down, means the
//! runtime stopped under it (an actix system it was borrowed from ended):
//! sends then fail at once ([`NodeInner::can_run`]) instead of waking
//! actors that can never start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use sitenet_protocols::base::timer::TimerQueue;

use super::NodeInner;
use crate::com_object::{ComObject, Poke};
use crate::site_entry::{ActorState, SiteEntry};

/// The parked sites' deadlines, and the wake-up of the task that keeps
/// them.
pub(crate) struct ParkedTimers {
    queue: Mutex<TimerQueue<usize>>,
    changed: Notify,
    /// False once the task ended: the node's runtime no longer runs it.
    runtime_runs: Arc<AtomicBool>,
}

impl Default for ParkedTimers {
    fn default() -> Self {
        Self {
            queue: Mutex::new(TimerQueue::default()),
            changed: Notify::new(),
            runtime_runs: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// Marks the runtime stopped when the task that holds it is dropped (it
/// ended, or its runtime dropped it unfinished).
struct RunsWhileHeld(Arc<AtomicBool>);

impl Drop for RunsWhileHeld {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl NodeInner {
    /// A parked site's deadline (called under its slot's lock).
    pub(crate) fn park_deadline(&self, key: usize, at: Instant) {
        if self.parked.queue.lock().set(key, at) {
            self.parked.changed.notify_one();
        }
    }

    /// The deadline of a site that starts again (under its slot's lock).
    pub(crate) fn unpark_deadline(&self, key: usize, at: Instant) {
        self.parked.queue.lock().stop(key, at);
    }

    /// Wakes the task (the node stops).
    pub(super) fn poke_parked_timer(&self) {
        self.parked.changed.notify_one();
    }

    /// True unless the node's runtime stopped under it or `entry` was
    /// forgotten: whether a message queued for `entry` can be sent. Two
    /// atomic loads: it runs on every send.
    pub(crate) fn can_run(&self, entry: &SiteEntry) -> bool {
        self.parked.runtime_runs.load(Ordering::Acquire) && !entry.liveness().reclaimed()
    }

    /// Starts the node's task that starts parked sites at their
    /// deadlines. It holds the node weakly and ends when the node stops.
    pub(super) fn start_parked_timer(self: &Arc<Self>) {
        let node: Weak<NodeInner> = Arc::downgrade(self);
        let parked = self.parked.clone();
        let runs = RunsWhileHeld(parked.runtime_runs.clone());
        let started = self.rt().spawn(async move {
            let _runs = runs;
            loop {
                let Some(due) = next_due(&node, &parked).await else {
                    return;
                };
                let Some(node) = node.upgrade() else {
                    return;
                };
                for entry in due {
                    // A key reused by an entry never started names no
                    // parked site: nothing to start there.
                    if entry.actor_state() != ActorState::Never {
                        ComObject::send(&node, &entry, Poke);
                    }
                }
            }
        });
        if !started {
            // The runtime is not running now: the future was dropped.
            tracing::warn!("the node's runtime does not run");
        }
    }
}

/// Sleeps until a parked site's deadline comes, and returns the sites
/// whose deadline came (`None` once the node stopped: its stop wakes
/// this).
async fn next_due(node: &Weak<NodeInner>, parked: &ParkedTimers) -> Option<Vec<Arc<SiteEntry>>> {
    loop {
        // Created before the queue is read: a deadline set after the read
        // is kept (notify_one stores it) and ends this wait at once.
        let changed = parked.changed.notified();
        let inner = node.upgrade()?;
        if inner.signals().is_shut_down() {
            return None;
        }
        let next = parked.queue.lock().next_deadline();
        let now = Instant::now();
        match next {
            Some(at) if at <= now => {
                let keys: Vec<usize> = parked.queue.lock().expire(now).collect();
                let t = inner.sites.lock();
                // A key whose entry went meanwhile names nothing, or a
                // newer entry (which starts, finds nothing due, parks).
                return Some(
                    keys.into_iter()
                        .filter_map(|k| t.entries.get(k).cloned())
                        .collect(),
                );
            }
            Some(at) => {
                drop(inner);
                let sleep = actix_rt::time::sleep_until(at.into());
                futures::pin_mut!(sleep, changed);
                futures::future::select(sleep, changed).await;
            }
            None => {
                drop(inner);
                changed.await;
            }
        }
    }
}
