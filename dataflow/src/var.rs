//! Dataflow variables.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sitenet_dataflow_protocols::{Answer, EntityId, FailMode};

use crate::error::DataflowError;
use crate::handle::{decode, encode, Handle};
use crate::runtime::Dataflow;

/// A single-assignment dataflow variable: made on any site, passed inside
/// messages (a dataflow value, or any sitenet message) like a `SiteRef`,
/// bound once from any site, waited for from any site without polling
/// (the binding is pushed to every site that waits).
///
/// ```
/// use sitenet::Node;
/// use sitenet_dataflow::{Dataflow, Var};
///
/// let node = Node::builder().start()?;
/// let df = Dataflow::on(&node);
/// let x: Var<u64> = Var::new(&df);
/// let y = x.clone();
/// std::thread::spawn(move || y.bind_blocking(42));
/// assert_eq!(x.wait_blocking()?, 42);
/// assert!(x.bind_blocking(7).is_err()); // bound once
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Var<T> {
    pub(crate) h: Handle,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        Var {
            h: self.h.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Var({:?})", self.h)
    }
}

impl<T> Var<T> {
    pub(crate) fn from_handle(h: Handle) -> Self {
        Var { h, _t: PhantomData }
    }

    /// The variable's id on every site.
    pub fn id(&self) -> EntityId {
        self.h.id
    }
}

impl<T: Serialize + DeserializeOwned> Var<T> {
    /// A new unbound variable, made (and managed) on this site.
    pub fn new(df: &Dataflow) -> Var<T> {
        let id = df.with_site(|s| s.new_var(false));
        Var::from_handle(Handle::counted(df, id))
    }

    /// A by-need (lazy) variable: `producer` runs on this site, once, when
    /// some site first waits for the variable, and binds it.
    pub fn by_need(df: &Dataflow, producer: impl FnOnce(Var<T>) + Send + 'static) -> Var<T> {
        let id = df.with_site(|s| s.new_var(true));
        df.set_producer(
            id,
            Box::new(move |df, id| producer(Var::from_handle(Handle::acquire(df, id)))),
        );
        Var::from_handle(Handle::counted(df, id))
    }

    /// Binds the variable to `value`: `Ok` if this bind won or the
    /// variable already holds an equal value, [`DataflowError::Conflict`]
    /// if it holds a different one. Waits through temporary failures of
    /// the home.
    pub async fn bind(&self, value: T) -> Result<(), DataflowError> {
        self.bind_mode(value, FailMode::Wait).await
    }

    /// [`bind`](Var::bind), ending with [`DataflowError::TempFail`] if the
    /// home is unreachable, by `mode`.
    pub async fn bind_mode(&self, value: T, mode: FailMode) -> Result<(), DataflowError> {
        let df = &self.h.df;
        let v = encode(df, &value)?;
        let (op, rx) = df.op();
        df.with_site(|s| s.bind(op, self.h.id, v, mode));
        df.answer(rx).await.map(|_| ())
    }

    /// [`bind`](Var::bind) from a thread that may block (not a handler).
    pub fn bind_blocking(&self, value: T) -> Result<(), DataflowError> {
        futures::executor::block_on(self.bind(value))
    }

    /// The variable's value, once bound (a by-need variable's producer
    /// runs). Waits through temporary failures; ends with
    /// [`DataflowError::PermFail`] if the home fails for good first.
    pub async fn wait(&self) -> Result<T, DataflowError> {
        self.wait_mode(FailMode::Wait).await
    }

    /// [`wait`](Var::wait), ending with [`DataflowError::TempFail`] if the
    /// home is unreachable, by `mode`.
    pub async fn wait_mode(&self, mode: FailMode) -> Result<T, DataflowError> {
        let df = &self.h.df;
        match self.wait_value(mode).await? {
            Answer::Value(v) => decode(df, v),
            Answer::Done => Err(DataflowError::Decode("a wait answered no value".into())),
        }
    }

    pub(crate) async fn wait_value(&self, mode: FailMode) -> Result<Answer, DataflowError> {
        let df = &self.h.df;
        let (op, rx) = df.op();
        df.with_site(|s| s.wait(op, self.h.id, mode));
        df.answer(rx).await
    }

    /// [`wait`](Var::wait) from a thread that may block (not a handler).
    pub fn wait_blocking(&self) -> Result<T, DataflowError> {
        futures::executor::block_on(self.wait())
    }

    /// The fault states of the variable's home as sitenet learns them
    /// (Mozart's fault watchers): see [`Dataflow::watch`].
    pub fn watch(&self) -> Option<futures::channel::mpsc::UnboundedReceiver<sitenet::FaultEvent>> {
        self.h.df.watch(self.h.id)
    }
}

impl<T> Serialize for Var<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.h.serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for Var<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let h = Handle::deserialize(d)?;
        if h.id.kind != sitenet_dataflow_protocols::Kind::Var {
            return Err(serde::de::Error::custom("expected a dataflow variable"));
        }
        Ok(Var::from_handle(h))
    }
}
