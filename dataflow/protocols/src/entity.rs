//! What the protocols name: entities, the operations a site started on
//! them, and the values they carry.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sitenet_protocols::SiteId;

/// Which protocol an entity follows. Part of its id: a site learns an
/// entity's kind from the reference itself, before it ever talks to the
/// entity's home, and a home refuses a message that names one of its
/// entities with the wrong kind.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub enum Kind {
    /// A single-assignment dataflow variable.
    Var,
    /// A many-to-one asynchronous channel whose stream is read at its home.
    Port,
    /// A cell whose content moves to the site that exchanges.
    MobileCell,
    /// A cell whose exchanges all run at its home.
    StationaryCell,
}

/// An entity's name on every site: the site that made it (its home, where
/// its manager lives) and a serial number the home never reuses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct EntityId {
    /// The site that made the entity and manages it.
    pub home: SiteId,
    /// Unique among the home's entities, for the home's lifetime.
    pub serial: u64,
    /// The protocol it follows.
    pub kind: Kind,
}

/// An operation a site started (a wait, a bind, an exchange, a send): the
/// driver picks the number, the protocol hands it back with the outcome
/// (`Action::Done`), exactly once.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct OpId(pub u64);

/// A value as the protocols carry it: its encoded bytes and the entities
/// it refers to. The bytes name an entity by its index in `refs`, so the
/// protocols can count every reference that travels (distributed
/// collection) without decoding the bytes.
///
/// Inside a [`Site`](crate::Site), a `Value` holds one handle on each of
/// its refs: the entities it names stay alive while the value does.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct Value {
    /// The encoded value.
    pub bytes: Bytes,
    /// The entities it names, in the order its bytes index them.
    pub refs: Vec<EntityId>,
}

impl Value {
    /// A value that names no entity.
    pub fn plain(bytes: impl Into<Bytes>) -> Value {
        Value {
            bytes: bytes.into(),
            refs: Vec::new(),
        }
    }

    /// A stream's cell: `item`, then the rest of the stream (a variable),
    /// named as the cell's last ref. A port's home makes one per message.
    pub fn stream_cell(item: Value, rest: EntityId) -> Value {
        let mut refs = item.refs;
        refs.push(rest);
        Value {
            bytes: item.bytes,
            refs,
        }
    }

    /// A stream cell split back into its item and the rest of the stream;
    /// `None` if the value is not a stream cell.
    pub fn split_stream_cell(&self) -> Option<(Value, EntityId)> {
        let (rest, refs) = self.refs.split_last()?;
        (rest.kind == Kind::Var).then(|| {
            (
                Value {
                    bytes: self.bytes.clone(),
                    refs: refs.to_vec(),
                },
                *rest,
            )
        })
    }
}
