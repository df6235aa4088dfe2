//! # sitenet-dataflow: a language runtime's distribution layer on sitenet
//!
//! The entities a distributed language shares between sites, as Mozart's
//! distribution subsystem and the Distributed Oz design made them, built
//! on sitenet's public API:
//!
//! * [`Var`]: single-assignment dataflow variables, bound once from any
//!   site and waited for from any site without polling; by-need
//!   (lazy) variables run a producer on the first wait.
//! * [`Port`] and [`Stream`]: many-to-one asynchronous channels, FIFO per
//!   sending site, read at the owner as a list whose tail is a dataflow
//!   variable, and passable to other sites.
//! * [`Cell`]: atomic exchange on state that moves to the site that uses
//!   it ([`CellMode::Mobile`]) or stays home ([`CellMode::Stationary`]).
//! * Distributed collection: an entity is collected on every site once no
//!   site refers to it.
//! * Failures the language sees: every operation ends with its outcome or
//!   with [`DataflowError::TempFail`]/[`DataflowError::PermFail`] (waiting
//!   through temporary failures by default: [`FailMode`]); watchers
//!   ([`Dataflow::watch`]).
//! * [`Ticket`]s: an entity as text, taken by another process.
//!
//! Entities travel inside dataflow values and inside any sitenet message,
//! like a `SiteRef`. The protocols are the sans-IO state machines of
//! `sitenet-dataflow-protocols`, also run by the simulator (`sitenet sim
//! --app dataflow`). docs/dataflow.md describes them, their failure model
//! and their figures.
//!
//! ```
//! use sitenet::Node;
//! use sitenet_dataflow::{Dataflow, Var};
//!
//! let a = Node::builder().listen("tcp:127.0.0.1:0").start()?;
//! let b = Node::builder().start()?;
//! let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
//! let x: Var<String> = Var::new(&da);
//! // Site b takes the variable from a ticket and binds it; a sees it.
//! let ticket = da.offer(&x);
//! let y: Var<String> = db.take(&ticket)?;
//! y.bind_blocking("hello".into())?;
//! assert_eq!(x.wait_blocking()?, "hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cell;
mod error;
mod handle;
mod port;
mod runtime;
mod ticket;
mod var;

pub use cell::{Cell, CellMode};
pub use error::DataflowError;
pub use port::{Port, Stream};
pub use runtime::{Dataflow, DataflowStats, AUDIT_PERIOD, DATAFLOW_PRIORITY};
pub use sitenet_dataflow_protocols::{EntityId, FailMode, Kind};
pub use ticket::{Entity, Ticket};
pub use var::Var;

#[cfg(test)]
mod layers;
