//! [`Deliver`]: where a session hands what it received — whole messages,
//! or, for the types the driver chooses, Madeleine's deferred receive: the
//! typed header as soon as it has arrived, then the body as chunks as their
//! frames arrive, so a handler can consume a 1 GiB body with bounded memory
//! instead of waiting for it whole.
//!
//! # The rules of a streamed message
//!
//! * Only a message that spans several frames is asked about
//!   ([`Deliver::stream`]); a message that arrives whole in one frame (or in
//!   a packed frame) is always a [`Deliver::message`].
//! * [`stream_start`](Deliver::stream_start) comes once the whole typed
//!   header has arrived, before any chunk. Chunks follow in order, with
//!   their offset in the body: the first is at 0 and each starts where the
//!   previous ended.
//! * [`stream_end`](Deliver::stream_end) says the last byte arrived and the
//!   message took its number: it counts as delivered exactly once, like a
//!   whole message, and is acknowledged after `stream_end` returns.
//! * [`stream_abort`](Deliver::stream_abort) ends a stream without its end:
//!   its channel was lost (the sender restarts the message from its first
//!   fragment on the next channel, so it arrives again as a new stream
//!   whose chunks start at offset 0 again), or the complete message turned
//!   out a duplicate of one delivered before.
//! * The body of a streamed message takes no reassembly budget: its bytes
//!   belong to the handler as soon as they are handed over. Its header
//!   does, until `stream_start`.

use bytes::Bytes;

use crate::base::priority::Priority;
use crate::wire::message::{InMessage, Prelude};

/// Why a stream ended without its [`stream_end`](Deliver::stream_end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamAbort {
    /// The channel was lost after `received` body bytes: the message will
    /// come again from its start on the next channel.
    ChannelLost {
        /// Body bytes handed over before the loss.
        received: u64,
    },
    /// The complete message was a duplicate of one delivered before: drop
    /// what was received.
    Duplicate,
}

/// What a driver gives a session to receive messages. Any `FnMut(InMessage)`
/// is one that never streams.
///
/// # Examples
///
/// A closure is a `Deliver` that takes every message whole:
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::{Deliver, InMessage, MessageKind, Prelude, Priority};
///
/// let mut bodies = Vec::new();
/// let mut deliver = |m: InMessage| bodies.push(m.body);
/// let prelude =
///     Prelude { type_id: 7, kind: MessageKind::OneWay, header_len: 0, body_len: 2, corr: 0 };
/// assert!(!deliver.stream(Priority::High, &prelude)); // never streams
/// let header = Bytes::new();
/// let body = Bytes::from("hi");
/// deliver.message(InMessage { priority: Priority::High, number: 1, prelude, header, body });
/// assert_eq!(bodies, ["hi"]);
/// ```
///
/// A receiver that streams large bodies as their frames arrive, given to
/// [`Session::handle_input_with`](crate::connection::session::Session::handle_input_with):
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::{Deliver, InMessage, Prelude, Priority};
/// # use std::time::Instant;
/// # use sitenet_protocols::{
/// #     ByteBuffer, ChannelParams, OutMessage, ReassemblyBudget, Session, SessionConfig,
/// # };
///
/// #[derive(Default)]
/// struct Streamer {
///     whole: usize,
///     streamed: u64,
///     ended: Vec<u64>,
/// }
///
/// impl Deliver for Streamer {
///     fn message(&mut self, _m: InMessage) {
///         self.whole += 1;
///     }
///     fn stream(&mut self, _lane: Priority, prelude: &Prelude) -> bool {
///         prelude.body_len >= 64 * 1024 // large bodies, a chunk at a time
///     }
///     fn stream_chunk(&mut self, _lane: Priority, offset: u64, data: Bytes) {
///         assert_eq!(offset, self.streamed); // in order, without gaps
///         self.streamed += data.len() as u64;
///     }
///     fn stream_end(&mut self, _lane: Priority, number: u64) {
///         self.ended.push(number);
///     }
/// }
///
/// # let now = Instant::now();
/// # let params = ChannelParams {
/// #     buffer_size: 16384, peer_max_message: 1 << 30, peer_last_received: 0, generation: 1,
/// #     caps: sitenet_protocols::Capabilities::ALL,
/// # };
/// # let mut a = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
/// # let mut b = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
/// # a.channel_up(params, now)?;
/// # b.channel_up(params, now)?;
/// # let mut wire = ByteBuffer::new(16384);
/// let big = Bytes::from(vec![0u8; 1 << 20]);
/// a.queue(OutMessage::new(Priority::Low, 1, Bytes::new(), vec![big])).unwrap();
/// a.queue(OutMessage::new(Priority::Low, 2, Bytes::new(), vec![Bytes::from("small")])).unwrap();
/// let mut receiver = Streamer::default();
/// while a.poll_transmit(now, &mut wire) > 0 {
///     b.handle_input_with(now, &mut wire, &mut receiver)?;
/// }
/// assert_eq!((receiver.streamed, &receiver.ended[..], receiver.whole), (1 << 20, &[1][..], 1));
/// # Ok::<(), sitenet_protocols::ProtocolError>(())
/// ```
pub trait Deliver {
    /// A complete message.
    fn message(&mut self, m: InMessage);

    /// Whether the message announced by `prelude` on `lane` (which spans
    /// several frames) is streamed. The default never streams.
    fn stream(&mut self, _lane: Priority, _prelude: &Prelude) -> bool {
        false
    }

    /// A streamed message's typed header has arrived.
    fn stream_start(&mut self, _lane: Priority, _prelude: &Prelude, _header: Bytes) {}

    /// `data` is the streamed message's body from `offset` on.
    fn stream_chunk(&mut self, _lane: Priority, _offset: u64, _data: Bytes) {}

    /// The streamed message is complete and numbered `number`.
    fn stream_end(&mut self, _lane: Priority, _number: u64) {}

    /// The streamed message on `lane` ends here without its end.
    fn stream_abort(&mut self, _lane: Priority, _why: StreamAbort) {}
}

impl<F: FnMut(InMessage)> Deliver for F {
    fn message(&mut self, m: InMessage) {
        self(m)
    }
}
