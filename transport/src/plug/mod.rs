//! Transports a user plugs in: TLS over something else, QUIC, a runtime's
//! own carrier — any reliable ordered byte channel, reached at addresses
//! of a scheme of its own (`pipe:NAME`, `quic:HOST:PORT`).
//!
//! Why: the built-in kinds ([`Channel`]'s TCP, Unix and mem variants) are a
//! closed enum, and a runtime embedding sitenet often has a carrier of its
//! own (BMI's transport methods and Erlang's `-proto_dist` are the
//! precedents). A [`Transport`] connects to and binds addresses of its
//! scheme; a [`TransportRegistry`] maps scheme names to transports, parses
//! addresses with them ([`TransportRegistry::parse`]) and dials and binds
//! through them ([`TransportRegistry::connect`], [`TransportRegistry::bind`]).
//! A node holds one registry (`NodeBuilder::transport` in the runtime).
//!
//! What a plugged channel must do is what the channel driver asks of every
//! channel, and nothing more ([`TransportChannel`]): readiness (read and
//! write), non-blocking vectored writes, non-blocking reads into a buffer
//! the caller provides (a ring's free space, or a large message's own
//! memory: the in-place read path), ending the writing direction, closing
//! (for the fault injector's cuts) and naming the peer. [`StreamChannel`]
//! does all of it for any tokio `AsyncRead + AsyncWrite` stream, so most
//! transports are a few lines (see [`Transport`]'s example).
//!
//! The built-in kinds stay on the enum, dispatched statically: their hot
//! paths do not change. Only plugged channels ([`Channel::Plugged`]) pay a
//! virtual call per readiness check, read and write.

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use parking_lot::Mutex;
use thiserror::Error;

use crate::address::{is_scheme_name, Address, AddressError, BUILT_IN_SCHEMES};
use crate::channel::{BoundListener, Channel, TcpTuning};

mod stream;
#[cfg(test)]
mod tests;

pub use stream::StreamChannel;

/// A boxed future that may move between threads: what [`Transport`] and
/// [`TransportListener`] return for their waits (connecting, accepting),
/// which are not on any hot path.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A transport a user plugs in: connects to and binds addresses of its
/// scheme. Registered under a scheme name in a [`TransportRegistry`]; the
/// registry hands it the text after `scheme:` (`rest`), never the scheme.
///
/// # Example
///
/// An in-process transport over `tokio::io::duplex` pairs: listeners are
/// named in a shared map, and a connect hands the far end of a fresh pair
/// to the listener of that name. [`StreamChannel`] makes each end a
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
    /// ([`TransportRegistry::parse`]), so a malformed address is an
    /// [`AddressError::Invalid`] at once rather than a failed connect
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
/// [`StreamChannel`] implements it for any tokio stream.
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
}

/// A channel of a plugged transport, in [`Channel::Plugged`]: the
/// transport's channel and the scheme it was registered under.
pub struct PluggedChannel {
    scheme: &'static str,
    inner: Box<dyn TransportChannel>,
}

impl PluggedChannel {
    /// `inner`, a channel of the transport registered as `scheme`. The
    /// scheme name is interned (kept for the life of the process, once
    /// per distinct name) so [`Channel::scheme`] stays a `&'static str`.
    pub fn new(scheme: &str, inner: Box<dyn TransportChannel>) -> Self {
        Self {
            scheme: intern(scheme),
            inner,
        }
    }

    /// The scheme the transport is registered under.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The transport's channel.
    pub fn get(&self) -> &dyn TransportChannel {
        &*self.inner
    }
}

impl fmt::Debug for PluggedChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluggedChannel")
            .field("scheme", &self.scheme)
            .field("peer", &self.inner.peer())
            .finish()
    }
}

/// A listener of a plugged transport, in [`crate::Listener::Plugged`].
pub struct PluggedListener {
    scheme: &'static str,
    inner: Box<dyn TransportListener>,
}

impl PluggedListener {
    /// `inner`, a listener of the transport registered as `scheme`.
    pub fn new(scheme: &str, inner: Box<dyn TransportListener>) -> Self {
        Self {
            scheme: intern(scheme),
            inner,
        }
    }

    /// The address bound, scheme included.
    pub fn local_address(&self) -> io::Result<Address> {
        Ok(Address::plugged(self.scheme, self.inner.local_address()?))
    }

    /// The next connection, as a [`Channel`].
    pub async fn accept(&self) -> io::Result<Channel> {
        let ch = self.inner.accept().await?;
        Ok(Channel::Plugged(PluggedChannel {
            scheme: self.scheme,
            inner: ch,
        }))
    }
}

impl fmt::Debug for PluggedListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PluggedListener");
        d.field("scheme", &self.scheme);
        if let Ok(a) = self.inner.local_address() {
            d.field("address", &a);
        }
        d.finish()
    }
}

/// Why a transport could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegisterError {
    /// The name is one of the built-in kinds' (`tcp`, `tls`, `unix`,
    /// `mem`): those are dispatched statically and cannot be replaced.
    #[error(
        "scheme {0:?} is built in (tcp, tls, unix, mem); register the transport under another name"
    )]
    BuiltIn(String),
    /// The name is not a scheme: a lowercase ASCII letter, then at most 31
    /// lowercase letters, digits, `+`, `-` or `.` (so that `NAME:REST`
    /// splits at the first colon and reads the same everywhere).
    #[error(
        "{0:?} is not a scheme name: expected a lowercase letter, then at most 31 lowercase letters, digits, '+', '-' or '.'"
    )]
    Name(String),
    /// A transport is registered under this scheme already.
    #[error("a transport is registered under scheme {0:?} already")]
    Taken(String),
}

/// Scheme name → [`Transport`]: what a node dials and listens through
/// beyond the built-in kinds. Cheap to clone (an `Arc` inside); clones
/// share the transports.
///
/// Parsing with it ([`parse`](Self::parse)) accepts the built-in forms
/// and `SCHEME:REST` for a registered scheme; a scheme name no transport
/// is registered under is [`AddressError::Unregistered`].
///
/// ```
/// use sitenet_transport::plug::{RegisterError, TransportRegistry};
/// use sitenet_transport::{Address, AddressError};
///
/// let empty = TransportRegistry::new();
/// // Built-in forms parse with any registry; other schemes must be registered.
/// assert_eq!(empty.parse("mem:a"), Ok(Address::mem("a")));
/// assert!(matches!(empty.parse("pipe:a"), Err(AddressError::Unregistered { .. })));
/// // Built-in names are not for the taking.
/// # struct T;
/// # impl sitenet_transport::plug::Transport for T {
/// #     fn connect<'a>(&'a self, _: &'a str) -> sitenet_transport::plug::BoxFuture<'a, std::io::Result<Box<dyn sitenet_transport::plug::TransportChannel>>> { unimplemented!() }
/// #     fn bind(&self, _: &str) -> std::io::Result<Box<dyn sitenet_transport::plug::TransportListener>> { unimplemented!() }
/// # }
/// let mut r = TransportRegistry::new();
/// let e = r.register("tcp", std::sync::Arc::new(T)).unwrap_err();
/// assert_eq!(e, RegisterError::BuiltIn("tcp".into()));
/// // Registering chains; a clone shares what was registered so far.
/// r.register("pipe", std::sync::Arc::new(T))?.register("quic", std::sync::Arc::new(T))?;
/// assert_eq!(r.clone().schemes().collect::<Vec<_>>(), ["pipe", "quic"]);
/// assert_eq!(r.parse("pipe:a"), Ok(Address::plugged("pipe", "a")));
/// # Ok::<(), RegisterError>(())
/// ```
#[derive(Clone, Default)]
pub struct TransportRegistry {
    map: Arc<BTreeMap<&'static str, Arc<dyn Transport>>>,
}

impl TransportRegistry {
    /// A registry with no plugged transport: the built-in kinds only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `transport` under `scheme` (without the colon). Refused
    /// for a built-in name, a name that is not a scheme, or one taken.
    pub fn register(
        &mut self,
        scheme: &str,
        transport: Arc<dyn Transport>,
    ) -> Result<&mut Self, RegisterError> {
        if BUILT_IN_SCHEMES.contains(&scheme) {
            return Err(RegisterError::BuiltIn(scheme.into()));
        }
        if !is_scheme_name(scheme) {
            return Err(RegisterError::Name(scheme.into()));
        }
        if self.map.contains_key(scheme) {
            return Err(RegisterError::Taken(scheme.into()));
        }
        Arc::make_mut(&mut self.map).insert(intern(scheme), transport);
        Ok(self)
    }

    /// Registers every transport of `other` here (refused, with nothing
    /// changed, if a scheme is taken).
    pub fn extend(&mut self, other: &TransportRegistry) -> Result<&mut Self, RegisterError> {
        if let Some(s) = other.schemes().find(|s| self.map.contains_key(s)) {
            return Err(RegisterError::Taken(s.into()));
        }
        let map = Arc::make_mut(&mut self.map);
        for (s, t) in other.map.iter() {
            map.insert(s, t.clone());
        }
        Ok(self)
    }

    /// The transport registered under `scheme`.
    pub fn get(&self, scheme: &str) -> Option<&Arc<dyn Transport>> {
        self.map.get(scheme)
    }

    /// The registered schemes, in name order.
    pub fn schemes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.map.keys().copied()
    }

    /// True when no transport is registered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Parses `s`: a built-in form as [`Address`]'s `FromStr` does, or
    /// `SCHEME:REST` for a registered scheme (`REST` not empty, and
    /// accepted by the transport's [`Transport::check`]).
    pub fn parse(&self, s: &str) -> Result<Address, AddressError> {
        match s.parse::<Address>() {
            Err(AddressError::Unregistered { scheme, .. }) if self.map.contains_key(&*scheme) => {
                let rest = &s[scheme.len() + 1..];
                let invalid = |reason: String| AddressError::Invalid {
                    address: s.to_string(),
                    reason,
                };
                if rest.is_empty() {
                    return Err(invalid(format!(
                        "nothing after {scheme}: (expected {scheme}:ADDRESS)"
                    )));
                }
                self.map[&*scheme].check(rest).map_err(invalid)?;
                Ok(Address::Plugged {
                    scheme,
                    rest: rest.to_string(),
                })
            }
            other => other,
        }
    }

    /// The transport for a plugged address, or why there is none.
    fn lookup<'a>(
        &'a self,
        scheme: &str,
        addr: &Address,
    ) -> io::Result<(&'static str, &'a dyn Transport)> {
        match self.map.get_key_value(scheme) {
            Some((name, t)) => Ok((name, &**t)),
            None => Err(unregistered(addr)),
        }
    }

    /// Connects to `addr`: through its transport for a plugged address,
    /// else as [`Channel::connect_tuned`] does.
    pub async fn connect(&self, addr: &Address, tuning: TcpTuning) -> io::Result<Channel> {
        match addr {
            Address::Plugged { scheme, rest } => {
                let (scheme, t) = self.lookup(scheme, addr)?;
                let inner = t.connect(rest).await?;
                Ok(Channel::Plugged(PluggedChannel { scheme, inner }))
            }
            _ => Channel::connect_tuned(addr, tuning).await,
        }
    }

    /// Binds `addr` now: through its transport for a plugged address, else
    /// as [`BoundListener::bind`] does.
    pub fn bind(&self, addr: &Address) -> io::Result<BoundListener> {
        match addr {
            Address::Plugged { scheme, rest } => {
                let (scheme, t) = self.lookup(scheme, addr)?;
                let inner = t.bind(rest)?;
                Ok(BoundListener::plugged(PluggedListener { scheme, inner }))
            }
            _ => BoundListener::bind(addr),
        }
    }
}

impl fmt::Debug for TransportRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.schemes()).finish()
    }
}

/// The error for a plugged address met where its transport is not known
/// (a plain [`Channel::connect`], or another registry): `Unsupported`,
/// carrying the [`AddressError::Unregistered`].
pub(crate) fn unregistered(addr: &Address) -> io::Error {
    let scheme = match addr {
        Address::Plugged { scheme, .. } => scheme.clone(),
        _ => String::new(),
    };
    io::Error::new(
        io::ErrorKind::Unsupported,
        AddressError::Unregistered {
            address: addr.to_string(),
            scheme,
        },
    )
}

/// Scheme names, kept for the life of the process: one copy per distinct
/// name ever registered, so channels can name theirs as `&'static str`.
fn intern(s: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut names = NAMES.lock();
    match names.get(s) {
        Some(n) => n,
        None => {
            let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
            names.insert(n);
            n
        }
    }
}
