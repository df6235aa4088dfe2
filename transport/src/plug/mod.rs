//! Transports a user plugs in: TLS over something else, QUIC, a runtime's
//! own carrier — any reliable ordered byte channel, reached at addresses
//! of a scheme of its own (`pipe:NAME`, `quic:HOST:PORT`).
//!
//! Why: the built-in kinds ([`Channel`](crate::Channel)'s TCP, Unix and
//! mem variants) are a closed enum, and a runtime embedding sitenet often
//! has a carrier of its own (BMI's transport methods and Erlang's
//! `-proto_dist` are the precedents). A [`Transport`] connects to and
//! binds addresses of its scheme; a [`TransportRegistry`] maps scheme
//! names to transports, parses addresses with them
//! ([`TransportRegistry::parse`]) and dials and binds through them
//! ([`TransportRegistry::connect`], [`TransportRegistry::bind`]).
//! A node holds one registry (`NodeBuilder::transport` in the runtime).
//!
//! What a plugged channel must do is what the channel driver asks of every
//! channel, and nothing more ([`TransportChannel`]): readiness (read and
//! write), non-blocking vectored writes, non-blocking reads into a buffer
//! the caller provides (a ring's free space, or a large message's own
//! memory: the in-place read path), ending the writing direction, closing
//! (for the fault injector's cuts) and naming the peer. [`StreamChannel`]
//! does all of it for any tokio `AsyncRead + AsyncWrite` stream, so most
//! transports are a few lines (see [`Transport`]'s example).
//!
//! The built-in kinds stay on the enum, dispatched statically: their hot
//! paths do not change. Only plugged channels
//! ([`Channel::Plugged`](crate::Channel::Plugged)) pay a virtual call per
//! readiness check, read and write; the test support's fault-injecting
//! wrapper ([`FaultyChannel`](crate::fault::FaultyChannel)) is one.
//!
//! Its files, lowest first: the interface ([`Transport`],
//! [`TransportListener`], [`TransportChannel`]), [`StreamChannel`], the
//! boxed channel and listener that [`Channel`](crate::Channel) and
//! [`Listener`](crate::Listener) hold ([`PluggedChannel`],
//! [`PluggedListener`]) — all below `channel.rs` — and the
//! [`TransportRegistry`], which dials and binds into a `Channel` and so
//! sits above it.

mod boxed;
mod registry;
mod stream;
#[cfg(test)]
mod tests;
mod transport;

pub(crate) use boxed::unregistered;
pub use boxed::{PluggedChannel, PluggedListener};
pub use registry::{RegisterError, TransportRegistry};
pub use stream::StreamChannel;
pub use transport::{BoxFuture, Transport, TransportChannel, TransportListener};
