//! [`StreamChannel`]: any tokio `AsyncRead + AsyncWrite` stream as a
//! [`TransportChannel`].

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::transport::TransportChannel;

/// Any tokio stream (`AsyncRead + AsyncWrite + Unpin + Send`: a
/// `tokio::io::DuplexStream`, a pipe, a TLS stream over a socket) as a
/// [`TransportChannel`], so a plugged transport need not implement
/// readiness itself.
///
/// How: a tokio stream has no readiness calls, only `poll_read` and
/// `poll_write`, which register the waker they are polled with when they
/// cannot progress. So `try_read` and `try_write_vectored` poll the
/// stream, straight into the caller's buffer and from the caller's
/// slices (no copy here), with a waker of the channel's own per direction;
/// a pending poll marks that direction blocked, the stream's wake marks it
/// ready and wakes the task waiting in `poll_read_ready` or
/// `poll_write_ready`. Readiness is therefore exact for any stream that
/// keeps the poll contract, with no busy loop and no read-ahead buffer.
///
/// A write is followed by a `poll_flush`. A stream that holds written
/// bytes until a later flush succeeds (a `BufWriter`, whose flush waits for
/// room) may hold the last ones until the next write: such a stream should
/// flush at once or get a [`TransportChannel`] of its own.
///
/// [`close`](TransportChannel::close) drops the stream (a `DuplexStream`'s
/// peer then reads what was sent, then the end, and its writes fail);
/// [`shutdown_write`](TransportChannel::shutdown_write) is the stream's
/// `poll_shutdown`, polled once (a stream whose shutdown must wait
/// finishes it when dropped).
///
/// ```
/// use sitenet_transport::plug::{StreamChannel, TransportChannel};
///
/// let (a, b) = tokio::io::duplex(1024);
/// let (a, b) = (StreamChannel::new(a, "b"), StreamChannel::new(b, "a"));
/// let mut buf = [0u8; 16];
/// // Nothing yet: WouldBlock, as a socket says.
/// assert_eq!(b.try_read(&mut buf).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// assert_eq!(a.try_write_vectored(&[std::io::IoSlice::new(b"hi")])?, 2);
/// assert_eq!(b.try_read(&mut buf)?, 2);
/// a.close(); // the peer reads the end of the stream
/// assert_eq!(b.try_read(&mut buf)?, 0);
/// assert_eq!(b.peer(), "a");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct StreamChannel<S> {
    /// `None` once closed.
    io: Mutex<Option<S>>,
    read: Direction,
    write: Direction,
    peer: String,
}

/// One direction's readiness.
struct Direction {
    state: Arc<Readiness>,
    /// A waker of `state`, made once: what the stream is polled with.
    waker: Waker,
}

/// Whether a direction may progress, and who waits for it.
#[derive(Default)]
struct Readiness {
    /// The last poll of the stream in this direction was pending.
    blocked: AtomicBool,
    /// The stream woke this direction since that poll.
    woken: AtomicBool,
    /// The channel was closed: always ready (the call then says so).
    closed: AtomicBool,
    /// The task waiting in `poll_*_ready`.
    task: Mutex<Option<Waker>>,
}

impl Wake for Readiness {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if let Some(w) = self.task.lock().take() {
            w.wake();
        }
    }
}

impl Direction {
    fn new() -> Self {
        let state = Arc::new(Readiness::default());
        Self {
            waker: Waker::from(state.clone()),
            state,
        }
    }

    fn ready(&self) -> bool {
        let s = &self.state;
        s.closed.load(Ordering::SeqCst)
            || !s.blocked.load(Ordering::SeqCst)
            || s.woken.load(Ordering::SeqCst)
    }

    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.ready() {
            return Poll::Ready(Ok(()));
        }
        {
            let mut task = self.state.task.lock();
            match &*task {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *task = Some(cx.waker().clone()),
            }
        }
        // A wake between the check and the registration is not lost.
        if self.ready() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// Polls the stream in this direction: `f` with the direction's own
    /// waker, the outcome recorded (pending: blocked until woken).
    fn poll<T>(&self, f: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
        // Cleared before the poll, so a wake during it counts.
        self.state.woken.store(false, Ordering::SeqCst);
        let mut cx = Context::from_waker(&self.waker);
        match f(&mut cx) {
            Poll::Ready(r) => {
                self.state.blocked.store(false, Ordering::SeqCst);
                r
            }
            Poll::Pending => {
                self.state.blocked.store(true, Ordering::SeqCst);
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }

    fn close(&self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.state.wake_by_ref();
    }
}

impl<S> StreamChannel<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// `stream` as a channel whose peer is `peer` (after the scheme, for
    /// logs: see [`TransportChannel::peer`]).
    pub fn new(stream: S, peer: impl Into<String>) -> Self {
        Self {
            io: Mutex::new(Some(stream)),
            read: Direction::new(),
            write: Direction::new(),
            peer: peer.into(),
        }
    }
}

impl<S> TransportChannel for StreamChannel<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.read.poll_ready(cx)
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.write.poll_ready(cx)
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut io = self.io.lock();
        let Some(s) = io.as_mut() else {
            return Ok(0);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        self.read.poll(|cx| {
            let mut rb = ReadBuf::new(buf);
            Pin::new(s)
                .poll_read(cx, &mut rb)
                .map_ok(|()| rb.filled().len())
        })
    }

    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut io = self.io.lock();
        let Some(s) = io.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the channel was closed",
            ));
        };
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        self.write.poll(|cx| {
            let r = Pin::new(&mut *s).poll_write_vectored(cx, bufs);
            if let Poll::Ready(Ok(n)) = r {
                if n > 0 {
                    // Hands the bytes on; a flush that must wait is
                    // finished by a later write (see the type's docs).
                    let _ = Pin::new(&mut *s).poll_flush(cx);
                }
            }
            r
        })
    }

    fn shutdown_write(&self) -> io::Result<()> {
        let mut io = self.io.lock();
        let Some(s) = io.as_mut() else {
            return Ok(());
        };
        match self.write.poll(|cx| Pin::new(s).poll_shutdown(cx)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }

    fn close(&self) {
        // Dropped outside the lock (a stream's drop may wake the peer).
        let s = self.io.lock().take();
        drop(s);
        self.read.close();
        self.write.close();
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl<S> fmt::Debug for StreamChannel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamChannel")
            .field("peer", &self.peer)
            .field("closed", &self.read.state.closed.load(Ordering::SeqCst))
            .finish()
    }
}
