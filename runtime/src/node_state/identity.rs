//! [`Identity`]: who a node is and what it offers its peers.

use sitenet_protocols::{LocalInfo, SiteId, Speaks};
use sitenet_transport::Address;

use crate::config::NodeConfig;

/// A node's site id, its configuration in force, the addresses it
/// listens on and the versions it speaks: set when the node starts, never
/// changed after, read by every handshake.
pub(crate) struct Identity {
    id: SiteId,
    cfg: NodeConfig,
    listen: Vec<Address>,
    /// The versions and capabilities this node offers in its handshakes.
    speaks: Speaks,
}

impl Identity {
    pub(crate) fn new(id: SiteId, cfg: NodeConfig, listen: Vec<Address>, speaks: Speaks) -> Self {
        Self {
            id,
            cfg,
            listen,
            speaks,
        }
    }

    /// This node's site id (its incarnation).
    pub(crate) fn id(&self) -> SiteId {
        self.id
    }

    /// The configuration in force (after clamping).
    pub(crate) fn cfg(&self) -> &NodeConfig {
        &self.cfg
    }

    /// Whether `address` is one of the addresses this node listens on (as
    /// bound, with real ports).
    pub(crate) fn listens_on(&self, address: &Address) -> bool {
        self.listen.contains(address)
    }

    /// The addresses this node listens on, with real ports, as text.
    pub(crate) fn listen_addresses(&self) -> Vec<String> {
        self.listen.iter().map(ToString::to_string).collect()
    }

    /// What this node tells a peer about itself in a handshake.
    pub(crate) fn local_info(&self) -> LocalInfo {
        LocalInfo {
            site: self.id,
            listen: self.listen_addresses(),
            buffer_size: self.cfg.buffer_size,
            max_message: self.cfg.max_message_size,
            speaks: self.speaks,
        }
    }
}
