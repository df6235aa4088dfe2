//! [`Channel`]: one reliable ordered byte channel, used through readiness
//! (`readable`/`writable`) and non-blocking `try_read`/`try_write`.
//!
//! The channel driver owns the two ByteBuffers and moves bytes between them
//! and the channel with the `try_*` calls, so reads and writes are independent
//! (reads never wait behind writes) and no buffer grows.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use crate::address::Address;
use crate::fault::FaultyChannel;

/// A connected byte channel. Cheap readiness futures take `&self`, so the
/// driver can await readability and writability concurrently.
#[derive(Debug)]
pub enum Channel {
    /// A TCP connection (TCP_NODELAY set).
    Tcp(TcpStream),
    /// Another channel wrapped by a [`FaultInjector`](crate::FaultInjector),
    /// for tests: cuts, delay and black holes on command.
    Faulty(FaultyChannel),
}

impl Channel {
    /// Connects to `addr`.
    pub async fn connect(addr: &Address) -> io::Result<Self> {
        match addr {
            Address::Tcp { .. } => {
                let s = TcpStream::connect(addr.socket_string()).await?;
                s.set_nodelay(true)?;
                Ok(Self::Tcp(s))
            }
        }
    }

    /// Waits until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.readable().await,
            // Boxed: a faulty channel wraps a `Channel`, so the futures nest.
            Self::Faulty(f) => Box::pin(f.readable()).await,
        }
    }

    /// Waits until a write may make progress.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.writable().await,
            Self::Faulty(f) => Box::pin(f.writable()).await,
        }
    }

    /// Reads without blocking; `Ok(0)` is end of stream, `WouldBlock` means
    /// wait for [`readable`](Self::readable).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.try_read(buf),
            Self::Faulty(f) => f.try_read(buf),
        }
    }

    /// Writes without blocking from up to two slices (a ring's two halves).
    pub fn try_write2(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => {
                if b.is_empty() {
                    s.try_write(a)
                } else {
                    s.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])
                }
            }
            Self::Faulty(f) => f.try_write2(a, b),
        }
    }

    /// The peer's address, for logs.
    pub fn peer(&self) -> String {
        match self {
            Self::Tcp(s) => s
                .peer_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp:?".into()),
            Self::Faulty(f) => f.peer(),
        }
    }
}

/// A listening endpoint.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
}

impl Listener {
    /// Binds `addr` (port 0 picks a free port; [`local_address`](Self::local_address)
    /// tells which).
    pub async fn bind(addr: &Address) -> io::Result<Self> {
        match addr {
            Address::Tcp { .. } => Ok(Self::Tcp(TcpListener::bind(addr.socket_string()).await?)),
        }
    }

    /// The address actually bound, with the real port.
    pub fn local_address(&self) -> io::Result<Address> {
        match self {
            Self::Tcp(l) => {
                let a: SocketAddr = l.local_addr()?;
                Ok(Address::tcp(a.ip().to_string(), a.port()))
            }
        }
    }

    /// Accepts the next channel.
    pub async fn accept(&self) -> io::Result<Channel> {
        match self {
            Self::Tcp(l) => {
                let (s, _) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok(Channel::Tcp(s))
            }
        }
    }
}

/// A listening socket bound synchronously (so a node can report its real
/// address before any runtime runs), turned into a [`Listener`] on the
/// runtime thread.
#[derive(Debug)]
pub struct BoundListener {
    inner: std::net::TcpListener,
}

impl BoundListener {
    /// Binds `addr` now (port 0 picks a free port).
    pub fn bind(addr: &Address) -> io::Result<Self> {
        match addr {
            Address::Tcp { .. } => {
                let l = std::net::TcpListener::bind(addr.socket_string())?;
                l.set_nonblocking(true)?;
                Ok(Self { inner: l })
            }
        }
    }

    /// The address actually bound, with the real port.
    pub fn local_address(&self) -> io::Result<Address> {
        let a = self.inner.local_addr()?;
        Ok(Address::tcp(a.ip().to_string(), a.port()))
    }

    /// Registers the socket with the calling thread's tokio runtime.
    pub fn into_listener(self) -> io::Result<Listener> {
        Ok(Listener::Tcp(TcpListener::from_std(self.inner)?))
    }
}
