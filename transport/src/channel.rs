//! [`Channel`]: one reliable ordered byte channel, used through readiness
//! (`readable`/`writable`) and non-blocking `try_read`/`try_write2`, and the
//! [`Listener`]s that accept them.
//!
//! The channel driver owns the two ByteBuffers and moves bytes between them
//! and the channel with the `try_*` calls, so reads and writes are independent
//! (reads never wait behind writes) and no buffer grows.
//!
//! Three kinds, one behaviour — the channel driver never asks which kind
//! it holds:
//!
//! - TCP ([`Channel::Tcp`], `tcp:HOST:PORT`), with TCP_NODELAY;
//! - Unix domain sockets ([`Channel::Unix`], `unix:PATH`), for sites on one
//!   machine;
//! - in-process pipes ([`Channel::Mem`], `mem:NAME`), for many sites in one
//!   process without file descriptors (see [`crate::mem`]).
//!
//! A fourth variant, [`Channel::Plugged`], holds a channel of a transport a
//! user plugged in (see [`crate::plug`]) behind a trait object: only such
//! channels pay a virtual call; the built-in kinds stay statically
//! dispatched. The test support's fault injector
//! ([`FaultInjector`](crate::fault::FaultInjector)) wraps a channel of any
//! kind in one of those ([`FaultyChannel`](crate::fault::FaultyChannel)), so
//! the production enum knows nothing of it.
//!
//! In each, `try_read` returning `Ok(0)` is the end of the stream and
//! `WouldBlock` means "await readiness"; a write after the peer is gone fails
//! (`BrokenPipe` or a reset).
//!
//! [`BoundListener`] binds synchronously (so a node can report its real
//! address before any runtime runs) and becomes a [`Listener`] on the runtime
//! thread.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::address::Address;
use crate::mem::{MemChannel, MemListener};
use crate::plug::{unregistered, PluggedChannel, PluggedListener};
use crate::tcp_tuning::tune_tcp;
pub use crate::tcp_tuning::{
    TcpTuning, TCP_LOOPBACK_NOTSENT_LOWAT, TCP_LOOPBACK_RECEIVE_BUFFER, TCP_NOTSENT_LOWAT,
    TCP_RECEIVE_BUFFER,
};

/// A connected byte channel. Cheap readiness futures take `&self`, so the
/// driver can await readability and writability concurrently.
///
/// # Example
///
/// A TCP channel over loopback: await readiness, then read or write without
/// blocking, retrying on `WouldBlock`.
///
/// ```
/// use std::io::ErrorKind;
/// use sitenet_transport::{Address, Channel, Listener};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// let listener = Listener::bind(&"tcp:127.0.0.1:0".parse().unwrap()).await?;
/// let addr = listener.local_address()?; // the real port
/// let client = Channel::connect(&addr).await?;
/// let server = listener.accept().await?;
/// assert_eq!(server.peer().split(':').next(), Some("tcp"));
///
/// client.writable().await?;
/// assert_eq!(client.try_write2(b"ping", &[])?, 4);
/// let mut got = Vec::new();
/// let mut buf = [0u8; 16];
/// while got.len() < 4 {
///     server.readable().await?;
///     match server.try_read(&mut buf) {
///         Ok(n) => got.extend_from_slice(&buf[..n]),
///         Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
///         Err(e) => return Err(e),
///     }
/// }
/// assert_eq!(got, b"ping");
/// # Ok::<(), std::io::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub enum Channel {
    /// A TCP connection (TCP_NODELAY set).
    Tcp(TcpStream),
    /// A Unix domain socket connection: like TCP, without the network stack,
    /// for sites on one machine.
    Unix(UnixStream),
    /// An in-process channel (two bounded byte pipes, no file descriptor),
    /// for many sites in one process.
    Mem(MemChannel),
    /// A channel of a transport plugged in by the user (see
    /// [`crate::plug`]), made by a
    /// [`TransportRegistry`](crate::plug::TransportRegistry); or a channel
    /// wrapped by a [`FaultInjector`](crate::FaultInjector), for tests.
    Plugged(PluggedChannel),
}

impl Channel {
    /// Connects to `addr`. A `mem:` address connects to a listener of this
    /// process (`ConnectionRefused` if there is none by that name); an empty
    /// Unix path or mem name is `InvalidInput`. A plugged transport's
    /// address is `Unsupported` here: connect through the
    /// [`TransportRegistry`](crate::plug::TransportRegistry) that has it.
    pub async fn connect(addr: &Address) -> io::Result<Self> {
        Self::connect_tuned(addr, TcpTuning::default()).await
    }

    /// [`connect`](Self::connect), with `tuning` for a TCP channel.
    pub async fn connect_tuned(addr: &Address, tuning: TcpTuning) -> io::Result<Self> {
        match addr {
            // TLS runs over the TCP channel, in the TransObject.
            Address::Tcp { .. } | Address::Tls { .. } => {
                let s = TcpStream::connect(addr.socket_string()).await?;
                tune_tcp(&s, tuning)?;
                Ok(Self::Tcp(s))
            }
            Address::Unix { path } => {
                check_path(path)?;
                Ok(Self::Unix(UnixStream::connect(path).await?))
            }
            Address::Mem { name } => Ok(Self::Mem(MemChannel::connect(name)?)),
            Address::Plugged { .. } => Err(unregistered(addr)),
        }
    }

    /// For an in-process channel's accepting end, the thread that
    /// connected it ([`MemChannel::connector_thread`]), through a fault
    /// wrapper too (a plugged channel says it with
    /// [`TransportChannel::connector_thread`](crate::plug::TransportChannel::connector_thread));
    /// `None` for every other channel. See
    /// `docs/architecture.md`, "Threads": the accepting node runs a new
    /// site of such a channel on that thread.
    pub fn connector_thread(&self) -> Option<std::thread::ThreadId> {
        match self {
            Self::Mem(m) => m.connector_thread(),
            Self::Plugged(p) => p.get().connector_thread(),
            Self::Tcp(_) | Self::Unix(_) => None,
        }
    }

    /// Moves the channel's socket to the I/O driver of the tokio runtime
    /// this is called on (it must be called inside one). A socket belongs
    /// to the runtime it was accepted or connected on: its readiness is
    /// polled there, and every event of a socket read on another thread
    /// would cross threads. A node accepts on one thread and hands each
    /// channel, once its handshake is done, to the thread of the site it
    /// serves, which calls this first.
    ///
    /// The socket's descriptor is duplicated and registered here; the old
    /// one is deregistered and closed. Nothing the socket holds is lost:
    /// unread bytes stay in the kernel, and the channel has no buffer of
    /// its own. In-process and plugged channels (fault wrappers among them)
    /// have no driver to move to and are left as they are.
    pub fn rehome(&mut self) -> io::Result<()> {
        use std::os::fd::AsFd;
        match self {
            Self::Tcp(s) => {
                let fd = s.as_fd().try_clone_to_owned()?;
                let std = std::net::TcpStream::from(fd);
                std.set_nonblocking(true)?;
                *s = TcpStream::from_std(std)?;
            }
            Self::Unix(s) => {
                let fd = s.as_fd().try_clone_to_owned()?;
                let std = std::os::unix::net::UnixStream::from(fd);
                std.set_nonblocking(true)?;
                *s = UnixStream::from_std(std)?;
            }
            Self::Mem(_) | Self::Plugged(_) => {}
        }
        Ok(())
    }

    /// Waits until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.readable().await,
            Self::Unix(s) => s.readable().await,
            Self::Mem(m) => m.readable().await,
            Self::Plugged(p) => std::future::poll_fn(|cx| p.get().poll_read_ready(cx)).await,
        }
    }

    /// Waits until a write may make progress.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.writable().await,
            Self::Unix(s) => s.writable().await,
            Self::Mem(m) => m.writable().await,
            Self::Plugged(p) => std::future::poll_fn(|cx| p.get().poll_write_ready(cx)).await,
        }
    }

    /// Reads without blocking; `Ok(0)` is end of stream, `WouldBlock` means
    /// wait for [`readable`](Self::readable).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.try_read(buf),
            Self::Unix(s) => s.try_read(buf),
            Self::Mem(m) => m.try_read(buf),
            Self::Plugged(p) => p.get().try_read(buf),
        }
    }

    /// Writes without blocking from up to two slices (a ring's two halves).
    pub fn try_write2(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        if b.is_empty() {
            self.try_write_vectored(&[io::IoSlice::new(a)])
        } else {
            self.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])
        }
    }

    /// Writes without blocking from `bufs` in order, in one system call on
    /// a socket (`writev`): frame headers from the output ring and large
    /// bodies straight from the application's buffers. Returns how many
    /// bytes were taken; `WouldBlock` means wait for
    /// [`writable`](Self::writable).
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => match bufs {
                [one] => s.try_write(one),
                _ => s.try_write_vectored(bufs),
            },
            Self::Unix(s) => match bufs {
                [one] => s.try_write(one),
                _ => s.try_write_vectored(bufs),
            },
            Self::Mem(m) => m.try_write_vectored(bufs),
            Self::Plugged(p) => p.get().try_write_vectored(bufs),
        }
    }

    /// Ends the writing direction after the bytes written so far (a TCP or
    /// Unix FIN); reading goes on. A closing side that still reads what
    /// its peer sends does not make the kernel answer with a reset that
    /// discards its own last bytes (see `TransObject::linger_close` in the
    /// runtime). A mem channel keeps what was written readable anyway:
    /// nothing to do. A plugged channel does what its transport does
    /// ([`TransportChannel::shutdown_write`](crate::plug::TransportChannel::shutdown_write)).
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write),
            Self::Unix(s) => socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write),
            Self::Mem(_) => Ok(()),
            Self::Plugged(p) => p.get().shutdown_write(),
        }
    }

    /// The channel's kind as an address scheme: `tcp`, `unix`, `mem`, or
    /// the scheme a plugged transport is registered under (a
    /// fault-injecting wrapper names what it wraps). A `tls:` channel is
    /// a `tcp` one here: TLS runs above the channel.
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::Tcp(_) => "tcp",
            Self::Unix(_) => "unix",
            Self::Mem(_) => "mem",
            Self::Plugged(p) => p.scheme(),
        }
    }

    /// The peer's address, for logs: `tcp:IP:PORT`; `unix:PATH` on the
    /// connecting side of a Unix socket and `unix:(client)` on the accepting
    /// side (clients have no name); `mem:NAME` on the connecting side of a
    /// mem channel and `mem:(client N)` on the accepting side;
    /// `SCHEME:` and what a plugged channel says of its peer.
    pub fn peer(&self) -> String {
        match self {
            Self::Tcp(s) => s
                .peer_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp:?".into()),
            Self::Unix(s) => match s.peer_addr() {
                Ok(a) => match a.as_pathname() {
                    Some(p) => format!("unix:{}", p.display()),
                    None => "unix:(client)".into(),
                },
                Err(_) => "unix:?".into(),
            },
            Self::Mem(m) => m.peer(),
            Self::Plugged(p) => format!("{}:{}", p.scheme(), p.get().peer()),
        }
    }

    /// The kernel's receive buffer of a TCP channel (`SO_RCVBUF` as the
    /// kernel reports it: Linux doubles what was set, for its
    /// bookkeeping); `None` for other channels. What [`TcpTuning`] did.
    pub fn tcp_receive_buffer(&self) -> Option<usize> {
        match self {
            Self::Tcp(s) => socket2::SockRef::from(s).recv_buffer_size().ok(),
            _ => None,
        }
    }
}

/// A listening endpoint.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A TCP listener whose channels run TLS (`tls:HOST:PORT`): it accepts
    /// TCP channels; the TransObject runs TLS over them.
    Tls(TcpListener),
    /// A Unix domain socket listener. The socket file stays after the
    /// listener is dropped (as with any Unix socket); the next bind at that
    /// path replaces it because no one listens there any more.
    Unix(UnixListener),
    /// A registered in-process name; dropping it frees the name.
    Mem(MemListener),
    /// A listener of a plugged transport (see [`crate::plug`]).
    Plugged(PluggedListener),
}

impl Listener {
    /// Binds `addr` (port 0 picks a free port; [`local_address`](Self::local_address)
    /// tells which). For Unix sockets, a stale socket file at the path (one
    /// no one listens on) is replaced; a live one is `AddrInUse` (found by
    /// connecting to it, so the live listener accepts one connection that
    /// ends at once). A mem name already bound in this process is
    /// `AddrInUse`. A plugged transport's address is `Unsupported` here:
    /// bind through the [`TransportRegistry`](crate::plug::TransportRegistry)
    /// that has it.
    pub async fn bind(addr: &Address) -> io::Result<Self> {
        match addr {
            Address::Tcp { .. } => Ok(Self::Tcp(TcpListener::bind(addr.socket_string()).await?)),
            Address::Tls { .. } => Ok(Self::Tls(TcpListener::bind(addr.socket_string()).await?)),
            // Sync binds, then registration with this task's runtime.
            Address::Unix { .. } | Address::Mem { .. } => {
                BoundListener::bind(addr)?.into_listener()
            }
            Address::Plugged { .. } => Err(unregistered(addr)),
        }
    }

    /// The address actually bound, with the real port.
    pub fn local_address(&self) -> io::Result<Address> {
        match self {
            Self::Tcp(l) => {
                let a: SocketAddr = l.local_addr()?;
                Ok(Address::tcp(a.ip().to_string(), a.port()))
            }
            Self::Tls(l) => {
                let a: SocketAddr = l.local_addr()?;
                Ok(Address::tls(a.ip().to_string(), a.port()))
            }
            Self::Unix(l) => unix_address(l.local_addr()?.as_pathname()),
            Self::Mem(l) => Ok(Address::mem(l.name())),
            Self::Plugged(l) => l.local_address(),
        }
    }

    /// Whether the channels this listener accepts run TLS (the caller
    /// starts it over them).
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// Accepts the next channel.
    pub async fn accept(&self) -> io::Result<Channel> {
        self.accept_tuned(TcpTuning::default()).await
    }

    /// [`accept`](Self::accept), with `tuning` for a TCP channel.
    pub async fn accept_tuned(&self, tuning: TcpTuning) -> io::Result<Channel> {
        match self {
            Self::Tcp(l) | Self::Tls(l) => {
                let (s, _) = l.accept().await?;
                tune_tcp(&s, tuning)?;
                Ok(Channel::Tcp(s))
            }
            Self::Unix(l) => Ok(Channel::Unix(l.accept().await?.0)),
            Self::Mem(l) => Ok(Channel::Mem(l.accept().await?)),
            Self::Plugged(l) => Ok(Channel::Plugged(l.accept().await?)),
        }
    }
}

/// A listening socket bound synchronously (so a node can report its real
/// address before any runtime runs), turned into a [`Listener`] on the
/// runtime thread.
///
/// # Example
///
/// A Unix socket in a temporary directory, bound and its address known
/// before the runtime exists.
///
/// ```
/// use std::io::ErrorKind;
/// use sitenet_transport::{Address, BoundListener, Channel};
///
/// # let dir = std::env::temp_dir().join(format!("sitenet-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let addr = Address::unix(dir.join("site.sock"));
/// let bound = BoundListener::bind(&addr)?;
/// assert_eq!(bound.local_address()?, addr);
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let listener = bound.into_listener()?; // on the runtime thread
///     let client = Channel::connect(&addr).await?;
///     let _server = listener.accept().await?;
///     assert_eq!(client.peer(), addr.to_string());
///     // The path is live: a second bind is refused.
///     assert_eq!(BoundListener::bind(&addr).unwrap_err().kind(), ErrorKind::AddrInUse);
///     Ok::<(), std::io::Error>(())
/// })?;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct BoundListener {
    inner: Bound,
}

#[derive(Debug)]
enum Bound {
    Tcp(std::net::TcpListener),
    Tls(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
    /// Registered already: needs no runtime at all.
    Mem(MemListener),
    /// Bound by its transport (synchronously, like the others).
    Plugged(PluggedListener),
}

impl BoundListener {
    /// Binds `addr` now (port 0 picks a free port; a stale Unix socket file
    /// is replaced, a live one is `AddrInUse`; a mem name is registered at
    /// once, `AddrInUse` if taken). A plugged transport's address is
    /// `Unsupported` here: bind through the
    /// [`TransportRegistry`](crate::plug::TransportRegistry) that has it.
    pub fn bind(addr: &Address) -> io::Result<Self> {
        let inner = match addr {
            Address::Tcp { .. } | Address::Tls { .. } => {
                let l = std::net::TcpListener::bind(addr.socket_string())?;
                l.set_nonblocking(true)?;
                if addr.is_tls() {
                    Bound::Tls(l)
                } else {
                    Bound::Tcp(l)
                }
            }
            Address::Unix { path } => {
                let l = bind_unix(path)?;
                l.set_nonblocking(true)?;
                Bound::Unix(l)
            }
            Address::Mem { name } => Bound::Mem(MemListener::bind(name)?),
            Address::Plugged { .. } => return Err(unregistered(addr)),
        };
        Ok(Self { inner })
    }

    /// A plugged transport's listener, bound by it.
    pub(crate) fn plugged(l: PluggedListener) -> Self {
        Self {
            inner: Bound::Plugged(l),
        }
    }

    /// The address actually bound, with the real port.
    pub fn local_address(&self) -> io::Result<Address> {
        match &self.inner {
            Bound::Tcp(l) => {
                let a = l.local_addr()?;
                Ok(Address::tcp(a.ip().to_string(), a.port()))
            }
            Bound::Tls(l) => {
                let a = l.local_addr()?;
                Ok(Address::tls(a.ip().to_string(), a.port()))
            }
            Bound::Unix(l) => unix_address(l.local_addr()?.as_pathname()),
            Bound::Mem(l) => Ok(Address::mem(l.name())),
            Bound::Plugged(l) => l.local_address(),
        }
    }

    /// Registers the socket with the calling thread's tokio runtime.
    pub fn into_listener(self) -> io::Result<Listener> {
        Ok(match self.inner {
            Bound::Tcp(l) => Listener::Tcp(TcpListener::from_std(l)?),
            Bound::Tls(l) => Listener::Tls(TcpListener::from_std(l)?),
            Bound::Unix(l) => Listener::Unix(UnixListener::from_std(l)?),
            Bound::Mem(l) => Listener::Mem(l),
            Bound::Plugged(l) => Listener::Plugged(l),
        })
    }
}

fn check_path(path: &Path) -> io::Result<()> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a unix: address needs a path (unix:PATH)",
        ));
    }
    Ok(())
}

fn unix_address(path: Option<&Path>) -> io::Result<Address> {
    path.map(Address::unix).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "the Unix socket has no path (unnamed)",
        )
    })
}

/// Binds a Unix socket at `path`. A socket file already there is removed
/// and the bind retried only if connecting to it is refused (a stale file
/// left by a listener that died); if someone listens there, or the file is
/// not a socket, the bind fails with `AddrInUse` and the file is left alone.
/// A live listener sees that probe as a connection closed before sending
/// a byte (an anonymous channel that ends at once).
///
/// Two processes replacing the same stale file at the same instant could
/// both succeed, the second unlinking the first's fresh socket; sites that
/// share a path must not start at the same time.
fn bind_unix(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::net::UnixListener;
    check_path(path)?;
    let in_use = match UnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => e,
        other => return other,
    };
    let busy = |why: &str| {
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("cannot bind unix:{}: {why} ({in_use})", path.display()),
        )
    };
    let is_socket = std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false);
    if !is_socket {
        return Err(busy("the path exists and is not a socket"));
    }
    match probe_unix(path) {
        Ok(()) => Err(busy("another listener is live there")),
        // A listener whose backlog is full: live, just busy.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            Err(busy("another listener is live there"))
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::debug!(path = %path.display(), "replacing a stale Unix socket file");
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            UnixListener::bind(path)
        }
        // Removed between the bind and the probe: the path is free now.
        Err(e) if e.kind() == io::ErrorKind::NotFound => UnixListener::bind(path),
        Err(e) => Err(busy(&format!("probing it failed: {e}"))),
    }
}

/// Connects to the Unix socket at `path` without blocking (a plain connect
/// would block while a live listener's backlog is full): `Ok` if a listener
/// took the connection, `WouldBlock` if one is live but its backlog is
/// full, `ConnectionRefused` if no one listens there.
fn probe_unix(path: &Path) -> io::Result<()> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    s.set_nonblocking(true)?;
    s.connect(&SockAddr::unix(path)?)
}
