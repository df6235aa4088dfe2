//! The messages the protocols exchange between sites. The driver carries
//! each one to its site (over sitenet, or the simulator's network) in the
//! order a site sends them: the protocols rely on FIFO between two sites
//! (sitenet's per-priority order, with every `Wire` at one priority).

use serde::{Deserialize, Serialize};
use sitenet_protocols::SiteId;

use crate::entity::{EntityId, OpId, Value};

/// Why a home refused an operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Refused {
    /// The variable is bound to a different value.
    Conflict,
    /// The home has no such entity (collected, or never made).
    Gone,
}

/// One protocol message.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Wire {
    // Distributed collection (reference listing with acknowledged hand-off).
    /// To an entity's home, from a site that holds a proxy: list the
    /// sender as holding the entity. The copies it received from the home
    /// itself are released with it (`home_copies`), with no `Release`.
    Dirty {
        /// The entity.
        entity: EntityId,
        /// Copies received from the home, released by this message.
        home_copies: u64,
    },
    /// From the home: the sender is listed.
    DirtyAck {
        /// The entity.
        entity: EntityId,
    },
    /// To the home: the sender's proxy went; unlist it.
    Clean {
        /// The entity.
        entity: EntityId,
    },
    /// To the site that sent a copy of the entity: the copy is accounted
    /// for (the receiver is listed, or is the home); the sender may let go.
    Release {
        /// The entity.
        entity: EntityId,
    },
    /// From the home: no such entity; every operation on it fails.
    Gone {
        /// The entity.
        entity: EntityId,
    },
    /// A question, each audit round, to a site this one heard nothing from
    /// for a round: from a home to a site it lists as holding the entity
    /// (does it still?), from a site that pins a copy for the receiver,
    /// or from a site with an operation waiting on the entity to its home
    /// (is it still served?). A site that took the asker for failed
    /// answers `Forgotten`; a listed site that no longer holds the entity
    /// answers `Clean`; otherwise nothing.
    Audit {
        /// The entity.
        entity: EntityId,
    },
    /// The sender took the receiver for failed for good (sitenet gave it
    /// up while it was up): it holds nothing of the receiver's and serves
    /// it no more. The receiver takes the sender as failed for good too,
    /// so that neither keeps books for the other.
    Forgotten {
        /// The entity the message answered.
        entity: EntityId,
    },

    // Dataflow variables.
    /// To the home: send the binding here once there is one (and run a
    /// by-need variable's producer).
    Register {
        /// The variable.
        var: EntityId,
    },
    /// To the home: bind the variable (the first bind wins).
    Bind {
        /// The variable.
        var: EntityId,
        /// The operation to answer.
        op: OpId,
        /// The value.
        value: Value,
    },
    /// From the home: how a `Bind` ended.
    BindAck {
        /// The variable.
        var: EntityId,
        /// The operation it answers.
        op: OpId,
        /// `None`: bound (to this value, or it already was).
        refused: Option<Refused>,
    },
    /// From the home to a registered site: the binding.
    Bound {
        /// The variable.
        var: EntityId,
        /// Its value.
        value: Value,
    },

    // Ports.
    /// To the port's home: append `value` to its stream.
    PortSend {
        /// The port.
        port: EntityId,
        /// The message.
        value: Value,
        /// The operation to answer (`None` for a send that needs no answer).
        op: Option<OpId>,
    },
    /// From the port's home: the message is in the stream.
    PortAck {
        /// The port.
        port: EntityId,
        /// The operation it answers.
        op: OpId,
        /// `None`: appended.
        refused: Option<Refused>,
    },

    // Stationary cells.
    /// To the home: put `new` in the cell and answer the old content.
    Exchange {
        /// The cell.
        cell: EntityId,
        /// The operation to answer.
        op: OpId,
        /// The new content.
        new: Value,
    },
    /// From the home: the content an exchange replaced.
    Exchanged {
        /// The cell.
        cell: EntityId,
        /// The operation it answers.
        op: OpId,
        /// The old content (`None`: refused).
        old: Result<Value, Refused>,
    },

    // Mobile cells.
    /// To the manager: the sender wants the content.
    Get {
        /// The cell.
        cell: EntityId,
    },
    /// From the manager to the site that has or will have the content:
    /// pass it to `to` once done with it.
    Forward {
        /// The cell.
        cell: EntityId,
        /// The next site in the chain.
        to: SiteId,
    },
    /// The content, passed along the chain.
    Put {
        /// The cell.
        cell: EntityId,
        /// The content.
        content: Value,
    },
    /// To the manager: the sender received the content.
    Got {
        /// The cell.
        cell: EntityId,
    },
    /// To the manager: the sender no longer wants the content it holds
    /// (nothing there refers to the cell any more); the manager passes it
    /// on.
    Return {
        /// The cell.
        cell: EntityId,
        /// The content.
        content: Value,
    },
    /// From the manager: the `Return` arrived; every `Forward` sent to the
    /// returning site before it is stale.
    ReturnAck {
        /// The cell.
        cell: EntityId,
    },
    /// From the manager: the content was lost with a site that held it or
    /// was to receive it; every exchange on the cell fails.
    Lost {
        /// The cell.
        cell: EntityId,
    },
    /// To the manager, from a site of the cell's chain or one that holds
    /// the cell: a message about the content (the content itself, a
    /// request, a `Got`) was handed back as maybe delivered — its peer
    /// may have forgotten the session. The manager cannot tell where the
    /// content is, and declares it lost rather than risk two copies or a
    /// chain that never moves.
    MaybeLost {
        /// The cell.
        cell: EntityId,
    },
}

impl Wire {
    /// The entity the message is about.
    pub fn entity(&self) -> EntityId {
        match self {
            Wire::Dirty { entity, .. }
            | Wire::DirtyAck { entity }
            | Wire::Clean { entity }
            | Wire::Release { entity }
            | Wire::Gone { entity }
            | Wire::Audit { entity }
            | Wire::Forgotten { entity } => *entity,
            Wire::Register { var }
            | Wire::Bind { var, .. }
            | Wire::BindAck { var, .. }
            | Wire::Bound { var, .. } => *var,
            Wire::PortSend { port, .. } | Wire::PortAck { port, .. } => *port,
            Wire::Exchange { cell, .. }
            | Wire::Exchanged { cell, .. }
            | Wire::Get { cell }
            | Wire::Forward { cell, .. }
            | Wire::Put { cell, .. }
            | Wire::Got { cell }
            | Wire::Return { cell, .. }
            | Wire::ReturnAck { cell }
            | Wire::Lost { cell }
            | Wire::MaybeLost { cell } => *cell,
        }
    }

    /// The operation an answer to the message ends, if any (a `Bind`, an
    /// `Exchange`, a `PortSend` that asked for its acknowledgement).
    pub fn op(&self) -> Option<OpId> {
        match self {
            Wire::Bind { op, .. } | Wire::Exchange { op, .. } => Some(*op),
            Wire::PortSend { op, .. } => *op,
            _ => None,
        }
    }

    /// The value the message carries, if any: its refs are copies that
    /// travel with it.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Wire::Bind { value, .. } | Wire::Bound { value, .. } | Wire::PortSend { value, .. } => {
                Some(value)
            }
            Wire::Exchange { new, .. } => Some(new),
            Wire::Exchanged { old: Ok(v), .. } => Some(v),
            Wire::Put { content, .. } | Wire::Return { content, .. } => Some(content),
            _ => None,
        }
    }
}
