//! [`Liveness`]: how an entry's site stands, in flags each read without a
//! lock.

use std::sync::atomic::{AtomicBool, Ordering};

/// How an entry's site stands: failed, connected, contacted once,
/// reclaimed, and whether its ComObject waits for the last reference to
/// go. One byte each, side by side (thousands of idle entries carry
/// them); each flag keeps the memory ordering its readers rely on.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    /// True once the failure is on record: checked on every send without a
    /// lock.
    failed: AtomicBool,
    /// A channel works for this site (for `Node::stats`).
    connected: AtomicBool,
    /// A channel has worked for this site once (a monitor's first event
    /// says when it has not).
    contacted: AtomicBool,
    /// The entry was reclaimed (its actor stopped for good): a send
    /// through a handle that kept it fails instead of waiting for ever.
    reclaimed: AtomicBool,
    /// Set by the ComObject while only references keep the site (no
    /// channel, nothing pending): the last `SiteRef` to go then wakes it, so
    /// the reclaim rule starts at once instead of at the next timer. Read
    /// and written with `SeqCst`, as the reference count is when it may
    /// reach 0 ([`Holds`](super::Holds)).
    poke_on_unref: AtomicBool,
}

impl Liveness {
    /// Whether the site's permanent failure is on record (`Acquire`: what
    /// the failure handed back is visible once this reads true).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The failure is on record (`Release`: published after what it
    /// handed back).
    pub(crate) fn set_failed(&self) {
        self.failed.store(true, Ordering::Release);
    }

    /// Whether a channel works for this site now (a statistic: `Relaxed`).
    pub(crate) fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// A channel works for this site, or no longer does.
    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    /// Whether a channel has ever worked for this site.
    pub(crate) fn contacted(&self) -> bool {
        self.contacted.load(Ordering::Acquire)
    }

    /// A channel has worked for this site.
    pub(crate) fn set_contacted(&self) {
        self.contacted.store(true, Ordering::Release);
    }

    /// Whether the entry was reclaimed (its actor stopped for good).
    pub(crate) fn reclaimed(&self) -> bool {
        self.reclaimed.load(Ordering::Acquire)
    }

    /// The entry is reclaimed: nothing runs it any more.
    pub(crate) fn set_reclaimed(&self) {
        self.reclaimed.store(true, Ordering::Release);
    }

    /// Whether the last reference to go must wake the ComObject (`SeqCst`).
    pub(crate) fn poke_on_unref(&self) -> bool {
        self.poke_on_unref.load(Ordering::SeqCst)
    }

    /// The ComObject asks (or no longer asks) to be woken when the last
    /// reference goes (`SeqCst`).
    pub(crate) fn set_poke_on_unref(&self, watch: bool) {
        self.poke_on_unref.store(watch, Ordering::SeqCst);
    }
}
