//! Node metrics: plain atomic counters, cheap to bump from any thread, read as
//! a [`Metrics`] snapshot. Tests use them to prove data-path properties (for
//! example: 10,000 sends to a busy ComObject cause one wake).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// What a field of [`Metrics`] is, for the OpenMetrics exposition
/// (`Node::openmetrics`): most only ever grow (counters); a few go up and
/// down or record a high-water mark (gauges), marked `: gauge` below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

macro_rules! kind {
    () => {
        Kind::Counter
    };
    (gauge) => {
        Kind::Gauge
    };
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident $(: $kind:ident)?),* $(,)?) => {
        /// Live counters of a node.
        #[derive(Debug, Default)]
        pub(crate) struct Counters { $(pub(crate) $name: AtomicU64,)* }

        /// A snapshot of a node's counters.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct Metrics { $($(#[doc = $doc])* pub $name: u64,)* }

        impl Counters {
            pub(crate) fn snapshot(&self) -> Metrics {
                Metrics { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl Metrics {
            /// Each field as (name, its doc comment (one line per line), kind,
            /// value), in declaration order: the exposition's source, so
            /// a counter added here is exported with its documentation.
            pub(crate) fn fields(&self) -> impl Iterator<Item = (&'static str, &'static str, Kind, u64)> {
                [$((stringify!($name), concat!($($doc, "\n"),*), kind!($($kind)?), self.$name),)*].into_iter()
            }
        }
    };
}

counters! {
    /// Wake-ups sent to ComObjects because an outbox went from empty to non-empty.
    wakes,
    /// Messages queued by a `SiteRef`'s sends and requests.
    messages_queued,
    /// Messages delivered to handlers (replies included).
    messages_delivered,
    /// Messages completely sent (first transmissions).
    messages_sent,
    /// Messages resent after a reconnect.
    messages_retransmitted,
    /// Duplicates received and discarded.
    duplicates,
    /// Channels that reached working.
    channels_opened,
    /// Channels closed or lost.
    channels_closed,
    /// Channels closed because the peer broke the protocol.
    protocol_errors,
    /// Accepted connections closed in their handshake to make room for a
    /// newer one: the node's pending handshakes, or their source address's,
    /// were at their cap (`NodeConfig::max_pending_handshakes`, `…_per_source`).
    handshakes_refused,
    /// Accepted connections closed for sending nothing within
    /// `NodeConfig::handshake_silence`.
    handshakes_silent,
    /// Gauge: accepted connections in their handshake now (they hold a
    /// descriptor, no channel slot).
    handshakes_pending: gauge,
    /// The most `handshakes_pending` has been.
    handshakes_pending_peak: gauge,
    /// Messages with no handler for their type (or that failed to decode).
    unhandled,
    /// Handlers that panicked (the message counts as delivered).
    handler_panics,
    /// Reads from sockets.
    reads,
    /// Writes to sockets.
    writes,
    /// Weak closes this node started.
    weak_closes_started,
    /// Weak closes of ours the peer rejected.
    weak_closes_rejected,
    /// Hard closes this node started.
    hard_closes_started,
    /// Channels that ended by the close protocol (not failures).
    orderly_closes,
    /// Transitions to temporarily failed.
    temp_failures,
    /// Sites declared permanently failed.
    perm_failures,
    /// Times a channel stopped reading because the reassembly budget was
    /// short (it resumes when budget is given back).
    budget_pauses,
    /// Replies that completed no request: late (after a timeout or a
    /// cancel), unknown, or from a site the request was not sent to.
    replies_discarded,
    /// Sink messages refused because their sender had
    /// `sink_streams_per_sender` streams open already.
    sink_refused,
    /// Messages handed back as never sendable (larger than the peer's
    /// maximum learned after they were queued, or queued as the site failed)
    /// or as maybe delivered (the peer forgot the session).
    handed_back,
    /// Site entries forgotten by the reclaim rule (no `SiteRef`, nothing
    /// pending, no channel for the linger time): their memory is returned.
    sites_reclaimed,
    /// Times an idle site's ComObject parked: no channel,
    /// nothing pending, so its actor stopped and what its machine keeps
    /// (numbering, the pair's secret, addresses, deadlines, counters)
    /// stayed in the site's entry, packed.
    parks,
    /// Times a parked site's ComObject started again from what it kept: a
    /// message to send, an accepted channel, a kill, or its deadline.
    unparks,
    /// Times a peer turned out to have forgotten this node's session (it
    /// reclaimed its entry); numbering started again.
    peers_forgot,
    /// Channels this node closed with CLOSE_HARD because the slot
    /// controller preempted them.
    preemptions,
    /// Preemptions that arrived after the channel they meant was replaced
    /// (their lease given back): ignored, the new channel kept.
    preemptions_stale,
    /// Accepted connections closed at once: the slot controller was at its
    /// hard limit, and its waiting line full (or the peer cannot wait).
    accepts_refused,
    /// Times accepting a connection failed at the listener (out of file
    /// descriptors, most often: the accept loop waits 10 ms and tries
    /// again, and its warnings are rate-limited as a peer's are).
    accept_errors,
    /// Times a site had to wait in line for a channel slot.
    slot_waits,
    /// Accepted peers this node told to wait in its line (its slots full)
    /// instead of refusing them.
    line_told_to_wait,
    /// Accepted peers let in from this node's line when a slot freed.
    line_granted,
    /// Gauge: accepted peers waiting in this node's line now (each holds
    /// a connection on its handshake rings, no channel slot).
    line_waiting: gauge,
    /// Open attempts of this node a peer told to wait in its line.
    line_waits,
    /// Waits in a peer's line given up at `NodeConfig::line_give_up`.
    line_give_ups,
    /// Waits in a peer's line left early: the slot they held went to a
    /// site waiting at this node (`SlotConfig::line_yield`; also counted
    /// in `preemptions`).
    line_yields,
    /// Gauge: bytes of ByteBuffers held by working channels (two fixed
    /// buffers per channel; it never grows with traffic).
    channel_buffer_bytes: gauge,
    /// The most `channel_buffer_bytes` has been.
    channel_buffer_bytes_peak: gauge,
    /// Frames written that carry application messages (DATA and PACKED,
    /// resends included): what a communication pattern costs on the wire.
    data_frames_sent,
    /// Explicit acknowledgement frames written (most acknowledgements ride
    /// on data frames and cost none).
    ack_frames_sent,
    /// Log lines about a peer's bad input (or a listener's failed accepts)
    /// not written: past a few per peer every 10 s they are counted here
    /// and summarised in the next line written
    /// (`sitenet_protocols::node::log_limit`).
    logs_suppressed,
    /// Stats queries refused: from another host (see
    /// `NodeConfig::stats_from_anywhere`) or naming a forwarded origin.
    stats_refused,
    /// Sites a peer named (a forwarded origin, a `SiteRef` in a message)
    /// that were not created: the peer held its bound of claims
    /// (`NodeConfig::forward_claims_per_peer`, `site_ref_claims_per_peer`).
    claims_refused,
    /// Channels refused because their NEGOTIATE named a site this node has
    /// a session with and did not prove the pair's continuity (a stranger
    /// claiming the site's id; see `sitenet_protocols::connection::handshake::continuity`).
    unproven_claims_refused,
    /// Accepted connections refused because their NEGOTIATE proved no
    /// cookie this node holds, or proved one while this node holds none
    ///: nothing was allocated for them (no site entry, no slot).
    auth_refused,
    /// Gauge: async handler futures running now (`Node::handle_async`),
    /// at most `NodeConfig::max_async_handlers`.
    async_handlers: gauge,
    /// Messages refused because `NodeConfig::max_async_handlers` async
    /// handler futures were running: a request answered at once with an
    /// error its caller sees as `RequestError::Busy`, a one-way message
    /// dropped (and passed to the `on_unhandled` hook).
    async_handlers_busy,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}
