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
//! when the peer acknowledges (or the message is handed back). A message
//! counts for what it occupies (`OutMessage::footprint`: its wire bytes and
//! its record), so tiny messages cannot take several times the bound.
//!
//! The bytes count twice: against the site's bound and against the node's
//! ([`NodeOutput`]), which bounds the sum over all sites — each site
//! within its own bound, sites that never read could together make the node
//! hold any amount. A message always fits an empty outbox under the site's
//! bound, never under the node's: the node's bound is a hard ceiling. Once
//! the node is half full, a site may add only while it holds less than a
//! quarter of the bound divided among the sites holding bytes, so one site
//! that never reads takes at most half the node and a few cannot starve the
//! rest: with eight such sites 7 % of the bound is still free for a site
//! holding little. (About a dozen can fill it, since a share is judged when
//! the bytes are added; what they hold is returned when they are given up:
//! the silence timeout, then `NodeConfig::unreachable_give_up`.)
//!
//! Within the site's bound each class — the four levels and the node's own
//! messages — has a reserve no other class can take
//! (`sitenet_protocols::connection::output_share::admits_class`): a level-1 backlog
//! never refuses a level-4 send, and user data never refuses the node's
//! own answers (error replies, "no reply"). The bytes are held per class
//! and given back per class.
//!
//! Senders that wait for room are served in the order they started waiting
//! (a ticket each, in one line per class): a large send at the head is not
//! overtaken by small ones
//! that would fit first, so it cannot starve; a sender that stops waiting
//! (its future dropped) gives up its turn. That rule, and what a merge does
//! to the queue, are `sitenet_protocols::node::turns` (tested there, with property
//! tests); this file keeps the locks, the wakers and the bytes, and asks it
//! whose turn it is. When the site fails or the node shuts down the outbox
//! is closed and every waiter returns at once.

mod node_output;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use sitenet_protocols::connection::output_share::{admits_class, Freed, CLASSES};
use sitenet_protocols::node::turns::{merge_line, Ticket, Turns};
use sitenet_protocols::OutMessage;

use node_output::NodeWait;
pub(crate) use node_output::{NodeOutput, OutputBound};

/// The bytes a sender that never waits queues before it yields to the
/// site's actor (see [`Pushed::Queued`]). Yielding on the cooperative
/// budget instead (every 128 sends) made the actor write 11 KB of 64 B
/// messages per system call, and wake the peer as often; batches of 64 KiB
/// are what the raw TCP baseline writes.
pub(crate) const SEND_BATCH: u64 = 64 * 1024;

/// The queue behind the outbox's lock.
#[derive(Debug, Default)]
struct Queue {
    msgs: Vec<OutMessage>,
    /// Wire bytes pushed since the actor last drained the queue (only
    /// compared with [`SEND_BATCH`]: saturating, 32 bits keep the queue's
    /// lock and fields in 40 bytes).
    batched: u32,
    /// The site merged into another entry: pushes are refused, and the
    /// sender re-resolves its entry (see [`Outbox::seal_into`]).
    sealed: bool,
}

/// A waiting sender's place in line; dropping it unserved gives the turn up.
struct Turn<'a> {
    outbox: &'a Outbox,
    class: usize,
    ticket: Ticket,
    done: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut t = self.outbox.turns.lock();
        let line = line(&mut t, self.class);
        if line.give_up(self.ticket) {
            self.outbox.publish_waiters(self.class, line);
            drop(t);
            self.outbox.space.notify_waiters();
        }
    }
}

/// The lines of waiting senders, one per class, once one has waited.
type Lines = Option<Box<[Turns; CLASSES]>>;

/// The line of `class`, made on first use.
fn line(lines: &mut Lines, class: usize) -> &mut Turns {
    &mut lines.get_or_insert_with(Box::default)[class]
}

/// What [`Outbox::push`] did.
#[derive(Debug)]
pub(crate) enum Pushed {
    /// Queued; `wake` tells whether the caller must wake the actor.
    Queued {
        /// The outbox went from empty to non-empty.
        wake: bool,
        /// This push brought the bytes waiting for the actor to
        /// [`SEND_BATCH`]: a sender that never has to wait should yield
        /// now, so the actor writes them.
        batch_full: bool,
    },
    /// The outbox was sealed by a merge: push the message to the entry this
    /// one now redirects to.
    Sealed(OutMessage),
}

/// Why a wait for room ended without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// One line of waiting senders per class (boxed when a sender first
    /// waits: most sites never have one, and each carries the room).
    turns: Mutex<Lines>,
    /// `turns[class].waiting()`, readable without the lock: the fast path
    /// of every send checks it, so it must not take a lock (written under
    /// the `turns` lock whenever a line changes).
    waiters: [AtomicBool; CLASSES],
    closed: AtomicBool,
    wake_pending: AtomicBool,
    /// Bytes held, all classes together (read without a lock).
    bytes: AtomicU64,
    /// Bytes held per class: changed under this lock, `bytes` with them.
    held: Mutex<[u64; CLASSES]>,
    bound: u64,
    node: Arc<NodeOutput>,
    space: Notify,
}

impl Outbox {
    /// Its site parked (see [`NodeOutput::site_parked`]).
    pub(crate) fn site_parked(&self) {
        self.node.site_parked();
    }

    pub(crate) fn new(bound: OutputBound) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            turns: Mutex::new(None),
            waiters: Default::default(),
            closed: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            held: Mutex::new([0; CLASSES]),
            bound: bound.site,
            node: bound.node,
            space: Notify::new(),
        }
    }

    /// The bound that refused `n` bytes of `class`: the site's if its
    /// rule refuses them, else the node's (for
    /// [`QueueFull`](crate::SendError::QueueFull)).
    pub(crate) fn full_bound(&self, class: usize, n: u64) -> u64 {
        if admits_class(self.bound, &self.held.lock(), class, n) {
            self.node.bound()
        } else {
            self.bound
        }
    }

    /// Bytes held per class (for stats).
    pub(crate) fn held_by_class(&self) -> [u64; CLASSES] {
        *self.held.lock()
    }

    /// Bytes held (outbox + queues + unacknowledged).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Reserves `n` bytes of `class` under the bound, unless senders of
    /// that class are waiting for room (they go first). A message always
    /// fits into an empty outbox (the bound is at least twice the maximum
    /// message).
    pub(crate) fn try_reserve(&self, class: usize, n: u64) -> bool {
        !self.waiters[class].load(Ordering::Acquire) && self.reserve_now(class, n)
    }

    /// Publishes whether senders of `class` wait in line (under the
    /// `turns` lock).
    fn publish_waiters(&self, class: usize, t: &Turns) {
        self.waiters[class].store(t.waiting(), Ordering::Release);
    }

    /// Reserves `n` bytes of `class` under both bounds, or nothing.
    fn reserve_now(&self, class: usize, n: u64) -> bool {
        let mut held = self.held.lock();
        if !admits_class(self.bound, &held, class, n) {
            return false;
        }
        held[class] += n;
        let before = self.bytes.fetch_add(n, Ordering::AcqRel);
        // Every change of `bytes` tells the node what it changed from and
        // to, the rollback's too: a sender racing this one sees (and
        // counts on) the bytes reserved here until they are given back.
        self.node.held(before, before + n);
        if !self.node.try_reserve(n, before) {
            held[class] -= n;
            let cur = self.bytes.fetch_sub(n, Ordering::AcqRel);
            self.node.held(cur, cur - n);
            return false;
        }
        true
    }

    /// Moves `n` bytes held here to `other`, an outbox of the same node
    /// (their messages moved there: a merge, or a send that followed it).
    /// Neither bound is asked (they were accepted once), and the node's
    /// count is left as it is: the node holds the same bytes, so it never
    /// shows room that is not there (a sender in between could take it and
    /// the node hold more than its bound) nor counts them twice.
    pub(crate) fn move_bytes_to(&self, other: &Outbox, by_class: &[u64; CLASSES]) {
        debug_assert!(Arc::ptr_eq(&self.node, &other.node), "one node");
        let n: u64 = by_class.iter().sum();
        if n == 0 {
            return;
        }
        {
            let mut theirs = other.held.lock();
            for (h, b) in theirs.iter_mut().zip(by_class) {
                *h += b;
            }
        }
        {
            let mut mine = self.held.lock();
            for (h, b) in mine.iter_mut().zip(by_class) {
                *h -= b;
            }
        }
        let before = other.bytes.fetch_add(n, Ordering::AcqRel);
        other.node.held(before, before + n);
        let before = self.bytes.fetch_sub(n, Ordering::AcqRel);
        self.node.held(before, before - n);
        self.space.notify_waiters();
    }

    /// Reserves `n` bytes of `class`, waiting in turn (among the senders
    /// of that class) for acknowledgements to free space. Fails at once if
    /// the outbox is closed (the site failed or the node shut down).
    pub(crate) async fn reserve(&self, class: usize, n: u64) -> Result<(), Closed> {
        // Fast path: no notification is set up while there is room.
        if self.try_reserve(class, n) {
            return Ok(());
        }
        let ticket = {
            let mut t = self.turns.lock();
            let line = line(&mut t, class);
            let ticket = line.join();
            self.publish_waiters(class, line);
            ticket
        };
        // Gives the turn up if this future is dropped before it is served.
        let mut turn = Turn {
            outbox: self,
            class,
            ticket,
            done: false,
        };
        // Counted as waiting on the node too: a release anywhere on the
        // node may make the room this sender lacks.
        let _node_wait = NodeWait::new(&self.node);
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let node_notified = self.node.space.notified();
            tokio::pin!(node_notified);
            node_notified.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return Err(Closed);
            }
            {
                let mut t = self.turns.lock();
                let line = line(&mut t, class);
                if line.is_turn(ticket) && self.reserve_now(class, n) {
                    line.served(ticket);
                    self.publish_waiters(class, line);
                    turn.done = true;
                    drop(t);
                    // The next in line may fit too.
                    self.space.notify_waiters();
                    return Ok(());
                }
            }
            futures::future::select(notified, node_notified).await;
        }
    }

    /// Completes after bytes are given back (acknowledged, handed back) or
    /// the outbox closes: what a flush of this one site waits for. Per
    /// site, so an acknowledgement wakes only that site's waiters — never
    /// every flusher of the node.
    pub(crate) fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.space.notified()
    }

    /// Closes the outbox: every sender waiting for room, and every later
    /// one, fails at once.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.space.notify_waiters();
    }

    /// Returns the bytes of `m` (acknowledged, handed back, or never
    /// queued).
    pub(crate) fn release_msg(&self, m: &OutMessage) {
        self.release(m.share_class(), m.footprint());
    }

    /// Returns what acknowledgements freed, per class.
    pub(crate) fn release_freed(&self, freed: &Freed) {
        for (class, &n) in freed.by_class.iter().enumerate() {
            self.release(class, n);
        }
    }

    /// Returns `n` bytes of `class`.
    pub(crate) fn release(&self, class: usize, n: u64) {
        if n > 0 {
            self.held.lock()[class] -= n;
            let before = self.bytes.fetch_sub(n, Ordering::AcqRel);
            self.node.held(before, before - n);
            self.node.release(n);
            self.space.notify_waiters();
        }
    }

    /// Pushes a message; returns true if the caller must wake the actor.
    ///
    /// In a burst the flag is already set: a plain load sees that without
    /// the locked exchange. It cannot miss a clear: the actor clears the flag
    /// before it takes the queue lock to drain, and this load follows this
    /// push's unlock, so if the drain missed the message, the load
    /// happens after the clear and sees it.
    pub(crate) fn push(&self, m: OutMessage) -> Pushed {
        let batch_full = {
            let mut q = self.queue.lock();
            if q.sealed {
                return Pushed::Sealed(m);
            }
            let before = u64::from(q.batched);
            let len = u32::try_from(m.wire_len()).unwrap_or(u32::MAX);
            q.batched = q.batched.saturating_add(len);
            q.msgs.push(m);
            before < SEND_BATCH && u64::from(q.batched) >= SEND_BATCH
        };
        let wake = !self.wake_pending.load(Ordering::Acquire)
            && !self.wake_pending.swap(true, Ordering::AcqRel);
        Pushed::Queued { wake, batch_full }
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
        let mut n = [0u64; CLASSES];
        for m in older.iter().chain(&mine.msgs) {
            n[m.share_class()] += m.footprint();
        }
        if merge_line(older, &mut mine.msgs, &mut theirs.msgs) == 0 {
            return false;
        }
        drop(theirs);
        drop(mine);
        self.move_bytes_to(other, &n);
        !other.wake_pending.load(Ordering::Acquire)
            && !other.wake_pending.swap(true, Ordering::AcqRel)
    }

    /// Called by the actor before a turn that drains the outbox at its end
    /// (`drain_on_wake`) whatever happens: pushes meanwhile — a handler's
    /// reply to what the turn delivers, above all — wake nobody, since the
    /// turn takes them. The actor must clear the flag (`drain_on_wake`) in
    /// the same turn, or later pushes would never wake it.
    pub(crate) fn hold_wakes(&self) {
        self.wake_pending.store(true, Ordering::Release);
    }

    /// Called by the actor on a wake: clears the flag, then takes everything.
    pub(crate) fn drain_on_wake(&self, into: &mut Vec<OutMessage>) {
        self.wake_pending.store(false, Ordering::Release);
        self.drain(into);
    }

    /// Gives back the queue's room if it is empty (an idle site's outbox
    /// keeps no capacity; it grows again on the next send).
    pub(crate) fn shed(&self) {
        let mut q = self.queue.lock();
        if q.msgs.is_empty() {
            q.msgs = Vec::new();
        }
    }

    /// True if nothing is queued (the site may park only then).
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.lock().msgs.is_empty()
    }

    /// Takes everything queued (without touching the wake flag).
    pub(crate) fn drain(&self, into: &mut Vec<OutMessage>) {
        let mut q = self.queue.lock();
        q.batched = 0;
        if into.is_empty() {
            std::mem::swap(&mut q.msgs, into);
        } else {
            into.append(&mut q.msgs);
        }
    }
}
