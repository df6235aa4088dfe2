//! A seeded fault-injecting channel wrapper: cuts (at any byte offset, mid-frame
//! too), read delay and black-holing (a partition), driven by one
//! [`FaultInjector`] shared by a test.
//!
//! Why: sitenet's reconnection, resend and failure-detection logic is only
//! believable if it is exercised against real losses on real sockets. A cut
//! here really loses data: the writer's bytes past the cut offset never reach
//! the socket, the socket is shut down so both peers see the channel end, and
//! bytes received but not yet read are dropped. Every random decision comes
//! from one RNG seeded with [`FaultInjector::seed`], so a failing run can be
//! replayed (see [`FaultInjector::seed_report`]).
//!
//! How it plugs in: [`FaultInjector::wrap`] turns any [`Channel`] into a
//! [`Channel::Faulty`], which the channel driver uses exactly like any other
//! channel (`readable`/`try_read`/`writable`/`try_write2`/`peer`), whatever
//! it wraps: TCP, Unix socket or mem channel (a cut shuts a socket down in
//! both directions, and closes both pipes of a mem channel). The
//! injector keeps a weak handle to every channel it wrapped, so its controls
//! ([`cut_all`](FaultInjector::cut_all), [`cut_after`](FaultInjector::cut_after),
//! [`random_cuts`](FaultInjector::random_cuts),
//! [`set_blackhole`](FaultInjector::set_blackhole),
//! [`set_delay`](FaultInjector::set_delay)) can be called from any thread
//! while the drivers run.
//!
//! Offsets: a channel's *write offset* is the number of bytes its writer has
//! been told were written (`try_write2` results), including bytes swallowed by
//! a black hole. Cuts are placed on write offsets, so "cut at N" means the peer
//! receives at most the first N bytes of the stream, then end of stream (or a
//! reset).
//!
//! Determinism: the seed fixes the sequence of random draws; which channel
//! gets which draw follows the order of [`FaultInjector::wrap`] calls and
//! control calls. A test that wraps channels in a fixed order gets the same
//! cut offsets in every run with the same seed.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

use crate::channel::Channel;

/// The environment variable [`FaultInjector::seed_report`] names when no
/// other was given to [`FaultInjector::from_env_or_random`]: one name for all
/// of sitenet's tests, so a printed seed is replayed the same way everywhere.
pub const SEED_ENV: &str = "SITENET_FAULT_SEED";

/// At most this many received bytes wait in a channel's delay queue; while it
/// is full the wrapper stops reading the socket, so TCP flow control pushes
/// back on the peer instead of memory growing (the transport's memory stays
/// bounded, as the design requires).
pub const DELAY_QUEUE_LIMIT: usize = 1 << 20;

/// Size of one read from the socket when the wrapper reads on the driver's
/// behalf (delay queue, black-hole draining).
const PUMP_CHUNK: usize = 16 * 1024;

/// At most this many socket reads per pump, so that a peer flooding a black
/// hole cannot keep one call spinning; the caller loops through the reactor.
const PUMP_READS: usize = 64;

/// Locks, ignoring poisoning: the state behind these locks stays consistent
/// across a panic (every update is a single assignment or a queue push/pop),
/// and a fault injector that panics in every test after the first failure
/// would hide the seed report of the real one.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Injects faults into the channels it wraps. Cheap to clone (an `Arc`
/// inside); clones share the seed, the RNG, the controls and the set of
/// wrapped channels, so a test keeps one clone and hands another to the code
/// that opens channels.
///
/// # Example
///
/// Cut a channel 5 bytes into its stream: the write that crosses the offset
/// is short, the peer receives exactly those bytes and then end of stream.
///
/// ```
/// use std::io::ErrorKind;
/// use sitenet_transport::{Channel, FaultInjector, MemChannel};
///
/// let injector = FaultInjector::new(42);
/// let (a, b) = MemChannel::pair();
/// let a = injector.wrap(Channel::Mem(a)); // used like any channel
/// let b = Channel::Mem(b);
///
/// injector.cut_after(5);
/// assert_eq!(a.try_write2(b"hello, world", &[])?, 5); // short write, then cut
/// assert_eq!(a.try_write2(b"more", &[]).unwrap_err().kind(), ErrorKind::BrokenPipe);
/// assert_eq!(injector.cuts(), 1);
///
/// let mut buf = [0u8; 32];
/// assert_eq!(b.try_read(&mut buf)?, 5);
/// assert_eq!(&buf[..5], b"hello");
/// assert_eq!(b.try_read(&mut buf)?, 0); // end of stream
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct FaultInjector {
    inner: Arc<Injector>,
}

/// The state shared by all clones of a [`FaultInjector`] and by the channels
/// it wrapped.
struct Injector {
    seed: u64,
    /// The variable named in [`FaultInjector::seed_report`].
    env_var: String,
    /// The only source of randomness (see the module doc on determinism).
    rng: Mutex<StdRng>,
    /// Wrapped channels and the random-cut mode, behind one lock so that a
    /// channel wrapped while [`FaultInjector::random_cuts`] runs is armed
    /// exactly once.
    registry: Mutex<Registry>,
    blackhole: AtomicBool,
    /// Read delay in nanoseconds; 0 = off.
    delay_nanos: AtomicU64,
    cuts: AtomicU64,
}

struct Registry {
    /// Weak handles in wrap order (the order random draws are handed out);
    /// dead ones are pruned on every control call.
    channels: Vec<Weak<Shared>>,
    /// `Some(mean)` while random cuts are on.
    random_mean: Option<u64>,
    next_id: u64,
}

impl Registry {
    fn live(&mut self) -> Vec<Arc<Shared>> {
        self.channels.retain(|w| w.strong_count() > 0);
        self.channels.iter().filter_map(Weak::upgrade).collect()
    }
}

impl Injector {
    fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_nanos.load(Ordering::SeqCst))
    }

    fn blackhole(&self) -> bool {
        self.blackhole.load(Ordering::SeqCst)
    }

    /// One random cut distance, uniform in `1..=2*mean`.
    fn draw(&self, mean: u64) -> u64 {
        let hi = mean.max(1).saturating_mul(2);
        lock(&self.rng).gen_range(1..=hi)
    }

    fn pick(&self, n: usize) -> usize {
        lock(&self.rng).gen_range(0..n)
    }
}

impl FaultInjector {
    /// An injector whose random decisions all come from `seed`. Nothing is
    /// injected until a control is called.
    pub fn new(seed: u64) -> Self {
        Self::with_env_var(seed, SEED_ENV)
    }

    fn with_env_var(seed: u64, var: &str) -> Self {
        Self {
            inner: Arc::new(Injector {
                seed,
                env_var: var.to_string(),
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                registry: Mutex::new(Registry {
                    channels: Vec::new(),
                    random_mean: None,
                    next_id: 0,
                }),
                blackhole: AtomicBool::new(false),
                delay_nanos: AtomicU64::new(0),
                cuts: AtomicU64::new(0),
            }),
        }
    }

    /// An injector seeded from the environment variable `var` when it is set
    /// (to replay a failure), else from a fresh random seed (so repeated runs
    /// explore different faults). The seed is logged at `info` level either
    /// way; tests should also print [`seed_report`](Self::seed_report) when
    /// they fail (see [`report_on_panic`](Self::report_on_panic)).
    ///
    /// # Panics
    ///
    /// If `var` is set but is not a `u64`: silently drawing another seed would
    /// make a user believe they replayed a run when they did not.
    pub fn from_env_or_random(var: &str) -> Self {
        let seed = match std::env::var(var) {
            Ok(s) => match s.trim().parse::<u64>() {
                Ok(seed) => {
                    tracing::info!(seed, var, "fault injector: seed taken from the environment");
                    seed
                }
                Err(_) => panic!(
                    "{var}={s:?} is not a fault-injector seed (expected a number from 0 to 2^64-1)"
                ),
            },
            Err(_) => {
                let seed = rand::random::<u64>();
                tracing::info!(
                    seed,
                    var,
                    "fault injector: random seed (set {var}={seed} to replay)"
                );
                seed
            }
        };
        Self::with_env_var(seed, var)
    }

    /// The seed, for a test to print or record.
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// A line to print when a test fails: the seed and how to replay it, for
    /// example `fault injector seed: 1234 (set SITENET_FAULT_SEED=1234 to replay)`.
    ///
    /// ```
    /// use sitenet_transport::FaultInjector;
    ///
    /// let injector = FaultInjector::new(1234);
    /// assert_eq!(injector.seed(), 1234);
    /// assert_eq!(
    ///     injector.seed_report(),
    ///     "fault injector seed: 1234 (set SITENET_FAULT_SEED=1234 to replay)"
    /// );
    /// ```
    pub fn seed_report(&self) -> String {
        let seed = self.inner.seed;
        format!(
            "fault injector seed: {seed} (set {}={seed} to replay)",
            self.inner.env_var
        )
    }

    /// A guard that prints [`seed_report`](Self::seed_report) to stderr if it
    /// is dropped while the thread panics, i.e. when a test assertion fails:
    /// `let _seed = injector.report_on_panic();` at the top of a test.
    pub fn report_on_panic(&self) -> SeedReportGuard {
        SeedReportGuard {
            report: self.seed_report(),
        }
    }

    /// Wraps `ch` so this injector's controls apply to it. The result is used
    /// exactly like `ch`; the injector keeps only a weak handle, so dropping
    /// the channel closes it as usual. If random cuts are on, the channel is
    /// armed with a fresh draw.
    pub fn wrap(&self, ch: Channel) -> Channel {
        let mut reg = lock(&self.inner.registry);
        reg.next_id += 1;
        let random_cut = reg.random_mean.map(|mean| self.inner.draw(mean));
        let shared = Arc::new(Shared {
            id: reg.next_id,
            inner: ch,
            injector: self.inner.clone(),
            cut: AtomicBool::new(false),
            write: Mutex::new(WriteSide {
                written: 0,
                explicit_cut: None,
                random_cut,
            }),
            read: Mutex::new(ReadSide::default()),
            notify: Notify::new(),
            discarded: AtomicU64::new(0),
        });
        reg.channels.push(Arc::downgrade(&shared));
        tracing::debug!(
            channel = shared.id,
            ?random_cut,
            "fault injector: channel wrapped"
        );
        Channel::Faulty(FaultyChannel { shared })
    }

    /// Live channels, in wrap order.
    fn live(&self) -> Vec<Arc<Shared>> {
        lock(&self.inner.registry).live()
    }

    /// Cuts every live channel at its current write offset: nothing more is
    /// sent, later writes fail with `BrokenPipe`, reads see end of stream, and
    /// the socket is shut down in both directions so the peer sees the end
    /// too. Pending `readable()`/`writable()` calls return so the drivers
    /// notice at once.
    pub fn cut_all(&self) {
        for ch in self.live() {
            let ws = lock(&ch.write);
            ch.cut_locked(&ws, "cut_all");
        }
    }

    /// A number uniform in `[0, 1)` from the seeded RNG, for drills that
    /// space their faults randomly but replayably.
    pub fn unit_draw(&self) -> f64 {
        lock(&self.inner.rng).gen_range(0.0..1.0)
    }

    /// Cuts one live channel, chosen by the seeded RNG, at its current write
    /// offset (as [`cut_all`](Self::cut_all) does to every one): the drill
    /// of `sitenet stress --cut-rate`. False if no channel is live.
    pub fn cut_one(&self) -> bool {
        let live: Vec<_> = self.live().into_iter().filter(|c| !c.is_cut()).collect();
        if live.is_empty() {
            return false;
        }
        let ch = &live[self.inner.pick(live.len())];
        let ws = lock(&ch.write);
        ch.cut_locked(&ws, "cut_one");
        true
    }

    /// Arms every live channel with a cut `bytes` past its current write
    /// offset (replacing an earlier `cut_after` offset; a pending random cut
    /// still applies if it comes first). The write that crosses the offset is
    /// short: it sends only the bytes up to the offset, then the channel is
    /// cut, so a cut can fall in the middle of a frame. `0` cuts now.
    pub fn cut_after(&self, bytes: u64) {
        for ch in self.live() {
            let mut ws = lock(&ch.write);
            if ch.is_cut() {
                continue;
            }
            if bytes == 0 {
                ch.cut_locked(&ws, "cut_after(0)");
            } else {
                ws.explicit_cut = Some(ws.written.saturating_add(bytes));
            }
        }
    }

    /// Random cuts: every live channel, and every channel wrapped from now on,
    /// is armed with a cut at a distance drawn from the seeded RNG, uniform in
    /// `1..=2*mean_bytes` (a fresh draw per channel, in wrap order; a mean
    /// of 0 counts as 1). A new call re-draws for the live channels.
    pub fn random_cuts(&self, mean_bytes: u64) {
        let mut reg = lock(&self.inner.registry);
        reg.random_mean = Some(mean_bytes);
        for ch in reg.live() {
            if ch.is_cut() {
                continue;
            }
            let d = self.inner.draw(mean_bytes);
            let mut ws = lock(&ch.write);
            ws.random_cut = Some(ws.written.saturating_add(d));
        }
    }

    /// Stops random cuts: new channels are not armed, and random cuts armed
    /// on live channels but not yet reached are withdrawn (so a test can let
    /// the system recover and check that it converges).
    pub fn stop_random_cuts(&self) {
        let mut reg = lock(&self.inner.registry);
        reg.random_mean = None;
        for ch in reg.live() {
            lock(&ch.write).random_cut = None;
        }
    }

    /// Withdraws every armed cut not yet reached (`cut_after` and random) on
    /// the live channels, and stops random cuts. Cuts already made stay made.
    pub fn disarm_cuts(&self) {
        self.stop_random_cuts();
        for ch in self.live() {
            lock(&ch.write).explicit_cut = None;
        }
    }

    /// A partition, for live and future channels. While on, writes report
    /// success but their bytes are discarded, and received bytes are read
    /// and discarded (also bytes received earlier and still waiting in a
    /// delay queue): `readable()` stays pending, but keeps draining the
    /// socket, so the peer's writes vanish too and its socket never backs
    /// up. A peer's end of stream is remembered and reported after the
    /// partition.
    ///
    /// When turned off, traffic flows again on channels that were not cut.
    /// The byte stream is then corrupt from each reader's point of view
    /// (bytes are missing in the middle, possibly mid-frame): that is
    /// realistic for a partition seen below TCP, and sitenet must detect it
    /// (a frame decoding error, or silence caught by heartbeats) and
    /// reconnect.
    pub fn set_blackhole(&self, on: bool) {
        self.inner.blackhole.store(on, Ordering::SeqCst);
        self.wake_all();
    }

    /// Read delay for live and future channels: bytes read from the socket
    /// are surfaced to the reader only `d` after they were read (in order,
    /// end of stream included). At most [`DELAY_QUEUE_LIMIT`] bytes wait; while
    /// the queue is full the socket is not read. `Duration::ZERO` turns it
    /// off; bytes already queued keep their due time.
    pub fn set_delay(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.inner.delay_nanos.store(nanos, Ordering::SeqCst);
        self.wake_all();
    }

    /// How many channels this injector has cut so far (by any control), for
    /// test figures.
    pub fn cuts(&self) -> u64 {
        self.inner.cuts.load(Ordering::SeqCst)
    }

    /// How many wrapped channels are still alive (not dropped), cut or not.
    pub fn live_channels(&self) -> usize {
        self.live().len()
    }

    fn wake_all(&self) {
        for ch in self.live() {
            ch.notify.notify_waiters();
        }
    }
}

impl fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reg = lock(&self.inner.registry);
        f.debug_struct("FaultInjector")
            .field("seed", &self.inner.seed)
            .field(
                "channels",
                &reg.channels.iter().filter(|w| w.strong_count() > 0).count(),
            )
            .field("random_mean", &reg.random_mean)
            .field("blackhole", &self.inner.blackhole())
            .field("delay", &self.inner.delay())
            .field("cuts", &self.cuts())
            .finish()
    }
}

/// Prints the fault injector's seed report to stderr if dropped during a
/// panic (a failing test), so the run can be replayed. Made by
/// [`FaultInjector::report_on_panic`].
#[derive(Debug)]
#[must_use = "the report is printed when the guard is dropped during a panic: bind it to a variable"]
pub struct SeedReportGuard {
    report: String,
}

impl Drop for SeedReportGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.report);
        }
    }
}

mod channel;
mod delay;

pub use channel::FaultyChannel;
use channel::{Shared, WriteSide};
use delay::ReadSide;

#[cfg(test)]
mod tests;
