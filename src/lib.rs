//! # sitenet
//!
//! The network layer for distributed language runtimes. A runtime hands
//! sitenet messages for other **sites** (processes) and gets messages back
//! through typed handlers; sitenet owns connections, handshakes, priority
//! lanes, fragmentation of big messages, acknowledgements, and the sharing of
//! channels among many sites. See `README.md` and `docs/`.
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
#[cfg(feature = "cli")]
pub mod metrics_http;
#[cfg(feature = "cli")]
pub mod stress;

pub use sitenet_protocols as protocols;
pub use sitenet_runtime::*;
pub use sitenet_transport as transport;
pub use sitenet_transport::{Address, AddressError};

/// The README's Rust examples, compiled and run with the doc tests (its
/// fragments are marked `ignore`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
