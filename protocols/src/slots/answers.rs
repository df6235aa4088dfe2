//! What the slot table answers its driver: whether a request got a slot
//! ([`Grant`]), whether an accepted peer may work or waits in line
//! ([`Accepted`]), what a tick decided ([`Tick`]), and the table's counts
//! ([`SlotStats`]).

use super::PreemptReason;
#[cfg(doc)]
use super::SlotTable;

/// What [`SlotTable::request`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A slot now: the holder id to release it with.
    Now(u64),
    /// No slot yet: the waiter's ticket (it is served by a later
    /// [`release`](SlotTable::release), or withdrawn with
    /// [`cancel`](SlotTable::cancel)).
    Queued(u64),
}

/// What [`SlotTable::accept_or_wait`] did with an accepted peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// A slot now: the holder id to release it with.
    Slot(u64),
    /// In line: tell the peer to wait; a later [`release`](SlotTable::release)
    /// serves `ticket`, or a tick expires it, or the driver withdraws it
    /// ([`leave_line`](SlotTable::leave_line)) when the peer closes.
    Wait {
        /// Its place, for the grant.
        ticket: u64,
        /// Its position when it joined (1: next).
        position: usize,
        /// The same site's older entry, which this one replaced: close
        /// that connection.
        replaced: Option<u64>,
        /// The entry dropped to make room for this one, of the source
        /// holding more than its share of the line (`sources.rs`): close
        /// that connection.
        evicted: Option<u64>,
    },
    /// No slot and no room in line (or the peer cannot wait): close it.
    Refused,
}

/// What a [`SlotTable::handle_timeout`] tick decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tick {
    /// Holders to close with CLOSE_HARD, and why.
    pub victims: Vec<(u64, PreemptReason)>,
    /// Line entries whose hold time is over: close their connections.
    pub expired: Vec<u64>,
}

/// Counters of a slot table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotStats {
    /// Slots granted (connects and accepts).
    pub granted: u64,
    /// Requests that had to wait.
    pub queued: u64,
    /// Accepts refused at the hard limit (the line full, or a peer that
    /// cannot wait).
    pub accepts_refused: u64,
    /// Preemptions, by [`PreemptReason`] (index = reason as u8).
    pub preemptions: [u64; PreemptReason::ALL.len()],
    /// Most slots in use at once.
    pub peak_in_use: usize,
    /// Most sites waiting at once.
    pub peak_waiting: usize,
    /// Accepted peers told to wait in line.
    pub line_waits: u64,
    /// Slots granted from the line.
    pub grants: u64,
    /// Entries whose hold time ran out.
    pub line_expired: u64,
    /// Entries that left before their turn (the peer closed, or a newer
    /// connection of the same site replaced it).
    pub line_left: u64,
    /// Most peers in line at once.
    pub peak_line: usize,
    /// Entries dropped from a full line to make room for a newcomer from
    /// another source, their source holding more than its share.
    pub line_evicted: u64,
}

impl SlotStats {
    /// All preemptions, whatever the reason.
    pub fn total_preemptions(&self) -> u64 {
        self.preemptions.iter().sum()
    }
}
