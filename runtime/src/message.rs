//! Typed messages.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use sitenet_protocols::Priority;

/// Serialises a typed header into a per-thread arena: each header is a
/// `Bytes` slice of a shared 4 KiB chunk, so encoding a message does not
/// cost an allocation of its own (the chunk is freed when the last header
/// cut from it has been acknowledged). The chunk is small so that one
/// header kept unacknowledged pins at most 4 KiB (64 KiB chunks made a
/// single slow message hold 64 KiB).
pub(crate) fn encode_header<M: Message>(msg: &M) -> Result<bytes::Bytes, rmp_serde::encode::Error> {
    use bytes::BytesMut;
    use std::cell::RefCell;
    const CHUNK: usize = 4 * 1024;
    thread_local! {
        static ARENA: RefCell<BytesMut> = RefCell::new(BytesMut::new());
    }
    ARENA.with(|a| {
        let mut a = a.borrow_mut();
        if a.capacity() < 256 {
            *a = BytesMut::with_capacity(CHUNK);
        }
        let mut w = ArenaWriter(&mut a);
        let written = if M::NAMED_FIELDS {
            rmp_serde::encode::write_named(&mut w, msg)
        } else {
            rmp_serde::encode::write(&mut w, msg)
        };
        match written {
            Ok(()) => Ok(a.split().freeze()),
            Err(e) => {
                a.clear();
                Err(e)
            }
        }
    })
}

/// The header arena as rmp-serde's output. MessagePack is written a
/// marker byte and a few value bytes at a time; going through
/// `BufMut::writer` cost a capacity check and a `memcpy` call for each of
/// them (438 instructions to encode two small integers, a fifth of a 64 B
/// send; 220 with this writer).
struct ArenaWriter<'a>(&'a mut bytes::BytesMut);

impl std::io::Write for ArenaWriter<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // MessagePack writes a marker, then 1, 2, 4 or 8 value bytes: a
        // copy of a known length compiles to a store, not a call.
        fn put<const N: usize>(a: &mut bytes::BytesMut, buf: &[u8]) {
            let b: [u8; N] = buf.try_into().expect("N bytes");
            a.extend_from_slice(&b);
        }
        let a = &mut *self.0;
        match buf.len() {
            1 => put::<1>(a, buf),
            2 => put::<2>(a, buf),
            4 => put::<4>(a, buf),
            8 => put::<8>(a, buf),
            _ => a.extend_from_slice(buf),
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Names one request across every site it passes: the site that asked
/// (its origin) and the correlation id it gave it. A forwarded request
/// keeps both (the last site answers the origin directly under the same
/// id), so the one value ties together the caller's `sitenet.request`
/// span and every `sitenet.handle` span the request runs in, on each hop
/// — grep one id across the logs of a cluster to follow a request.
/// Printed `ORIGIN/CORR` (the origin's 32 hex digits).
///
/// ```
/// use sitenet_runtime::{RequestId, SiteId};
/// let id = RequestId { origin: SiteId(0xA), corr: 7 };
/// assert_eq!(id.to_string(), "0000000000000000000000000000000a/7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId {
    /// The site that sent the request first.
    pub origin: sitenet_protocols::SiteId,
    /// The correlation id it gave the request.
    pub corr: u64,
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.origin, self.corr)
    }
}

/// Ids at or above this are reserved for sitenet's own message types.
pub const RESERVED_IDS: u32 = 0xFFFF_0000;

/// A message type: a Rust type serialised with rmp-serde as the message's
/// typed header, with a stable wire id. The id, not the Rust type name, is
/// what a peer matches on, so it must never change once deployed.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Put { key: String }
/// impl sitenet_runtime::Message for Put { const ID: u32 = 17; }
/// ```
///
/// How a type evolves while nodes of two versions of it run (a cluster
/// upgraded node by node) is in docs/evolving-messages.md: in short, add
/// fields at the end with `#[serde(default)]`, and set
/// [`NAMED_FIELDS`](Message::NAMED_FIELDS) if older nodes must read what
/// newer ones send.
pub trait Message: Serialize + DeserializeOwned + Send + 'static {
    /// The stable wire id (below [`RESERVED_IDS`]).
    const ID: u32;

    /// Encode structs as maps keyed by field name (rmp-serde's named form)
    /// instead of arrays of their fields. With names, a node whose version
    /// of the type lacks a field skips it, so a newer node may send a type
    /// with more fields to an older one; with arrays (the default, a few
    /// bytes smaller and faster) an older node refuses a message longer
    /// than its type. Decoding takes either form, so turning it on is
    /// itself compatible: old nodes read the new form and vice versa.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use sitenet_runtime::Message;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Put { key: String, #[serde(default)] ttl_s: Option<u32> }
    /// impl Message for Put {
    ///     const ID: u32 = 17;
    ///     const NAMED_FIELDS: bool = true;
    /// }
    /// ```
    const NAMED_FIELDS: bool = false;
}

/// How to send: the priority and the body parts, as a value. A
/// `SiteRef`'s sends and requests take them on their builder
/// ([`SendBuilder::priority`](crate::SendBuilder::priority), `body`,
/// `parts`, or all at once with
/// [`options`](crate::SendBuilder::options)); the handler's answers and
/// the grouped operations take them in a `_with` form:
/// `Ctx::reply`/`reply_with`, `Ctx::forward`/`forward_with`,
/// `Responder::reply`/`reply_with`, `Batch::send`/`send_with`,
/// `Batch::request`/`request_with` and
/// `Cooperation::request`/`request_with`.
///
/// Built with a chain in any order. A priority left unset is medium for a
/// send or a request, and the request's own priority for a reply or a
/// forward.
///
/// ```
/// use bytes::Bytes;
/// use sitenet_runtime::{Priority, SendOptions};
///
/// // A control message ahead of bulk traffic, with a small body...
/// let urgent = SendOptions::new().priority(Priority::High).body(&b"stop"[..]);
/// assert_eq!(urgent.get_priority(), Some(Priority::High));
/// // ...and a bulk one whose body is shared, not copied (a `Bytes` clone).
/// let block = Bytes::from(vec![0u8; 1 << 20]);
/// let bulk = SendOptions::new().body(block.clone()).priority(Priority::Low);
/// assert_eq!(bulk.get_body()[0].as_ptr(), block.as_ptr());
/// ```
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    /// The level; `None`: the operation's default.
    priority: Option<Priority>,
    /// The body, as parts sent one after the other without being copied
    /// before the marshaler writes them into the channel's ring (one part
    /// is held inline; more cost an allocation).
    body: sitenet_protocols::Body,
}

impl SendOptions {
    /// Options with nothing set: the operation's default priority, no
    /// body (the same as `SendOptions::default()`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends at `priority` (1 lowest, 5 highest; see [`Priority`]).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Adds a body part.
    pub fn body(mut self, part: impl Into<Bytes>) -> Self {
        self.body.push(part.into());
        self
    }

    /// Adds several body parts, sent one after the other (BMI's list I/O):
    /// a message assembled from pieces the caller already holds — a block
    /// of records, a payload, a trailer — without concatenating them
    /// first. The receiver gets one body, the parts in order.
    ///
    /// ```
    /// use bytes::Bytes;
    /// let opts = sitenet_runtime::SendOptions::new()
    ///     .parts([Bytes::from_static(b"head "), Bytes::from_static(b"tail")]);
    /// assert_eq!(opts.get_body().len(), 2);
    /// ```
    pub fn parts(mut self, parts: impl IntoIterator<Item = Bytes>) -> Self {
        self.body.extend(parts);
        self
    }

    /// The priority set, if any.
    pub fn get_priority(&self) -> Option<Priority> {
        self.priority
    }

    /// The body parts, in order.
    pub fn get_body(&self) -> &[Bytes] {
        &self.body
    }

    /// The priority, `default` if none was set, and the body.
    pub(crate) fn into_parts(self, default: Priority) -> (Priority, sitenet_protocols::Body) {
        (self.priority.unwrap_or(default), self.body)
    }

    /// Options sending `body` as one part (none if it is empty).
    pub(crate) fn one_part(body: Bytes) -> Self {
        Self {
            priority: None,
            body: one_part(body),
        }
    }
}

/// A body of one part (none if `part` is empty), held inline.
pub(crate) fn one_part(part: Bytes) -> sitenet_protocols::Body {
    let mut body = sitenet_protocols::Body::new();
    if !part.is_empty() {
        body.push(part);
    }
    body
}

/// A decoded reply: the typed header and the body.
#[derive(Debug, Clone)]
pub struct Reply<R> {
    /// The reply's typed header.
    pub msg: R,
    /// The reply's body.
    pub body: Bytes,
}

/// A message as bytes, without serde: what a raw handler
/// ([`Node::handle_raw`](crate::Node::handle_raw)) gets and a raw request
/// ([`SiteRef::request_raw`](crate::SiteRef::request_raw)) is answered
/// with. A language runtime has its own marshaler and its own dispatch,
/// and cannot declare a serde type per message: it sends a type id and
/// bytes, and reads them back here.
///
/// On the wire a raw message is an ordinary message (docs/protocol.md
/// §2.1): its type id, an empty typed header, and the bytes as its body.
/// A raw handler may also be given a message sent typed (a type id no
/// typed handler of this node takes): its serialised header is then in
/// [`header`](Self::header).
///
/// The bytes come from the network: a runtime decodes them as it would
/// any untrusted input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawMessage {
    /// The message's wire type id.
    pub type_id: u32,
    /// The typed header, as it came: empty for a message sent raw
    /// ([`SiteRef::send_raw`](crate::SiteRef::send_raw)), rmp-serde bytes
    /// for one sent typed.
    pub header: Bytes,
    /// The bytes sent (the message's body). Shared, not copied.
    pub body: Bytes,
}
