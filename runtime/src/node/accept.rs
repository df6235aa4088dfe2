//! The accept loop: accepted channels run the acceptor's handshake (at most
//! `max_pending_handshakes` at once) and are routed, by the site id their
//! NEGOTIATE names, to that site's ComObject.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sitenet_transport::{Channel, Listener};

use super::{FaultReport, NodeInner};
use crate::channel_io::accept_until_negotiate;
use crate::com_object::Adopt;
use crate::metrics::Counters;

/// Completes once the stop signal is set (at once if it already is).
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        let set = *rx.borrow_and_update();
        if set || rx.changed().await.is_err() {
            return;
        }
    }
}

impl NodeInner {
    pub(super) async fn accept_loop(self: Arc<Self>, listener: Listener) {
        let mut stop = self.stop_listeners.subscribe();
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                r = listener.accept_tuned(self.cfg.tcp_tuning()) => match r {
                    Ok(ch) => self.clone().on_accepted(ch),
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        // e.g. out of file descriptors: back off a little.
                        actix_rt::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
            if self.is_shut_down() {
                return;
            }
        }
    }

    fn on_accepted(self: Arc<Self>, ch: Channel) {
        if self.pending_handshakes.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_pending_handshakes
        {
            self.pending_handshakes.fetch_sub(1, Ordering::AcqRel);
            Counters::add(&self.counters.handshakes_refused, 1);
            tracing::warn!(peer = %ch.peer(), "too many pending handshakes; refusing connection");
            return;
        }
        let peer = ch.peer();
        // Past the hard slot limit the connection is closed at once, not
        // left hanging: the peer retries after its backoff.
        let Some(lease) = self.slots.accept() else {
            self.pending_handshakes.fetch_sub(1, Ordering::AcqRel);
            Counters::add(&self.counters.accepts_refused, 1);
            tracing::debug!(%peer, "no channel slot: connection closed");
            return;
        };
        let ch = match &self.cfg.fault_injector {
            Some(f) => f.wrap(ch),
            None => ch,
        };
        actix_rt::spawn(async move {
            let r =
                accept_until_negotiate(ch, lease, self.local_info(), self.cfg.handshake_timeout)
                    .await;
            self.pending_handshakes.fetch_sub(1, Ordering::AcqRel);
            match r {
                Ok((trans, neg, nonce)) => {
                    if self.is_shut_down() {
                        return;
                    }
                    self.route_accepted(Adopt { trans, neg, nonce });
                }
                Err((ch, e)) => {
                    tracing::info!(%peer, error = %e, "accepted channel closed during the handshake");
                    if let crate::channel_io::OpenFailure::Open(oe) = &e {
                        if !matches!(oe, sitenet_protocols::OpenError::Timeout) {
                            Counters::add(&self.counters.protocol_errors, 1);
                        }
                    }
                    self.record_fault(FaultReport {
                        site: None,
                        peer,
                        reason: e.to_string(),
                        permanent: false,
                    });
                    // Closed only now: the fault is on record before the peer sees the close.
                    drop(ch);
                }
            }
        });
    }
}
