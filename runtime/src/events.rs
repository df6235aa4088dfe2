//! Node-wide events: which sites came up, became unreachable or went for
//! good, and which peers the node refused — what Erlang's
//! `net_kernel:monitor_nodes` gives, as a bounded stream per subscriber.
//!
//! Why bounded and lossy: a hostile network can make a node refuse
//! connections as fast as it can accept them, so a subscriber that reads
//! slowly must not make the node hold an unbounded backlog. Each
//! subscriber has its own queue of [`EVENTS_QUEUED`] events; past it, new
//! events are counted and the subscriber reads one
//! [`NodeEvent::Lagged`] with the count before the next event. A node with
//! no subscriber builds no events at all.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::Mutex;
use sitenet_protocols::{OpenError, SiteFailure, SiteId};

/// Events a subscriber's queue holds before it counts the rest as missed.
pub const EVENTS_QUEUED: usize = 1024;

/// Something the node learned about another site or peer (see
/// [`Node::events`](crate::Node::events)).
///
/// A site is named by its [`SiteId`], which names one incarnation: a
/// restarted process is a new site with a new id, and the old one goes
/// down with [`SiteFailure::Open`]`(`[`OpenError::WrongIdentity`]`)` when
/// its address answers with the new id. Events carry ids and addresses,
/// not `SiteRef`s: a queued event never keeps a site in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A channel to the site works: the first for this node's entry of it,
    /// or the first since it was unreachable. A channel closed while idle
    /// (linger, preemption) and opened again is not announced again.
    SiteUp {
        /// The site (its incarnation).
        site: SiteId,
        /// The address this node knows it by, if it dialled it.
        address: Option<String>,
        /// The channel's transport: `tcp`, `tls`, `unix`, `mem`, or the
        /// scheme of a plugged transport.
        transport: &'static str,
    },
    /// The site is temporarily failed: its channel was lost or an open
    /// failed (refused, timed out). It is retried with backoff; its
    /// messages wait. It fails for good after
    /// [`NodeConfig::give_up_after`](crate::NodeConfig::give_up_after) (60 s
    /// by default), or sooner if it cannot be called back.
    SiteUnreachable {
        /// The site, if its id is known yet.
        site: Option<SiteId>,
        /// The address this node knows it by, if any.
        address: Option<String>,
        /// When it became unreachable.
        since: Instant,
        /// What failed (the lost channel or the failed open).
        cause: String,
    },
    /// The site failed permanently: killed, given up on, shut down by its
    /// node, a new incarnation at its address, or refused by the protocol.
    /// Its messages were handed back ([`SiteRef::failure`](crate::SiteRef::failure)).
    SiteDown {
        /// The site, if its id is known.
        site: Option<SiteId>,
        /// The address this node knows it by, if any.
        address: Option<String>,
        /// Why, typed.
        reason: SiteFailure,
    },
    /// Messages for a site that is not failed were handed back: they can
    /// never be sent to it (larger than its maximum), or its peer forgot
    /// the session before acknowledging them (maybe delivered, never
    /// resent). Take them with
    /// [`SiteRef::take_refused`](crate::SiteRef::take_refused), or a
    /// layer's own with
    /// [`SiteRef::take_handed_back_of`](crate::SiteRef::take_handed_back_of):
    /// a layer that keeps books about what it sent (who holds what) must
    /// learn of each. Told once until someone takes: the next hand-back
    /// after a take is told again. (What a failed site held is told by
    /// [`SiteDown`](NodeEvent::SiteDown) instead.)
    HandedBack {
        /// The site, if its id is known.
        site: Option<SiteId>,
        /// The address this node knows it by, if any.
        address: Option<String>,
    },
    /// The node refused a connection from a peer.
    PeerRefused {
        /// The peer's network address.
        address: String,
        /// Why.
        reason: PeerRefusal,
    },
    /// The subscriber read too slowly: this many events were dropped
    /// before the next one (see [`EVENTS_QUEUED`]).
    Lagged {
        /// Events dropped.
        missed: u64,
    },
}

/// Why the node refused a peer's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerRefusal {
    /// Its handshake broke this node's rules: authentication (cookie or
    /// certificate), TLS, protocol version, or the protocol itself.
    Handshake(OpenError),
    /// Every channel slot was taken (the hard limit): the peer retries
    /// after its backoff.
    NoSlot,
}

/// One subscriber's queue.
#[derive(Default)]
struct Queue {
    events: VecDeque<NodeEvent>,
    missed: u64,
    waker: Option<Waker>,
    closed: bool,
}

/// The node's side: who subscribed.
#[derive(Default)]
pub(crate) struct EventHub {
    subscribers: Mutex<Vec<Weak<Mutex<Queue>>>>,
    /// How many subscribers may be alive: zero means no event is built.
    count: std::sync::atomic::AtomicUsize,
}

impl EventHub {
    /// A new subscriber's stream.
    pub(crate) fn subscribe(&self) -> NodeEvents {
        let q = Arc::new(Mutex::new(Queue::default()));
        let mut subs = self.subscribers.lock();
        subs.retain(|w| w.strong_count() > 0);
        subs.push(Arc::downgrade(&q));
        self.count
            .store(subs.len(), std::sync::atomic::Ordering::Relaxed);
        NodeEvents { queue: q }
    }

    /// True if anyone may be listening (then build the event).
    pub(crate) fn wanted(&self) -> bool {
        self.count.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Gives `event` to every subscriber, counting it as missed where a
    /// queue is full.
    pub(crate) fn publish(&self, event: NodeEvent) {
        let mut subs = self.subscribers.lock();
        subs.retain(|w| {
            let Some(q) = w.upgrade() else {
                return false;
            };
            let mut q = q.lock();
            if q.events.len() < EVENTS_QUEUED {
                q.events.push_back(event.clone());
            } else {
                q.missed += 1;
            }
            if let Some(w) = q.waker.take() {
                w.wake();
            }
            true
        });
        self.count
            .store(subs.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for EventHub {
    /// The node is gone: every stream ends after what it holds.
    fn drop(&mut self) {
        for w in self.subscribers.get_mut().drain(..) {
            if let Some(q) = w.upgrade() {
                let mut q = q.lock();
                q.closed = true;
                if let Some(w) = q.waker.take() {
                    w.wake();
                }
            }
        }
    }
}

/// A stream of [`NodeEvent`]s from [`Node::events`](crate::Node::events):
/// events after the call, in order; it ends once the node is gone. Use it
/// as a `futures::Stream`, or poll it with [`try_next`](Self::try_next).
pub struct NodeEvents {
    queue: Arc<Mutex<Queue>>,
}

impl std::fmt::Debug for NodeEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.lock();
        f.debug_struct("NodeEvents")
            .field("queued", &q.events.len())
            .field("missed", &q.missed)
            .finish()
    }
}

impl NodeEvents {
    /// The next event if one is queued, without waiting.
    pub fn try_next(&mut self) -> Option<NodeEvent> {
        Self::take(&mut self.queue.lock())
    }

    fn take(q: &mut Queue) -> Option<NodeEvent> {
        if q.missed > 0 {
            return Some(NodeEvent::Lagged {
                missed: std::mem::take(&mut q.missed),
            });
        }
        q.events.pop_front()
    }
}

impl futures::Stream for NodeEvents {
    type Item = NodeEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<NodeEvent>> {
        let mut q = self.queue.lock();
        if let Some(ev) = Self::take(&mut q) {
            return Poll::Ready(Some(ev));
        }
        if q.closed {
            return Poll::Ready(None);
        }
        q.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn refused(n: u32) -> NodeEvent {
        NodeEvent::PeerRefused {
            address: format!("10.0.0.{n}:1"),
            reason: PeerRefusal::NoSlot,
        }
    }

    #[test]
    fn a_slow_subscriber_gets_a_count_of_what_it_missed_then_the_rest() {
        let hub = EventHub::default();
        assert!(!hub.wanted(), "no subscriber: no event is built");
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        for n in 0..EVENTS_QUEUED as u32 + 5 {
            hub.publish(refused(n));
        }
        // Each subscriber has its own queue.
        assert_eq!(b.try_next(), Some(NodeEvent::Lagged { missed: 5 }));
        assert_eq!(b.try_next(), Some(refused(0)));
        drop(b);
        assert_eq!(a.try_next(), Some(NodeEvent::Lagged { missed: 5 }));
        let mut n = 0;
        while let Some(ev) = a.try_next() {
            assert_eq!(ev, refused(n));
            n += 1;
        }
        assert_eq!(n as usize, EVENTS_QUEUED);
        hub.publish(refused(7));
        assert_eq!(
            hub.subscribers.lock().len(),
            1,
            "a dropped stream is forgotten"
        );
        // The hub goes: the stream ends after what it holds.
        drop(hub);
        let rest: Vec<_> = futures::executor::block_on(a.collect());
        assert_eq!(rest, [refused(7)]);
    }
}
