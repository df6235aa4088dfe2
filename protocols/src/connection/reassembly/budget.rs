//! The node's reassembly budget, shared by every session. A session that wants `n`
//! more bytes gets them if they are available **and** it would then hold at
//! most its fair share — the limit divided by the number of sessions that
//! hold budget (itself included), and never less than one maximum frame —
//! or it is the *oldest holder* (the session holding budget the longest,
//! which may finish what it started). Otherwise it is *blocked*: the
//! session stops consuming input (the frame stays in the ring, so the
//! peer's sending is slowed by TCP), and the driver stops reading that
//! channel until budget is released
//! ([`ReassemblyBudget::set_release_hook`]). An exhausted budget therefore
//! pauses peers; it never fails one: a paused channel is paused, not
//! silent (no silence deadline runs while its input waits).
//!
//! Partial messages that together need more than the budget cannot all
//! finish: if a holder other than the oldest stays blocked for the
//! reassembly idle time, it gives way — its partial messages are abandoned
//! and its channel closed, not as a fault: the peer reconnects and resends
//! them from their first fragment — which frees budget for the oldest.
//!
//! # Progress means bytes; the oldest holder has a deadline
//!
//! Before these rules one peer kept the whole budget with one zero-byte
//! continuation frame per lane every 29 s: an empty frame counted as
//! progress, and the oldest holder was exempt from everything.
//!
//! * **Progress means bytes.** A partial message's idle deadline
//!   (`reassembly_idle`, 30 s) is measured from the last fragment that
//!   *added bytes*; an empty fragment moves nothing. A partial message
//!   that gets no byte for that long is abandoned as a protocol fault.
//! * **While another session waits for budget, the oldest holder must keep
//!   a minimum rate** (`reassembly_min_rate`, 1 MiB/s). When a session's
//!   input blocks it counts as *waiting* ([`ReassemblyBudget::waiting`]).
//!   While any other session waits, the oldest holder's deadline starts
//!   half a `reassembly_idle` after its last byte (its grace: shorter than
//!   the idle time after which a younger holder blocked behind it would
//!   give way) and each byte received buys `1 / reassembly_min_rate`
//!   seconds more, never past its stall deadline (one `reassembly_idle`
//!   after its last byte: no credit is banked). A holder receiving at
//!   least the minimum rate therefore never reaches it; a slower one does
//!   — about `reassembly_idle / 2 / (1 - rate / min_rate)` after it first
//!   sees someone wait — and gives way like any other holder (not a
//!   fault). An honest large sender (250 MB over loopback, or any steady
//!   link at 1 MiB/s or more) is never made to give way; a trickle keeps
//!   the budget from a waiting session for at most its trickle period and
//!   about half an idle time. The deadline does not run while the oldest holder is
//!   itself blocked by another holder (that one gives way in its turn); it
//!   does while it is blocked with no other holder (nobody else could ever
//!   free what it waits for).
//!
//! Whatever a peer holds is only what it sent, within its share unless it
//! is the oldest holder, and the oldest holder keeps that exemption only
//! while it keeps sending at the minimum rate (a peer that does so for
//! ever keeps it for ever: that is a transfer, not a trickle).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::wire::frame::MAX_FRAME_LEN;

/// A share below one maximum frame could block a session for ever.
const MIN_SHARE: u64 = MAX_FRAME_LEN as u64;

/// The release hook (see [`ReassemblyBudget::set_release_hook`]).
type Hook = Arc<dyn Fn() + Send + Sync>;

/// Where the release hook lives; taken out of the lock before it is called.
#[derive(Default)]
struct HookSlot(std::sync::Mutex<Option<Hook>>);

impl HookSlot {
    fn set(&self, hook: Hook) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    fn call(&self) {
        let hook = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h();
        }
    }
}

struct Inner {
    available: AtomicU64,
    /// Sessions holding budget now.
    holders: AtomicU64,
    /// The tickets of the sessions holding budget, oldest first.
    order: std::sync::Mutex<std::collections::BTreeSet<u64>>,
    next_ticket: AtomicU64,
    /// Times budget was given back (lets a driver see progress).
    releases: AtomicU64,
    /// Sessions whose input waits for budget now.
    waiting: AtomicU64,
    limit: u64,
    hook: HookSlot,
}

/// The per-node budget of bytes held by partly received messages, shared by
/// every session of a node so that many peers together cannot make it
/// allocate without limit (see the module documentation for how it is
/// shared).
///
/// # Example
///
/// ```
/// use sitenet_protocols::connection::reassembly::Blocked;
/// use sitenet_protocols::ReassemblyBudget;
///
/// const K: u64 = 1024;
/// let budget = ReassemblyBudget::new(200 * K); // one per node
/// let mut a = budget.share(); // one per session
/// let mut b = budget.share();
/// assert_eq!(a.try_take(150 * K), Ok(())); // alone, a may take beyond a fair share
/// assert_eq!(b.try_take(40 * K), Ok(()));
/// // With two holders a fair share is 100 KiB, and only the oldest holder may
/// // go beyond it: b must wait (its driver stops reading its channel).
/// assert_eq!(b.try_take(70 * K), Err(Blocked::OverShare));
/// assert!(a.is_oldest() && !b.is_oldest());
///
/// drop(a); // a's messages completed: its bytes come back
/// assert_eq!(budget.available(), 160 * K);
/// assert_eq!(b.try_take(70 * K), Ok(()));
/// ```
#[derive(Clone)]
pub struct ReassemblyBudget {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ReassemblyBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReassemblyBudget")
            .field("available", &self.available())
            .field("holders", &self.holders())
            .field("limit", &self.inner.limit)
            .finish()
    }
}

impl ReassemblyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                available: AtomicU64::new(limit),
                holders: AtomicU64::new(0),
                order: Default::default(),
                next_ticket: AtomicU64::new(0),
                releases: AtomicU64::new(0),
                waiting: AtomicU64::new(0),
                limit,
                hook: HookSlot::default(),
            }),
        }
    }

    /// Bytes currently available.
    pub fn available(&self) -> u64 {
        self.inner.available.load(Ordering::Acquire)
    }

    /// The configured limit.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Sessions holding budget now.
    pub fn holders(&self) -> u64 {
        self.inner.holders.load(Ordering::Acquire)
    }

    /// Sessions whose input waits for budget now.
    pub fn waiting(&self) -> u64 {
        self.inner.waiting.load(Ordering::Acquire)
    }

    /// How many times budget was given back so far.
    pub fn releases(&self) -> u64 {
        self.inner.releases.load(Ordering::Acquire)
    }

    /// Calls `hook` whenever budget is given back, so a driver that stopped
    /// reading a blocked channel can resume it. Replaces any earlier hook.
    pub fn set_release_hook(&self, hook: Hook) {
        self.inner.hook.set(hook);
    }

    /// A session's handle on the budget.
    pub fn share(&self) -> BudgetShare {
        BudgetShare {
            budget: self.clone(),
            held: 0,
            ticket: 0,
            waiting: false,
        }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u64>> {
        self.inner.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fair_share(&self, holders: u64) -> u64 {
        (self.inner.limit / holders.max(1)).max(MIN_SHARE)
    }
}

/// Why a session could not take budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The session would hold more than its fair share while others hold
    /// budget: it must wait, and gives way if that lasts.
    OverShare,
    /// The budget is exhausted by others: wait until they give some back.
    Exhausted,
}

/// One session's part of the node's [`ReassemblyBudget`]: what it holds.
/// Dropping it gives everything back.
#[derive(Debug)]
pub struct BudgetShare {
    budget: ReassemblyBudget,
    held: u64,
    /// This session's place in the holders' order (meaningful while it
    /// holds budget: `held > 0`).
    ticket: u64,
    /// Its input waits for budget (counted in the budget's `waiting`).
    waiting: bool,
}

impl BudgetShare {
    /// Bytes this session holds.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// True if this session is the oldest holder (or no one holds budget):
    /// it may take beyond its share, and never has to give way.
    pub fn is_oldest(&self) -> bool {
        if self.held > 0 {
            self.budget.order().first() == Some(&self.ticket)
        } else {
            self.budget.holders() == 0
        }
    }

    /// True if another session's input waits for budget: the oldest
    /// holder's deadline runs (see the module documentation).
    pub fn others_waiting(&self) -> bool {
        self.budget.waiting() > u64::from(self.waiting)
    }

    /// True if another session holds budget (one that may give way).
    pub fn others_holding(&self) -> bool {
        self.budget.holders() > u64::from(self.held > 0)
    }

    /// True if this session's input waits for budget.
    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// The budget this is a share of.
    pub fn budget(&self) -> &ReassemblyBudget {
        &self.budget
    }

    /// This session's input no longer waits for budget (it was fed without
    /// blocking, or its channel went).
    pub fn stop_waiting(&mut self) {
        self.set_waiting(false);
    }

    fn set_waiting(&mut self, waiting: bool) {
        if self.waiting != waiting {
            self.waiting = waiting;
            let w = &self.budget.inner.waiting;
            if waiting {
                w.fetch_add(1, Ordering::AcqRel);
            } else {
                w.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Takes `n` more bytes, or says why not (leaving everything unchanged
    /// but that the session now counts as waiting for budget, until it
    /// takes some or [`stop_waiting`](Self::stop_waiting)).
    pub fn try_take(&mut self, n: u64) -> Result<(), Blocked> {
        if n == 0 {
            return Ok(());
        }
        let b = &self.budget.inner;
        let others = b.holders.load(Ordering::Acquire) - u64::from(self.held > 0);
        let share = self.budget.fair_share(others + 1);
        if others > 0 && self.held.saturating_add(n) > share && !self.is_oldest() {
            self.set_waiting(true);
            return Err(Blocked::OverShare);
        }
        if b.available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(n))
            .is_err()
        {
            self.set_waiting(true);
            return Err(Blocked::Exhausted);
        }
        self.set_waiting(false);
        let b = &self.budget.inner;
        if self.held == 0 {
            let t = b.next_ticket.fetch_add(1, Ordering::AcqRel);
            self.budget.order().insert(t);
            self.ticket = t;
            b.holders.fetch_add(1, Ordering::AcqRel);
        }
        self.held += n;
        Ok(())
    }

    /// Gives `n` bytes back (a message completed or was abandoned).
    pub fn give_back(&mut self, n: u64) {
        let n = n.min(self.held);
        if n == 0 {
            return;
        }
        let b = &self.budget.inner;
        self.held -= n;
        if self.held == 0 {
            self.budget.order().remove(&self.ticket);
            b.holders.fetch_sub(1, Ordering::AcqRel);
        }
        b.available.fetch_add(n, Ordering::AcqRel);
        b.releases.fetch_add(1, Ordering::AcqRel);
        b.hook.call();
    }
}

impl Drop for BudgetShare {
    fn drop(&mut self) {
        self.set_waiting(false);
        self.give_back(self.held);
    }
}
