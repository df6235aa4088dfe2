//! [`FaultyChannel`]: a channel wrapped by a
//! [`FaultInjector`](super::FaultInjector), with its write side (offset and
//! armed cuts) and the readiness and read/write calls the channel driver
//! makes, as a plugged [`TransportChannel`].

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use super::controls::{lock, Controls, DELAY_QUEUE_LIMIT, PUMP_CHUNK, PUMP_READS};
use super::delay::{End, ReadSide};
use crate::channel::Channel;
use crate::plug::TransportChannel;

/// A channel wrapped by a [`FaultInjector`](super::FaultInjector): what
/// [`FaultInjector::wrap`](super::FaultInjector::wrap) puts in the
/// [`Channel::Plugged`] it returns. It behaves like the channel it wraps
/// until the injector says otherwise. Its calls take `&self` like
/// [`Channel`]'s; the injector's controls may run on other threads at the
/// same time.
pub struct FaultyChannel {
    pub(super) shared: Arc<Shared>,
    /// The wait of the task polling for readability, kept between polls
    /// (the driver has one waiter per direction at a time).
    read_wait: parking_lot::Mutex<Option<Waiting>>,
    /// The same for writability.
    write_wait: parking_lot::Mutex<Option<Waiting>>,
}

/// A readiness wait in progress; owns its handle to the channel's state.
type Waiting = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// Polls the wait in `slot`, started by `start` if none is in progress,
/// and forgets it once it is over.
fn poll_wait(
    slot: &parking_lot::Mutex<Option<Waiting>>,
    cx: &mut Context<'_>,
    start: impl FnOnce() -> Waiting,
) -> Poll<io::Result<()>> {
    let mut slot = slot.lock();
    let wait = slot.get_or_insert_with(start);
    let ready = wait.as_mut().poll(cx);
    if ready.is_ready() {
        *slot = None;
    }
    ready
}

/// One wrapped channel's state, shared with the injector (weakly).
pub(super) struct Shared {
    /// For logs: the n-th channel this injector wrapped.
    pub(super) id: u64,
    /// Owned here (not by [`FaultyChannel`]) so the injector can shut the
    /// socket down from its own thread without racing the fd's close.
    pub(super) inner: Channel,
    pub(super) controls: Arc<Controls>,
    /// Set once, never cleared. Written under the `write` lock.
    pub(super) cut: AtomicBool,
    pub(super) write: Mutex<WriteSide>,
    pub(super) read: Mutex<ReadSide>,
    /// Wakes pending `readable()`/`writable()` calls when a control changes
    /// something they wait on.
    pub(super) notify: Notify,
    /// Received bytes thrown away by the black hole.
    pub(super) discarded: AtomicU64,
}

/// The write offset and the armed cuts. One lock for all three so a cut
/// offset is compared with an offset that no write is changing.
pub(super) struct WriteSide {
    /// Bytes reported written to the writer (the stream's write offset).
    pub(super) written: u64,
    /// From [`FaultInjector::cut_after`].
    pub(super) explicit_cut: Option<u64>,
    /// From [`FaultInjector::random_cuts`].
    pub(super) random_cut: Option<u64>,
}

impl WriteSide {
    /// The offset at which the channel will be cut, if any: the earlier of
    /// the armed cuts.
    pub(super) fn cut_at(&self) -> Option<u64> {
        match (self.explicit_cut, self.random_cut) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Shuts a channel down in both directions (the peer sees end of stream,
/// after the bytes already sent, and its later writes fail), whatever kind
/// it is. Errors are ignored: a socket the peer already closed is as cut as
/// it gets.
pub(super) fn shutdown_both(ch: &Channel) {
    match ch {
        // socket2: tokio's streams cannot shut down their read half.
        Channel::Tcp(s) => {
            let _ = socket2::SockRef::from(s).shutdown(Shutdown::Both);
        }
        Channel::Unix(s) => {
            let _ = socket2::SockRef::from(s).shutdown(Shutdown::Both);
        }
        Channel::Mem(m) => m.shutdown(),
        // A channel wrapped twice: its inner wrapper's close is a cut.
        Channel::Plugged(p) => p.get().close(),
    }
}

pub(super) fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

impl Shared {
    /// The state of the `id`-th channel an injector wrapped, `inner`, armed
    /// with `random_cut` if random cuts are on.
    pub(super) fn new(
        id: u64,
        inner: Channel,
        controls: Arc<Controls>,
        random_cut: Option<u64>,
    ) -> Self {
        Self {
            id,
            inner,
            controls,
            cut: AtomicBool::new(false),
            write: Mutex::new(WriteSide {
                written: 0,
                explicit_cut: None,
                random_cut,
            }),
            read: Mutex::new(ReadSide::default()),
            notify: Notify::new(),
            discarded: AtomicU64::new(0),
        }
    }

    pub(super) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    pub(super) fn broken_pipe(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            format!(
                "channel cut by the fault injector ({})",
                self.controls.seed_report()
            ),
        )
    }

    /// Cuts the channel (once). The caller holds the write lock, so no write
    /// is half-counted and the cut offset is exact.
    pub(super) fn cut_locked(&self, ws: &WriteSide, why: &str) {
        if !self.cut.swap(true, Ordering::SeqCst) {
            self.controls.cuts.fetch_add(1, Ordering::SeqCst);
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
    pub(super) fn pump(&self, rs: &mut ReadSide, now: Instant, delay: Duration, blackhole: bool) {
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
    pub(super) fn swallow(&self, rs: &mut ReadSide, now: Instant) {
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

impl Shared {
    /// Waits until a read may make progress (see [`Channel::readable`]).
    /// Returns at once on a cut channel (reads then see end of stream). In
    /// delay mode, returns when queued bytes become due; in a black hole,
    /// stays pending while draining the socket.
    async fn readable(self: Arc<Self>) -> io::Result<()> {
        let s = &*self;
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
                if s.controls.blackhole() {
                    s.swallow(&mut rs, now);
                    Wait::Queue {
                        socket: rs.end.is_none(),
                        due: None,
                    }
                } else {
                    let delay = s.controls.delay();
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
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let s = self;
        if s.is_cut() {
            return Ok(0);
        }
        let now = Instant::now();
        let mut rs = lock(&s.read);
        if s.controls.blackhole() {
            s.swallow(&mut rs, now);
            return Err(would_block());
        }
        let delay = s.controls.delay();
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
    async fn writable(self: Arc<Self>) -> io::Result<()> {
        let s = &*self;
        loop {
            let notified = s.notify.notified();
            tokio::pin!(notified);
            if s.is_cut() || s.controls.blackhole() {
                return Ok(());
            }
            tokio::select! {
                r = s.inner.writable() => return r,
                _ = &mut notified => {}
            }
        }
    }

    /// Writes without blocking from `bufs` in order (see
    /// [`Channel::try_write_vectored`]). `BrokenPipe` on a cut channel. A
    /// write that crosses an armed cut offset is short — only the bytes up
    /// to the offset are sent — and the channel is cut right after it. In a
    /// black hole the bytes are counted as written and discarded.
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let s = self;
        let mut ws = lock(&s.write);
        if s.is_cut() {
            return Err(s.broken_pipe());
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
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
        let n = if s.controls.blackhole() {
            allowed
        } else {
            // The first `allowed` bytes of `bufs`.
            let mut left = allowed;
            let mut upto = Vec::with_capacity(bufs.len());
            for b in bufs {
                if left == 0 {
                    break;
                }
                let k = b.len().min(left);
                upto.push(io::IoSlice::new(&b[..k]));
                left -= k;
            }
            s.inner.try_write_vectored(&upto)?
        };
        ws.written += n as u64;
        if ws.cut_at() == Some(ws.written) {
            s.cut_locked(&ws, "cut offset reached");
        }
        Ok(n)
    }
}

impl FaultyChannel {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            read_wait: parking_lot::Mutex::new(None),
            write_wait: parking_lot::Mutex::new(None),
        }
    }

    /// The fault wrapper in `ch`, if `ch` is a channel a
    /// [`FaultInjector`](super::FaultInjector) wrapped: for a test that
    /// reads its write offset or armed cut, or cuts just this channel.
    pub fn of(ch: &Channel) -> Option<&FaultyChannel> {
        match ch {
            Channel::Plugged(p) => p.downcast_ref(),
            _ => None,
        }
    }

    /// The wrapped channel's number in its injector (1 for the first
    /// [`FaultInjector::wrap`](super::FaultInjector::wrap)), for logs and
    /// tests.
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
    /// [`FaultInjector::cut_all`](super::FaultInjector::cut_all) for one
    /// channel).
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

/// The wrapped channel's calls, with the faults in between: what
/// [`Channel::Plugged`] calls.
impl TransportChannel for FaultyChannel {
    /// Returns at once on a cut channel (reads then see end of stream). In
    /// delay mode, ready when queued bytes become due; in a black hole,
    /// pending while draining the socket.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_wait(&self.read_wait, cx, || {
            Box::pin(self.shared.clone().readable())
        })
    }

    /// Returns at once on a cut channel (writes then fail) and in a black
    /// hole (writes then succeed).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_wait(&self.write_wait, cx, || {
            Box::pin(self.shared.clone().writable())
        })
    }

    /// `Ok(0)` on a cut channel; `WouldBlock` in a black hole or while
    /// delayed bytes are not yet due.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.shared.try_read(buf)
    }

    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.shared.try_write_vectored(bufs)
    }

    /// Ends the wrapped channel's writing direction.
    fn shutdown_write(&self) -> io::Result<()> {
        self.shared.inner.shutdown_write()
    }

    /// Cuts the channel (see [`cut`](FaultyChannel::cut)).
    fn close(&self) {
        self.cut();
    }

    /// The wrapped channel's peer, so logs and comparisons match the
    /// unwrapped channel's ([`Channel::peer`] puts the scheme back).
    fn peer(&self) -> String {
        let peer = self.shared.inner.peer();
        let scheme = self.shared.inner.scheme();
        match peer.strip_prefix(scheme).and_then(|p| p.strip_prefix(':')) {
            Some(rest) => rest.to_string(),
            None => peer,
        }
    }

    /// What the wrapped channel says: an accepting node runs a wrapped
    /// in-process channel's site on its connecting thread too.
    fn connector_thread(&self) -> Option<std::thread::ThreadId> {
        self.shared.inner.connector_thread()
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
