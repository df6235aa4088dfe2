//! In-process channels (`mem:NAME`): [`MemChannel`] and [`MemListener`].
//!
//! Why: many sites in one process (tests, simulations, the stress drill)
//! should not pay for a file descriptor and a kernel round trip per channel,
//! and should not be limited by `RLIMIT_NOFILE`. A mem channel is two bounded
//! byte pipes in memory, used exactly like a socket: readiness
//! (`readable`/`writable`) and non-blocking `try_read`/`try_write2`, with the
//! same end-of-stream and broken-pipe behaviour, so the channel driver and
//! the fault injector need not know which kind of channel they hold.
//!
//! Names live in one process-wide registry: [`MemListener::bind`] registers a
//! name (`AddrInUse` if it is taken), [`MemChannel::connect`] creates a
//! connected pair and puts the accepting end in the listener's accept queue
//! (`ConnectionRefused` if no listener has that name), and dropping the
//! listener frees the name. A name is any non-empty string; tests that need a
//! fresh one take it from [`Address::unique_mem`](crate::Address::unique_mem).
//!
//! Memory is bounded: each direction holds at most [`MEM_PIPE_CAPACITY`]
//! bytes (the writer gets `WouldBlock` while it is full), and a listener
//! queues at most [`MEM_BACKLOG`] connections not yet accepted.
//!
//! A listener may also have an accept lane per thread ([`MemLanes`],
//! `lanes.rs`): connections made on a thread with a lane are accepted by
//! that thread's [`MemAcceptor`], so the connect wakes a task of its own
//! thread rather than the listener's.

mod lanes;

pub use lanes::{MemAcceptor, MemLanes};

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Bytes one direction of a mem channel holds before the writer must wait:
/// the in-memory counterpart of a socket's send and receive buffers, so a
/// fast writer is pushed back instead of memory growing.
pub const MEM_PIPE_CAPACITY: usize = 256 * 1024;

/// Connections a [`MemListener`] queues before they are accepted; further
/// connects are refused (`ConnectionRefused`) until the listener catches up,
/// so a connect loop cannot grow memory without limit.
pub const MEM_BACKLOG: usize = 1024;

/// Numbers accepted-side peers for logs (`mem:(client N)`).
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// The process-wide name → listener registry.
static REGISTRY: LazyLock<Mutex<HashMap<String, Arc<ListenerShared>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// One direction of a mem channel: bytes written by one end, read by the
/// other.
struct Pipe {
    state: Mutex<PipeState>,
    /// Woken when bytes arrive or the writer closes.
    readable: Notify,
    /// Woken when room is made or the reader closes.
    writable: Notify,
}

#[derive(Default)]
struct PipeState {
    /// At most [`MEM_PIPE_CAPACITY`] bytes, grown on demand (an idle channel
    /// costs almost nothing).
    buf: VecDeque<u8>,
    /// The writing end was dropped or shut down: the reader sees end of
    /// stream once `buf` is drained.
    writer_closed: bool,
    /// The reading end was dropped or shut down: writes fail with
    /// `BrokenPipe`, and nothing is kept for a reader that will never come.
    reader_closed: bool,
}

impl Pipe {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(PipeState::default()),
            readable: Notify::new(),
            writable: Notify::new(),
        })
    }

    fn close_writer(&self) {
        self.state.lock().writer_closed = true;
        self.readable.notify_waiters();
    }

    fn close_reader(&self) {
        {
            let mut st = self.state.lock();
            st.reader_closed = true;
            st.buf = VecDeque::new();
        }
        self.writable.notify_waiters();
    }
}

/// Waits on `notify` until `ready` holds. The waiter is registered (created
/// and enabled) *before* the condition is checked, so a state change and its
/// `notify_waiters` landing between the check and the await cannot be lost.
async fn wait_until(notify: &Notify, mut ready: impl FnMut() -> bool) {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ready() {
            return;
        }
        notified.await;
    }
}

fn broken_pipe(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, why.to_string())
}

/// One end of an in-process byte channel, found in
/// [`Channel::Mem`](crate::Channel::Mem). Behaves like a connected socket:
/// `readable()` completes when bytes are waiting or the peer closed (then
/// `try_read` returns them, or `Ok(0)`); `writable()` completes when there is
/// room or the peer is gone (then `try_write2` fails with `BrokenPipe`); the
/// `try_*` calls never block and return `WouldBlock` when nothing can be done.
/// All methods take `&self`, so one task may await readability while another
/// awaits writability. Dropping an end closes both directions: the peer reads
/// the bytes already sent and then end of stream, and its writes fail.
///
/// # Example
///
/// The `try_*` calls need no runtime:
///
/// ```
/// use std::io::ErrorKind;
/// use sitenet_transport::MemChannel;
///
/// let (a, b) = MemChannel::pair();
/// let mut buf = [0u8; 16];
/// assert_eq!(b.try_read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
///
/// assert_eq!(a.try_write2(b"abc", b"de")?, 5);
/// drop(a); // closes both directions
/// assert_eq!(b.try_read(&mut buf)?, 5); // the bytes already sent...
/// assert_eq!(&buf[..5], b"abcde");
/// assert_eq!(b.try_read(&mut buf)?, 0); // ...then end of stream
/// assert_eq!(b.try_write2(b"x", &[]).unwrap_err().kind(), ErrorKind::BrokenPipe);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct MemChannel {
    /// Bytes from the peer.
    rx: Arc<Pipe>,
    /// Bytes to the peer.
    tx: Arc<Pipe>,
    /// For [`peer`](Self::peer).
    peer: String,
    /// On the accepting end, the thread that connected (see
    /// [`connector_thread`](Self::connector_thread)).
    connector: Option<std::thread::ThreadId>,
}

impl MemChannel {
    /// A connected pair not registered anywhere, `(a, b)`: what `a` writes
    /// `b` reads and the other way round. For tests and for wiring two
    /// components of one process without a name.
    pub fn pair() -> (Self, Self) {
        // Each end reports the other as its peer.
        Self::pair_named("mem:(pair b)".into(), "mem:(pair a)".into())
    }

    /// A pair whose ends report `peer_of_a` and `peer_of_b` as their peers.
    fn pair_named(peer_of_a: String, peer_of_b: String) -> (Self, Self) {
        let ab = Pipe::new();
        let ba = Pipe::new();
        (
            Self {
                rx: ba.clone(),
                tx: ab.clone(),
                peer: peer_of_a,
                connector: None,
            },
            Self {
                rx: ab,
                tx: ba,
                peer: peer_of_b,
                connector: None,
            },
        )
    }

    /// Connects to the listener registered as `name`: the accepting end is
    /// queued for its [`accept`](MemListener::accept) at once (like a TCP
    /// connection completed by the kernel before `accept`), and this end is
    /// returned. `ConnectionRefused` if no listener has that name or its
    /// backlog ([`MEM_BACKLOG`]) is full; `InvalidInput` for an empty name.
    pub fn connect(name: &str) -> io::Result<Self> {
        check_name(name)?;
        let listener = REGISTRY.lock().get(name).cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("no listener at mem:{name}"),
            )
        })?;
        let n = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
        let (ours, mut theirs) =
            Self::pair_named(format!("mem:{name}"), format!("mem:(client {n})"));
        let here = std::thread::current().id();
        theirs.connector = Some(here);
        let lane_wake = {
            let mut q = listener.queue.lock();
            if q.closed {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("the listener at mem:{name} was closed"),
                ));
            }
            if q.queued() >= MEM_BACKLOG {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!(
                        "the listener at mem:{name} has {MEM_BACKLOG} connections not yet accepted"
                    ),
                ));
            }
            // Queued for this thread's own acceptor if it has one, else
            // for the listener's.
            match q.lanes.get_mut(&here) {
                Some(lane) => {
                    lane.pending.push_back(theirs);
                    Some(lane.notify.clone())
                }
                None => {
                    q.pending.push_back(theirs);
                    None
                }
            }
        };
        lane_wake
            .as_deref()
            .unwrap_or(&listener.notify)
            .notify_waiters();
        Ok(ours)
    }

    /// On the accepting end, the thread that called
    /// [`connect`](Self::connect) (`None` on the connecting end and for a
    /// [`pair`](Self::pair)). Both ends live in this process: a runtime
    /// may serve the accepting end on that same thread, so the two sites
    /// talk without waking another thread for every exchange.
    pub fn connector_thread(&self) -> Option<std::thread::ThreadId> {
        self.connector
    }

    /// Waits until a read may make progress: bytes are waiting, or the
    /// stream has ended (the peer closed, or this end was shut down).
    pub async fn readable(&self) -> io::Result<()> {
        let p = &*self.rx;
        wait_until(&p.readable, || {
            let st = p.state.lock();
            !st.buf.is_empty() || st.writer_closed || st.reader_closed
        })
        .await;
        Ok(())
    }

    /// Waits until a write may make progress: there is room, or a write
    /// would fail (the peer is gone, or this end was shut down).
    pub async fn writable(&self) -> io::Result<()> {
        let p = &*self.tx;
        wait_until(&p.writable, || {
            let st = p.state.lock();
            st.buf.len() < MEM_PIPE_CAPACITY || st.reader_closed || st.writer_closed
        })
        .await;
        Ok(())
    }

    /// Reads without blocking: the bytes waiting (up to `buf.len()`),
    /// `Ok(0)` at end of stream (after every byte the peer sent), or
    /// `WouldBlock` when the peer is alive and sent nothing new.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let p = &*self.rx;
        let n = {
            let mut st = p.state.lock();
            if st.reader_closed || buf.is_empty() {
                return Ok(0);
            }
            if st.buf.is_empty() {
                return if st.writer_closed {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            st.buf.read(buf)?
        };
        p.writable.notify_waiters();
        Ok(n)
    }

    /// Writes without blocking from up to two slices (a ring's two halves):
    /// as many bytes as fit, `WouldBlock` if none fit, `BrokenPipe` if the
    /// peer is gone or this end was shut down.
    pub fn try_write2(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])
    }

    /// Writes from `bufs` in order, as much as the pipe takes (see
    /// [`Channel::try_write_vectored`](crate::Channel::try_write_vectored)).
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let p = &*self.tx;
        let n = {
            let mut st = p.state.lock();
            if st.writer_closed {
                return Err(broken_pipe("mem channel: this end was shut down"));
            }
            if st.reader_closed {
                return Err(broken_pipe("mem channel: the peer closed its end"));
            }
            if bufs.iter().all(|b| b.is_empty()) {
                return Ok(0);
            }
            let mut room = MEM_PIPE_CAPACITY - st.buf.len();
            if room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(room);
                st.buf.extend(&b[..k]);
                room -= k;
                n += k;
            }
            n
        };
        p.readable.notify_waiters();
        Ok(n)
    }

    /// Closes both directions now, as `shutdown(Both)` does on a socket: the
    /// peer reads the bytes already sent and then end of stream, and its
    /// writes fail with `BrokenPipe`; on this end reads return end of stream
    /// (bytes received and not yet read are dropped) and writes fail.
    /// Pending readiness calls on both ends return. Used by the fault
    /// injector to cut a channel from another thread; dropping the channel
    /// does the same.
    pub fn shutdown(&self) {
        self.tx.close_writer();
        self.rx.close_reader();
        // Our own pending readiness calls watch the other sides of the pipes.
        self.rx.readable.notify_waiters();
        self.tx.writable.notify_waiters();
    }

    /// The peer, for logs: `mem:NAME` on the connecting end, `mem:(client N)`
    /// on the accepting end.
    pub fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl Drop for MemChannel {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for MemChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One lock at a time: the peer's `Debug` locks the same two pipes in
        // the other order.
        let inbound = self.rx.state.lock().buf.len();
        let outbound = self.tx.state.lock().buf.len();
        f.debug_struct("MemChannel")
            .field("peer", &self.peer)
            .field("inbound", &inbound)
            .field("outbound", &outbound)
            .finish()
    }
}

/// The accept queue of a registered name, shared by the [`MemListener`] and
/// the registry (so a connect finds it without holding the registry lock).
struct ListenerShared {
    name: String,
    queue: Mutex<AcceptQueue>,
    /// Woken when a connection is queued.
    notify: Notify,
}

#[derive(Default)]
struct AcceptQueue {
    pending: VecDeque<MemChannel>,
    /// The threads that accept their own connections (see `lanes.rs`).
    lanes: HashMap<std::thread::ThreadId, lanes::Lane>,
    /// The listener was dropped: connects that found it in the registry just
    /// before are refused.
    closed: bool,
}

/// A registered `mem:NAME`, found in [`Listener::Mem`](crate::Listener::Mem).
/// Binding is synchronous (no runtime needed), so a node can report its
/// address before any runtime runs. Dropping it frees the name and drops the
/// connections not yet accepted (their connecting ends see end of stream).
///
/// # Example
///
/// ```
/// use std::io::ErrorKind;
/// use sitenet_transport::{MemChannel, MemListener};
///
/// let name = "node-a"; // process-wide: tests take `Address::unique_mem` names
/// let listener = MemListener::bind(name)?;
/// assert_eq!(listener.name(), name);
/// assert_eq!(MemListener::bind(name).unwrap_err().kind(), ErrorKind::AddrInUse);
///
/// let client = MemChannel::connect(name)?; // queued for `accept` at once
/// # let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let server = rt.block_on(listener.accept())?;
/// assert_eq!(client.peer(), format!("mem:{name}"));
/// assert!(server.peer().starts_with("mem:(client "));
///
/// drop(listener); // frees the name
/// let refused = MemChannel::connect(name).unwrap_err();
/// assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct MemListener {
    shared: Arc<ListenerShared>,
}

impl MemListener {
    /// Registers `name`. `AddrInUse` if a live listener has it,
    /// `InvalidInput` if it is empty. Names are process-wide: pick a unique
    /// one (for tests, [`Address::unique_mem`](crate::Address::unique_mem)).
    pub fn bind(name: &str) -> io::Result<Self> {
        check_name(name)?;
        let mut reg = REGISTRY.lock();
        if reg.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("mem:{name} is already bound by another listener in this process"),
            ));
        }
        let shared = Arc::new(ListenerShared {
            name: name.to_string(),
            queue: Mutex::new(AcceptQueue::default()),
            notify: Notify::new(),
        });
        reg.insert(name.to_string(), shared.clone());
        Ok(Self { shared })
    }

    /// The registered name (without `mem:`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Waits for the next connection and returns its accepting end.
    pub async fn accept(&self) -> io::Result<MemChannel> {
        let s = &*self.shared;
        let mut got = None;
        wait_until(&s.notify, || {
            got = s.queue.lock().pending.pop_front();
            got.is_some()
        })
        .await;
        Ok(got.expect("wait_until returns only once a connection was taken"))
    }

    /// Whether `name` is bound now (a snapshot: it may change right after).
    pub(crate) fn is_bound(name: &str) -> bool {
        REGISTRY.lock().contains_key(name)
    }
}

impl Drop for MemListener {
    fn drop(&mut self) {
        {
            let mut reg = REGISTRY.lock();
            if reg
                .get(&self.shared.name)
                .is_some_and(|l| Arc::ptr_eq(l, &self.shared))
            {
                reg.remove(&self.shared.name);
            }
        }
        let (pending, lanes) = {
            let mut q = self.shared.queue.lock();
            q.closed = true;
            (std::mem::take(&mut q.pending), std::mem::take(&mut q.lanes))
        };
        // Dropped outside the lock: each drop wakes its connecting end;
        // the lanes' acceptors wake to find the listener closed.
        drop(pending);
        for lane in lanes.into_values() {
            lane.notify.notify_waiters();
        }
    }
}

impl fmt::Debug for MemListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemListener")
            .field("name", &self.shared.name)
            .field("pending", &self.shared.queue.lock().pending.len())
            .finish()
    }
}

fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a mem: address needs a name (mem:NAME)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review finding (writing the doc examples): `pair()`'s ends named
    /// themselves, not their peers.
    #[test]
    fn each_end_of_a_pair_reports_the_other_as_its_peer() {
        let (a, b) = MemChannel::pair();
        assert_eq!(
            (a.peer().as_str(), b.peer().as_str()),
            ("mem:(pair b)", "mem:(pair a)")
        );
    }

    #[test]
    fn pipe_is_bounded_and_splits_two_slices() {
        let (a, b) = MemChannel::pair();
        let big = vec![1u8; MEM_PIPE_CAPACITY - 10];
        assert_eq!(a.try_write2(&big, &[2; 4]).unwrap(), MEM_PIPE_CAPACITY - 6);
        assert_eq!(a.try_write2(&[3; 4], &[4; 4]).unwrap(), 6);
        let e = a.try_write2(&[5], &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let mut buf = vec![0u8; MEM_PIPE_CAPACITY + 10];
        assert_eq!(b.try_read(&mut buf).unwrap(), MEM_PIPE_CAPACITY);
        assert_eq!(
            &buf[MEM_PIPE_CAPACITY - 10..MEM_PIPE_CAPACITY],
            &[2, 2, 2, 2, 3, 3, 3, 3, 4, 4]
        );
        let e = b.try_read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn shutdown_ends_both_directions_on_both_ends() {
        let (a, b) = MemChannel::pair();
        a.try_write2(b"abc", &[]).unwrap();
        b.try_write2(b"xyz", &[]).unwrap();
        a.shutdown();
        // This end: reads end (unread bytes dropped), writes fail.
        let mut buf = [0u8; 8];
        assert_eq!(a.try_read(&mut buf).unwrap(), 0);
        assert_eq!(
            a.try_write2(b"1", &[]).unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        // The peer: bytes already sent, then end; writes fail.
        assert_eq!(b.try_read(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(b.try_read(&mut buf).unwrap(), 0);
        assert_eq!(
            b.try_write2(b"1", &[]).unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }

    #[test]
    fn dropped_listener_drops_its_pending_connections() {
        let name = crate::Address::unique_mem("pending");
        let crate::Address::Mem { name } = name else {
            unreachable!()
        };
        let l = MemListener::bind(&name).unwrap();
        let c = MemChannel::connect(&name).unwrap();
        drop(l);
        let mut buf = [0u8; 1];
        assert_eq!(c.try_read(&mut buf).unwrap(), 0);
        assert_eq!(
            MemChannel::connect(&name).unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
    }
}
