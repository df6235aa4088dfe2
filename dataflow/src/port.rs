//! Ports and their streams.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sitenet_dataflow_protocols::{Answer, FailMode, Kind};

use crate::error::DataflowError;
use crate::handle::{decode_keep, encode, Handle};
use crate::runtime::Dataflow;
use crate::var::Var;

/// A many-to-one asynchronous channel, as in Oz: `send` from any site, in
/// order per sending site; the messages form a [`Stream`] at the port's
/// home.
///
/// ```
/// use sitenet::Node;
/// use sitenet_dataflow::{Dataflow, Port};
///
/// let node = Node::builder().start()?;
/// let df = Dataflow::on(&node);
/// let (port, mut stream) = Port::<String>::new(&df);
/// port.send("hello".to_string())?;
/// port.send("world".to_string())?;
/// assert_eq!(stream.next_blocking()?, "hello");
/// assert_eq!(stream.next_blocking()?, "world");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Port<T> {
    h: Handle,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for Port<T> {
    fn clone(&self) -> Self {
        Port {
            h: self.h.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Port<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Port({:?})", self.h)
    }
}

/// The stream of a port: a list whose tail is an unbound dataflow
/// variable. It can be passed to other sites and read there; each reader
/// reads every message from where its copy stands.
pub struct Stream<T> {
    at: Var<()>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Stream<T> {
    fn clone(&self) -> Self {
        Stream {
            at: self.at.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Stream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:?})", self.at.h)
    }
}

impl<T: Serialize + DeserializeOwned> Port<T> {
    /// A new port on this site, and its stream.
    pub fn new(df: &Dataflow) -> (Port<T>, Stream<T>) {
        let (port, stream) = df.with_site(|s| s.new_port());
        (
            Port {
                h: Handle::counted(df, port),
                _t: PhantomData,
            },
            Stream {
                at: Var::from_handle(Handle::counted(df, stream)),
                _t: PhantomData,
            },
        )
    }

    /// Sends `msg`: it joins the stream after every message this site sent
    /// before. Returns at once; fails only if the message cannot be
    /// encoded or the home is known to have failed for good.
    pub fn send(&self, msg: T) -> Result<(), DataflowError> {
        let df = &self.h.df;
        let v = encode(df, &msg)?;
        df.with_site(|s| s.send(None, self.h.id, v, FailMode::Wait));
        Ok(())
    }

    /// Sends `msg` and waits until it is in the stream.
    pub async fn send_acked(&self, msg: T) -> Result<(), DataflowError> {
        let df = &self.h.df;
        let v = encode(df, &msg)?;
        let (op, rx) = df.op();
        df.with_site(|s| s.send(Some(op), self.h.id, v, FailMode::Wait));
        df.answer(rx).await.map(|_| ())
    }

    /// The entity's id.
    pub fn id(&self) -> sitenet_dataflow_protocols::EntityId {
        self.h.id
    }
}

impl<T> Port<T> {
    pub(crate) fn handle_ref(&self) -> &Handle {
        &self.h
    }

    pub(crate) fn from_handle_any(h: Handle) -> Self {
        Port { h, _t: PhantomData }
    }
}

impl<T: DeserializeOwned> Stream<T> {
    /// The next message, once there is one. Ends with
    /// [`DataflowError::PermFail`] if the port's home fails for good.
    pub async fn next(&mut self) -> Result<T, DataflowError> {
        self.next_mode(FailMode::Wait).await
    }

    /// [`next`](Stream::next), by `mode` on temporary failures.
    pub async fn next_mode(&mut self, mode: FailMode) -> Result<T, DataflowError> {
        let df = self.at.h.df.clone();
        let Answer::Value(cell) = self.at.wait_value(mode).await? else {
            return Err(DataflowError::Decode(
                "a stream cell without a value".into(),
            ));
        };
        let Some((item, rest)) = cell.split_stream_cell() else {
            df.release_value(&cell);
            return Err(DataflowError::Decode("not a stream cell".into()));
        };
        let msg = decode_keep(&df, &item.bytes, &item.refs);
        self.at = Var::from_handle(Handle::acquire(&df, rest));
        df.release_value(&cell);
        msg
    }

    /// [`next`](Stream::next) from a thread that may block.
    pub fn next_blocking(&mut self) -> Result<T, DataflowError> {
        futures::executor::block_on(self.next())
    }
}

impl<T> Stream<T> {
    pub(crate) fn handle_ref(&self) -> &Handle {
        &self.at.h
    }

    pub(crate) fn from_handle_any(h: Handle) -> Self {
        Stream {
            at: Var::from_handle(h),
            _t: PhantomData,
        }
    }
}

impl<T> Serialize for Port<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.h.serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for Port<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let h = Handle::deserialize(d)?;
        if h.id.kind != Kind::Port {
            return Err(serde::de::Error::custom("expected a port"));
        }
        Ok(Port { h, _t: PhantomData })
    }
}

impl<T> Serialize for Stream<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.at.serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for Stream<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Stream {
            at: Var::deserialize(d)?,
            _t: PhantomData,
        })
    }
}
