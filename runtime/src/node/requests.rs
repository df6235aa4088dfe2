//! Pending requests: registered when sent, completed by the reply of the
//! site they were sent to (and only that site), failed with the site, ended
//! by their deadline. One task per node ends the requests whose deadlines
//! pass (a task, a timer and two channels per request cost more than the
//! request's own round trip).

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use sitenet_protocols::InMessage;

use super::NodeInner;
use crate::error::RequestError;
use crate::handlers::RemoteError;
use crate::message::Message;
use crate::metrics::Counters;
use crate::site::SiteEntry;

pub(crate) struct Pending {
    /// The site the request was sent to: only its reply completes it. The
    /// request counts in that site's `pending_requests` while it lives.
    pub(super) entry: Awaited,
    pub(super) waiter: Waiter,
    /// When it times out (its key in [`Deadlines`]), and after how long; a
    /// cooperation's request has its cooperation's wait instead.
    deadline: Option<(Instant, Duration)>,
}

/// Who awaits a request's reply.
pub(crate) enum Waiter {
    /// `SiteRef::request`'s future.
    Request(oneshot::Sender<Result<InMessage, RequestError>>),
    /// A cooperation: the reply fills one of its descriptors.
    Coop(Arc<crate::cooperation::CoopState>),
}

/// The deadlines of the pending requests, earliest first, and the wake-up
/// of the node's one task that ends them.
#[derive(Default)]
pub(crate) struct Deadlines {
    state: Mutex<DeadlineState>,
    changed: Notify,
}

#[derive(Default)]
struct DeadlineState {
    set: BTreeSet<(Instant, u64)>,
    /// What the task sleeps until (`None`: until poked). A new deadline
    /// wakes it only if earlier: requests with the usual timeout come later
    /// than the one it already waits for, and cost it no wake-up.
    target: Option<Instant>,
}

impl Deadlines {
    /// Wakes the task (an earlier deadline, or the node stops).
    pub(super) fn poke(&self) {
        self.changed.notify_one();
    }

    fn forget(&self, p: &Pending, corr: u64) {
        if let Some((at, _)) = p.deadline {
            self.state.lock().set.remove(&(at, corr));
        }
    }
}

/// The site a request was sent to, counting the request in its
/// `pending_requests` however the request ends (reply, timeout, failure,
/// shutdown).
pub(crate) struct Awaited(Arc<SiteEntry>);

impl std::ops::Deref for Awaited {
    type Target = Arc<SiteEntry>;

    fn deref(&self) -> &Arc<SiteEntry> {
        &self.0
    }
}

impl Awaited {
    fn new(entry: &Arc<SiteEntry>) -> Self {
        entry
            .pending_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(entry.clone())
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        self.0
            .pending_requests
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl NodeInner {
    pub(crate) fn register_request(
        self: &Arc<Self>,
        corr: u64,
        entry: &Arc<SiteEntry>,
        timeout: Duration,
    ) -> oneshot::Receiver<Result<InMessage, RequestError>> {
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        self.pending.lock().insert(
            corr,
            Pending {
                entry: Awaited::new(entry),
                waiter: Waiter::Request(tx),
                deadline: Some((deadline, timeout)),
            },
        );
        let earlier = {
            let mut st = self.deadlines.state.lock();
            st.set.insert((deadline, corr));
            st.target.is_none_or(|t| deadline < t)
        };
        if earlier {
            self.deadlines.poke();
        }
        rx
    }

    /// Registers a request of a cooperation: its reply goes to `coop`.
    pub(crate) fn register_coop_request(
        &self,
        corr: u64,
        entry: &Arc<SiteEntry>,
        coop: &Arc<crate::cooperation::CoopState>,
    ) {
        self.pending.lock().insert(
            corr,
            Pending {
                entry: Awaited::new(entry),
                waiter: Waiter::Coop(coop.clone()),
                deadline: None,
            },
        );
    }

    pub(crate) fn cancel_request(&self, corr: u64) {
        let p = self.pending.lock().remove(&corr);
        if let Some(p) = p {
            self.deadlines.forget(&p, corr);
        }
    }

    /// Starts the node's task that ends requests at their deadlines. It
    /// holds the node weakly, and ends when the node stops.
    pub(super) fn start_request_timer(self: &Arc<Self>) {
        let deadlines = self.deadlines.clone();
        let node: Weak<NodeInner> = Arc::downgrade(self);
        self.rt.spawn(async move {
            loop {
                // Created before the set is read: a poke after the read is
                // kept (notify_one stores it) and ends this wait at once.
                let poked = deadlines.changed.notified();
                let next = {
                    let mut st = deadlines.state.lock();
                    st.target = st.set.first().map(|d| d.0);
                    st.target
                };
                match next {
                    None => poked.await,
                    Some(at) => {
                        let sleep = actix_rt::time::sleep_until(at.into());
                        futures::pin_mut!(sleep, poked);
                        futures::future::select(sleep, poked).await;
                    }
                }
                let Some(node) = node.upgrade() else {
                    return;
                };
                if node.is_shut_down() {
                    return;
                }
                node.expire_requests(Instant::now());
            }
        });
    }

    /// Ends every request whose deadline is at or before `now`.
    fn expire_requests(&self, now: Instant) {
        loop {
            let corr = {
                let mut st = self.deadlines.state.lock();
                match st.set.first() {
                    Some(&(at, corr)) if at <= now => {
                        st.set.pop_first();
                        corr
                    }
                    _ => return,
                }
            };
            // Completed meanwhile: nothing left to end.
            let p = self.pending.lock().remove(&corr);
            if let Some(Pending {
                waiter: Waiter::Request(tx),
                deadline: Some((_, timeout)),
                ..
            }) = p
            {
                let _ = tx.send(Err(RequestError::Timeout(timeout)));
            }
        }
    }

    /// Completes the request `m` replies to — only if `from` is the site
    /// the request was sent to: another site cannot complete (or forge a
    /// reply to) a request it never received.
    pub(crate) fn complete_request(self: &Arc<Self>, from: &Arc<SiteEntry>, m: InMessage) {
        let p = {
            let mut pending = self.pending.lock();
            // A delegated reply may come from any site: its unguessable
            // corr proves the request went through it (docs/protocol.md §2.6).
            let delegated = m.prelude.kind == sitenet_protocols::MessageKind::DelegatedReply;
            match pending.get(&m.prelude.corr) {
                Some(p) if delegated || Arc::ptr_eq(p.entry.resolved(), from.resolved()) => {
                    let p = pending.remove(&m.prelude.corr);
                    if let Some(p) = &p {
                        self.deadlines.forget(p, m.prelude.corr);
                    }
                    p
                }
                Some(_) => {
                    Counters::add(&self.counters.replies_discarded, 1);
                    if let Some(suppressed) = self.peer_logs.site(from, &self.counters) {
                        tracing::warn!(corr = m.prelude.corr, site = ?from.id.get(), suppressed, "reply from a site the request was not sent to; discarded");
                    }
                    return;
                }
                None => None,
            }
        };
        let Some(p) = p else {
            Counters::add(&self.counters.replies_discarded, 1);
            tracing::debug!(corr = m.prelude.corr, "late or unknown reply discarded");
            return;
        };
        let remote = (m.prelude.type_id == RemoteError::ID).then(|| {
            rmp_serde::from_slice::<RemoteError>(&m.header)
                .map(|e| e.reason)
                .unwrap_or_else(|e| format!("undecodable error reply: {e}"))
        });
        match p.waiter {
            Waiter::Request(tx) => {
                let _ = tx.send(match remote {
                    Some(reason) => Err(RequestError::Remote(reason)),
                    None => Ok(m),
                });
            }
            Waiter::Coop(coop) => match remote {
                Some(reason) => coop.site_failed(self, from, &reason),
                None => coop.offer(self, from, m),
            },
        }
    }

    /// Fails every request awaiting `site`: those sent through an entry
    /// that has since merged into it too (they were registered with the
    /// entry they were sent through).
    pub(crate) fn fail_requests(&self, site: &Arc<SiteEntry>, reason: &str) {
        let mut pending = self.pending.lock();
        let keys: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.entry.same_site(site))
            .map(|(k, _)| *k)
            .collect();
        let mut coops = Vec::new();
        for k in keys {
            if let Some(p) = pending.remove(&k) {
                self.deadlines.forget(&p, k);
                match p.waiter {
                    Waiter::Request(tx) => {
                        let _ = tx.send(Err(RequestError::SiteFailed(reason.to_string())));
                    }
                    Waiter::Coop(c) => coops.push(c),
                }
            }
        }
        drop(pending);
        for c in coops {
            c.site_failed(self, site, reason);
        }
    }

    /// Removes the requests `corrs` of an ended cooperation: a reply that
    /// comes later finds nothing, and is discarded and counted.
    pub(crate) fn forget_requests(&self, corrs: &[u64]) {
        let mut pending = self.pending.lock();
        for c in corrs {
            pending.remove(c);
        }
    }
}
