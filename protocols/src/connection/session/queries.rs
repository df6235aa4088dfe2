//! What a session tells about itself: its numbering, the channel's
//! agreed features, its counters and what it holds. Read-only; the
//! session's rules are in the parent module.

use super::{Session, SessionStats};
use crate::wire::version::Capabilities;

impl Session {
    /// Highest generation seen working (for NEGOTIATE and the link decision).
    pub fn last_generation(&self) -> u64 {
        self.last_generation
    }

    /// Which numbering of the pair this session is in (for NEGOTIATE and
    /// the acceptor's decision; see
    /// [`SessionTag`](crate::connection::handshake::SessionTag)).
    pub fn tag(&self) -> crate::connection::handshake::SessionTag {
        self.tag
    }

    /// A handshake settled the numbering both sides are in (the ComObject
    /// calls it with [`forget_peer`](Self::forget_peer) when it numbers
    /// afresh, and with the answer's tag as initiator).
    pub fn set_tag(&mut self, tag: crate::connection::handshake::SessionTag) {
        self.tag = tag;
    }

    /// Highest message number received (for NEGOTIATE / NEGOTIATE_ANS).
    pub fn last_received(&self) -> u64 {
        self.recv.last_received
    }

    /// Highest message number assigned.
    pub fn last_sent(&self) -> u64 {
        self.send.last_sent
    }

    /// The capabilities the working channel's ends agreed in its
    /// handshake (docs/protocol.md §4.11); `None` without a channel.
    pub fn channel_caps(&self) -> Option<Capabilities> {
        self.link.as_ref().map(|l| l.params.caps)
    }

    /// Largest message the peer accepts, once known.
    pub fn peer_max_message(&self) -> Option<u64> {
        self.send.peer_max_message()
    }

    /// Counters, without copying them (they are read on every event).
    pub fn stats_ref(&self) -> &SessionStats {
        static NONE: SessionStats = SessionStats::ZERO;
        self.stats.as_deref().unwrap_or(&NONE)
    }

    /// Counters (a copy).
    pub fn stats(&self) -> SessionStats {
        *self.stats_ref()
    }

    /// Messages held: queued, partly sent, or awaiting acknowledgement.
    pub fn pending_messages(&self) -> usize {
        self.send.pending_messages()
    }

    /// True if the peer acknowledged a message of ours on the working
    /// channel since it came up: the channel moved something (a peer that
    /// accepts and closes at once, acknowledging nothing, moved nothing).
    pub fn acked_on_channel(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| self.send.acked() > l.acked_at_up)
    }

    /// Messages completely sent and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.send.unacked()
    }

    /// Bytes queued and not yet completely sent.
    pub fn queued_bytes(&self) -> u64 {
        self.send.queued_bytes()
    }
}
