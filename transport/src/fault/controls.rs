//! What a wrapped channel reads of its injector: the seed (for the report
//! in a cut's error), the black hole and delay switches and the cut
//! counter, shared by a [`FaultInjector`](super::FaultInjector) with every
//! channel it wrapped; and the limits of the wrapper's reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// At most this many received bytes wait in a channel's delay queue; while it
/// is full the wrapper stops reading the socket, so TCP flow control pushes
/// back on the peer instead of memory growing (the transport's memory stays
/// bounded, as the design requires).
pub const DELAY_QUEUE_LIMIT: usize = 1 << 20;

/// Size of one read from the socket when the wrapper reads on the driver's
/// behalf (delay queue, black-hole draining).
pub(super) const PUMP_CHUNK: usize = 16 * 1024;

/// At most this many socket reads per pump, so that a peer flooding a black
/// hole cannot keep one call spinning; the caller loops through the reactor.
pub(super) const PUMP_READS: usize = 64;

/// Locks, ignoring poisoning: the state behind these locks stays consistent
/// across a panic (every update is a single assignment or a queue push/pop),
/// and a fault injector that panics in every test after the first failure
/// would hide the seed report of the real one.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The injector's switches and figures that its channels read.
pub(super) struct Controls {
    pub(super) seed: u64,
    /// The variable named in the seed report.
    pub(super) env_var: String,
    pub(super) blackhole: AtomicBool,
    /// Read delay in nanoseconds; 0 = off.
    pub(super) delay_nanos: AtomicU64,
    pub(super) cuts: AtomicU64,
}

impl Controls {
    pub(super) fn new(seed: u64, env_var: &str) -> Self {
        Self {
            seed,
            env_var: env_var.to_string(),
            blackhole: AtomicBool::new(false),
            delay_nanos: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
        }
    }

    pub(super) fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_nanos.load(Ordering::SeqCst))
    }

    pub(super) fn blackhole(&self) -> bool {
        self.blackhole.load(Ordering::SeqCst)
    }

    /// See [`FaultInjector::seed_report`](super::FaultInjector::seed_report).
    pub(super) fn seed_report(&self) -> String {
        let seed = self.seed;
        format!(
            "fault injector seed: {seed} (set {}={seed} to replay)",
            self.env_var
        )
    }
}
