//! Errors of the public API, grouped by cause.

use std::io;

use thiserror::Error;

use sitenet_protocols::SiteId;
use sitenet_transport::{AddressError, RegisterError};

/// A node configuration that cannot work, found when the node starts
/// (`NodeBuilder::start`): nothing has been bound or spawned. Each variant
/// names the setting and the change that makes it work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration that must be above zero is zero.
    #[error("NodeConfig::{field} is zero: it must be above zero (the default is {default:?})")]
    Zero {
        /// The setting.
        field: &'static str,
        /// Its default.
        default: std::time::Duration,
    },
    /// The silence timeout does not exceed the heartbeat interval: an idle
    /// peer would be taken for failed between two of its heartbeats.
    #[error(
        "NodeConfig::silence_timeout ({silence:?}) must be longer than heartbeat_interval \
         ({heartbeat:?}): an idle peer would be taken for failed between two of its \
         heartbeats (the defaults are 5 s and 1 s; MAX_DURATION means never)"
    )]
    SilenceWithinHeartbeat {
        /// `NodeConfig::silence_timeout`.
        silence: std::time::Duration,
        /// `NodeConfig::heartbeat_interval`.
        heartbeat: std::time::Duration,
    },
    /// A node with a certificate demands one of every peer, so it listens
    /// only on `tls:` addresses; `addr` is another kind.
    #[error(
        "this node has a TLS certificate, so it listens only on tls:HOST:PORT addresses \
         (every peer must prove its certificate); got {addr}"
    )]
    PlainListenWithCertificate {
        /// The listen address.
        addr: String,
    },
    /// A `tls:` listen address on a node without a certificate.
    #[error(
        "{addr} needs a certificate: give the node one (NodeConfig::tls; --cert, --key and \
         --ca on the command line) or listen on tcp:"
    )]
    TlsListenWithoutCertificate {
        /// The listen address.
        addr: String,
    },
    /// The node's own handshake cannot be written (a listen list too long
    /// for the handshake, for one).
    #[error("{0}")]
    Handshake(sitenet_protocols::OpenError),
}

/// A node could not be started or configured.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The listen address does not parse.
    #[error(transparent)]
    Address(#[from] AddressError),
    /// Binding the listen address failed.
    #[error("cannot listen on {addr}: {source} (is the port in use? port 0 picks a free one)")]
    Bind {
        /// What was asked.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// A message type id was registered twice.
    #[error("a handler for message type id {0} is already registered")]
    DuplicateHandler(u32),
    /// A user type tried to use an id reserved for sitenet's own messages.
    #[error("message type id {0} is in the range reserved for sitenet (4294901760 = 0xFFFF_0000 and above); pick a smaller id")]
    ReservedId(u32),
    /// A raw handler's range of type ids overlaps the range of one already
    /// registered (`Node::handle_raw`): each id has at most one raw
    /// handler, so which one runs never depends on the order of
    /// registration. Remove the other first, or pick disjoint ranges.
    #[error("the raw handler range {range:?} overlaps the registered range {registered:?}")]
    OverlappingRange {
        /// The range asked for.
        range: std::ops::RangeInclusive<u32>,
        /// The registered range it overlaps.
        registered: std::ops::RangeInclusive<u32>,
    },
    /// A raw handler's range of type ids holds no id (for example `5..5`).
    #[error("the raw handler range holds no type id")]
    EmptyRange,
    /// A raw fallback handler (`Node::handle_raw_fallback`) is registered
    /// already; `replace_raw_fallback` replaces it.
    #[error("a raw fallback handler is already registered")]
    DuplicateFallback,
    /// The node has been shut down.
    #[error("the node has been shut down")]
    Shutdown,
    /// A descriptor names this node itself. No longer returned: such a
    /// descriptor gives `Node::local_site`, which delivers without the
    /// network (kept so that matches on this enum still compile).
    #[error("the descriptor names this node's own site {0}; handle the message locally instead")]
    OwnSite(sitenet_protocols::SiteId),
    /// The configuration cannot work; the [`ConfigError`] says what to
    /// change.
    #[error("invalid node configuration: {0}")]
    Config(#[from] ConfigError),
    /// The node would listen where other hosts reach it (`addr`, a
    /// `tcp:` address that is not loopback) at the open level, where
    /// anyone who reaches the port can be any site, and the open level was
    /// not chosen explicitly. Give the node a cookie or a certificate, or
    /// choose the open level ([`NodeConfig::allow_open`](crate::NodeConfig::allow_open)).
    #[error(
        "{addr} is reachable from other hosts and this node has no cookie and no certificate, \
         so anyone who reaches it can be any site: give it a cookie (NodeConfig::cookies; \
         --cookie-file), a certificate (NodeConfig::tls; --cert), or choose the open level \
         explicitly (NodeConfig::allow_open, NodeBuilder::open(); --open), or listen on \
         loopback (tcp:127.0.0.1:PORT)"
    )]
    OpenToNetwork {
        /// The listen address (as bound: the real port).
        addr: String,
    },
    /// A transport could not be plugged in
    /// ([`NodeBuilder::transport`](crate::NodeBuilder::transport)): a
    /// built-in scheme, not a scheme name, or one taken.
    #[error("cannot plug in the transport: {0}")]
    Transport(#[from] RegisterError),
}

/// A message could not be queued. Nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SendError {
    /// The site's output bound is reached (`SendBuilder::try_now`, or a
    /// send from a handler, which never waits). Retry later or await the
    /// send.
    #[error(
        "the output queue is full ({bound} bytes held for this site, or for all sites of the node together); retry later or await the send"
    )]
    QueueFull {
        /// The bound that was reached: the site's (`output_bound`) or the
        /// node's (`node_output_bound`).
        bound: u64,
    },
    /// The message exceeds the maximum message size of this node or the peer.
    #[error("message of {size} bytes exceeds the maximum message size {max}; split it or raise max_message_size on both nodes")]
    TooLarge {
        /// Encoded size.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// The message could not be made: its typed header does not
    /// serialise with rmp-serde (a map with non-string keys in named
    /// form, a `Serialize` impl that fails, a `SiteRef` whose id is not
    /// known yet), or, for a forward, the requesting site cannot be named.
    /// Nothing was sent; fix the type, or talk to the site first.
    #[error("cannot encode the message of type {type_id}: {reason}")]
    Encode {
        /// The message's type id.
        type_id: u32,
        /// What the encoder said.
        reason: String,
    },
    /// A reply or a forward (`Ctx::reply`, `Ctx::forward`, their raw and
    /// `_with` forms) of a message that is not a request awaiting its
    /// answer: a one-way message, or a request answered (or forwarded,
    /// or handed to a `Responder`) already. Nothing was sent. Answer each
    /// request once (`Ctx::is_request` tells a request).
    #[error("message type {type_id} is not a request awaiting its answer (a one-way message, or a request answered already): answer each request once")]
    NothingToAnswer {
        /// The type id of the message being handled.
        type_id: u32,
    },
    /// A raw message (`SiteRef::send_raw`, `Ctx::reply_raw`) named a type
    /// id reserved for sitenet's own messages.
    #[error("message type id {0} is in the range reserved for sitenet (4294901760 = 0xFFFF_0000 and above); pick a smaller id")]
    ReservedId(u32),
    /// A handed-back message that cannot be sent again as it is
    /// (`SiteRef::resend`): only one-way messages can. A request's caller
    /// was told of the failure already and a reply's request is gone; the
    /// message says what to do instead.
    #[error("this handed-back message cannot be sent again: {0}")]
    NotResendable(String),
    /// The site is permanently failed; messages to it are refused.
    #[error("site {site:?} failed permanently: {reason}")]
    SiteFailed {
        /// The site, if its id was known.
        site: Option<SiteId>,
        /// Why, typed (shut down, killed, gave up, a new incarnation…).
        reason: SiteFailure,
    },
    /// The node has been shut down.
    #[error("the node has been shut down")]
    Shutdown,
    /// A blocking call was made on the node's own runtime thread, where it
    /// would wait for ever for work only that thread can do. Use the async
    /// send (or `try_now` it) there, e.g. from a handler or `Ctx::spawn`.
    #[error("a blocking call on the node's own runtime thread would deadlock; await the send or request there, or try_now a send")]
    WouldDeadlock,
    /// The node's runtime no longer runs (an actix system it was started on
    /// has stopped): nothing can be sent. Start the node on a live runtime.
    #[error(
        "the node's runtime has stopped; nothing can be sent (start the node on a running runtime)"
    )]
    RuntimeStopped,
}

/// Why a tracked message (`SendBuilder::tracked`) will never be
/// acknowledged. The two site failures differ in what a runtime may do: a
/// message `NotSent` can be sent elsewhere as it is; one `MaybeDelivered`
/// may have been handled, so resending it could apply it twice.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The message never completely left this node: the site failed
    /// permanently first, or the peer can never take it (too large).
    #[error("not sent: {reason}")]
    NotSent {
        /// Why.
        reason: String,
    },
    /// The message was sent, and the site failed (or forgot this node)
    /// before acknowledging it: it may or may not have been delivered.
    #[error("maybe delivered: {reason}")]
    MaybeDelivered {
        /// Why.
        reason: String,
    },
    /// The node was shut down before the outcome was known.
    #[error("the node was shut down before the message was acknowledged")]
    Shutdown,
}

/// A request did not produce a reply.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Queuing the request failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// No reply within the timeout. The request may still be processed; a late
    /// reply is discarded.
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    /// No reply within the timeout, and the site was unreachable at the
    /// deadline: its channel was lost or an open failed (`cause`: for
    /// example "connection refused"). The request waits in the site's
    /// queue and is sent if the site comes back; a late reply is
    /// discarded. A slow site that is reachable gives
    /// [`Timeout`](Self::Timeout) instead.
    #[error("no reply within {waited:?}: the site is unreachable ({cause})")]
    Unreachable {
        /// The request's timeout.
        waited: std::time::Duration,
        /// What keeps the site away.
        cause: String,
    },
    /// The peer has no handler for the request's type id (nor a raw
    /// handler whose range holds it). Nothing ran there. Register a
    /// handler on the peer, or check that both sides declare the same
    /// `Message::ID`.
    #[error("the peer has no handler for message type {type_id}; register one there, or check both sides declare the same type id")]
    NoHandler {
        /// The request's type id.
        type_id: u32,
    },
    /// The peer's handler failed: it panicked, refused the request
    /// ([`Responder::fail`](crate::Responder::fail)), its request's
    /// header did not decode as its type, or it returned an error value
    /// of its own type (`Node::handle_result`, `Node::handle_async`) —
    /// which [`or_error`](crate::RequestBuilder::or_error) decodes
    /// instead; here `value` holds it. The handler may have had effects:
    /// retry only what is safe to repeat.
    #[error("the peer's handler for message type {type_id} failed: {reason}")]
    Remote {
        /// The request's type id.
        type_id: u32,
        /// What the peer said.
        reason: String,
        /// The handler's own error value, MessagePack-encoded, if it
        /// answered with one (decode it with `rmp_serde`, or ask with
        /// [`or_error`](crate::RequestBuilder::or_error)).
        value: Option<bytes::Bytes>,
    },
    /// The peer's handler answered nothing: it returned without replying,
    /// forwarding or taking the request's
    /// [`Responder`](crate::Responder), or dropped the responder
    /// unanswered. Said at once, so no caller waits out its timeout; the
    /// handler did run (retrying repeats its effects). Fix the handler to
    /// answer every request.
    #[error("the peer's handler for message type {type_id} gave no reply: {reason}")]
    NoReply {
        /// The request's type id.
        type_id: u32,
        /// What the peer said.
        reason: String,
    },
    /// The peer did not run the request's handler: it was an async
    /// handler ([`Node::handle_async`](crate::Node::handle_async)) and
    /// the peer already ran as many as it allows at once
    /// (`NodeConfig::max_async_handlers`). Said at once; nothing was
    /// applied, so retrying later is safe. (It travels as an error reply:
    /// a caller running an older sitenet sees it as
    /// [`Remote`](Self::Remote), with the same reason.)
    #[error(
        "the peer is busy and did not handle the request of type {type_id} (retry later): {reason}"
    )]
    Busy {
        /// The request's type id.
        type_id: u32,
        /// What the peer said.
        reason: String,
    },
    /// The answer did not decode as the type asked for: the peer's reply
    /// type or its error type differs from the caller's (a version
    /// mismatch, or the wrong `R`/`E`). The handler ran.
    #[error("cannot decode the reply: {0}")]
    Decode(DecodeError),
    /// The site failed permanently before replying, and why.
    #[error("site failed permanently before replying: {0}")]
    SiteFailed(SiteFailure),
    /// The node was shut down before a reply arrived.
    #[error("the node was shut down before a reply arrived")]
    Shutdown,
}

/// A message did not decode as the type asked for: a handed-back message
/// ([`ReturnedMessage::decode`](crate::ReturnedMessage::decode)), a
/// batch's reply ([`Done::decode`](crate::Done::decode)) or a
/// cooperation's answer ([`Answer::decode`](crate::Answer::decode)).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message is of another type.
    #[error("the message is of type {got}, not {expected}")]
    WrongType {
        /// The type asked for.
        expected: u32,
        /// The message's type id.
        got: u32,
    },
    /// The typed header does not decode as the type asked for (a message
    /// sent raw has an empty header: read its body instead).
    #[error("the header does not decode as type {type_id}: {reason}")]
    Header {
        /// The message's type id.
        type_id: u32,
        /// What the decoder said.
        reason: String,
    },
    /// A batch's send completed: it has no reply to decode.
    #[error("a send has no reply to decode")]
    NoReply,
    /// A handler's own error value
    /// ([`or_error`](crate::RequestBuilder::or_error)) does not decode as
    /// the type asked for: the handler returned another type.
    #[error("the handler's error value does not decode as {expected} ({reason}); the handler said: {handler_said}")]
    ErrorValue {
        /// The type asked for.
        expected: &'static str,
        /// What the decoder said.
        reason: String,
        /// The handler's own rendering of its error.
        handler_said: String,
    },
}

/// Why a site failed permanently (also reported to the user via faults);
/// decided by the ComObject state machine in `sitenet-protocols`.
pub use sitenet_protocols::SiteFailure;

/// A blocking call ([`Node::shutdown_blocking`](crate::Node::shutdown_blocking),
/// [`Node::wait_until_blocking`](crate::Node::wait_until_blocking)) was made
/// on the node's own runtime thread, where it would wait for ever for work
/// only that thread can do — as a send's or request's `blocking` (`SendError::WouldDeadlock`)
/// and a flush's `blocking` (`FlushError::WouldDeadlock`) report it. Await the
/// async variant there (from a handler, `Ctx::spawn`, or a task on the
/// node's runtime), or drop the node to stop it without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("a blocking call on the node's own runtime thread would deadlock; await the async variant there")]
pub struct WouldDeadlock;

/// Waiting for a site's messages to be acknowledged did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FlushError {
    /// The deadline passed with messages still unacknowledged.
    #[error("{pending_bytes} bytes still unacknowledged at the deadline")]
    Timeout {
        /// Bytes still held.
        pending_bytes: u64,
    },
    /// The site failed permanently; see `SiteRef::failure` for what it
    /// handed back.
    #[error("site failed permanently: {0}")]
    SiteFailed(SiteFailure),
    /// A flush's `blocking` was called on the node's own runtime thread, where
    /// it would wait for ever; use `flush` there.
    #[error("a blocking call on the node's own runtime thread would deadlock; use flush there")]
    WouldDeadlock,
}
