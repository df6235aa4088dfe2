//! [`Holds`]: what keeps an entry: its references, the channels on their
//! way to it and the requests awaiting its replies.

use std::sync::atomic::{AtomicU32, Ordering};

/// What keeps an entry and its channel: counts, each read without a lock
/// and each with the memory ordering its readers rely on.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// Live `SiteRef`s (a weak close is considered only when none is left,
    /// and the entry is reclaimed only then). Changed only with `SeqCst`
    /// when it may reach 0 (see [`Liveness::poke_on_unref`](super::Liveness::poke_on_unref)).
    refs: AtomicU32,
    /// Accepted channels routed to this entry and not yet taken by its
    /// ComObject (incremented under the site table's lock): the entry is
    /// not reclaimed while one is on its way.
    adopting: AtomicU32,
    /// Requests sent to this site whose replies are awaited (the slot
    /// policy avoids preempting a channel that replies will come back on).
    pending_requests: AtomicU32,
}

impl Holds {
    /// One more `SiteRef` (`AcqRel`: it cannot reach 0 here).
    pub(crate) fn add_ref(&self) {
        self.refs.fetch_add(1, Ordering::AcqRel);
    }

    /// One `SiteRef` fewer (`SeqCst`); true if it was the last.
    pub(crate) fn drop_ref(&self) -> bool {
        self.refs.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Whether any `SiteRef` is live (`Acquire`).
    pub(crate) fn has_refs(&self) -> bool {
        self.refs.load(Ordering::Acquire) > 0
    }

    /// Live `SiteRef`s, read with `SeqCst` (against the last one going:
    /// see [`Liveness::poke_on_unref`](super::Liveness::poke_on_unref)).
    pub(crate) fn refs(&self) -> u32 {
        self.refs.load(Ordering::SeqCst)
    }

    /// An accepted channel is routed to the entry (`SeqCst`).
    pub(crate) fn adoption_begins(&self) {
        self.adopting.fetch_add(1, Ordering::SeqCst);
    }

    /// An accepted channel routed to the entry was taken, or went
    /// elsewhere (`SeqCst`).
    pub(crate) fn adoption_ends(&self) {
        self.adopting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Accepted channels on their way to the entry (`SeqCst`).
    pub(crate) fn adopting(&self) -> u32 {
        self.adopting.load(Ordering::SeqCst)
    }

    /// A request to the site awaits its reply (`Relaxed`: a hint to the
    /// slot policy).
    pub(crate) fn request_sent(&self) {
        self.pending_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A request to the site no longer awaits its reply.
    pub(crate) fn request_ended(&self) {
        self.pending_requests.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests to the site awaiting their replies (`Relaxed`).
    pub(crate) fn pending_requests(&self) -> u32 {
        self.pending_requests.load(Ordering::Relaxed)
    }
}
