//! # sitenet-transport
//!
//! Byte channels for sitenet (the TransObject's I/O): addresses and their
//! parsing, TCP channels with TCP_NODELAY, listeners, and a seeded
//! fault-injecting wrapper ([`FaultInjector`]) for tests, and the
//! [`TransController`] that shares a process's channel slots among its nodes. Channels are used
//! through readiness and non-blocking reads and writes so that the channel
//! driver can keep its two fixed ByteBuffers and never pause reads behind
//! writes.

#![warn(missing_docs)]

pub mod address;
pub mod channel;
pub mod controller;
pub mod fault;

pub use address::{Address, AddressError};
pub use channel::{BoundListener, Channel, Listener};
pub use controller::{SlotInfo, SlotLease, SlotReport, SlotSnapshot, TransController, WaitTicket};
pub use fault::{FaultInjector, FaultyChannel, SeedReportGuard};
