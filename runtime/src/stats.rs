//! [`NodeStats`]: what a node holds, against its bounds — channel slots,
//! transport memory, sites — for operators and for `sitenet stress`.

use serde::Serialize;
use sitenet_transport::SlotSnapshot;

/// A snapshot of a node's resources (see [`Node::stats`](crate::Node::stats)).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct NodeStats {
    /// The channel slots of the node's TransController (shared with the
    /// other nodes of the process unless the node has its own).
    pub slots: SlotSnapshot,
    /// Bytes of ByteBuffers held by this node's working channels now.
    pub transport_bytes: u64,
    /// The most `transport_bytes` has been.
    pub transport_bytes_peak: u64,
    /// What `transport_bytes` can never exceed: the controller's hard limit
    /// × two buffers × the buffer size.
    pub transport_bytes_bound: u64,
    /// Remote sites in the site table.
    pub sites_live: usize,
    /// Of those, sites with no channel.
    pub sites_idle: usize,
    /// Of those, sites whose ComObject is parked: no actor, no
    /// session, what it must remember kept in the site's entry, packed.
    pub sites_parked: usize,
    /// Sites forgotten by the reclaim rule since the node started.
    pub sites_reclaimed: u64,
    /// Each site's counters.
    pub per_site: Vec<SiteStats>,
    /// Bytes of output held for all sites together (queued, being sent,
    /// unacknowledged) …
    pub output_bytes: u64,
    /// … which never exceeds this (`NodeConfig::node_output_bound`).
    pub output_bytes_bound: u64,
    /// Accepted connections in their handshake now: each holds a
    /// descriptor and small rings (and, on `tls:`, a TLS session), no
    /// channel slot, no site entry.
    pub handshakes_pending: u64,
    /// The most `handshakes_pending` has been.
    pub handshakes_pending_peak: u64,
    /// What `handshakes_pending` never exceeds
    /// (`NodeConfig::max_pending_handshakes`).
    pub handshakes_pending_bound: usize,
    /// Handshakes refused because the peer is not a member or not the
    /// site its certificate names (wrong or missing cookie, a refused
    /// certificate).
    pub auth_refused: u64,
}

/// One remote site's counters, as its ComObject last published them (at
/// most every few milliseconds while it is active).
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct SiteStats {
    /// The site's id, once a handshake told it.
    pub site: Option<String>,
    /// The address it was asked for (`Node::site`), if any.
    pub address: Option<String>,
    /// Every address it can be called at, in the order opens try them
    /// (mem, unix, tcp): the one asked for and those the site listed in
    /// its handshakes. Empty for a site that only connects to us.
    pub addresses: Vec<String>,
    /// The peer's end of the working channel (`tcp:…`, `unix:…`,
    /// `mem:…`): which transport the two sites use now.
    pub channel: Option<String>,
    /// The optional features the working channel's two ends agreed in
    /// their handshake (`packed,leaving,line`, or `none` with a peer of an
    /// older build): during a rolling upgrade, which peers lack what.
    pub capabilities: Option<String>,
    /// `capabilities` as bits, to rebuild the text only when it changes.
    #[serde(skip)]
    pub(crate) capabilities_bits: Option<u64>,
    /// A channel works now.
    pub connected: bool,
    /// Messages sent for the first time, by level 1 to 4.
    pub messages_sent: [u64; 4],
    /// Frame bytes written for application messages, by level (resends
    /// included).
    pub bytes_sent: [u64; 4],
    /// Messages delivered from the site, by level.
    pub messages_received: [u64; 4],
    /// Messages resent after a lost channel.
    pub retransmitted: u64,
    /// Channels opened to or accepted from the site beyond the first.
    pub reconnects: u64,
    /// Channels closed because the slot controller preempted them.
    pub preemptions: u64,
    /// Messages queued, partly sent or unacknowledged.
    pub queue_depth: u64,
    /// Bytes held for the site (queued and unacknowledged) per class of
    /// its output bound, read when the stats are taken: levels 1 to 4
    /// (indexed as `Priority::index`), then the node's own messages (error
    /// and "no reply" answers, the built-in services' replies). Each class
    /// keeps a reserve of the bound the others cannot take, so a backlog at
    /// one level never refuses another's sends.
    pub pending_bytes_by_class: [u64; sitenet_protocols::connection::output_share::CLASSES],
}

impl SiteStats {
    /// How much the node has served the site: the messages exchanged with
    /// it (sent once, delivered), as the sessions count them
    /// (`SessionStats::served`). The waiting line lets the least served in
    /// first under `Admission::Share` (see `docs/architecture.md`).
    pub fn served(&self) -> u64 {
        let sum = |a: &[u64; 4]| a.iter().fold(0u64, |s, &n| s.saturating_add(n));
        sum(&self.messages_sent).saturating_add(sum(&self.messages_received))
    }
}
