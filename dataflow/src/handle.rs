//! A reference to an entity held by this site, and how references travel:
//! inside a dataflow value as an index into the value's list of entities,
//! inside any other sitenet message as the home's descriptor and the
//! entity's serial (accounted by the collection protocol: pinned by the
//! sender, released once the receiver is listed with the home).

use std::cell::RefCell;

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sitenet::SiteRef;
use sitenet_dataflow_protocols::{EntityId, Kind, Value};

use crate::error::DataflowError;
use crate::runtime::Dataflow;

/// One handle on an entity: the site keeps the entity (or its proxy)
/// while a handle exists. Cloning takes another; dropping gives it back.
#[doc(hidden)]
pub struct Handle {
    pub(crate) df: Dataflow,
    pub(crate) id: EntityId,
}

impl Handle {
    /// A handle the machine already counted (a new entity, a taken ticket).
    pub(crate) fn counted(df: &Dataflow, id: EntityId) -> Handle {
        Handle { df: df.clone(), id }
    }

    /// One more handle on `id`.
    pub(crate) fn acquire(df: &Dataflow, id: EntityId) -> Handle {
        df.with_site(|s| s.acquire(id));
        Handle::counted(df, id)
    }
}

impl Clone for Handle {
    fn clone(&self) -> Self {
        Handle::acquire(&self.df, self.id)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let id = self.id;
        self.df.with_site(|s| {
            s.release(id);
            s.settle_now();
        });
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}#{}@{}", self.id.kind, self.id.serial, self.id.home)
    }
}

thread_local! {
    /// While a dataflow value is encoded: the entities it names so far.
    static ENCODING: RefCell<Option<Vec<EntityId>>> = const { RefCell::new(None) };
    /// While a dataflow value is decoded: its layer and the entities it
    /// names.
    static DECODING: RefCell<Option<(Dataflow, Vec<EntityId>)>> = const { RefCell::new(None) };
}

/// Encodes `v` as a dataflow value: its bytes, with every entity it names
/// listed (the value holds a handle on each).
pub(crate) fn encode<T: Serialize>(df: &Dataflow, v: &T) -> Result<Value, DataflowError> {
    let before = ENCODING.with(|c| c.replace(Some(Vec::new())));
    let bytes = rmp_serde::to_vec(v);
    let refs = ENCODING.with(|c| c.replace(before)).expect("set above");
    let bytes = bytes.map_err(|e| DataflowError::Encode(e.to_string()))?;
    Ok(df.with_site(|s| s.make_value(bytes, refs)))
}

/// Decodes a dataflow value as `T`, then gives back the value's holds
/// (the handles decoded hold the entities now).
pub(crate) fn decode<T: DeserializeOwned>(df: &Dataflow, v: Value) -> Result<T, DataflowError> {
    let r = decode_keep(df, &v.bytes, &v.refs);
    df.release_value(&v);
    r
}

/// Decodes bytes naming `refs` as `T`.
pub(crate) fn decode_keep<T: DeserializeOwned>(
    df: &Dataflow,
    bytes: &[u8],
    refs: &[EntityId],
) -> Result<T, DataflowError> {
    let before = DECODING.with(|c| c.replace(Some((df.clone(), refs.to_vec()))));
    let r = rmp_serde::from_slice(bytes);
    DECODING.with(|c| c.replace(before));
    r.map_err(|e| DataflowError::Decode(e.to_string()))
}

/// An entity reference as it travels inside another sitenet message.
#[derive(Serialize, Deserialize)]
struct Travelling {
    home: SiteRef,
    serial: u64,
    kind: Kind,
}

impl Serialize for Handle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let in_value = ENCODING.with(|c| {
            c.borrow_mut().as_mut().map(|refs| {
                refs.push(self.id);
                refs.len() - 1
            })
        });
        if let Some(index) = in_value {
            return s.serialize_u32(index as u32);
        }
        let enc = sitenet::context::encoding().ok_or_else(|| {
            S::Error::custom(
                "a dataflow entity travels only inside a dataflow value or a message sitenet sends",
            )
        })?;
        let to = enc.to.and_then(|t| t.id()).ok_or_else(|| {
            S::Error::custom(
                "a dataflow entity can only be sent to a site whose id is known: talk to it first",
            )
        })?;
        let home = self
            .df
            .site_ref(self.id.home)
            .ok_or_else(|| S::Error::custom("the entity's home is not reachable from this node"))?;
        self.df.with_site(|site| {
            site.lend(self.id, to);
            site.settle_now();
        });
        Travelling {
            home,
            serial: self.id.serial,
            kind: self.id.kind,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Handle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let in_value = DECODING.with(|c| c.borrow().as_ref().map(|(df, _)| df.clone()));
        if let Some(df) = in_value {
            let index = u32::deserialize(d)? as usize;
            let id = DECODING
                .with(|c| {
                    c.borrow()
                        .as_ref()
                        .and_then(|(_, refs)| refs.get(index).copied())
                })
                .ok_or_else(|| D::Error::custom("an entity index past the value's entities"))?;
            return Ok(Handle::acquire(&df, id));
        }
        let dec = sitenet::context::decoding().ok_or_else(|| {
            D::Error::custom(
                "a dataflow entity decodes only inside a dataflow value or a message sitenet delivers",
            )
        })?;
        let t = Travelling::deserialize(d)?;
        let home = t
            .home
            .id()
            .ok_or_else(|| D::Error::custom("an entity's home without an id"))?;
        let df = Dataflow::on(&dec.node);
        df.know(&t.home);
        df.know(&dec.from);
        let from = dec
            .from
            .id()
            .ok_or_else(|| D::Error::custom("an entity from a site without an id"))?;
        let id = EntityId {
            home,
            serial: t.serial,
            kind: t.kind,
        };
        df.with_site(|s| {
            s.receive(id, from);
            s.acquire(id);
            s.settle_now();
        });
        Ok(Handle::counted(&df, id))
    }
}
