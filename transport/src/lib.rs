//! # sitenet-transport
//!
//! Byte channels for sitenet (the TransObject's I/O): addresses and their
//! parsing ([`Address`]: `tcp:HOST:PORT`, `unix:PATH`, `mem:NAME`), the
//! channels and listeners for each — TCP with TCP_NODELAY, Unix domain
//! sockets for sites on one machine, and in-process pipes ([`mem`]) for many
//! sites in one process without file descriptors — a seeded fault-injecting
//! wrapper ([`FaultInjector`]) for tests that works on every kind, and the
//! [`TransController`] that shares a process's channel slots among its
//! nodes. Channels are used through readiness and non-blocking reads and
//! writes so that the channel driver can keep its two fixed ByteBuffers and
//! never pause reads behind writes.

#![warn(missing_docs)]

pub mod address;
pub mod channel;
pub mod controller;
pub mod fault;
pub mod mem;

pub use address::{Address, AddressError};
pub use channel::{BoundListener, Channel, Listener};
pub use controller::{SlotInfo, SlotLease, SlotReport, SlotSnapshot, TransController, WaitTicket};
pub use fault::{FaultInjector, FaultyChannel, SeedReportGuard};
pub use mem::{MemChannel, MemListener, MEM_BACKLOG, MEM_PIPE_CAPACITY};
