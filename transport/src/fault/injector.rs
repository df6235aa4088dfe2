//! [`FaultInjector`]: the seeded controls of the fault injection (cuts,
//! black holes, delay), the random draws, and the weak handles to every
//! channel it wrapped, so a control reaches them from any thread.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::channel::{FaultyChannel, Shared};
use super::controls::{lock, Controls};
use crate::channel::Channel;
use crate::plug::PluggedChannel;

/// The environment variable [`FaultInjector::seed_report`] names when no
/// other was given to [`FaultInjector::from_env_or_random`]: one name for all
/// of sitenet's tests, so a printed seed is replayed the same way everywhere.
pub const SEED_ENV: &str = "SITENET_FAULT_SEED";

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

/// The state shared by all clones of a [`FaultInjector`]; the part its
/// channels read too is in [`Controls`].
struct Injector {
    controls: Arc<Controls>,
    /// The only source of randomness (see the module doc on determinism).
    rng: Mutex<StdRng>,
    /// Wrapped channels and the random-cut mode, behind one lock so that a
    /// channel wrapped while [`FaultInjector::random_cuts`] runs is armed
    /// exactly once.
    registry: Mutex<Registry>,
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
                controls: Arc::new(Controls::new(seed, var)),
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                registry: Mutex::new(Registry {
                    channels: Vec::new(),
                    random_mean: None,
                    next_id: 0,
                }),
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
        self.inner.controls.seed
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
        self.inner.controls.seed_report()
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
    /// exactly like `ch`: a [`Channel::Plugged`] holding a [`FaultyChannel`]
    /// (see [`FaultyChannel::of`]), under `ch`'s scheme, with `ch`'s peer and
    /// connecting thread. The injector keeps only a weak handle, so dropping
    /// the channel closes it as usual. If random cuts are on, the channel is
    /// armed with a fresh draw.
    pub fn wrap(&self, ch: Channel) -> Channel {
        let scheme = ch.scheme();
        let mut reg = lock(&self.inner.registry);
        reg.next_id += 1;
        let random_cut = reg.random_mean.map(|mean| self.inner.draw(mean));
        let shared = Arc::new(Shared::new(
            reg.next_id,
            ch,
            self.inner.controls.clone(),
            random_cut,
        ));
        reg.channels.push(Arc::downgrade(&shared));
        tracing::debug!(
            channel = shared.id,
            ?random_cut,
            "fault injector: channel wrapped"
        );
        Channel::Plugged(PluggedChannel::interned(
            scheme,
            Box::new(FaultyChannel::new(shared)),
        ))
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
        self.inner.controls.blackhole.store(on, Ordering::SeqCst);
        self.wake_all();
    }

    /// Read delay for live and future channels: bytes read from the socket
    /// are surfaced to the reader only `d` after they were read (in order,
    /// end of stream included). At most [`DELAY_QUEUE_LIMIT`](super::DELAY_QUEUE_LIMIT) bytes wait; while
    /// the queue is full the socket is not read. `Duration::ZERO` turns it
    /// off; bytes already queued keep their due time.
    pub fn set_delay(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .controls
            .delay_nanos
            .store(nanos, Ordering::SeqCst);
        self.wake_all();
    }

    /// How many channels this injector has cut so far (by any control), for
    /// test figures.
    pub fn cuts(&self) -> u64 {
        self.inner.controls.cuts.load(Ordering::SeqCst)
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
            .field("seed", &self.inner.controls.seed)
            .field(
                "channels",
                &reg.channels.iter().filter(|w| w.strong_count() > 0).count(),
            )
            .field("random_mean", &reg.random_mean)
            .field("blackhole", &self.inner.controls.blackhole())
            .field("delay", &self.inner.controls.delay())
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
