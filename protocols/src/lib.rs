//! # sitenet-protocols
//!
//! The sans-IO core of sitenet: every protocol rule of the design (docs/architecture.md) as plain
//! state machines that take events (bytes arrived, time passed, message
//! queued, channel lost) and return actions (bytes to write, messages to
//! deliver, deadlines). No tokio, no actix, no sockets, no clock — so every
//! rule is testable deterministically, with virtual time.
//!
//! * [`frame`] — the versioned frame header (`docs/protocol.md`).
//! * [`byte_buffer`] — the fixed-capacity ring of each channel direction.
//! * [`message`] — the message envelope: prelude, typed header, body parts.
//! * [`marshal`] / [`reassembly`] — a message into frames and back, a frame at
//!   a time, within size limits and a reassembly budget.
//! * [`scheduler`] — which level sends the next frame (by bytes, weighted).
//! * [`ledger`] — the unacknowledged messages.
//! * [`handshake`] / [`link`] — the open protocol and which channel a site
//!   pair keeps.
//! * [`session`] — all of it together for one remote site.
//! * [`com_object`] — the connection logic of one remote site around its
//!   session: opening and backoff, the link decision, linger and weak close,
//!   give-up, permanent failure and what it hands back.
//! * [`slots`] — the TransController's decisions: channel slots under a
//!   weak and a hard limit, a fair line of waiters, and the preemption
//!   policies.
//! * [`timer`] — every wait as a variant of one [`Timer`] enum, and the table of
//!   deadlines that consumes a timer when it fires.
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

pub mod address_book;
pub mod admission;
pub mod batch;
pub mod byte_buffer;
pub mod claims;
pub mod com_object;
pub mod cooperation;
pub mod delegation;
pub mod deliver;
pub mod dial_bound;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod idle_spin;
pub mod input_budget;
pub mod lane_slots;
pub mod ledger;
pub mod link;
pub mod log_limit;
pub mod marshal;
pub mod message;
pub mod output_share;
pub mod packed;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod priority;
pub mod reassembly;
pub mod requests;
pub mod scheduler;
pub mod session;
pub mod sim;
pub mod site;
pub mod site_index;
pub mod slots;
pub mod timer;
pub mod turns;
pub(crate) mod varint;
pub mod version;

pub use address_book::{AddressBook, Fallback, PluggedSchemes, TransportKind};
pub use byte_buffer::ByteBuffer;
pub use com_object::{
    AcceptOutcome, Action, ChannelEnd, ChannelId, ComConfig, ComObject, ComState, ComStats,
    FaultState, Loss, OpenFailure, OpenRequest, Parked, SiteFailure,
};
pub use deliver::{Deliver, StreamAbort};
pub use error::{FrameError, OpenError, ProtocolError, Refusal};
pub use frame::{
    FrameHeader, FrameKind, FRAME_FORMAT, HEADER_LEN, MAX_FRAME_LEN, PROTOCOL_VERSION,
};
pub use handshake::{
    Acceptor, Attempt, AuthFailure, Claim, Continuity, Cookie, CookieProof, HandshakeNonces,
    Initiator, Keyring, LocalInfo, Negotiate, NegotiateAns, Nonce, Opened, PairMemory, PairSecret,
    PeerCertificate, Present, Proof, RefuseReason, SessionTag,
};
pub use link::{decide, Decision, LinkView};
pub use message::{
    Body, InMessage, MessageKind, OutMessage, Prelude, MESSAGE_OVERHEAD, PRELUDE_LEN,
};
pub use priority::Priority;
pub use reassembly::{Blocked, BudgetShare, ReassemblyBudget};
pub use session::{
    ChannelParams, ClosePhase, CloseReason, Session, SessionConfig, SessionEvent, SessionStats,
};
pub use site::{DescriptorError, SiteDescriptor, SiteId};
pub use timer::{ComTimers, SessionTimers, Timer, TimerTable};
pub use version::{Agreed, Capabilities, Speaks, VersionRange, MIN_PROTOCOL_VERSION};
