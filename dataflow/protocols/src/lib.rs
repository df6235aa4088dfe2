//! The sans-IO protocols of `sitenet-dataflow`: a language runtime's
//! distributed entities, as one state machine per site ([`Site`]).
//!
//! * **Dataflow variables**: single assignment, one manager at the home,
//!   the binding pushed to every site that waits.
//! * **Ports**: many-to-one channels read at the home as a stream of
//!   variables, FIFO per sending site.
//! * **Cells**: atomic exchange, the content moving to the site that
//!   exchanges (mobile) or staying at the home (stationary).
//! * **Distributed collection**: reference listing with an acknowledged
//!   hand-off (a sender pins what it sent until the receiver is listed);
//!   an entity is collected once no site refers to it.
//! * **Failures**: every operation ends, with the outcome or with
//!   `TempFail`/`PermFail`/`Gone`, by the caller's [`FailMode`].
//!
//! The machine reads no clock and no randomness: `sitenet-dataflow` drives
//! it over sitenet, and the simulator (`sitenet sim --app dataflow`) drives
//! it over its virtual network with checkers. `docs/dataflow.md` describes
//! the protocols and their failure model.

pub mod entity;
pub mod outcome;
pub mod site;
pub mod wire;

pub use entity::{EntityId, Kind, OpId, Value};
pub use outcome::{Action, Answer, FailMode, OpError};
pub use site::{Site, MAX_AUDITS, MAX_HOLDERS};
pub use wire::{Refused, Wire};

#[cfg(test)]
mod layers;
