//! The outbox: the shared, bounded queue `SiteRef`s write into, drained by the
//! site's ComObject.
//!
//! `send` encodes on the caller's thread and pushes here; the ComObject actor
//! is woken only when the outbox goes from empty to non-empty. The wake is
//! race-free: the sender sets `wake_pending` before waking the actor; the
//! actor clears it *before* its final re-check of the queue, so a message
//! pushed concurrently is either seen by that re-check or causes a new wake.
//! The byte bound counts the outbox, the session's queues and its
//! unacknowledged ledger together: bytes are reserved at `send` and returned
//! when the peer acknowledges (or the message is handed back).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use sitenet_protocols::OutMessage;

/// The queue behind the outbox's lock.
#[derive(Debug, Default)]
struct Queue {
    msgs: Vec<OutMessage>,
    /// The site merged into another entry: pushes are refused, and the
    /// sender re-resolves its entry (see [`Outbox::seal_into`]).
    sealed: bool,
}

/// What [`Outbox::push`] did.
#[derive(Debug)]
pub(crate) enum Pushed {
    /// Queued; `wake` tells whether the caller must wake the actor.
    Queued {
        /// The outbox went from empty to non-empty.
        wake: bool,
    },
    /// The outbox was sealed by a merge: push the message to the entry this
    /// one now redirects to.
    Sealed(OutMessage),
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    wake_pending: AtomicBool,
    bytes: AtomicU64,
    bound: u64,
    space: Notify,
}

impl Outbox {
    pub(crate) fn new(bound: u64) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            wake_pending: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            bound,
            space: Notify::new(),
        }
    }

    pub(crate) fn bound(&self) -> u64 {
        self.bound
    }

    /// Bytes held (outbox + queues + unacknowledged).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Reserves `n` bytes under the bound. A message always fits into an
    /// empty outbox (the bound is at least twice the maximum message).
    pub(crate) fn try_reserve(&self, n: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur == 0 || cur + n <= self.bound).then_some(cur + n)
            })
            .is_ok()
    }

    /// Adds `n` bytes regardless of the bound (a message moved from another
    /// outbox, already accepted once).
    pub(crate) fn force_reserve(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    /// Reserves `n` bytes, waiting for acknowledgements to free space.
    pub(crate) async fn reserve(&self, n: u64) {
        // Fast path: no notification is set up while there is room.
        if self.try_reserve(n) {
            return;
        }
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_reserve(n) {
                return;
            }
            notified.await;
        }
    }

    /// Returns bytes (acknowledged, handed back, or never queued).
    pub(crate) fn release(&self, n: u64) {
        if n > 0 {
            self.bytes.fetch_sub(n, Ordering::AcqRel);
            self.space.notify_waiters();
        }
    }

    /// Wakes every waiter (shutdown, failure).
    pub(crate) fn notify_all(&self) {
        self.space.notify_waiters();
    }

    /// Pushes a message; returns true if the caller must wake the actor.
    ///
    /// In a burst the flag is already set: a plain load sees that without
    /// the locked exchange. It cannot miss a clear: the actor clears the flag
    /// before it takes the queue lock to drain, and this load follows this
    /// push's unlock, so if the drain missed the message, the load
    /// happens after the clear and sees it.
    pub(crate) fn push(&self, m: OutMessage) -> Pushed {
        {
            let mut q = self.queue.lock();
            if q.sealed {
                return Pushed::Sealed(m);
            }
            q.msgs.push(m);
        }
        let wake = !self.wake_pending.load(Ordering::Acquire)
            && !self.wake_pending.swap(true, Ordering::AcqRel);
        Pushed::Queued { wake }
    }

    /// Merges this outbox into `other`, keeping every sender's order: under
    /// both locks, this outbox is sealed (a later push is refused and the
    /// sender re-resolves to `other`), and `older` (what the merging
    /// ComObject held, older than anything queued here) followed by what is
    /// queued here goes to the front of `other`, before anything a sender
    /// that already follows the redirect can push there. `redirect` runs
    /// under the locks (it points the entry at `other`). The bytes move
    /// with the messages. Returns true if `other`'s actor must be woken.
    pub(crate) fn seal_into(
        &self,
        other: &Outbox,
        older: Vec<OutMessage>,
        redirect: impl FnOnce(),
    ) -> bool {
        let mut mine = self.queue.lock();
        let mut theirs = other.queue.lock();
        mine.sealed = true;
        redirect();
        let mut moved = older;
        moved.append(&mut mine.msgs);
        let n: u64 = moved.iter().map(OutMessage::wire_len).sum();
        if moved.is_empty() {
            return false;
        }
        moved.append(&mut theirs.msgs);
        theirs.msgs = moved;
        drop(theirs);
        drop(mine);
        self.release(n);
        other.force_reserve(n);
        !other.wake_pending.load(Ordering::Acquire)
            && !other.wake_pending.swap(true, Ordering::AcqRel)
    }

    /// Called by the actor on a wake: clears the flag, then takes everything.
    pub(crate) fn drain_on_wake(&self, into: &mut Vec<OutMessage>) {
        self.wake_pending.store(false, Ordering::Release);
        self.drain(into);
    }

    /// Takes everything queued (without touching the wake flag).
    pub(crate) fn drain(&self, into: &mut Vec<OutMessage>) {
        let mut q = self.queue.lock();
        if into.is_empty() {
            std::mem::swap(&mut q.msgs, into);
        } else {
            into.append(&mut q.msgs);
        }
    }
}
