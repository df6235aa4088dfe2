//! The interface a plugged transport implements: [`Transport`] (connect
//! and bind addresses of its scheme), [`TransportListener`] and
//! [`TransportChannel`] (a reliable ordered byte channel used through
//! readiness and non-blocking calls, as the channel driver uses a socket).

use std::any::Any;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed future that may move between threads: what [`Transport`] and
/// [`TransportListener`] return for their waits (connecting, accepting),
/// which are not on any hot path.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A transport a user plugs in: connects to and binds addresses of its
/// scheme. Registered under a scheme name in a [`TransportRegistry`](super::TransportRegistry); the
/// registry hands it the text after `scheme:` (`rest`), never the scheme.
///
/// # Example
///
/// An in-process transport over `tokio::io::duplex` pairs: listeners are
/// named in a shared map, and a connect hands the far end of a fresh pair
/// to the listener of that name. [`StreamChannel`](super::StreamChannel) makes each end a
/// channel.
///
/// ```
/// use std::collections::HashMap;
/// use std::io;
/// use std::sync::{Arc, Mutex};
/// use sitenet_transport::plug::{
///     BoxFuture, StreamChannel, Transport, TransportChannel, TransportListener, TransportRegistry,
/// };
/// use sitenet_transport::channel::TcpTuning;
/// use sitenet_transport::Address;
/// use tokio::io::DuplexStream;
/// use tokio::sync::mpsc;
///
/// #[derive(Default)]
/// struct Pipes(Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>);
///
/// struct PipeListener {
///     name: String,
///     queue: tokio::sync::Mutex<mpsc::Receiver<DuplexStream>>,
/// }
///
/// impl Transport for Pipes {
///     fn connect<'a>(&'a self, rest: &'a str) -> BoxFuture<'a, io::Result<Box<dyn TransportChannel>>> {
///         Box::pin(async move {
///             let queue = self.0.lock().unwrap().get(rest).cloned();
///             let queue = queue.ok_or(io::ErrorKind::ConnectionRefused)?;
///             let (ours, theirs) = tokio::io::duplex(64 * 1024);
///             queue.send(theirs).await.map_err(|_| io::ErrorKind::ConnectionRefused)?;
///             Ok(Box::new(StreamChannel::new(ours, rest)) as Box<dyn TransportChannel>)
///         })
///     }
///
///     fn bind(&self, rest: &str) -> io::Result<Box<dyn TransportListener>> {
///         let (tx, rx) = mpsc::channel(16);
///         let mut names = self.0.lock().unwrap();
///         if names.insert(rest.to_string(), tx).is_some() {
///             return Err(io::ErrorKind::AddrInUse.into());
///         }
///         Ok(Box::new(PipeListener { name: rest.into(), queue: rx.into() }))
///     }
/// }
///
/// impl TransportListener for PipeListener {
///     fn accept(&self) -> BoxFuture<'_, io::Result<Box<dyn TransportChannel>>> {
///         Box::pin(async move {
///             let s = self.queue.lock().await.recv().await;
///             let s = s.ok_or(io::ErrorKind::ConnectionAborted)?;
///             Ok(Box::new(StreamChannel::new(s, "(client)")) as Box<dyn TransportChannel>)
///         })
///     }
///
///     fn local_address(&self) -> io::Result<String> {
///         Ok(self.name.clone())
///     }
/// }
///
/// let mut registry = TransportRegistry::new();
/// registry.register("pipe", Arc::new(Pipes::default()))?;
/// let addr: Address = registry.parse("pipe:a")?;
/// assert_eq!(addr.to_string(), "pipe:a");
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let listener = registry.bind(&addr)?.into_listener()?;
///     let client = registry.connect(&addr, TcpTuning::default()).await?;
///     let server = listener.accept().await?;
///     assert_eq!((client.scheme(), client.peer()), ("pipe", "pipe:a".to_string()));
///     assert_eq!(server.peer(), "pipe:(client)");
///
///     client.writable().await?;
///     assert_eq!(client.try_write2(b"hello ", b"pipe")?, 10);
///     server.readable().await?;
///     let mut buf = [0u8; 32];
///     let n = server.try_read(&mut buf)?;
///     assert_eq!(&buf[..n], b"hello pipe");
///     Ok::<(), io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Transport: Send + Sync + 'static {
    /// Checks the text after `scheme:` when an address is parsed
    /// ([`TransportRegistry::parse`](super::TransportRegistry::parse)), so a malformed address is an
    /// [`AddressError::Invalid`](crate::AddressError::Invalid) at once rather than a failed connect
    /// later. The reason is shown to the user. Accepts anything not empty
    /// unless overridden (an empty `rest` never reaches it).
    fn check(&self, rest: &str) -> Result<(), String> {
        let _ = rest;
        Ok(())
    }

    /// Connects to the listener at `rest`. The caller bounds the wait
    /// (the node's connect timeout) and drops the future when it expires.
    /// A refusal is an error (for example `ConnectionRefused`); the node
    /// then tries the site's next address.
    fn connect<'a>(&'a self, rest: &'a str)
        -> BoxFuture<'a, io::Result<Box<dyn TransportChannel>>>;

    /// Binds `rest`, now. A node binds its listeners when it starts,
    /// possibly on a thread with no tokio runtime, so that a taken address
    /// is an error of `start` and the real address is known before
    /// anything runs: reserve the address here and leave what needs a
    /// runtime to the first [`accept`](TransportListener::accept).
    fn bind(&self, rest: &str) -> io::Result<Box<dyn TransportListener>>;
}

/// The listening end of a plugged [`Transport`]. Dropping it stops the
/// listening (frees the address).
pub trait TransportListener: Send + Sync + 'static {
    /// The next connection. Must be cancel-safe: the node drops the future
    /// when it stops, and a connection must not be lost because a future
    /// was dropped (a queue's `recv` is; a half-done handshake in the
    /// future is not). An error makes the node log it and try again a
    /// little later.
    fn accept(&self) -> BoxFuture<'_, io::Result<Box<dyn TransportChannel>>>;

    /// The address actually bound, after `scheme:` (a transport that picks
    /// a name for a wildcard, as port 0 does for TCP, says which here).
    /// This is the address the node lists to its peers.
    fn local_address(&self) -> io::Result<String>;
}

/// One connected channel of a plugged [`Transport`]: a reliable ordered
/// byte stream used through readiness and non-blocking calls, exactly as
/// the channel driver uses a socket. All methods take `&self`: the driver
/// waits for readability and writability concurrently (one waiter per
/// direction at a time) while it reads or writes.
///
/// The contract is a socket's: `try_read` returning `Ok(0)` (with a
/// non-empty buffer) is the end of the stream; `WouldBlock` from a `try_*`
/// call means "wait for readiness", and readiness must then be announced
/// (waking the task that polled it) when a retry may make progress — a
/// spurious readiness is fine, a missing one stalls the channel. A write
/// after the peer is gone fails (`BrokenPipe` or a reset). Bytes a write
/// took are the transport's to deliver (after a graceful close too: see
/// [`shutdown_write`](Self::shutdown_write)).
///
/// [`StreamChannel`](super::StreamChannel) implements it for any tokio stream.
pub trait TransportChannel: Send + Sync + 'static {
    /// Ready when a read may make progress (bytes or the end of the stream
    /// wait, or an error); otherwise registers `cx`'s waker and is pending.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Ready when a write may make progress (room, or an error); otherwise
    /// registers `cx`'s waker and is pending.
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Reads without blocking into `buf`, which is where the bytes are
    /// wanted (the input ring's free space, or a large message's own
    /// buffer: the driver's in-place read path). `Ok(0)` is the end of
    /// the stream; `WouldBlock` means wait for
    /// [`poll_read_ready`](Self::poll_read_ready).
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;

    /// Writes without blocking from `bufs` in order (frame headers from the
    /// output ring and large bodies from the application's buffers, so
    /// taking them in one call saves copies and calls). Returns how many
    /// bytes were taken; `WouldBlock` means wait for
    /// [`poll_write_ready`](Self::poll_write_ready).
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;

    /// Ends the writing direction after the bytes written so far; reading
    /// goes on until the peer closes too. A node closing gracefully writes
    /// its last frame, calls this, and reads until the end of the stream
    /// (bounded in time) before dropping the channel, so a transport that
    /// discards unsent bytes on drop (as TCP does with unread input) still
    /// delivers the frame that says why it went.
    fn shutdown_write(&self) -> io::Result<()>;

    /// Closes both directions at once: the peer reads what was already
    /// delivered, then the end of the stream, and its writes fail; reads
    /// here return `Ok(0)` and writes fail from now on. The fault
    /// injector's cut ([`crate::FaultInjector`]); dropping the channel
    /// closes it too.
    fn close(&self);

    /// The peer, after the scheme (the node prefixes `scheme:`), for logs
    /// and fault reports: a name on the connecting side, something like
    /// `(client 3)` on the accepting side.
    fn peer(&self) -> String;

    /// For the accepting end of an in-process channel, the thread that
    /// connected it: the accepting node runs the new site on that thread
    /// (see [`crate::Channel::connector_thread`]). `None` by default, as
    /// for any channel between processes; a wrapper passes on what the
    /// channel it wraps says.
    fn connector_thread(&self) -> Option<std::thread::ThreadId> {
        None
    }

    /// The channel as [`Any`], so the code that made it can reach its own
    /// type again through [`PluggedChannel::downcast_ref`](super::PluggedChannel::downcast_ref).
    /// `None` by default (nothing to reach); a type that wants to be
    /// reached returns `Some(self)`.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}
