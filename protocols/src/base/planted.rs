//! Bugs planted on purpose, behind the `planted-bugs` feature, so that a
//! test can show the simulator's checkers catch them ([`crate::sim`]). A
//! checker that never fails proves nothing: each bug here is one the
//! design's rules forbid, two of them bugs the original Mozart code had.
//!
//! The switch is per thread (the simulator runs on the thread that calls
//! it), off by default, and compiled out of every build without the
//! feature: release binaries carry no trace of it.

use std::cell::Cell;

/// A bug that can be planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// A repeated acknowledgement frees one more message than it covers
    /// (the original Mozart code lost a message per repeated ack).
    AckFreesOneMore,
    /// The resend after a reconnect skips the first unacknowledged message.
    ResendSkipsFirst,
    /// A preemption (CLOSE_HARD from the slot controller) drops the
    /// ledger of unacknowledged messages.
    PreemptionDropsLedger,
    /// The merge of an entry reached by address into the entry its site
    /// already has drops the newest message it held (neither moved nor
    /// handed back).
    MergeDropsNewest,
    /// The reclaim re-check forgets an entry but not the claim a peer held
    /// on it: the peer's bound is spent for ever, one claim per entry.
    ReclaimKeepsClaims,
    /// A cooperation's descriptor from one site is filled by a reply from
    /// any site (the receive descriptor's site is ignored).
    CoopIgnoresFrom,
    /// An ended cooperation hands over all its requests but the last: that
    /// one stays in the request table, awaiting a cooperation that is over.
    CoopKeepsRequests,
    /// A batch retries a send handed back as maybe delivered (it may then
    /// be applied twice).
    RetryMaybeDelivered,
    /// A sender served at the outbox moves its line on by two: the next
    /// waiter's turn never comes.
    LineSkipsNext,
    /// What an acknowledgement frees is counted against the lowest class,
    /// whatever the message's class was.
    FreedInLowestClass,
    /// A waiter that gives its turn up behind the head is not remembered:
    /// when the line reaches its ticket, nobody's turn comes.
    GiveUpForgetsTurn,
    /// A merge puts what the merging entry's outbox queued before what its
    /// ComObject held (which is older).
    MergeLineQueueFirst,
    /// The reclaim re-check forgets an entry while an accepted channel is
    /// on its way to it (`Counts::adopting` ignored): the channel arrives
    /// at an entry that is gone.
    ReclaimIgnoresAdopting,
    /// A site whose peer closed its channel hard reopens it after the
    /// callback wait while it still references the peer, with nothing to
    /// send and though the peer can call it back (the simulator's first
    /// finding: idle churn through the slot limits, for ever).
    ReopenWithoutNeed,
    /// The link rule refuses as stale a reconnect whose last generation
    /// equals the working channel's: a peer that lost the working channel
    /// cannot replace it until this side's silence timeout.
    SameGenerationStale,
    /// A channel's loss leaves a half-sent message where it stopped: the
    /// next channel continues it from the middle.
    HalfSentNotRewound,
    /// A preempted slot, once released, stays marked as being given up.
    ReleaseKeepsPreempting,
    /// The link rule refuses as stale a later attempt of the opener whose
    /// attempt the working channel came from (the opener gave it up).
    AbandonedAttemptStale,
}

thread_local! {
    static PLANTED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) on this thread until changed.
pub fn plant(bug: Option<Bug>) {
    PLANTED.with(|p| p.set(bug));
}

/// True if `bug` is planted on this thread.
pub fn active(bug: Bug) -> bool {
    PLANTED.with(|p| p.get() == Some(bug))
}
