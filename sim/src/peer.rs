//! One remote site as a simulated node sees it: the real ComObject (or
//! what it kept while parked) and what its driver keeps beside it, and
//! the node's table of them.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::{ComObject, ComState, Parked};

/// Where a ComObject stands with its node's slot table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    None,
    Waiting(u64),
    Granted(u64),
}

/// One remote site as a node sees it: the real ComObject and what its
/// driver keeps beside it.
pub(crate) struct Peer {
    /// The machine (an empty one while parked: see `parked`). Used only
    /// once the peer is taken out of its node's table
    /// ([`Sim::take_peer`]), which starts it again from what it kept.
    pub(crate) com: ComObject,
    /// What the machine kept while it is parked: the driver
    /// parks it whenever the rule allows, as the runtime does, and starts
    /// it again for its next input or deadline.
    pub(crate) parked: Option<Parked>,
    /// When the timer event in the queue fires (at or before the
    /// machine's next deadline).
    pub(crate) armed: Option<Duration>,
    pub(crate) slot: Slot,
    /// The open attempt in progress: (attempt, connection).
    pub(crate) opening: Option<(u64, u64)>,
    /// The working channel: (channel, connection, end).
    pub(crate) live: Option<(
        sitenet_protocols::connection::com_object::ChannelId,
        u64,
        usize,
    )>,
    /// The machine asked to be forgotten (its reclaim rule) and nothing
    /// of the driver's holds it.
    pub(crate) reclaim: bool,
    /// When the application last sent to the site (it holds a reference
    /// until [`SimConfig::hold_references`](crate::SimConfig) after).
    pub(crate) last_send: Option<Duration>,
    /// The entry's key in its node's site table ([`SiteIndex`](sitenet_protocols::node::site_index::SiteIndex)).
    pub(crate) key: usize,
    /// The address the entry was made for, if the application named the
    /// site by its address ([`AppCtx::send_to_address_of`](crate::AppCtx::send_to_address_of)).
    pub(crate) address: Option<std::sync::Arc<str>>,
    /// The bytes it holds against the output bounds, and the senders
    /// waiting for room ([`outbox`](crate::outbox)).
    pub(crate) out: crate::outbox::SiteOut,
    /// Sends with their bytes reserved, not yet in the machine (only with
    /// [`SimConfig::outbox_queue`](crate::SimConfig::outbox_queue)), and
    /// whether the drain that takes them is scheduled.
    pub(crate) queued: Vec<crate::outbox::Waiting>,
    pub(crate) drain_armed: bool,
    /// Accepted channels routed to this entry, on their way to its
    /// ComObject ([`SimConfig::adopt_hop`](crate::SimConfig::adopt_hop)):
    /// while any is, the reclaim re-check keeps the entry.
    pub(crate) adopting: u32,
}

/// True if `key` names an entry not bound to a site yet: the application
/// reached it by address, and it has not connected there. Such an entry is
/// keyed by an even stand-in ([`Sim::unbound_key`](crate::Sim)); every
/// real site id is odd.
pub(crate) fn unbound(key: SiteId) -> bool {
    key.0 & 1 == 0
}

impl Peer {
    /// The machine's state (parked: the one it parked in).
    pub(crate) fn state(&self) -> ComState {
        match &self.parked {
            Some(p) => p.state(),
            None => self.com.state(),
        }
    }

    /// How much the node has served this site (see
    /// [`SessionStats::served`](sitenet_protocols::connection::session::SessionStats::served)).
    pub(crate) fn served(&self) -> u64 {
        match &self.parked {
            Some(p) => p.session_stats().served(),
            None => self.com.session().stats_ref().served(),
        }
    }

    /// The machine's next deadline (parked: the one it kept).
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        match &self.parked {
            Some(p) => p.deadline(),
            None => self.com.poll_timeout(),
        }
    }

    /// Messages resent on a new channel, so far.
    pub(crate) fn retransmitted(&self) -> u64 {
        match &self.parked {
            Some(p) => p.session_stats().retransmitted,
            None => self.com.session().stats_ref().retransmitted,
        }
    }

    /// (queued, unacknowledged) messages (a parked machine holds none).
    pub(crate) fn pending(&self) -> (usize, usize) {
        match &self.parked {
            Some(_) => (0, 0),
            None => (
                self.com.session().pending_messages(),
                self.com.session().unacked(),
            ),
        }
    }
}

/// A node's ComObjects by remote site. A hash map, looked up and taken out
/// and put back at nearly every event (a `BTreeMap`'s rebalancing cost a
/// tenth of a large run), with a fixed hasher so that nothing differs from
/// run to run; where the order of its entries could reach the trace or a
/// verdict, they are visited sorted ([`sorted_peers`]).
pub(crate) type Peers = HashMap<SiteId, Box<Peer>, BuildHasherDefault<SiteHasher>>;

/// Hashes a site id: its bits are random already (drawn from the run's
/// seed), so folding them is enough, and no per-process key makes two
/// runs differ.
#[derive(Default)]
pub(crate) struct SiteHasher(u64);

impl Hasher for SiteHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }
}

/// A node's ComObjects in the order of their sites' ids: the order every
/// visit that can reach the trace or a verdict takes.
pub(crate) fn sorted_peers(peers: &Peers) -> Vec<(SiteId, &Peer)> {
    let mut v: Vec<(SiteId, &Peer)> = peers.iter().map(|(id, p)| (*id, &**p)).collect();
    v.sort_unstable_by_key(|(id, _)| *id);
    v
}

/// The key `key` goes by now: itself, unless it is a stand-in that was
/// bound or merged ([`Node::aliases`](crate::node::Node::aliases)).
pub(crate) fn resolve(aliases: &BTreeMap<SiteId, SiteId>, mut key: SiteId) -> SiteId {
    while let Some(&next) = aliases.get(&key) {
        key = next;
    }
    key
}
