//! Tickets: an entity offered as printable text, taken by another process
//! (Mozart's `Connection.offer` and `take`), to bootstrap a distributed
//! program.

use std::fmt;
use std::str::FromStr;

use sitenet::SiteDescriptor;
use sitenet_dataflow_protocols::{EntityId, Kind};

use crate::cell::Cell;
use crate::error::DataflowError;
use crate::handle::Handle;
use crate::port::{Port, Stream};
use crate::runtime::Dataflow;
use crate::var::Var;

/// An entity as text: its home's descriptor (id and addresses), its kind
/// and its serial. `df:KIND:SERIAL:DESCRIPTOR`, e.g.
/// `df:var:7:00…2a@tcp:127.0.0.1:4000`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Where the entity lives.
    pub home: SiteDescriptor,
    /// The entity.
    pub entity: EntityId,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Var => "var",
        Kind::Port => "port",
        Kind::MobileCell => "mcell",
        Kind::StationaryCell => "scell",
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "df:{}:{}:{}",
            kind_name(self.entity.kind),
            self.entity.serial,
            self.home
        )
    }
}

impl FromStr for Ticket {
    type Err = DataflowError;

    fn from_str(s: &str) -> Result<Ticket, DataflowError> {
        let bad = |why: &str| DataflowError::BadTicket(format!("{s:?}: {why}"));
        let rest = s
            .trim()
            .strip_prefix("df:")
            .ok_or_else(|| bad("no df: prefix"))?;
        let (kind, rest) = rest.split_once(':').ok_or_else(|| bad("no kind"))?;
        let (serial, desc) = rest.split_once(':').ok_or_else(|| bad("no serial"))?;
        let kind = match kind {
            "var" => Kind::Var,
            "port" => Kind::Port,
            "mcell" => Kind::MobileCell,
            "scell" => Kind::StationaryCell,
            _ => return Err(bad("unknown kind")),
        };
        let serial: u64 = serial.parse().map_err(|_| bad("bad serial"))?;
        let home: SiteDescriptor = desc.parse().map_err(|e| bad(&format!("{e}")))?;
        Ok(Ticket {
            entity: EntityId {
                home: home.id,
                serial,
                kind,
            },
            home,
        })
    }
}

/// A typed reference to an entity: what can be offered and taken.
pub trait Entity: sealed::Sealed {}

pub(crate) mod sealed {
    use super::*;

    pub trait Sealed: Sized {
        fn handle(&self) -> &Handle;
        fn accepts(kind: Kind) -> bool;
        fn from_handle(h: Handle) -> Self;
    }

    impl<T> Sealed for Var<T> {
        fn handle(&self) -> &Handle {
            &self.h
        }
        fn accepts(kind: Kind) -> bool {
            kind == Kind::Var
        }
        fn from_handle(h: Handle) -> Self {
            Var::from_handle(h)
        }
    }
    impl<T> Sealed for Port<T> {
        fn handle(&self) -> &Handle {
            self.handle_ref()
        }
        fn accepts(kind: Kind) -> bool {
            kind == Kind::Port
        }
        fn from_handle(h: Handle) -> Self {
            Port::from_handle_any(h)
        }
    }
    impl<T> Sealed for Stream<T> {
        fn handle(&self) -> &Handle {
            self.handle_ref()
        }
        fn accepts(kind: Kind) -> bool {
            kind == Kind::Var
        }
        fn from_handle(h: Handle) -> Self {
            Stream::from_handle_any(h)
        }
    }
    impl<T> Sealed for Cell<T> {
        fn handle(&self) -> &Handle {
            self.handle_ref()
        }
        fn accepts(kind: Kind) -> bool {
            matches!(kind, Kind::MobileCell | Kind::StationaryCell)
        }
        fn from_handle(h: Handle) -> Self {
            Cell::from_handle_any(h)
        }
    }
}

impl<T> Entity for Var<T> {}
impl<T> Entity for Port<T> {}
impl<T> Entity for Stream<T> {}
impl<T> Entity for Cell<T> {}

impl Dataflow {
    /// Offers `e` as a ticket another process can take. The offer keeps
    /// the entity alive until [`withdraw`](Dataflow::withdraw)n (or the
    /// node goes).
    pub fn offer<E: Entity>(&self, e: &E) -> Ticket {
        let h = e.handle().clone();
        let id = h.id;
        self.keep_offer(id, Box::new(h));
        let home = self.node().descriptor();
        Ticket { home, entity: id }
    }

    /// Ends an offer: the entity is collected once nothing else refers
    /// to it. Returns whether it was offered.
    pub fn withdraw(&self, t: &Ticket) -> bool {
        self.drop_offer(t.entity)
    }

    /// Takes the entity a ticket names, as `E` (a [`Var`], [`Port`],
    /// [`Stream`] or [`Cell`] of the type the offering side used). Fails
    /// with [`DataflowError::WrongKind`] for a ticket of another kind; an
    /// entity no longer offered or collected makes its operations fail
    /// with [`DataflowError::Gone`].
    pub fn take<E: Entity>(&self, t: &Ticket) -> Result<E, DataflowError> {
        if !E::accepts(t.entity.kind) || t.home.id != t.entity.home {
            return Err(DataflowError::WrongKind);
        }
        if t.entity.home != self.id() {
            let site = self
                .node()
                .site_from_descriptor(&t.home)
                .map_err(|e| DataflowError::BadTicket(e.to_string()))?;
            self.know(&site);
        }
        let id = t.entity;
        self.with_site(|s| s.take(id));
        Ok(E::from_handle(Handle::counted(self, id)))
    }
}
