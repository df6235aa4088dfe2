//! [`FaultyChannel`]: a channel wrapped by a [`FaultInjector`], with its
//! write side (offset and armed cuts) and the readiness and read/write
//! calls the channel driver makes.

use std::fmt;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use super::delay::{End, ReadSide};
use super::{lock, FaultInjector, Injector, DELAY_QUEUE_LIMIT, PUMP_CHUNK, PUMP_READS};
use crate::channel::Channel;

/// A channel wrapped by a [`FaultInjector`], found in [`Channel::Faulty`].
/// It behaves like the channel it wraps until the injector says otherwise.
/// Its methods take `&self` like [`Channel`]'s; the injector's controls may
/// run on other threads at the same time.
pub struct FaultyChannel {
    pub(super) shared: Arc<Shared>,
}

/// One wrapped channel's state, shared with the injector (weakly).
pub(super) struct Shared {
    /// For logs: the n-th channel this injector wrapped.
    pub(super) id: u64,
    /// Owned here (not by [`FaultyChannel`]) so the injector can shut the
    /// socket down from its own thread without racing the fd's close.
    pub(super) inner: Channel,
    pub(super) injector: Arc<Injector>,
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
        Channel::Plugged(p) => p.get().close(),
        Channel::Faulty(f) => {
            let ws = lock(&f.shared.write);
            f.shared.cut_locked(&ws, "outer channel cut");
        }
    }
}

pub(super) fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

impl Shared {
    pub(super) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    pub(super) fn broken_pipe(&self) -> io::Error {
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
    pub(super) fn cut_locked(&self, ws: &WriteSide, why: &str) {
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

impl FaultyChannel {
    /// The wrapped channel.
    pub(crate) fn inner(&self) -> &Channel {
        &self.shared.inner
    }

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
        self.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])
    }

    /// Writes from `bufs` in order, honouring the cut offset as
    /// [`try_write2`](Self::try_write2) does.
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let s = &*self.shared;
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
        let n = if s.injector.blackhole() {
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

    /// Ends the wrapped channel's writing direction (see
    /// [`Channel::shutdown_write`]).
    pub fn shutdown_write(&self) -> std::io::Result<()> {
        self.shared.inner.shutdown_write()
    }

    /// The wrapped channel's scheme (see [`Channel::scheme`]).
    pub fn scheme(&self) -> &'static str {
        self.shared.inner.scheme()
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
