//! # sitenet
//!
//! The network layer for distributed language runtimes. A runtime hands
//! sitenet messages for other **sites** (processes) and gets messages back
//! through typed handlers; sitenet owns connections, handshakes, priority
//! lanes, fragmentation of big messages, acknowledgements, and the sharing of
//! channels among many sites. The [`guide`] shows the API chapter by
//! chapter; the repository's `docs/` holds the command line (`cli.md`), the
//! design (`architecture.md`), the wire format (`protocol.md`) and the
//! threats and their tests (`threats.md`).
//!
//! ```
//! use std::time::Duration;
//! use serde::{Deserialize, Serialize};
//! use sitenet::{Message, Node};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Get { key: String }
//! impl Message for Get { const ID: u32 = 1; }
//! #[derive(Serialize, Deserialize)]
//! struct Value { value: Option<String> }
//! impl Message for Value { const ID: u32 = 2; }
//!
//! let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
//! server.handle(|ctx, g: Get| {
//!     let _ = ctx.reply(&Value { value: Some(format!("value of {}", g.key)) });
//! })?;
//!
//! let client = Node::builder().start()?;
//! let site = client.site(&server.listen_addresses()[0])?;
//! let reply = site
//!     .request::<Get, Value>(&Get { key: "x".into() })
//!     .timeout(Duration::from_secs(5))
//!     .blocking()?;
//! assert_eq!(reply.msg.value.as_deref(), Some("value of x"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod bench;
pub mod guide;
#[cfg(test)]
mod layers;
#[cfg(feature = "cli")]
pub mod metrics_http;
#[cfg(feature = "cli")]
pub mod stress;

// The API a runtime author uses, by name: the node and its builder, a
// site and its sends and requests, messages, handlers, errors, metrics,
// configuration. Tests and tools that reach into the layers below use
// the sub-crates (`sitenet_protocols`, `sitenet_transport`,
// `sitenet_runtime`) directly.
#[cfg(feature = "test-hooks")]
pub use sitenet_runtime::BusyGuard;
pub use sitenet_runtime::{
    batch, config, context, cookie_file, default_threads, error, idle_spin, message, metrics,
    services, Answer, AsyncCtx, Batch, BatchReport, BodySink, ConfigError, CoopError, Cooperation,
    Ctx, DecodeError, Delivery, DeliveryError, DescriptorError, Done, Expect, FaultEvent,
    FaultReport, FaultState, Flush, FlushError, HandedBack, Message, Metrics, Node, NodeBuilder,
    NodeConfig, NodeError, NodeEvent, NodeEvents, NodeStats, OpError, OpResult, OpenError, Outcome,
    PeerRefusal, Priority, RawMessage, Reply, RequestBuilder, RequestError, RequestId, Responder,
    ReturnedMessage, Runtime, SendBuilder, SendError, SendOptions, ShutdownReport, SiteDescriptor,
    SiteFailure, SiteId, SiteRef, SiteStats, StreamAbort, Submitted, ToAddress, TrackedSend,
    Unhandled, WaitTimedOut, WeakNode, WouldDeadlock, DEFAULT_REQUEST_TIMEOUT, EVENTS_QUEUED,
    MAX_DURATION, NOT_CONTACTED, OPENMETRICS_CONTENT_TYPE, OPENMETRICS_TOP_SITES, RESERVED_IDS,
};

/// The protocol's types that the API hands out or takes: a handed-back
/// message's kind and encoding ([`ReturnedMessage::kind`],
/// [`SiteRef::take_refused`]), the cookie a node proves its peers with
/// ([`NodeConfig::cookies`]), and the fd-slot admission
/// ([`NodeConfig::admission`]).
pub use sitenet_protocols::{
    slots::{Admission, DefaultPolicy, SlotConfig},
    Cookie, Keyring, MessageKind, OutMessage, Refusal,
};
pub use sitenet_transport::{Address, AddressError};

/// The deterministic simulator (the `sitenet-sim` crate): thousands of
/// sites' protocol machines over a virtual network and clock, with faults
/// and checkers, and a runtime author's own application protocol on top
/// ([`sim::Application`]).
pub use sitenet_sim as sim;

/// Transports: addresses, the plug-in traits a custom transport
/// implements ([`NodeBuilder::transport`]), TLS identities, the fd-slot
/// controller a node may share ([`NodeConfig::trans_controller`]), and
/// the fault injector tests of a runtime wrap channels in
/// ([`NodeConfig::fault_injector`]).
pub mod transport {
    pub use sitenet_transport::tls::{self, TlsIdentity};
    pub use sitenet_transport::{
        Address, AddressError, FaultInjector, PluggedChannel, PluggedListener, RegisterError,
        StreamChannel, TransController, Transport, TransportChannel, TransportListener,
        TransportRegistry,
    };
}

/// The README's Rust examples, compiled and run with the doc tests (its
/// fragments are marked `ignore`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
