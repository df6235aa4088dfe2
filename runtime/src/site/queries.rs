//! What a `SiteRef` tells of its site — fault state, identity, failure
//! and what it handed back, bytes pending — and its flush and `prepare`
//! (split from `mod.rs`, which keeps the sends and requests).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sitenet_protocols::{OutMessage, SiteFailure, SiteId};

use super::{FaultState, HandedBack, ReturnedMessage, SiteRef};
use crate::error::FlushError;

impl SiteRef {
    /// True if `self` and `other` reach the same site now: the same entry
    /// once the merges the table has made are followed. Unlike `==`, which
    /// never changes, this becomes true when the node learns that two
    /// references made apart name one site.
    pub fn same_site(&self, other: &SiteRef) -> bool {
        self.entry.same_site(&other.entry)
    }

    /// The site's current fault state.
    pub fn fault_state(&self) -> FaultState {
        self.entry.resolved().fault_state()
    }

    /// Waits until every message sent to this site so far is acknowledged,
    /// at most `timeout`: a [`Flush`], awaited or
    /// [`blocking`](Flush::blocking). Fails at once if the site failed
    /// permanently.
    pub fn flush(&self, timeout: std::time::Duration) -> Flush<'_> {
        Flush {
            site: self,
            timeout,
            waiting: None,
        }
    }

    async fn flushed(&self, timeout: std::time::Duration) -> Result<(), FlushError> {
        let entry = self.entry.resolved().clone();
        let timer = self.node.rt().delay(timeout);
        futures::pin_mut!(timer);
        loop {
            let notified = entry.outbox().released();
            futures::pin_mut!(notified);
            notified.as_mut().enable();
            if let Some(reason) = entry.failure() {
                return Err(FlushError::SiteFailed(reason));
            }
            let pending_bytes = entry.outbox().bytes();
            if pending_bytes == 0 {
                return Ok(());
            }
            if let futures::future::Either::Right(_) =
                futures::future::select(notified, timer.as_mut()).await
            {
                let pending_bytes = entry.outbox().bytes();
                return if pending_bytes == 0 {
                    Ok(())
                } else {
                    Err(FlushError::Timeout { pending_bytes })
                };
            }
        }
    }

    /// Makes the site's ComObject now rather than with the first message
    /// (its machine, session and address book), without opening a
    /// channel: a runtime that knows it will talk to the site soon takes
    /// that off its first message's path, and a measure of what an idle
    /// site costs (`sitenet stress`) makes many. With nothing to do, the
    /// ComObject parks at once (its actor stops, what it must
    /// remember stays in the site's entry), and its first message starts
    /// it again. Idempotent; the site stays idle and is reclaimed as any
    /// other once its references go.
    ///
    /// ```
    /// # let node = sitenet_runtime::Node::builder().start()?;
    /// let worker = node.site("tcp:127.0.0.1:7000")?; // nothing listens there yet
    /// worker.prepare(); // the first send to it only queues and opens
    /// assert!(worker.failure().is_none());
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn prepare(&self) {
        if !self.is_local() {
            self.node.start_unstarted(self.entry.resolved());
        }
    }

    /// True for [`Node::local_site`](crate::Node::local_site): this node itself.
    pub fn is_local(&self) -> bool {
        self.entry.is_local()
    }

    /// The site's id, once a handshake has told it.
    pub fn id(&self) -> Option<SiteId> {
        self.entry.resolved().id()
    }

    /// The address this site is contacted at, if known.
    pub fn address(&self) -> Option<String> {
        self.entry.resolved().address().map(ToString::to_string)
    }

    /// If the site failed permanently: why, and what it handed back —
    /// each message can be decoded ([`ReturnedMessage::decode`]) and sent
    /// again, to this site's successor or another ([`SiteRef::resend`]).
    pub fn failure(&self) -> Option<(SiteFailure, HandedBack)> {
        let handed = self.entry.resolved().handed_if_any()?.lock();
        let (reason, back) = handed.as_deref()?.failed.as_ref()?;
        let returned =
            |list: &[OutMessage]| list.iter().map(|m| self.returned(m.clone())).collect();
        Some((
            reason.clone(),
            HandedBack {
                not_sent: returned(&back.not_sent),
                maybe_delivered: returned(&back.maybe_delivered),
            },
        ))
    }

    /// Takes the messages handed back while the site lives, with why each
    /// can never be sent to it — for example a message queued before the
    /// first handshake that turned out larger than the peer accepts, never
    /// sent, or one the peer may have had before it forgot the session
    /// (`Refusal::PeerForgot`: maybe delivered, never resent).
    /// `Metrics::handed_back` counts them, and
    /// [`NodeEvent::HandedBack`](crate::NodeEvent::HandedBack) tells of
    /// them; nothing is resent for ever or dropped silently.
    pub fn take_refused(&self) -> Vec<(sitenet_protocols::Refusal, OutMessage)> {
        self.take_refused_where(|_| true)
    }

    /// Takes the messages of type `type_id` (a [`Message::ID`](crate::Message::ID))
    /// handed back while the site lives, as
    /// [`take_refused`](Self::take_refused) does, and leaves the others;
    /// each is ready to decode ([`ReturnedMessage::decode`], `SiteRef`s in
    /// its header included) or send again. A layer that keeps books about
    /// what it sent takes its own messages when told
    /// [`NodeEvent::HandedBack`](crate::NodeEvent::HandedBack), without
    /// taking the application's; the next hand-back is told again.
    pub fn take_handed_back_of(
        &self,
        type_id: u32,
    ) -> Vec<(sitenet_protocols::Refusal, ReturnedMessage)> {
        self.take_refused_where(|m| m.type_id == type_id)
            .into_iter()
            .map(|(why, m)| (why, self.returned(m)))
            .collect()
    }

    /// Takes the messages handed back while the site lives that `take`
    /// picks, and leaves the others; a take lets the next hand-back be
    /// told again.
    fn take_refused_where(
        &self,
        take: impl Fn(&OutMessage) -> bool,
    ) -> Vec<(sitenet_protocols::Refusal, OutMessage)> {
        let Some(handed) = self.entry.resolved().handed_if_any() else {
            return Vec::new();
        };
        let mut handed = handed.lock();
        let Some(h) = handed.as_deref_mut() else {
            return Vec::new();
        };
        let (taken, left): (Vec<_>, Vec<_>) = std::mem::take(&mut h.refused)
            .into_iter()
            .partition(|(_, m)| take(m));
        h.refused = left;
        h.told = false;
        if h.failed.is_none() && h.refused.is_empty() {
            // Nothing else kept: the room goes.
            *handed = None;
        }
        taken
    }

    /// `message`, decodable on this site's node.
    fn returned(&self, message: OutMessage) -> ReturnedMessage {
        ReturnedMessage {
            message,
            node: Arc::downgrade(&self.node),
        }
    }

    /// Bytes held for this site (queued and unacknowledged); per class of
    /// the output bound in the node's stats
    /// ([`SiteStats::pending_bytes_by_class`](crate::SiteStats::pending_bytes_by_class)).
    pub fn pending_bytes(&self) -> u64 {
        self.entry.resolved().outbox().bytes()
    }
}

/// A flush's wait, boxed.
type Waiting<'a> = Pin<Box<dyn Future<Output = Result<(), FlushError>> + Send + 'a>>;

/// The wait for a site's messages to be acknowledged
/// ([`SiteRef::flush`]): a future, or [`blocking`](Self::blocking) on a
/// plain thread.
#[must_use = "a flush does nothing until it is awaited or `blocking`-ed"]
pub struct Flush<'a> {
    site: &'a SiteRef,
    timeout: std::time::Duration,
    /// The wait, once polled (a flush is rare: its state is boxed).
    waiting: Option<Waiting<'a>>,
}

impl Flush<'_> {
    /// Waits on this thread. On the node's own runtime thread it fails
    /// with [`FlushError::WouldDeadlock`] rather than hang.
    pub fn blocking(self) -> Result<(), FlushError> {
        if self.site.node.rt().is_current_thread() {
            return Err(FlushError::WouldDeadlock);
        }
        futures::executor::block_on(self)
    }
}

impl Future for Flush<'_> {
    type Output = Result<(), FlushError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (site, timeout) = (self.site, self.timeout);
        self.waiting
            .get_or_insert_with(|| Box::pin(site.flushed(timeout)))
            .as_mut()
            .poll(cx)
    }
}

impl std::fmt::Debug for Flush<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flush")
            .field("site", self.site)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
