//! The application message envelope.
//!
//! A message is a small typed header (serialised with rmp-serde by the caller,
//! on the caller's thread) and a body of `Bytes` parts (Madeleine's express
//! header and deferred body). On the wire the message bytes are a fixed
//! [`PRELUDE_LEN`]-byte prelude, then the header, then the body parts one after
//! another, cut into frames by the marshaler:
//!
//! ```text
//!  0..4    type_id     u32  the message type's stable wire id
//!  4       kind        u8   0 one-way, 1 request, 2 reply
//!  5..8    reserved    0
//!  8..12   header_len  u32
//! 12..20   body_len    u64
//! 20..28   corr        u64  request id (request and reply), 0 for one-way
//! ```

use bytes::Bytes;

use crate::base::priority::Priority;

/// A message body: its parts, sent one after another. One part is held
/// inline, so the usual one-part body costs no allocation of its own (a
/// body of several parts pays one); an `OutMessage` is 88 bytes, moved
/// several times on its way (two inline parts made it 120: 2.8% more
/// instructions per 64 B message on the sender).
pub type Body = smallvec::SmallVec<[Bytes; 1]>;

/// The memory a queued message costs beyond its wire bytes: its record in
/// a queue or in the unacknowledged ledger (see [`OutMessage::footprint`]).
pub const MESSAGE_OVERHEAD: u64 = std::mem::size_of::<(u64, OutMessage)>() as u64;

/// Length of the message prelude.
pub const PRELUDE_LEN: usize = 28;

/// What role a message plays in request/reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    /// A plain message.
    OneWay = 0,
    /// A request expecting a reply with the same `corr`.
    Request = 1,
    /// The reply to the request with the same `corr`.
    Reply = 2,
    /// A request delegated by the site it was sent to (version 3): its
    /// typed header is preceded by the origin's descriptor (see
    /// [`wrap_origin`]), `corr` is the origin's request id, and the final
    /// handler answers the origin directly.
    Forward = 3,
    /// The answer to a forwarded request, sent to the origin by the final
    /// site (version 3). The origin takes it from any site: only sites the
    /// request went through know its `corr`, which is unguessable.
    DelegatedReply = 4,
}

impl MessageKind {
    /// Decodes a kind code (in the prelude and in a packed entry's head);
    /// `None` for an unknown one.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::OneWay),
            1 => Some(Self::Request),
            2 => Some(Self::Reply),
            3 => Some(Self::Forward),
            4 => Some(Self::DelegatedReply),
            _ => None,
        }
    }
}

/// The origin block in front of a forwarded request's typed header: the
/// origin site's descriptor (`ID@ADDR,…`, UTF-8) behind its u16 length.
/// Returns the header to send, or `None` if the descriptor does not fit
/// the block (over 65,535 bytes; a parsed descriptor is far shorter, see
/// [`MAX_DESCRIPTOR_LEN`](crate::base::site::MAX_DESCRIPTOR_LEN)).
pub fn wrap_origin(origin: &str, header: &[u8]) -> Option<Bytes> {
    let len = u16::try_from(origin.len()).ok()?;
    let mut v = Vec::with_capacity(2 + origin.len() + header.len());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(origin.as_bytes());
    v.extend_from_slice(header);
    Some(v.into())
}

/// Splits a forwarded request's header into the origin's descriptor text
/// and the typed header; `None` if the block is malformed.
///
/// # Example
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::wire::message::{unwrap_origin, wrap_origin};
/// use sitenet_protocols::SiteId;
///
/// // The site a request is delegated by puts the origin in front of its header.
/// let origin = format!("{}@tcp:10.0.0.1:7000", SiteId(0xA));
/// let header = wrap_origin(&origin, b"typed header").expect("a short origin");
/// // The final site takes it off again, and answers the origin directly.
/// let (from, typed) = unwrap_origin(&header).expect("a well-formed origin block");
/// assert_eq!(from, origin);
/// assert_eq!(typed, &b"typed header"[..]);
/// // A length running past the end is malformed.
/// assert_eq!(unwrap_origin(&Bytes::from_static(b"\x09\x00short")), None);
/// ```
pub fn unwrap_origin(header: &Bytes) -> Option<(&str, Bytes)> {
    let len = u16::from_le_bytes(header.get(..2)?.try_into().ok()?) as usize;
    let origin = std::str::from_utf8(header.get(2..2 + len)?).ok()?;
    Some((origin, header.slice(2 + len..)))
}

/// The fixed part in front of every message.
///
/// # Example
///
/// ```
/// use sitenet_protocols::{MessageKind, Prelude, PRELUDE_LEN};
///
/// let prelude = Prelude {
///     type_id: 42,
///     kind: MessageKind::Request,
///     header_len: 3,
///     body_len: 1000,
///     corr: 9, // the request id its reply carries back
/// };
/// let bytes: [u8; PRELUDE_LEN] = prelude.encode();
/// assert_eq!(Prelude::decode(&bytes), Some(prelude));
/// assert_eq!(prelude.total_len(), (PRELUDE_LEN + 3 + 1000) as u64);
///
/// let mut bad = bytes;
/// bad[4] = 9; // no such message kind
/// assert_eq!(Prelude::decode(&bad), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prelude {
    /// Stable wire id of the message type.
    pub type_id: u32,
    /// One-way, request or reply.
    pub kind: MessageKind,
    /// Length of the typed header.
    pub header_len: u32,
    /// Length of the body.
    pub body_len: u64,
    /// Request id for requests and replies.
    pub corr: u64,
}

impl Prelude {
    /// Total length of the message on the wire (prelude included). Saturates
    /// instead of overflowing: a peer announcing an absurd size gets a
    /// "message too large" error, never a wrapped small size.
    pub fn total_len(&self) -> u64 {
        (PRELUDE_LEN as u64 + self.header_len as u64).saturating_add(self.body_len)
    }

    /// Encodes the prelude.
    pub fn encode(&self) -> [u8; PRELUDE_LEN] {
        let mut b = [0u8; PRELUDE_LEN];
        b[0..4].copy_from_slice(&self.type_id.to_le_bytes());
        b[4] = self.kind as u8;
        b[8..12].copy_from_slice(&self.header_len.to_le_bytes());
        b[12..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..28].copy_from_slice(&self.corr.to_le_bytes());
        b
    }

    /// Decodes a prelude; `None` if the kind byte or reserved bytes are invalid.
    pub fn decode(b: &[u8; PRELUDE_LEN]) -> Option<Self> {
        let kind = MessageKind::from_u8(b[4])?;
        if b[5..8] != [0, 0, 0] {
            return None;
        }
        Some(Self {
            type_id: u32::from_le_bytes(b[0..4].try_into().ok()?),
            kind,
            header_len: u32::from_le_bytes(b[8..12].try_into().ok()?),
            body_len: u64::from_le_bytes(b[12..20].try_into().ok()?),
            corr: u64::from_le_bytes(b[20..28].try_into().ok()?),
        })
    }
}

/// A message queued for sending. Cheap to clone: the header and body are
/// shared `Bytes`, so the unacknowledged ledger and the marshaler share them.
///
/// # Example
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::{MessageKind, OutMessage, Priority, PRELUDE_LEN};
///
/// // Type 7: a 2-byte typed header (already serialised) and a body of two
/// // parts, sent one after the other.
/// let body = vec![Bytes::from("hello, "), Bytes::from("world")];
/// let msg = OutMessage::new(Priority::High, 7, Bytes::from("hd"), body);
/// assert_eq!(msg.kind, MessageKind::OneWay);
/// assert_eq!(msg.body_len(), 12);
/// assert_eq!(msg.wire_len(), (PRELUDE_LEN + 2 + 12) as u64);
///
/// // A request is the same message with a kind and a request id.
/// let request = OutMessage { kind: MessageKind::Request, corr: 5, ..msg };
/// let prelude = request.prelude();
/// assert_eq!((prelude.type_id, prelude.header_len, prelude.body_len), (7, 2, 12));
/// assert_eq!((prelude.kind, prelude.corr), (MessageKind::Request, 5));
/// ```
#[derive(Debug, Clone)]
pub struct OutMessage {
    /// Level and lane.
    pub priority: Priority,
    /// Type id, kind, correlation id.
    pub type_id: u32,
    /// Role in request/reply.
    pub kind: MessageKind,
    /// Request id (0 for one-way).
    pub corr: u64,
    /// The typed header, already serialised.
    pub header: Bytes,
    /// The body, as parts sent one after another.
    pub body: Body,
    /// The sender wants to know when the peer acknowledges it: its `corr`
    /// (a request id, or for a one-way message a token of the same
    /// series, never sent on the wire) is then reported by
    /// `Session::take_delivered` (BMI's test for a posted send). Fits in
    /// the struct's padding: an `OutMessage` stays 88 bytes.
    pub tracked: bool,
}

impl OutMessage {
    /// A one-way message.
    pub fn new(priority: Priority, type_id: u32, header: Bytes, body: impl Into<Body>) -> Self {
        Self {
            priority,
            type_id,
            kind: MessageKind::OneWay,
            corr: 0,
            header,
            body: body.into(),
            tracked: false,
        }
    }

    /// Body length in bytes.
    pub fn body_len(&self) -> u64 {
        self.body.iter().map(|b| b.len() as u64).sum()
    }

    /// The message as a peer's session would hand it over, for a site that
    /// delivers to itself (the local site: no network, no session): one
    /// body, number 0, and the token of a tracked one-way message left out
    /// (it never goes on the wire).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use sitenet_protocols::{MessageKind, OutMessage, Priority};
    ///
    /// let mut m = OutMessage::new(Priority::Medium, 7, Bytes::from_static(b"h"),
    ///     vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]);
    /// m.corr = 42; // a tracked one-way message's token
    /// let got = m.into_received();
    /// assert_eq!(got.body, Bytes::from_static(b"abcd"));
    /// assert_eq!(got.prelude.corr, 0);
    /// assert_eq!(got.prelude.kind, MessageKind::OneWay);
    /// ```
    pub fn into_received(self) -> InMessage {
        let prelude = self.prelude();
        let body = match self.body.len() {
            0 => Bytes::new(),
            1 => self.body.into_iter().next().unwrap_or_default(),
            _ => {
                let mut b = bytes::BytesMut::with_capacity(prelude.body_len as usize);
                for part in &self.body {
                    b.extend_from_slice(part);
                }
                b.freeze()
            }
        };
        InMessage {
            priority: self.priority,
            number: 0,
            prelude,
            header: self.header,
            body,
        }
    }

    /// The prelude describing this message.
    pub fn prelude(&self) -> Prelude {
        Prelude {
            type_id: self.type_id,
            kind: self.kind,
            header_len: self.header.len() as u32,
            body_len: self.body_len(),
            // A one-way message's corr is a local delivery token at most.
            corr: if self.kind == MessageKind::OneWay {
                0
            } else {
                self.corr
            },
        }
    }

    /// Total bytes on the wire (prelude, header, body; frame headers excluded).
    /// This is what the maximum message size and the output byte bound count.
    pub fn wire_len(&self) -> u64 {
        PRELUDE_LEN as u64 + self.header.len() as u64 + self.body_len()
    }

    /// What the message occupies in memory while it is queued or awaits
    /// its acknowledgement, as a sender's byte bound counts it: its bytes
    /// on the wire and the [`MESSAGE_OVERHEAD`] of the record holding
    /// them. Counting wire bytes alone let a stream of tiny messages take
    /// several times its bound.
    pub fn footprint(&self) -> u64 {
        self.wire_len() + MESSAGE_OVERHEAD
    }

    /// The class of the site's output bound this message counts in: its
    /// level, or the node's own class for a reserved type id
    /// ([`crate::base::class::class_of`]).
    pub fn share_class(&self) -> usize {
        crate::base::class::class_of(self.priority, self.type_id)
    }
}

/// A message received whole.
///
/// # Example
///
/// What a session hands its [`Deliver`](crate::connection::deliver::Deliver) (here a closure)
/// for a message queued on the other side:
///
/// ```
/// # use std::time::Instant;
/// # use bytes::Bytes;
/// # use sitenet_protocols::*;
/// # let now = Instant::now();
/// # let params = ChannelParams {
/// #     buffer_size: 65536, peer_max_message: 1 << 20, peer_last_received: 0, generation: 1,
/// #     caps: sitenet_protocols::Capabilities::ALL,
/// # };
/// # let mut a = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
/// # let mut b = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
/// # a.channel_up(params, now)?;
/// # b.channel_up(params, now)?;
/// # let mut wire = ByteBuffer::new(65536);
/// let msg = OutMessage::new(Priority::Low, 7, Bytes::from("hd"), vec![Bytes::from("body")]);
/// a.queue(msg).unwrap();
/// a.poll_transmit(now, &mut wire);
/// b.handle_input(now, &mut wire, &mut |m: InMessage| {
///     // The handler of `m.prelude.type_id` decodes the typed header.
///     assert_eq!((m.prelude.type_id, m.number, m.priority), (7, 1, Priority::Low));
///     assert_eq!((&m.header[..], &m.body[..]), (&b"hd"[..], &b"body"[..]));
/// })?;
/// # assert_eq!(b.stats().delivered, 1);
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug, Clone)]
pub struct InMessage {
    /// The lane it arrived on.
    pub priority: Priority,
    /// The message number the sender gave it.
    pub number: u64,
    /// Type id, kind and correlation id.
    pub prelude: Prelude,
    /// The typed header, still serialised (decoded by the handler's type).
    pub header: Bytes,
    /// The body, in one piece.
    pub body: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An origin longer than its block's 64 KiB is refused by
    /// `wrap_origin`, not a panic in every forward of that site's requests.
    #[test]
    fn an_origin_too_long_for_its_block_is_refused_not_a_panic() {
        let long = "a".repeat(70_000);
        let r = std::panic::catch_unwind(|| wrap_origin(&long, b"typed"));
        assert_eq!(r.ok(), Some(None), "refused, not a panic");
        let most = "a".repeat(65_535);
        assert_eq!(wrap_origin(&most, b"").map(|b| b.len()), Some(65_537));
    }

    #[test]
    fn prelude_round_trip_and_rejects() {
        let p = Prelude {
            type_id: 7,
            kind: MessageKind::Request,
            header_len: 3,
            body_len: 1 << 40,
            corr: 99,
        };
        let b = p.encode();
        assert_eq!(Prelude::decode(&b), Some(p));
        let mut bad = b;
        bad[4] = 5;
        assert_eq!(Prelude::decode(&bad), None);
        let mut bad = b;
        bad[6] = 1;
        assert_eq!(Prelude::decode(&bad), None);
    }
}

#[cfg(test)]
mod size {
    /// Every queued message is moved several times on its way (outbox,
    /// batch, queue, marshaler, ledger): its size is paid per message.
    #[test]
    fn an_out_message_stays_small() {
        assert!(std::mem::size_of::<super::OutMessage>() <= 88);
    }
}
