//! # sitenet-protocols
//!
//! The sans-IO core of sitenet: every protocol rule of the design (docs/architecture.md) as plain
//! state machines that take events (bytes arrived, time passed, message
//! queued, channel lost) and return actions (bytes to write, messages to
//! deliver, deadlines). No tokio, no actix, no sockets, no clock — so every
//! rule is testable deterministically, with virtual time.
//!
//! The crate is four layers and a leaf, each a folder that imports only
//! the ones below it (`src/layers.rs` checks it; docs/architecture.md,
//! "Layers", gives the reasons):
//!
//! * [`base`] — the leaf: site ids, priorities and output classes, shared
//!   limits, the [`Timer`] enum and its table of deadlines.
//! * [`wire`] — bytes: the versioned frame header (`docs/protocol.md`), the
//!   fixed-capacity ring of each channel direction ([`ByteBuffer`]), the
//!   message envelope, marshaling a message into frames, version ranges.
//! * [`slots`] — the TransController's decisions: channel slots under a
//!   weak and a hard limit, a fair line of waiters, the preemption
//!   policies, and the admission of handshakes by source.
//! * [`connection`] — one remote site: the open protocol
//!   ([`connection::handshake`]), which channel a pair keeps, the
//!   [`Session`] (reassembly, scheduler, ledger of unacknowledged
//!   messages), and the [`ComObject`] machine around it: opening and
//!   backoff, linger and weak close, give-up, permanent failure and what
//!   it hands back.
//! * [`node`] — many sites: the site table and its reclaim, requests,
//!   delegation, cooperations, batches, the line of senders.
//!
//! The deterministic simulator that runs these machines by the thousand is
//! its own crate, `sitenet-sim`.
//!
//! # Example
//!
//! Two [`Session`]s with a working channel, joined by one [`ByteBuffer`]
//! that stands in for the socket: A queues a message and marshals it into
//! frames, B consumes the frames and delivers the message. A driver does the
//! same with a real socket between two output and input buffers, and real
//! time.
//!
//! ```
//! use std::time::Instant;
//!
//! use bytes::Bytes;
//! use sitenet_protocols::{
//!     ByteBuffer, ChannelParams, OutMessage, Priority, ReassemblyBudget, Session, SessionConfig,
//! };
//!
//! let now = Instant::now(); // the virtual clock: no method reads one
//! // What the open protocol settled for the channel (see `handshake`).
//! let params = ChannelParams {
//!     buffer_size: 64 * 1024,
//!     peer_max_message: 1 << 20,
//!     peer_last_received: 0,
//!     generation: 1,
//!     caps: sitenet_protocols::Capabilities::ALL,
//! };
//! let mut a = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
//! let mut b = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
//! a.channel_up(params, now)?;
//! b.channel_up(params, now)?;
//!
//! let msg = OutMessage::new(Priority::High, 7, Bytes::from("hdr"), vec![Bytes::from("hi")]);
//! a.queue(msg).expect("within the peer's maximum message size");
//! let mut wire = ByteBuffer::new(64 * 1024); // A's output is B's input
//! a.poll_transmit(now, &mut wire);
//! let mut delivered = Vec::new();
//! b.handle_input(now, &mut wire, &mut |m| delivered.push(m))?;
//!
//! assert_eq!(delivered.len(), 1);
//! assert_eq!(delivered[0].prelude.type_id, 7);
//! assert_eq!((&delivered[0].header[..], &delivered[0].body[..]), (&b"hdr"[..], &b"hi"[..]));
//! assert!(wire.is_empty(), "B consumed every frame");
//! # Ok::<(), sitenet_protocols::ProtocolError>(())
//! ```

#![warn(missing_docs)]

pub mod base;
pub mod connection;
pub mod node;
pub mod slots;
pub mod wire;

#[cfg(test)]
mod layers;

pub use base::priority::Priority;
pub use base::site::{DescriptorError, SiteDescriptor, SiteId};
pub use base::timer::{ComTimers, SessionTimers, Timer, TimerTable};
pub use connection::address_book::{AddressBook, Fallback, PluggedSchemes, TransportKind};
pub use connection::com_object::{
    AcceptOutcome, Action, ChannelEnd, ChannelId, ComConfig, ComObject, ComState, ComStats,
    FaultState, Loss, OpenFailure, OpenRequest, Parked, SiteFailure,
};
pub use connection::deliver::{Deliver, StreamAbort};
pub use connection::error::{FrameError, OpenError, ProtocolError, Refusal};
pub use connection::handshake::{
    Acceptor, Attempt, AuthFailure, Claim, Continuity, Cookie, CookieProof, HandshakeNonces,
    Initiator, Keyring, LocalInfo, Negotiate, NegotiateAns, Nonce, Opened, PairMemory, PairSecret,
    PeerCertificate, Present, Proof, RefuseReason, SessionTag,
};
pub use connection::link::{decide, Decision, LinkView};
pub use connection::reassembly::{Blocked, BudgetShare, ReassemblyBudget};
pub use connection::session::{
    ChannelParams, ClosePhase, CloseReason, Session, SessionConfig, SessionEvent, SessionStats,
};
pub use wire::byte_buffer::ByteBuffer;
pub use wire::frame::{
    FrameHeader, FrameKind, FRAME_FORMAT, HEADER_LEN, MAX_FRAME_LEN, PROTOCOL_VERSION,
};
pub use wire::message::{
    Body, InMessage, MessageKind, OutMessage, Prelude, MESSAGE_OVERHEAD, PRELUDE_LEN,
};
pub use wire::version::{Agreed, Capabilities, Speaks, VersionRange, MIN_PROTOCOL_VERSION};
