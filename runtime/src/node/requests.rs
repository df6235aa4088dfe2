//! Pending requests: the node's `RequestTable` (sitenet_protocols::node::requests,
//! where the rules live: only the site asked completes a plain reply, any
//! site a delegated one; deadlines; a failed site's requests), driven here.
//! Registered when sent, completed by a reply, failed with the site, ended
//! by their deadline. The deadlines are the table's `TimerQueue`
//! (`sitenet_protocols::base::timer`: a deadline taken is consumed, the contract
//! of every other wait of the protocol); one task per node sleeps until the
//! table's `poll_timeout` and hands what `expire` ends to its awaiters (a
//! task, a timer and two channels per request cost more than the request's
//! own round trip).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use sitenet_protocols::node::requests::{Reply, RequestTable};
use sitenet_protocols::{InMessage, SiteFailure};

use super::NodeInner;
use crate::error::RequestError;
use crate::metrics::Counters;
use crate::site_entry::SiteEntry;

/// Who awaits a request's reply.
pub(crate) enum Waiter {
    /// `SiteRef::request`'s future.
    Request(oneshot::Sender<Result<InMessage, RequestError>>),
    /// A cooperation: the reply fills one of its descriptors.
    Coop(Arc<dyn super::Coop>),
}

/// The node's pending requests and the wake-up of its one task that ends
/// them at their deadlines.
#[derive(Default)]
pub(crate) struct Requests {
    /// One insert and one removal per request: hashed with foldhash.
    table: Mutex<RequestTable<Awaited, Waiter, foldhash::fast::RandomState>>,
    changed: Notify,
}

impl Requests {
    /// Wakes the task (an earlier deadline, or the node stops).
    pub(super) fn poke(&self) {
        self.changed.notify_one();
    }

    /// Ends every request (the node stops): who awaited them.
    pub(super) fn drain(&self) -> Vec<Waiter> {
        self.table.lock().drain()
    }
}

/// Whether a request was sent to `from` (entries merge when two turn out
/// to be one site: a request sent through either is that site's).
fn sent_to(a: &Awaited, from: &Arc<SiteEntry>) -> bool {
    Arc::ptr_eq(a.resolved(), from.resolved())
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
        entry.holds().request_sent();
        Self(entry.clone())
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        self.0.holds().request_ended();
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
        let deadline = sitenet_protocols::base::timer::later(Instant::now(), timeout);
        let earliest = self.requests.table.lock().register(
            corr,
            Awaited::new(entry),
            Waiter::Request(tx),
            Some((deadline, timeout)),
        );
        if earliest {
            self.requests.poke();
        }
        rx
    }

    /// Registers a request of a cooperation: its reply goes to `coop`.
    pub(crate) fn register_coop_request(
        &self,
        corr: u64,
        entry: &Arc<SiteEntry>,
        coop: Arc<dyn super::Coop>,
    ) {
        self.requests
            .table
            .lock()
            .register(corr, Awaited::new(entry), Waiter::Coop(coop), None);
    }

    pub(crate) fn cancel_request(&self, corr: u64) {
        let w = self.requests.table.lock().cancel(corr);
        drop(w);
    }

    /// Starts the node's task that ends requests at their deadlines. It
    /// holds the node weakly, and ends when the node stops.
    pub(super) fn start_request_timer(self: &Arc<Self>) {
        let node: Weak<NodeInner> = Arc::downgrade(self);
        let requests = self.requests.clone();
        self.rt().spawn(async move {
            loop {
                // Created before the table is read: a poke after the read
                // is kept (notify_one stores it) and ends this wait at once.
                let poked = requests.changed.notified();
                let next = requests.table.lock().poll_timeout();
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
                if node.signals().is_shut_down() {
                    return;
                }
                let ended = requests.table.lock().expire(Instant::now());
                for (_, waiter, timeout, site) in ended {
                    if let Waiter::Request(tx) = waiter {
                        // A site that cannot be reached did not answer
                        // slowly: say what keeps it away.
                        let err = match site.unreachable_cause() {
                            Some(cause) => RequestError::Unreachable {
                                waited: timeout,
                                cause,
                            },
                            None => RequestError::Timeout(timeout),
                        };
                        let _ = tx.send(Err(err));
                    }
                }
            }
        });
    }

    /// Completes the request `m` replies to — only if `from` is the site
    /// the request was sent to: another site cannot complete (or forge a
    /// reply to) a request it never received.
    pub(crate) fn complete_request(self: &Arc<Self>, from: &Arc<SiteEntry>, m: InMessage) {
        let delegated = m.prelude.kind == sitenet_protocols::MessageKind::DelegatedReply;
        let reply = self
            .requests
            .table
            .lock()
            .reply(m.prelude.corr, from, delegated, sent_to);
        let waiter = match reply {
            Reply::Complete(w) => w,
            Reply::FromAnotherSite => {
                Counters::add(&self.counters().replies_discarded, 1);
                if let Some(suppressed) = self.peer_logs().site(
                    from,
                    crate::peer_logs::LogKind::MisdirectedReply,
                    self.counters(),
                ) {
                    tracing::warn!(corr = m.prelude.corr, site = ?from.id(), suppressed, "reply from a site the request was not sent to; discarded");
                }
                return;
            }
            Reply::Unknown => {
                Counters::add(&self.counters().replies_discarded, 1);
                tracing::debug!(corr = m.prelude.corr, "late or unknown reply discarded");
                return;
            }
        };
        match waiter {
            // An error reply goes on to the caller's future, which reads
            // it with the request's type (`SiteRef::request`).
            Waiter::Request(tx) => {
                let _ = tx.send(Ok(m));
            }
            Waiter::Coop(coop) => match super::error_reply(m.prelude.type_id, &m.header, &m.body) {
                Some(failed) => coop.site_failed(self, from, &failed.describe()),
                None => coop.offer(self, from, m),
            },
        }
    }

    /// Fails every request awaiting `site`: those sent through an entry
    /// that has since merged into it too (they were registered with the
    /// entry they were sent through).
    pub(crate) fn fail_requests(&self, site: &Arc<SiteEntry>, failure: &SiteFailure) {
        let ended = self
            .requests
            .table
            .lock()
            .fail_site(|p: &Awaited| p.same_site(site));
        for w in ended {
            match w {
                Waiter::Request(tx) => {
                    let _ = tx.send(Err(RequestError::SiteFailed(failure.clone())));
                }
                Waiter::Coop(c) => c.site_failed(self, site, &failure.to_string()),
            }
        }
    }

    /// Removes the requests `corrs` of an ended cooperation: a reply that
    /// comes later finds nothing, and is discarded and counted.
    pub(crate) fn forget_requests(&self, corrs: &[u64]) {
        self.requests.table.lock().forget(corrs);
    }
}
