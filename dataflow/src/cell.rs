//! Cells: mutable state with an atomic exchange.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sitenet_dataflow_protocols::{Answer, FailMode, Kind};

use crate::error::DataflowError;
use crate::handle::{decode, encode, Handle};
use crate::runtime::Dataflow;

/// How a cell's state is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellMode {
    /// The content moves to the site that exchanges (Mozart's mobile
    /// state protocol): a site that uses the cell repeatedly pays no
    /// message per exchange.
    Mobile,
    /// The content stays at the home; every exchange is a round trip to
    /// it. Survives every failure but its home's.
    Stationary,
}

/// A cell with an atomic `exchange`: put a new content in, get the old
/// one out. Exchanges are linearizable in both modes.
///
/// ```
/// use sitenet::Node;
/// use sitenet_dataflow::{Cell, CellMode, Dataflow};
///
/// let node = Node::builder().start()?;
/// let df = Dataflow::on(&node);
/// let c = Cell::new(&df, CellMode::Mobile, 1u64)?;
/// assert_eq!(c.exchange_blocking(2)?, 1);
/// assert_eq!(c.exchange_blocking(3)?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Cell<T> {
    h: Handle,
    _t: PhantomData<fn(T) -> T>,
}

impl<T> Clone for Cell<T> {
    fn clone(&self) -> Self {
        Cell {
            h: self.h.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Cell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cell({:?})", self.h)
    }
}

impl<T: Serialize + DeserializeOwned> Cell<T> {
    /// A new cell on this site holding `init`.
    pub fn new(df: &Dataflow, mode: CellMode, init: T) -> Result<Cell<T>, DataflowError> {
        let v = encode(df, &init)?;
        let id = df.with_site(|s| s.new_cell(mode == CellMode::Mobile, v));
        Ok(Cell {
            h: Handle::counted(df, id),
            _t: PhantomData,
        })
    }

    /// Puts `new` in the cell and returns what it held, atomically. Waits
    /// through temporary failures; ends with [`DataflowError::PermFail`]
    /// if the content is lost (see docs/dataflow.md).
    pub async fn exchange(&self, new: T) -> Result<T, DataflowError> {
        self.exchange_mode(new, FailMode::Wait).await
    }

    /// [`exchange`](Cell::exchange), by `mode` on temporary failures.
    pub async fn exchange_mode(&self, new: T, mode: FailMode) -> Result<T, DataflowError> {
        let df = &self.h.df;
        let v = encode(df, &new)?;
        let (op, rx) = df.op();
        df.with_site(|s| s.exchange(op, self.h.id, v, mode));
        match df.answer(rx).await? {
            Answer::Value(old) => decode(df, old),
            Answer::Done => Err(DataflowError::Decode(
                "an exchange answered no value".into(),
            )),
        }
    }

    /// [`exchange`](Cell::exchange) from a thread that may block.
    pub fn exchange_blocking(&self, new: T) -> Result<T, DataflowError> {
        futures::executor::block_on(self.exchange(new))
    }

    /// The cell's mode.
    pub fn mode(&self) -> CellMode {
        if self.h.id.kind == Kind::MobileCell {
            CellMode::Mobile
        } else {
            CellMode::Stationary
        }
    }

    /// The entity's id.
    pub fn id(&self) -> sitenet_dataflow_protocols::EntityId {
        self.h.id
    }
}

impl<T> Cell<T> {
    pub(crate) fn handle_ref(&self) -> &Handle {
        &self.h
    }

    pub(crate) fn from_handle_any(h: Handle) -> Self {
        Cell { h, _t: PhantomData }
    }
}

impl<T> Serialize for Cell<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.h.serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for Cell<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let h = Handle::deserialize(d)?;
        if !matches!(h.id.kind, Kind::MobileCell | Kind::StationaryCell) {
            return Err(serde::de::Error::custom("expected a cell"));
        }
        Ok(Cell { h, _t: PhantomData })
    }
}
