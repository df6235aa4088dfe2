//! What a session keeps while its site is parked (see
//! [`Parked`](crate::connection::com_object::Parked)): with no channel and no message,
//! a session is its numbering and its counters. Everything else — the
//! link, the traffic state, partly received messages, events — is empty
//! then, and made again on demand as always.

use std::num::NonZeroU64;
use std::sync::Arc;

use super::{Session, SessionConfig, SessionStats};
use crate::connection::reassembly::ReassemblyBudget;
use crate::wire::varint::{Packer, Unpacker};

/// A parked session, unpacked (see [`Session::parked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionFields {
    pub(crate) last_sent: u64,
    pub(crate) acked: u64,
    pub(crate) last_received: u64,
    pub(crate) last_generation: u64,
    pub(crate) tag: crate::connection::handshake::SessionTag,
    pub(crate) peer_max_message: Option<NonZeroU64>,
    pub(crate) local_need: bool,
    pub(crate) ack_hold: bool,
    pub(crate) pack: bool,
    pub(crate) stats: Option<SessionStats>,
}

impl Session {
    /// True if the session holds nothing but its numbering and counters:
    /// no channel, no message queued, partly sent, unacknowledged or
    /// refused, no acknowledgement the driver has not taken
    /// ([`take_freed`](Self::take_freed), [`take_delivered`](Self::take_delivered)),
    /// no partly received message, no interrupted stream not yet reported,
    /// no reassembly budget, no event.
    pub fn parkable(&self) -> bool {
        self.link.is_none()
            && self.send.is_idle()
            && self.recv.is_idle()
            && self.events.as_ref().is_none_or(|e| e.is_empty())
    }

    /// What a parked session keeps ([`parkable`](Self::parkable) must
    /// hold): the numbering both ways, the highest generation seen and
    /// the session's tag, the peer's maximum message, the driver's
    /// settings, and every counter. (What lives only within one input call
    /// — the bytes taken, a read in place — is not kept: no channel, no
    /// call.)
    pub(crate) fn parked(&self) -> SessionFields {
        debug_assert!(self.parkable());
        SessionFields {
            last_sent: self.send.last_sent,
            acked: self.send.acked,
            last_received: self.recv.last_received,
            last_generation: self.last_generation,
            tag: self.tag,
            peer_max_message: self.send.peer_max_message,
            local_need: self.local_need,
            ack_hold: self.ack_hold,
            pack: self.send.pack,
            stats: self.stats.as_deref().copied(),
        }
    }

    /// The session [`parked`](Self::parked) described, with `cfg` and
    /// `budget` (the node's, as when it was made).
    pub(crate) fn unparked(
        f: SessionFields,
        cfg: Arc<SessionConfig>,
        budget: ReassemblyBudget,
    ) -> Session {
        let mut s = Session::new(cfg, budget);
        s.send.last_sent = f.last_sent;
        s.send.acked = f.acked;
        s.send.peer_max_message = f.peer_max_message;
        s.send.pack = f.pack;
        s.recv.last_received = f.last_received;
        s.last_generation = f.last_generation;
        s.tag = f.tag;
        s.local_need = f.local_need;
        s.ack_hold = f.ack_hold;
        s.stats = f.stats.map(Box::new);
        s
    }
}

impl SessionFields {
    pub(crate) fn pack(&self, p: &mut Packer) {
        p.u64(self.last_sent);
        p.u64(self.acked);
        p.u64(self.last_received);
        p.u64(self.last_generation);
        p.u64(self.tag);
        p.u64(self.peer_max_message.map_or(0, NonZeroU64::get));
        p.flags(&[
            self.local_need,
            self.ack_hold,
            self.pack,
            self.stats.is_some(),
        ]);
        if let Some(mut st) = self.stats {
            for v in stats_fields(&mut st) {
                p.u64(*v);
            }
        }
    }

    pub(crate) fn unpack(u: &mut Unpacker<'_>) -> Self {
        let last_sent = u.u64();
        let acked = u.u64();
        let last_received = u.u64();
        let last_generation = u.u64();
        let tag = u.u64();
        let peer_max_message = NonZeroU64::new(u.u64());
        let [local_need, ack_hold, pack, has_stats] = u.flags();
        let stats = has_stats.then(|| {
            let mut st = SessionStats::ZERO;
            for f in stats_fields(&mut st) {
                *f = u.u64();
            }
            st
        });
        Self {
            last_sent,
            acked,
            last_received,
            last_generation,
            tag,
            peer_max_message,
            local_need,
            ack_hold,
            pack,
            stats,
        }
    }
}

/// Every counter of `st`, in the packed form's order. Listed by
/// destructuring: a counter added to [`SessionStats`] is a compile error
/// here until it is kept too.
fn stats_fields(st: &mut SessionStats) -> impl Iterator<Item = &mut u64> {
    let SessionStats {
        sent,
        retransmitted,
        delivered,
        duplicates,
        frames_out,
        data_frames_out,
        acks_out,
        heartbeats_out,
        frames_in,
        peer_forgot,
        forgotten_unacked,
        sent_by_level,
        bytes_by_level,
        delivered_by_level,
    } = st;
    [
        sent,
        retransmitted,
        delivered,
        duplicates,
        frames_out,
        data_frames_out,
        acks_out,
        heartbeats_out,
        frames_in,
        peer_forgot,
        forgotten_unacked,
    ]
    .into_iter()
    .chain(sent_by_level.iter_mut())
    .chain(bytes_by_level.iter_mut())
    .chain(delivered_by_level.iter_mut())
}
