//! What an operation on a distributed entity can end with.

use sitenet_dataflow_protocols::OpError;
use thiserror::Error;

/// Why an operation on a variable, port or cell failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DataflowError {
    /// The variable is bound to a different value: bind it once, or to an
    /// equal value.
    #[error("the variable is bound to a different value")]
    Conflict,
    /// The entity's home cannot be reached for now (sitenet keeps trying).
    /// The operation may still take effect: wait with the default mode,
    /// or retry.
    #[error("the entity's home is unreachable for now (temporary failure): retry, or wait")]
    TempFail,
    /// The entity's home, or a mobile cell's content, is gone for good.
    #[error("the entity's home or content is gone for good (permanent failure)")]
    PermFail,
    /// No such entity at its home: collected once nothing referred to it,
    /// or a ticket that names nothing.
    #[error("no such entity at its home (collected, or a stale ticket)")]
    Gone,
    /// The operation does not fit this kind of entity (a ticket taken as
    /// the wrong type).
    #[error("the entity is not of the kind this operation needs")]
    WrongKind,
    /// A value could not be encoded (serde): check its `Serialize`.
    #[error("cannot encode the value: {0}")]
    Encode(String),
    /// A value could not be decoded as the entity's type: the sites
    /// disagree on the type.
    #[error("cannot decode the value: {0}")]
    Decode(String),
    /// The dataflow layer of this node is gone (the node shut down).
    #[error("the node's dataflow layer is gone (the node shut down)")]
    Shutdown,
    /// A ticket's text is not a ticket.
    #[error("not a ticket: {0}")]
    BadTicket(String),
    /// The operation's message can never reach the entity's home: its
    /// value is larger than the home's node accepts
    /// (`NodeConfig::max_message_size`). It did not take effect: send a
    /// smaller value, or raise the home's limit.
    #[error("the operation's message can never reach the entity's home (larger than it accepts)")]
    Unsendable,
}

impl From<OpError> for DataflowError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Conflict => DataflowError::Conflict,
            OpError::TempFail => DataflowError::TempFail,
            OpError::PermFail => DataflowError::PermFail,
            OpError::Gone => DataflowError::Gone,
            OpError::WrongKind => DataflowError::WrongKind,
            OpError::Unsendable => DataflowError::Unsendable,
        }
    }
}
