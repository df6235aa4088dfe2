//! # sitenet-transport
//!
//! Byte channels for sitenet (the TransObject's I/O): addresses and their
//! parsing ([`Address`]: `tcp:HOST:PORT`, `tls:HOST:PORT`, `unix:PATH`,
//! `mem:NAME`), TLS with per-site certificates ([`tls`]), the
//! channels and listeners for each — TCP with TCP_NODELAY, Unix domain
//! sockets for sites on one machine, and in-process pipes ([`mem`]) for many
//! sites in one process without file descriptors — a seeded fault-injecting
//! wrapper ([`FaultInjector`]) for tests that works on every kind, and the
//! [`TransController`] that shares a process's channel slots among its
//! nodes. Other transports plug in ([`plug`]): a [`plug::Transport`]
//! registered under a scheme of its own in a [`plug::TransportRegistry`].
//! Channels are used through readiness and non-blocking reads and
//! writes so that the channel driver can keep its two fixed ByteBuffers and
//! never pause reads behind writes.
//!
//! # Example
//!
//! Two ends of an in-process (`mem:`) channel exchange bytes; with a
//! `tcp:127.0.0.1:0` or `unix:PATH` address the code is the same.
//!
//! ```
//! use sitenet_transport::{Address, Channel, Listener};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # rt.block_on(async {
//! let addr = Address::unique_mem("doc");
//! let listener = Listener::bind(&addr).await?;
//! let client = Channel::connect(&addr).await?;
//! let server = listener.accept().await?;
//!
//! client.writable().await?;
//! assert_eq!(client.try_write2(b"hello ", b"site")?, 10);
//! server.readable().await?;
//! let mut buf = [0u8; 64];
//! let n = server.try_read(&mut buf)?;
//! assert_eq!(&buf[..n], b"hello site");
//!
//! drop(client); // the peer reads end of stream (`Ok(0)`)
//! server.readable().await?;
//! assert_eq!(server.try_read(&mut buf)?, 0);
//! # Ok::<(), std::io::Error>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod address;
pub mod channel;
pub mod controller;
pub mod fault;
#[cfg(test)]
mod layers;
pub mod mem;
pub mod plug;
mod tcp_tuning;
pub mod tls;

pub use address::{is_scheme_name, Address, AddressError};
pub use channel::{BoundListener, Channel, Listener};
pub use controller::{
    fd_limit, AcceptOrWait, Lane, LeaseId, LineEnd, LineTicket, Requested, SlotInfo, SlotLease,
    SlotReport, SlotSnapshot, TransController, WaitTicket,
};
pub use fault::{FaultInjector, FaultyChannel, SeedReportGuard};
/// A current-thread runtime with I/O and time, for this crate's unit tests.
#[cfg(test)]
pub(crate) fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

pub use mem::{MemAcceptor, MemChannel, MemLanes, MemListener, MEM_BACKLOG, MEM_PIPE_CAPACITY};
pub use plug::{
    PluggedChannel, PluggedListener, RegisterError, StreamChannel, Transport, TransportChannel,
    TransportListener, TransportRegistry,
};
