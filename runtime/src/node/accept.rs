//! The accept loop: an accepted connection is admitted as a pending
//! handshake (`sitenet_protocols::slots::admission` decides which pending
//! handshakes are closed, by count per node and per source address, and by
//! time), runs the acceptor's handshake holding no channel slot, and only
//! once its peer has presented itself (NEGOTIATE) takes a slot and is
//! routed, by the site id it names, to that site's ComObject.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sitenet_protocols::slots::admission::{Admission, AdmissionConfig, Dropped, Source};
use sitenet_transport::{Channel, Listener, MemLanes};
use tokio::sync::{oneshot, Notify};

use super::{FaultReport, NodeInner, PeerRefusal};
use crate::channel_io::{accept_until_negotiate, flush_and_close, OpenFailure, Tls};
use crate::metrics::Counters;
use crate::peer_logs::LogKind;
use sitenet_protocols::OpenError;

/// Completes once the stop signal is set (at once if it already is).
pub(super) async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        let set = *rx.borrow_and_update();
        if set || rx.changed().await.is_err() {
            return;
        }
    }
}

/// The driver of the node's [`Admission`] table: each pending handshake's
/// task waits on the receiving end of its ticket's sender, which the table's
/// decisions (a cap, a deadline) fire.
pub(crate) struct Handshakes {
    state: Mutex<HandshakesState>,
    /// Wakes the deadline task: a handshake was admitted (its deadline may
    /// be the first).
    wake: Notify,
}

struct HandshakesState {
    table: Admission,
    close: HashMap<u64, oneshot::Sender<Dropped>>,
}

impl Handshakes {
    pub(crate) fn new(cfg: AdmissionConfig) -> Self {
        Self {
            state: Mutex::new(HandshakesState {
                table: Admission::new(cfg),
                close: HashMap::new(),
            }),
            wake: Notify::new(),
        }
    }

    /// Admits a connection from `ip`; closes the one the table drops for it.
    fn admit(&self, ip: Option<IpAddr>, c: &Counters) -> (u64, oneshot::Receiver<Dropped>) {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state.lock();
        let a = st.table.admit(Instant::now(), Source::of(ip));
        st.close.insert(a.ticket, tx);
        let victim = a
            .dropped
            .and_then(|(t, why)| st.close.remove(&t).map(|s| (s, why)));
        Self::gauge(&st.table, c);
        drop(st);
        if let Some((s, why)) = victim {
            Self::count(why, c);
            let _ = s.send(why);
        }
        self.wake.notify_one();
        (a.ticket, rx)
    }

    fn spoke(&self, ticket: u64) {
        self.state.lock().table.spoke(ticket);
    }

    fn finish(&self, ticket: u64, c: &Counters) {
        let mut st = self.state.lock();
        st.table.finish(ticket);
        st.close.remove(&ticket);
        Self::gauge(&st.table, c);
    }

    /// Closes the handshakes past their deadline; returns the next one.
    fn expire(&self, c: &Counters) -> Option<Instant> {
        let mut st = self.state.lock();
        let due = st.table.handle_timeout(Instant::now());
        let close: Vec<_> = due
            .into_iter()
            .filter_map(|(t, why)| st.close.remove(&t).map(|s| (s, why)))
            .collect();
        Self::gauge(&st.table, c);
        let next = st.table.poll_timeout();
        drop(st);
        for (s, why) in close {
            Self::count(why, c);
            let _ = s.send(why);
        }
        next
    }

    /// The node stops: every pending handshake ends (its sender dropped).
    fn close_all(&self) {
        let close = std::mem::take(&mut self.state.lock().close);
        drop(close);
    }

    fn gauge(t: &Admission, c: &Counters) {
        let n = t.pending() as u64;
        c.handshakes_pending
            .store(n, std::sync::atomic::Ordering::Relaxed);
        c.handshakes_pending_peak
            .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn count(why: Dropped, c: &Counters) {
        match why {
            Dropped::NodeFull | Dropped::SourceFull => Counters::add(&c.handshakes_refused, 1),
            Dropped::Silent => Counters::add(&c.handshakes_silent, 1),
            // Reported as a fault, with the handshake errors.
            Dropped::TimedOut => {}
        }
    }
}

impl NodeInner {
    pub(super) async fn accept_loop(self: Arc<Self>, listener: Listener) {
        let (l, tuning) = (&listener, self.identity().cfg().tcp_tuning());
        let counters = &self.counters();
        // Out of descriptors, every try fails for as long as it lasts: a
        // few lines per window, the rest counted (as a peer's bad input).
        let logs = &self.peer_logs();
        self.serve_accepts(|| async move {
            loop {
                match l.accept_tuned(tuning).await {
                    Ok(ch) => return Some((ch, l.is_tls())),
                    Err(e) => {
                        Counters::add(&counters.accept_errors, 1);
                        if let Some(suppressed) = logs.node(LogKind::AcceptFailed, counters) {
                            tracing::warn!(error = %e, suppressed, "accept failed");
                        }
                        // e.g. out of file descriptors: back off a little.
                        actix_rt::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        })
        .await;
    }

    /// Accepts the connections to a mem listener made on this thread, until
    /// the node stops or the listener closes. Started on each of the
    /// runtime's threads beside the [`accept_loop`](Self::accept_loop):
    /// a connect made on a thread then wakes a task of that thread, not
    /// the listener's, which under load waits in the other thread's remote
    /// queue for hundreds of milliseconds (see `sitenet_transport::mem`'s
    /// lanes), and the handshake runs where the peer's ComObject will.
    pub(super) async fn accept_lane(self: Arc<Self>, lanes: MemLanes) {
        let acceptor = &lanes.acceptor_here();
        // An error: the listener is gone, its node is stopping.
        self.serve_accepts(
            || async move { Some((Channel::Mem(acceptor.accept().await.ok()?), false)) },
        )
        .await;
    }

    /// Hands what `accept` yields (a channel, and whether it runs TLS) to
    /// the handshake, until the node stops or `accept` yields `None`.
    async fn serve_accepts<F: std::future::Future<Output = Option<(Channel, bool)>>>(
        self: &Arc<Self>,
        mut accept: impl FnMut() -> F,
    ) {
        let mut stop = self.stop_listeners.subscribe();
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                r = accept() => match r {
                    Some((ch, tls)) => self.clone().on_accepted(ch, tls),
                    None => return,
                },
            }
            if self.signals().is_shut_down() {
                return;
            }
        }
    }

    /// Closes pending handshakes at their deadlines, until the node stops
    /// (then closes them all). One per listening node.
    pub(super) async fn handshake_deadlines(self: Arc<Self>) {
        let mut stop = self.stop_listeners.subscribe();
        let mut next = None;
        loop {
            let sleep = async {
                match next {
                    Some(at) => {
                        actix_rt::time::sleep_until(tokio::time::Instant::from_std(at)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stopped(&mut stop) => {
                    self.handshakes.close_all();
                    return;
                }
                _ = self.handshakes.wake.notified() => {}
                _ = sleep => {}
            }
            next = self.handshakes.expire(self.counters());
        }
    }

    /// Tells the node's event subscribers (if any) that `peer` was refused.
    pub(super) fn peer_refused(&self, peer: &str, reason: PeerRefusal) {
        if self.signals().events().wanted() {
            self.signals()
                .events()
                .publish(crate::NodeEvent::PeerRefused {
                    address: peer.to_string(),
                    reason,
                });
        }
    }

    /// Runs the acceptor's handshake on a channel accepted by a listener
    /// (`tls`: a `tls:` one, whose channels run TLS).
    fn on_accepted(self: Arc<Self>, ch: Channel, tls: bool) {
        let peer = ch.peer();
        let ip = crate::channel_io::peer_ip(&peer);
        let (ticket, dropped) = self.handshakes.admit(ip, self.counters());
        let ch = match &self.identity().cfg().fault_injector {
            Some(f) => f.wrap(ch),
            None => ch,
        };
        actix_rt::spawn(async move {
            let node = self.clone();
            let keys = self.security().keys().clone();
            let session = match self.identity().cfg().tls.as_ref().filter(|_| tls) {
                Some(id) => match id.server_session() {
                    Ok(s) => Some(s),
                    Err(e) => {
                        if let Some(suppressed) =
                            self.peer_logs()
                                .address(ip, LogKind::TlsStart, self.counters())
                        {
                            tracing::error!(error = %e, suppressed, "cannot start TLS on an accepted channel");
                        }
                        self.handshakes.finish(ticket, self.counters());
                        return;
                    }
                },
                None => None,
            };
            let tls = Tls {
                session,
                required: self.identity().cfg().tls.is_some(),
            };
            let r = accept_until_negotiate(
                ch,
                self.identity().local_info(),
                keys,
                tls,
                dropped,
                move || node.handshakes.spoke(ticket),
            )
            .await;
            self.handshakes.finish(ticket, self.counters());
            match r {
                Ok((trans, accepted)) => {
                    if self.signals().is_shut_down() {
                        return;
                    }
                    // The slot is taken only now that the peer presented
                    // itself, or the peer waits in line for one.
                    self.adopt_or_wait(trans, accepted, peer).await;
                }
                Err((_, OpenFailure::Dropped(why @ (Dropped::NodeFull | Dropped::SourceFull)))) => {
                    // Closed to make room for a newer one: counted, not a
                    // fault of this peer's.
                    tracing::debug!(%peer, reason = %why, "pending handshake closed");
                }
                Err((_, OpenFailure::Stopping)) => {}
                Err((
                    trans,
                    OpenFailure::Open(
                        why @ (OpenError::AuthenticationFailed(_)
                        | OpenError::NotCertified { .. }
                        | OpenError::Tls(_)),
                    ),
                )) => {
                    // Not a member, or not the site its certificate names
                    //: refused by the acceptor's machine (or by
                    // TLS) before anything was allocated for it. Its
                    // refusal (in the output ring, or TLS's alert) is
                    // written, then the channel closed; logged through the
                    // source's limit, at WARN: what `sitenet node` shows by
                    // default, so an operator sees who is turned away.
                    Counters::add(&self.counters().auth_refused, 1);
                    if let Some(suppressed) =
                        self.peer_logs()
                            .address(ip, LogKind::Refused, self.counters())
                    {
                        tracing::warn!(%peer, reason = %why, suppressed, "not a member: connection refused");
                    }
                    self.peer_refused(&peer, PeerRefusal::Handshake(why));
                    flush_and_close(trans, self.identity().cfg().handshake_timeout).await;
                }
                Err((ch, e)) => {
                    if let Some(suppressed) =
                        self.peer_logs()
                            .address(ip, LogKind::HandshakeFailed, self.counters())
                    {
                        tracing::info!(%peer, error = %e, suppressed, "accepted channel closed during the handshake");
                    }
                    if let OpenFailure::Open(why) = &e {
                        Counters::add(&self.counters().protocol_errors, 1);
                        self.peer_refused(&peer, PeerRefusal::Handshake(why.clone()));
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
