//! What the protocols tell their driver: what to send, which operation
//! ended and how, and what happened to entities.

use sitenet_protocols::SiteId;
use thiserror::Error;

use crate::entity::{EntityId, OpId, Value};
use crate::wire::Wire;

/// Why an operation on an entity failed: the language sees these.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Error)]
pub enum OpError {
    /// Bound already, to a different value: a variable is bound once.
    #[error("the variable is bound to a different value")]
    Conflict,
    /// The entity's home (or a site its content depends on) cannot be
    /// reached for now; sitenet keeps trying. The operation may still take
    /// effect: retry, or wait with `FailMode::Wait`.
    #[error("the entity's home is unreachable for now (temporary failure)")]
    TempFail,
    /// The entity's home, or the content it depends on, is gone for good.
    #[error("the entity's home or content is gone for good (permanent failure)")]
    PermFail,
    /// The home has no such entity: collected (no site held it) or never
    /// made (a forged or stale ticket).
    #[error("no such entity at its home (collected, or never made)")]
    Gone,
    /// The operation does not apply to this kind of entity.
    #[error("the entity is not of the kind this operation needs")]
    WrongKind,
    /// The message carrying the operation can never reach the home (its
    /// value is larger than the home accepts, or cannot be encoded). It
    /// did not take effect.
    #[error("the operation's message can never reach the entity's home (too large)")]
    Unsendable,
}

/// How an operation that succeeded ended.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Answer {
    /// Done (a bind, a port send).
    Done,
    /// A value (a variable's binding, a cell's old content). It holds a
    /// handle on each entity it names, which the driver gives back with
    /// [`Site::release_value`](crate::Site::release_value) once it has
    /// decoded it.
    Value(Value),
}

/// What to do when the entity's home is temporarily unreachable.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum FailMode {
    /// Keep waiting: sitenet keeps trying, and a temporary failure may
    /// heal; only a permanent one ends the operation.
    #[default]
    Wait,
    /// End with [`OpError::TempFail`] as soon as the home is known to be
    /// unreachable.
    Fail,
}

/// One thing the driver must do.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Action {
    /// Send `msg` to site `to`, after every message sent to it before.
    Send {
        /// The destination.
        to: SiteId,
        /// The message.
        msg: Wire,
    },
    /// Operation `op` ended.
    Done {
        /// The operation.
        op: OpId,
        /// How.
        outcome: Result<Answer, OpError>,
    },
    /// A by-need variable was first waited for: run its producer (at its
    /// home).
    Need {
        /// The variable.
        var: EntityId,
    },
    /// The home forgot an entity: no site holds a reference any more.
    Reclaimed {
        /// The entity.
        entity: EntityId,
    },
    /// This site holds nothing homed at `site` any more: the driver may
    /// drop what it keeps to reach it.
    HomeUnused {
        /// The site.
        site: SiteId,
    },
}
