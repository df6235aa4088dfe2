//! Pending requests: registered when sent, completed by the reply of the
//! site they were sent to (and only that site), failed with the site, ended
//! by their timer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

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
    pub(super) tx: oneshot::Sender<Result<InMessage, RequestError>>,
    /// Dropping it ends the request's timeout task at once.
    pub(super) _cancel_timer: oneshot::Sender<()>,
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
        let (cancel, cancelled) = oneshot::channel::<()>();
        self.pending.lock().insert(
            corr,
            Pending {
                entry: Awaited::new(entry),
                tx,
                _cancel_timer: cancel,
            },
        );
        let node = Arc::downgrade(self);
        let armed = self.rt.spawn(async move {
            // The reply (or a failure) drops the Pending entry, which ends
            // this task at once instead of keeping it for the whole timeout.
            let sleep = actix_rt::time::sleep(timeout);
            futures::pin_mut!(sleep);
            if let futures::future::Either::Right(_) =
                futures::future::select(sleep, cancelled).await
            {
                return;
            }
            if let Some(node) = node.upgrade() {
                if let Some(p) = node.pending.lock().remove(&corr) {
                    let _ = p.tx.send(Err(RequestError::Timeout(timeout)));
                }
            }
        });
        if !armed {
            // The runtime stopped: no timer would ever end this request.
            if let Some(p) = self.pending.lock().remove(&corr) {
                let _ = p.tx.send(Err(RequestError::Send(
                    crate::error::SendError::RuntimeStopped,
                )));
            }
        }
        rx
    }

    pub(crate) fn cancel_request(&self, corr: u64) {
        self.pending.lock().remove(&corr);
    }

    /// Completes the request `m` replies to — only if `from` is the site
    /// the request was sent to: another site cannot complete (or forge a
    /// reply to) a request it never received.
    pub(crate) fn complete_request(&self, from: &Arc<SiteEntry>, m: InMessage) {
        let p = {
            let mut pending = self.pending.lock();
            match pending.get(&m.prelude.corr) {
                Some(p) if Arc::ptr_eq(p.entry.resolved(), from.resolved()) => {
                    pending.remove(&m.prelude.corr)
                }
                Some(_) => {
                    Counters::add(&self.counters.replies_discarded, 1);
                    tracing::warn!(corr = m.prelude.corr, site = ?from.id.get(), "reply from a site the request was not sent to; discarded");
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
        let r = if m.prelude.type_id == RemoteError::ID {
            let reason = rmp_serde::from_slice::<RemoteError>(&m.header)
                .map(|e| e.reason)
                .unwrap_or_else(|e| format!("undecodable error reply: {e}"));
            Err(RequestError::Remote(reason))
        } else {
            Ok(m)
        };
        let _ = p.tx.send(r);
    }

    pub(crate) fn fail_requests(&self, site: &Arc<SiteEntry>, reason: &str) {
        let mut pending = self.pending.lock();
        let keys: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| Arc::ptr_eq(&p.entry, site))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(p) = pending.remove(&k) {
                let _ = p.tx.send(Err(RequestError::SiteFailed(reason.to_string())));
            }
        }
    }
}
