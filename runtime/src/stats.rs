//! [`NodeStats`]: what a node holds, against its bounds — channel slots,
//! transport memory, sites — for operators and for `sitenet stress`.

use serde::Serialize;
use sitenet_transport::SlotSnapshot;

/// A snapshot of a node's resources (see [`Node::stats`](crate::Node::stats)).
#[derive(Debug, Clone, Serialize)]
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
    /// Sites forgotten by the reclaim rule since the node started.
    pub sites_reclaimed: u64,
}
