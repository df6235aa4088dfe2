//! # sitenet-runtime
//!
//! The actix side of sitenet: a [`Node`] per local site, one ComObject actor
//! per remote site (driving the sans-IO session of `sitenet-protocols`), the
//! site table, typed handlers, request/reply, metrics (with their
//! OpenMetrics text, [`Node::openmetrics`]) and faults.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use sitenet_runtime::{Message, Node};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Hello { name: String }
//! impl Message for Hello { const ID: u32 = 1; }
//!
//! let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
//! server.handle(|ctx, m: Hello| println!("hello from {} ({:?})", m.name, ctx.sender_id()))?;
//! let client = Node::builder().start()?;
//! let site = client.site(&server.listen_addresses()[0])?;
//! site.send(&Hello { name: "client".into() }).blocking()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod batch;
mod channel_io;
mod com_object;
pub mod config;
pub mod context;
pub mod cookie_file;
mod cooperation;
mod delivery;
pub mod error;
mod events;
mod handlers;
pub mod idle_spin;
#[cfg(test)]
mod layers;
mod local;
pub mod message;
pub mod metrics;
mod node;
mod node_state;
mod openmetrics;
mod outbox;
mod peer_logs;
mod runtime;
pub mod services;
mod site;
mod site_entry;
mod start;
mod stats;
mod streams;
mod trans_object;

pub use batch::{Batch, Done, OpError, OpResult, Report as BatchReport, Submitted, WaitTimedOut};
pub use com_object::FaultReport;
pub use config::{NodeConfig, MAX_DURATION};
pub use cooperation::{Answer, CoopError, Cooperation, Expect};
pub use delivery::Delivery;
pub use error::SiteFailure;
pub use error::WouldDeadlock;
pub use error::{
    ConfigError, DecodeError, DeliveryError, FlushError, NodeError, RequestError, SendError,
};
pub use events::{NodeEvent, NodeEvents, PeerRefusal, EVENTS_QUEUED};
pub use handlers::{AsyncCtx, Ctx, Outcome, Responder, Unhandled};
pub use message::{Message, RawMessage, Reply, RequestId, SendOptions, RESERVED_IDS};
pub use metrics::Metrics;
pub use node::{Node, NodeBuilder, ShutdownReport, ToAddress, WeakNode};
pub use openmetrics::{OPENMETRICS_CONTENT_TYPE, OPENMETRICS_TOP_SITES};
pub use runtime::{default_threads, Runtime};
#[cfg(feature = "test-hooks")]
pub use site::BusyGuard;
pub use site::{
    FaultEvent, FaultState, Flush, HandedBack, RequestBuilder, ReturnedMessage, SendBuilder,
    SiteRef, TrackedSend, DEFAULT_REQUEST_TIMEOUT, NOT_CONTACTED,
};
pub use sitenet_protocols::StreamAbort;
pub use sitenet_protocols::{DescriptorError, OpenError, Priority, SiteDescriptor, SiteId};
pub use sitenet_transport::Address;
pub use stats::{NodeStats, SiteStats};
pub use streams::BodySink;
