//! What the owner of a slot reports about its channel ([`SlotInfo`]):
//! atomics the owner stores and the tick thread loads, and where the
//! channel's turn started, for the slot table's turns.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use sitenet_protocols::slots::ChannelReport;

/// What the owner of a slot reports about its channel, for the policy.
/// Atomics: the owner stores, the tick thread loads, nobody waits.
#[derive(Debug)]
pub struct SlotInfo {
    closeable: AtomicBool,
    last_active_us: AtomicU64,
    mid_message: AtomicBool,
    replies_expected: AtomicBool,
    buffers_empty: AtomicBool,
    queues_empty: AtomicBool,
    callable: AtomicBool,
    served: AtomicU64,
    /// `served` at the first report of the channel working ([`NOT_YET`]
    /// before it): where its turn's work starts
    /// ([`ChannelReport::served_from`]).
    served_from: AtomicU64,
    /// Since when (µs after the controller's epoch; [`NOT_YET`]: not) the
    /// owner's open attempt waits in the peer's line
    /// ([`ChannelReport::in_peer_line_since`]).
    in_line_since_us: AtomicU64,
    /// [`ChannelReport::line_yields`].
    line_yields: AtomicU8,
    /// This channel's owner has told the tick its turn's work is done
    /// (once per channel: the tick then decides).
    work_told: AtomicBool,
    /// The table chose this channel to give way: set before its preempt
    /// callback is called, read by the owner on its next turn (the
    /// callback's message may wait behind thousands of others).
    preempted: AtomicBool,
}

/// No value yet, in an atomic that holds an `Option<u64>`.
pub(super) const NOT_YET: u64 = u64::MAX;

impl Default for SlotInfo {
    fn default() -> Self {
        Self {
            closeable: AtomicBool::default(),
            last_active_us: AtomicU64::default(),
            mid_message: AtomicBool::default(),
            replies_expected: AtomicBool::default(),
            buffers_empty: AtomicBool::default(),
            queues_empty: AtomicBool::default(),
            callable: AtomicBool::default(),
            served: AtomicU64::default(),
            served_from: AtomicU64::new(NOT_YET),
            in_line_since_us: AtomicU64::new(NOT_YET),
            line_yields: AtomicU8::default(),
            work_told: AtomicBool::default(),
            preempted: AtomicBool::default(),
        }
    }
}

/// `at` in µs after `epoch` (0 before it), below [`NOT_YET`].
fn micros(epoch: Instant, at: Instant) -> u64 {
    let us = at.saturating_duration_since(epoch).as_micros();
    u64::try_from(us).unwrap_or(NOT_YET - 1).min(NOT_YET - 1)
}

/// One report of a channel's state: the policy's own
/// [`ChannelReport`], under the name owners know it by.
pub type SlotReport = ChannelReport;

impl SlotInfo {
    pub(super) fn store(&self, epoch: Instant, r: &SlotReport) {
        let us = micros(epoch, r.last_active);
        self.closeable.store(r.closeable, Ordering::Relaxed);
        self.last_active_us.store(us, Ordering::Relaxed);
        self.mid_message.store(r.mid_message, Ordering::Relaxed);
        self.replies_expected
            .store(r.replies_expected, Ordering::Relaxed);
        self.buffers_empty.store(r.buffers_empty, Ordering::Relaxed);
        self.queues_empty.store(r.queues_empty, Ordering::Relaxed);
        self.callable.store(r.callable, Ordering::Relaxed);
        self.served.store(r.served, Ordering::Relaxed);
        let since = r.in_peer_line_since.map_or(NOT_YET, |t| micros(epoch, t));
        self.in_line_since_us.store(since, Ordering::Relaxed);
        self.line_yields.store(r.line_yields, Ordering::Relaxed);
        if r.closeable {
            let from = r.served_from.unwrap_or(r.served);
            let _ = self.served_from.compare_exchange(
                NOT_YET,
                from,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// True the first time it is asked: the owner tells the tick its
    /// turn's work is done once per channel.
    pub(super) fn first_work_told(&self) -> bool {
        !self.work_told.swap(true, Ordering::Relaxed)
    }

    /// Marks this channel as chosen to give way (the tick thread, before
    /// it calls the preempt callback).
    pub(super) fn preempt(&self) {
        self.preempted.store(true, Ordering::Release);
    }

    /// True once the slot table chose this channel to give way.
    pub(super) fn is_preempted(&self) -> bool {
        self.preempted.load(Ordering::Acquire)
    }

    /// True if this channel has exchanged `due` messages or more since it
    /// first worked (`served` now): no lock, two loads.
    pub(super) fn worked(&self, served: u64, due: u64) -> bool {
        let from = self.served_from.load(Ordering::Relaxed);
        from != NOT_YET && served.saturating_sub(from) >= due
    }

    pub(super) fn load(&self, epoch: Instant) -> ChannelReport {
        ChannelReport {
            closeable: self.closeable.load(Ordering::Relaxed),
            last_active: epoch + Duration::from_micros(self.last_active_us.load(Ordering::Relaxed)),
            mid_message: self.mid_message.load(Ordering::Relaxed),
            replies_expected: self.replies_expected.load(Ordering::Relaxed),
            buffers_empty: self.buffers_empty.load(Ordering::Relaxed),
            queues_empty: self.queues_empty.load(Ordering::Relaxed),
            callable: self.callable.load(Ordering::Relaxed),
            served: self.served.load(Ordering::Relaxed),
            served_from: Some(self.served_from.load(Ordering::Relaxed)).filter(|f| *f != NOT_YET),
            in_peer_line_since: Some(self.in_line_since_us.load(Ordering::Relaxed))
                .filter(|us| *us != NOT_YET)
                .map(|us| epoch + Duration::from_micros(us)),
            line_yields: self.line_yields.load(Ordering::Relaxed),
        }
    }
}
