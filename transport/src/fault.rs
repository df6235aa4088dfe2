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
//! channel (`readable`/`try_read`/`writable`/`try_write2`/`peer`). The
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

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

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

/// A channel wrapped by a [`FaultInjector`], found in [`Channel::Faulty`].
/// It behaves like the channel it wraps until the injector says otherwise.
/// Its methods take `&self` like [`Channel`]'s; the injector's controls may
/// run on other threads at the same time.
pub struct FaultyChannel {
    shared: Arc<Shared>,
}

/// One wrapped channel's state, shared with the injector (weakly).
struct Shared {
    /// For logs: the n-th channel this injector wrapped.
    id: u64,
    /// Owned here (not by [`FaultyChannel`]) so the injector can shut the
    /// socket down from its own thread without racing the fd's close.
    inner: Channel,
    injector: Arc<Injector>,
    /// Set once, never cleared. Written under the `write` lock.
    cut: AtomicBool,
    write: Mutex<WriteSide>,
    read: Mutex<ReadSide>,
    /// Wakes pending `readable()`/`writable()` calls when a control changes
    /// something they wait on.
    notify: Notify,
    /// Received bytes thrown away by the black hole.
    discarded: AtomicU64,
}

/// The write offset and the armed cuts. One lock for all three so a cut
/// offset is compared with an offset that no write is changing.
struct WriteSide {
    /// Bytes reported written to the writer (the stream's write offset).
    written: u64,
    /// From [`FaultInjector::cut_after`].
    explicit_cut: Option<u64>,
    /// From [`FaultInjector::random_cuts`].
    random_cut: Option<u64>,
}

impl WriteSide {
    /// The offset at which the channel will be cut, if any: the earlier of
    /// the armed cuts.
    fn cut_at(&self) -> Option<u64> {
        match (self.explicit_cut, self.random_cut) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Received bytes not yet surfaced to the reader (delay mode), and how the
/// inbound stream ended.
#[derive(Default)]
struct ReadSide {
    /// Chunks with the instant they become readable, in stream order.
    queue: VecDeque<(Instant, Vec<u8>)>,
    /// Bytes of the front chunk already handed out.
    head: usize,
    /// Bytes in `queue` not yet handed out (≤ [`DELAY_QUEUE_LIMIT`]).
    queued: usize,
    /// The socket reported end of stream or an error; surfaced at that
    /// instant, after every queued byte.
    end: Option<(Instant, End)>,
}

enum End {
    Eof,
    Error(io::ErrorKind, String),
}

impl ReadSide {
    fn clear_queue(&mut self) -> usize {
        let dropped = self.queued;
        self.queue.clear();
        self.head = 0;
        self.queued = 0;
        dropped
    }

    /// True when nothing is queued, so reads may go straight to the socket.
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.end.is_none()
    }

    /// True when a `try_read` at `now` makes progress.
    fn ready(&self, now: Instant) -> bool {
        match (self.queue.front(), &self.end) {
            (Some((at, _)), _) => *at <= now,
            (None, Some((at, _))) => *at <= now,
            (None, None) => false,
        }
    }

    /// When the next queued item becomes readable.
    fn next_due(&self) -> Option<Instant> {
        match (self.queue.front(), &self.end) {
            (Some((at, _)), _) => Some(*at),
            (None, Some((at, _))) => Some(*at),
            (None, None) => None,
        }
    }

    /// Hands out due bytes (or the due end of stream); `None` if nothing is
    /// due yet.
    fn take(&mut self, now: Instant, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let mut n = 0;
        while n < buf.len() {
            let Some((at, chunk)) = self.queue.front() else {
                break;
            };
            if *at > now {
                break;
            }
            let avail = &chunk[self.head..];
            let k = avail.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&avail[..k]);
            n += k;
            self.head += k;
            self.queued -= k;
            if self.head == chunk.len() {
                self.queue.pop_front();
                self.head = 0;
            }
        }
        if n > 0 || buf.is_empty() {
            return Some(Ok(n));
        }
        match (&self.end, self.queue.is_empty()) {
            (Some((at, End::Eof)), true) if *at <= now => Some(Ok(0)),
            (Some((at, End::Error(kind, msg))), true) if *at <= now => {
                Some(Err(io::Error::new(*kind, msg.clone())))
            }
            _ => None,
        }
    }
}

/// Shuts a channel down in both directions (the peer sees end of stream,
/// after the bytes already sent). Errors are ignored: a socket the peer
/// already closed is as cut as it gets.
fn shutdown_both(ch: &Channel) {
    match ch {
        Channel::Tcp(s) => {
            let _ = socket2::SockRef::from(s).shutdown(Shutdown::Both);
        }
        Channel::Faulty(f) => {
            let ws = lock(&f.shared.write);
            f.shared.cut_locked(&ws, "outer channel cut");
        }
    }
}

fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

impl Shared {
    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    fn broken_pipe(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            format!(
                "channel cut by the fault injector ({})",
                FaultInjector {
                    inner: self.injector.clone()
                }
                .seed_report()
            ),
        )
    }

    /// Cuts the channel (once). The caller holds the write lock, so no write
    /// is half-counted and the cut offset is exact.
    fn cut_locked(&self, ws: &WriteSide, why: &str) {
        if !self.cut.swap(true, Ordering::SeqCst) {
            self.injector.cuts.fetch_add(1, Ordering::SeqCst);
            shutdown_both(&self.inner);
            tracing::debug!(
                channel = self.id,
                offset = ws.written,
                why,
                "fault injector: channel cut"
            );
        }
        self.notify.notify_waiters();
    }

    /// Reads from the socket on the reader's behalf without blocking: into
    /// the delay queue (each chunk due `delay` from now), or, in a black
    /// hole, into nothing. Stops at `WouldBlock`, a full queue, the end of
    /// the stream, or after [`PUMP_READS`] reads.
    fn pump(&self, rs: &mut ReadSide, now: Instant, delay: Duration, blackhole: bool) {
        let mut scratch = [0u8; PUMP_CHUNK];
        for _ in 0..PUMP_READS {
            if rs.end.is_some() {
                return;
            }
            let room = if blackhole {
                PUMP_CHUNK
            } else {
                PUMP_CHUNK.min(DELAY_QUEUE_LIMIT - rs.queued)
            };
            if room == 0 {
                return;
            }
            match self.inner.try_read(&mut scratch[..room]) {
                Ok(0) => rs.end = Some((now + delay, End::Eof)),
                Ok(n) if blackhole => {
                    self.discarded.fetch_add(n as u64, Ordering::SeqCst);
                }
                Ok(n) => {
                    rs.queue.push_back((now + delay, scratch[..n].to_vec()));
                    rs.queued += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => rs.end = Some((now + delay, End::Error(e.kind(), e.to_string()))),
            }
        }
    }

    /// In a black hole: drops what is queued and drains the socket.
    fn swallow(&self, rs: &mut ReadSide, now: Instant) {
        let dropped = rs.clear_queue();
        self.discarded.fetch_add(dropped as u64, Ordering::SeqCst);
        self.pump(rs, now, Duration::ZERO, true);
    }
}

/// What `readable()` waits for after one look at the state.
enum Wait {
    /// Nothing injected: the socket's own readiness.
    Passthrough,
    /// The socket (if `socket`), the next due item (if any), or a control.
    Queue { socket: bool, due: Option<Instant> },
}

impl FaultyChannel {
    /// Waits until a read may make progress (see [`Channel::readable`]).
    /// Returns at once on a cut channel (reads then see end of stream). In
    /// delay mode, returns when queued bytes become due; in a black hole,
    /// stays pending while draining the socket.
    pub async fn readable(&self) -> io::Result<()> {
        let s = &*self.shared;
        loop {
            // Registered before the state is read, so a control that changes
            // the state after this point wakes us.
            let notified = s.notify.notified();
            tokio::pin!(notified);
            if s.is_cut() {
                return Ok(());
            }
            let now = Instant::now();
            let wait = {
                let mut rs = lock(&s.read);
                if s.injector.blackhole() {
                    s.swallow(&mut rs, now);
                    Wait::Queue {
                        socket: rs.end.is_none(),
                        due: None,
                    }
                } else {
                    let delay = s.injector.delay();
                    if delay.is_zero() && rs.is_idle() {
                        Wait::Passthrough
                    } else {
                        s.pump(&mut rs, now, delay, false);
                        if rs.ready(now) {
                            return Ok(());
                        }
                        Wait::Queue {
                            socket: rs.end.is_none() && rs.queued < DELAY_QUEUE_LIMIT,
                            due: rs.next_due(),
                        }
                    }
                }
            };
            match wait {
                Wait::Passthrough => tokio::select! {
                    r = s.inner.readable() => return r,
                    _ = &mut notified => {}
                },
                Wait::Queue { socket, due } => tokio::select! {
                    r = s.inner.readable(), if socket => r?,
                    _ = sleep_until(due.unwrap_or(now)), if due.is_some() => {}
                    _ = &mut notified => {}
                },
            }
        }
    }

    /// Reads without blocking (see [`Channel::try_read`]). `Ok(0)` on a cut
    /// channel; `WouldBlock` in a black hole or while delayed bytes are not
    /// yet due.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let s = &*self.shared;
        if s.is_cut() {
            return Ok(0);
        }
        let now = Instant::now();
        let mut rs = lock(&s.read);
        if s.injector.blackhole() {
            s.swallow(&mut rs, now);
            return Err(would_block());
        }
        let delay = s.injector.delay();
        if delay.is_zero() && rs.is_idle() {
            drop(rs);
            return s.inner.try_read(buf);
        }
        s.pump(&mut rs, now, delay, false);
        rs.take(now, buf).unwrap_or_else(|| Err(would_block()))
    }

    /// Waits until a write may make progress (see [`Channel::writable`]).
    /// Returns at once on a cut channel (writes then fail) and in a black
    /// hole (writes then succeed).
    pub async fn writable(&self) -> io::Result<()> {
        let s = &*self.shared;
        loop {
            let notified = s.notify.notified();
            tokio::pin!(notified);
            if s.is_cut() || s.injector.blackhole() {
                return Ok(());
            }
            tokio::select! {
                r = s.inner.writable() => return r,
                _ = &mut notified => {}
            }
        }
    }

    /// Writes without blocking from up to two slices (see
    /// [`Channel::try_write2`]). `BrokenPipe` on a cut channel. A write that
    /// crosses an armed cut offset is short — only the bytes up to the
    /// offset are sent — and the channel is cut right after it. In a black
    /// hole the bytes are counted as written and discarded.
    pub fn try_write2(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        let s = &*self.shared;
        let mut ws = lock(&s.write);
        if s.is_cut() {
            return Err(s.broken_pipe());
        }
        let total = a.len() + b.len();
        if total == 0 {
            return Ok(0);
        }
        let allowed = match ws.cut_at() {
            Some(at) => {
                let left = at.saturating_sub(ws.written);
                if left == 0 {
                    s.cut_locked(&ws, "cut offset reached");
                    return Err(s.broken_pipe());
                }
                usize::try_from(left).map_or(total, |left| left.min(total))
            }
            None => total,
        };
        let n = if s.injector.blackhole() {
            allowed
        } else if allowed <= a.len() {
            s.inner.try_write2(&a[..allowed], &[])?
        } else {
            s.inner.try_write2(a, &b[..allowed - a.len()])?
        };
        ws.written += n as u64;
        if ws.cut_at() == Some(ws.written) {
            s.cut_locked(&ws, "cut offset reached");
        }
        Ok(n)
    }

    /// The wrapped channel's peer (unchanged, so logs and comparisons match
    /// the unwrapped channel's).
    pub fn peer(&self) -> String {
        self.shared.inner.peer()
    }

    /// The wrapped channel's number in its injector (1 for the first
    /// [`FaultInjector::wrap`]), for logs and tests.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The write offset: bytes reported written so far (black-holed bytes
    /// included). After a cut, the offset the channel was cut at.
    pub fn bytes_written(&self) -> u64 {
        lock(&self.shared.write).written
    }

    /// The write offset at which the channel will be cut, if a cut is armed
    /// (the earlier of `cut_after` and random cuts), so a test can predict
    /// what the peer receives.
    pub fn cut_offset(&self) -> Option<u64> {
        lock(&self.shared.write).cut_at()
    }

    /// Whether the channel has been cut.
    pub fn is_cut(&self) -> bool {
        self.shared.is_cut()
    }

    /// Received bytes discarded by black holes so far.
    pub fn bytes_discarded(&self) -> u64 {
        self.shared.discarded.load(Ordering::SeqCst)
    }

    /// Cuts this channel now, at its current write offset (like
    /// [`FaultInjector::cut_all`] for one channel).
    pub fn cut(&self) {
        let ws = lock(&self.shared.write);
        self.shared.cut_locked(&ws, "cut");
    }
}

impl fmt::Debug for FaultyChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ws = lock(&self.shared.write);
        f.debug_struct("FaultyChannel")
            .field("id", &self.shared.id)
            .field("inner", &self.shared.inner)
            .field("written", &ws.written)
            .field("cut_at", &ws.cut_at())
            .field("cut", &self.shared.is_cut())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::channel::Listener;

    /// A connected loopback TCP pair: (connecting end, accepted end).
    async fn pair() -> (Channel, Channel) {
        let l = Listener::bind(&Address::tcp("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_address().unwrap();
        let (c, a) = tokio::join!(Channel::connect(&addr), l.accept());
        (c.unwrap(), a.unwrap())
    }

    fn faulty(ch: &Channel) -> &FaultyChannel {
        match ch {
            Channel::Faulty(f) => f,
            other => panic!("not a faulty channel: {other:?}"),
        }
    }

    /// The byte at stream offset `i`: a pattern that makes a shifted or
    /// truncated stream visible.
    fn pattern(i: u64) -> u8 {
        (i % 251) as u8
    }

    /// Writes `want` pattern bytes through `try_write2` in 1000-byte writes
    /// split 300/700 over the two slices, until done or an error. Returns
    /// every `Ok(n)` and the error that stopped it, if any.
    async fn write_pattern(ch: &Channel, want: u64) -> (Vec<usize>, Option<io::Error>) {
        let mut results = Vec::new();
        let mut off = 0u64;
        while off < want {
            let len = (want - off).min(1000);
            let buf: Vec<u8> = (off..off + len).map(pattern).collect();
            let (a, b) = buf.split_at(buf.len().min(300));
            ch.writable().await.unwrap();
            match ch.try_write2(a, b) {
                Ok(n) => {
                    results.push(n);
                    off += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return (results, Some(e)),
            }
        }
        (results, None)
    }

    /// Reads until end of stream or an error; returns the bytes and whether
    /// it ended with an error (a reset) rather than `Ok(0)`.
    async fn read_to_end(ch: &Channel) -> (Vec<u8>, Option<io::Error>) {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Err(e) = ch.readable().await {
                return (out, Some(e));
            }
            match ch.try_read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// Reads exactly `n` bytes.
    async fn read_exact(ch: &Channel, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let mut got = 0;
        while got < n {
            ch.readable().await.unwrap();
            match ch.try_read(&mut out[got..]) {
                Ok(0) => panic!("end of stream after {got} of {n} bytes"),
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read failed after {got} of {n} bytes: {e}"),
            }
        }
        out
    }

    /// Writes all of `data`.
    async fn write_all(ch: &Channel, data: &[u8]) {
        let mut off = 0;
        while off < data.len() {
            ch.writable().await.unwrap();
            match ch.try_write2(&data[off..], &[]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write failed: {e}"),
            }
        }
    }

    #[test]
    fn injector_is_send_sync_clone_debug() {
        fn check<T: Send + Sync + Clone + fmt::Debug>() {}
        check::<FaultInjector>();
        fn check_channel<T: Send + Sync + fmt::Debug>() {}
        check_channel::<Channel>();
        let inj = FaultInjector::new(1234);
        assert_eq!(inj.seed(), 1234);
        assert_eq!(
            inj.seed_report(),
            "fault injector seed: 1234 (set SITENET_FAULT_SEED=1234 to replay)"
        );
        assert!(format!("{inj:?}").contains("1234"));
    }

    #[test]
    fn seed_from_environment() {
        let var = "SITENET_FAULT_SEED_TEST_ONLY_FAULT_RS";
        std::env::set_var(var, "987654321");
        let inj = FaultInjector::from_env_or_random(var);
        std::env::remove_var(var);
        assert_eq!(inj.seed(), 987654321);
        assert_eq!(
            inj.seed_report(),
            format!("fault injector seed: 987654321 (set {var}=987654321 to replay)")
        );
        // Unset: some seed, reported under the same name.
        let inj = FaultInjector::from_env_or_random(var);
        assert!(inj.seed_report().contains(&format!("{var}={}", inj.seed())));
    }

    /// (1) A cut at offset N: the reader gets exactly the first N bytes and
    /// then the end; the writer gets a short write then `BrokenPipe`.
    #[tokio::test]
    async fn cut_after_delivers_exactly_n_bytes() {
        // 2200 and 2500 split the third write in its first and second slice;
        // 1 and 299 split the first write; 3000 falls on a write boundary.
        for n in [0u64, 1, 299, 1000, 2200, 2500, 3000, 65_537] {
            let inj = FaultInjector::new(7);
            let _seed = inj.report_on_panic();
            let (c, a) = pair().await;
            let w = inj.wrap(c);
            inj.cut_after(n);
            assert_eq!(faulty(&w).cut_offset(), (n > 0).then_some(n));
            let ((results, err), (got, _reset)) =
                tokio::join!(write_pattern(&w, n + 10_000), read_to_end(&a));

            let err = err.expect("the writer must see the cut");
            assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "n={n}: {err}");
            assert_eq!(results.iter().map(|&k| k as u64).sum::<u64>(), n, "n={n}");
            if n % 1000 != 0 {
                assert!(
                    *results.last().unwrap() < 1000,
                    "n={n}: the crossing write must be short: {results:?}"
                );
            }
            assert_eq!(
                got.len() as u64,
                n,
                "n={n}: the reader must get exactly the bytes before the cut"
            );
            assert!(
                got.iter().enumerate().all(|(i, &b)| b == pattern(i as u64)),
                "n={n}: corrupt prefix"
            );

            // The cut side sees the end too, at once.
            assert!(faulty(&w).is_cut());
            assert_eq!(faulty(&w).bytes_written(), n);
            w.readable().await.unwrap();
            assert_eq!(w.try_read(&mut [0u8; 16]).unwrap(), 0);
            assert_eq!(
                w.try_write2(b"x", b"").unwrap_err().kind(),
                io::ErrorKind::BrokenPipe
            );
            assert_eq!(inj.cuts(), 1);
        }
    }

    /// The write offsets at which each of four channels is cut under random
    /// cuts with `seed`: one armed while live, three at wrap time, then all
    /// four re-armed by a second call.
    async fn random_cut_run(seed: u64) -> Vec<(u64, usize)> {
        let inj = FaultInjector::new(seed);
        let _seed = inj.report_on_panic();
        // The accepted ends stay open: a write to a closed peer would fail
        // with a reset before the cut.
        let mut peers = Vec::new();
        let (c, a) = pair().await;
        peers.push(a);
        let mut chans = vec![inj.wrap(c)];
        inj.random_cuts(500);
        for _ in 0..3 {
            let (c, a) = pair().await;
            peers.push(a);
            chans.push(inj.wrap(c));
        }
        // Re-draws for all four, in wrap order.
        inj.random_cuts(500);
        let mut out = Vec::new();
        for ch in &chans {
            let armed = faulty(ch).cut_offset().expect("armed");
            assert!(
                (1..=1000).contains(&armed),
                "offset {armed} outside 1..=2*mean"
            );
            let (results, err) = write_pattern(ch, 100_000).await;
            assert_eq!(err.unwrap().kind(), io::ErrorKind::BrokenPipe);
            let sent = results.iter().sum::<usize>();
            assert_eq!(sent as u64, armed);
            out.push((armed, sent));
        }
        assert_eq!(inj.cuts(), 4);
        out
    }

    /// (2) The same seed gives the same cuts; another seed gives others.
    #[tokio::test]
    async fn random_cuts_are_deterministic() {
        let a = random_cut_run(42).await;
        let b = random_cut_run(42).await;
        assert_eq!(a, b);
        let c = random_cut_run(43).await;
        assert_ne!(a, c, "seeds 42 and 43 drew the same four offsets");
    }

    #[tokio::test]
    async fn stop_random_cuts_disarms() {
        let inj = FaultInjector::new(5);
        let (c, _a) = pair().await;
        inj.random_cuts(10);
        let w = inj.wrap(c);
        assert!(faulty(&w).cut_offset().is_some());
        inj.stop_random_cuts();
        assert_eq!(faulty(&w).cut_offset(), None);
        let (c2, _a2) = pair().await;
        let w2 = inj.wrap(c2);
        assert_eq!(faulty(&w2).cut_offset(), None);
        inj.cut_after(3);
        inj.disarm_cuts();
        assert_eq!(faulty(&w).cut_offset(), None);
        assert_eq!(inj.live_channels(), 2);
        drop(w);
        assert_eq!(inj.live_channels(), 1);
    }

    /// (3) A black hole: bytes written either way during it never arrive;
    /// afterwards new bytes do.
    #[tokio::test]
    async fn blackhole_loses_bytes_both_ways() {
        let inj = FaultInjector::new(3);
        let _seed = inj.report_on_panic();
        let (c, b) = pair().await;
        let a = inj.wrap(c);

        write_all(&a, b"hello").await;
        assert_eq!(read_exact(&b, 5).await, b"hello");

        inj.set_blackhole(true);
        // Writes succeed and count towards the write offset...
        a.writable().await.unwrap();
        assert_eq!(a.try_write2(b"lo", b"st1").unwrap(), 5);
        assert_eq!(faulty(&a).bytes_written(), 10);
        // ...and the peer's bytes are drained and dropped while `a` waits.
        write_all(&b, b"lost2").await;
        while faulty(&a).bytes_discarded() < 5 {
            // Bounded wait for something that must not happen.
            let r = tokio::time::timeout(Duration::from_millis(20), a.readable()).await;
            assert!(r.is_err(), "readable() returned during a black hole");
        }
        assert_eq!(faulty(&a).bytes_discarded(), 5);
        assert_eq!(
            a.try_read(&mut [0u8; 16]).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );

        inj.set_blackhole(false);
        write_all(&a, b"after").await;
        write_all(&b, b"fresh").await;
        // TCP is ordered: had "lost1"/"lost2" travelled, they would come first.
        assert_eq!(read_exact(&b, 5).await, b"after");
        assert_eq!(read_exact(&a, 5).await, b"fresh");
        assert_eq!(inj.cuts(), 0);
    }

    /// A peer's end of stream seen during a black hole is reported after it.
    #[tokio::test]
    async fn blackhole_remembers_the_end() {
        let inj = FaultInjector::new(4);
        let (c, b) = pair().await;
        let a = inj.wrap(c);
        inj.set_blackhole(true);
        write_all(&b, b"gone").await;
        drop(b);
        // Drain until the end of stream has been seen (and hidden).
        while lock(&faulty(&a).shared.read).end.is_none() {
            let r = tokio::time::timeout(Duration::from_millis(20), a.readable()).await;
            assert!(r.is_err(), "readable() returned during a black hole");
        }
        inj.set_blackhole(false);
        let (got, err) = read_to_end(&a).await;
        assert!(got.is_empty() && err.is_none(), "{got:?} {err:?}");
    }

    /// (4) Delay: bytes surface no earlier than the delay after they were
    /// read, in order, end of stream last.
    #[tokio::test]
    async fn delay_holds_bytes_back() {
        let d = Duration::from_millis(50);
        let inj = FaultInjector::new(9);
        let (c, b) = pair().await;
        let a = inj.wrap(c);
        inj.set_delay(d);

        let t0 = std::time::Instant::now();
        write_all(&b, b"ping").await;
        assert_eq!(read_exact(&a, 4).await, b"ping");
        assert!(
            t0.elapsed() >= d,
            "delivered after {:?}, before the {d:?} delay",
            t0.elapsed()
        );

        let t1 = std::time::Instant::now();
        write_all(&b, b"one,").await;
        write_all(&b, b"two").await;
        drop(b);
        let (got, err) = read_to_end(&a).await;
        assert!(t1.elapsed() >= d);
        assert_eq!(got, b"one,two");
        assert!(err.is_none(), "{err:?}");

        // Zero turns it off.
        inj.set_delay(Duration::ZERO);
        let (c, b) = pair().await;
        let a = inj.wrap(c);
        write_all(&b, b"now").await;
        assert_eq!(read_exact(&a, 3).await, b"now");
    }

    /// The delay queue is bounded: a burst bigger than the bound still
    /// arrives whole and in order (the socket is read again as the queue
    /// drains).
    #[tokio::test]
    async fn delay_queue_is_bounded() {
        let inj = FaultInjector::new(11);
        let (c, b) = pair().await;
        let a = inj.wrap(c);
        inj.set_delay(Duration::from_millis(5));
        let total = 3 * DELAY_QUEUE_LIMIT as u64 + 123;
        let b_ref = &b;
        let writer = async move {
            let (_, err) = write_pattern(b_ref, total).await;
            assert!(err.is_none());
        };
        let reader = async {
            let got = read_exact(&a, total as usize).await;
            assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(i as u64)));
            assert!(lock(&faulty(&a).shared.read).queued <= DELAY_QUEUE_LIMIT);
        };
        tokio::join!(writer, reader);
    }

    /// (5) `cut_all` from another thread wakes a pending `readable()`, and
    /// both ends see the end of the channel.
    #[tokio::test]
    async fn cut_all_wakes_pending_readable() {
        let inj = FaultInjector::new(13);
        let _seed = inj.report_on_panic();
        let (c, b) = pair().await;
        let a = inj.wrap(c);

        let pending = a.readable();
        tokio::pin!(pending);
        tokio::select! {
            biased;
            _ = &mut pending => panic!("readable() with nothing sent"),
            _ = std::future::ready(()) => {}
        }
        let inj2 = inj.clone();
        std::thread::spawn(move || inj2.cut_all()).join().unwrap();
        pending.await.unwrap();

        assert_eq!(a.try_read(&mut [0u8; 8]).unwrap(), 0);
        a.writable().await.unwrap();
        assert_eq!(
            a.try_write2(b"x", b"y").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        let (got, _) = read_to_end(&b).await;
        assert!(got.is_empty());
        assert_eq!(inj.cuts(), 1);
        // A second cut_all does not count the same channel again.
        inj.cut_all();
        assert_eq!(inj.cuts(), 1);
    }

    /// A pending `writable()` on a full socket is woken by a cut too.
    #[tokio::test]
    async fn cut_all_wakes_pending_writable() {
        let inj = FaultInjector::new(17);
        let (c, _b) = pair().await;
        let a = inj.wrap(c);
        // Fill the socket until it would block (the peer never reads).
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match a.try_write2(&chunk, &[]) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let pending = a.writable();
        tokio::pin!(pending);
        let early = tokio::select! {
            biased;
            r = &mut pending => Some(r), // spurious readiness is allowed
            _ = std::future::ready(()) => None,
        };
        inj.cut_all();
        match early {
            Some(r) => r.unwrap(),
            None => pending.await.unwrap(),
        }
        assert_eq!(
            a.try_write2(b"x", b"").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
