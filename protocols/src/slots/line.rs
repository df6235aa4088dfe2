//! The waiting line of accepted peers (issue 21): peers that completed
//! their handshake while every channel slot was in use, told to wait
//! instead of being refused, and let in first come, first served.
//!
//! What a peer may cost here is bounded: the line holds at most
//! [`SlotConfig::line`](super::SlotConfig::line) entries in all, at most
//! one per peer site (a newer connection from the same site replaces the
//! older, which its initiator has given up: it runs one attempt at a
//! time), each for at most [`SlotConfig::line_hold`](super::SlotConfig::line_hold).
//! An entry leaves when it is granted a slot, when its peer closes the
//! connection, when its hold time is over, or when it is replaced; a full
//! line refuses the newcomer, as a full table did before the line.
//!
//! Tickets increase with arrival, so the first entry of the map is the
//! head of the line and, every entry being held equally long, also the
//! first to expire.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::site::SiteId;

#[derive(Debug, Clone, Copy)]
struct Entry {
    peer: SiteId,
    since: Instant,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Line {
    /// Ticket → entry; tickets increase, so this is arrival order.
    entries: BTreeMap<u64, Entry>,
    /// Each peer's one entry.
    by_peer: HashMap<SiteId, u64>,
}

impl Line {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry `peer` holds, if any.
    pub(super) fn of(&self, peer: SiteId) -> Option<u64> {
        self.by_peer.get(&peer).copied()
    }

    /// Puts `peer` at the back with `ticket` (larger than every ticket
    /// given before). The caller removed its older entry first.
    pub(super) fn push(&mut self, ticket: u64, peer: SiteId, now: Instant) {
        debug_assert!(self
            .entries
            .last_key_value()
            .is_none_or(|(t, _)| *t < ticket));
        debug_assert!(!self.by_peer.contains_key(&peer));
        self.entries.insert(ticket, Entry { peer, since: now });
        self.by_peer.insert(peer, ticket);
    }

    /// The head's ticket.
    pub(super) fn front(&self) -> Option<u64> {
        self.entries.first_key_value().map(|(t, _)| *t)
    }

    /// Takes the head of the line.
    pub(super) fn pop(&mut self) -> Option<(u64, SiteId)> {
        let (ticket, e) = self.entries.pop_first()?;
        self.by_peer.remove(&e.peer);
        Some((ticket, e.peer))
    }

    /// Removes `ticket`; false if it was not in line.
    pub(super) fn remove(&mut self, ticket: u64) -> bool {
        let Some(e) = self.entries.remove(&ticket) else {
            return false;
        };
        self.by_peer.remove(&e.peer);
        true
    }

    /// When the head's hold time is over.
    pub(super) fn deadline(&self, hold: Duration) -> Option<Instant> {
        self.entries.first_key_value().map(|(_, e)| e.since + hold)
    }

    /// Removes every entry whose hold time is over at `now`, head first.
    pub(super) fn expire(&mut self, now: Instant, hold: Duration) -> Vec<u64> {
        let mut out = Vec::new();
        while self.deadline(hold).is_some_and(|d| d <= now) {
            if let Some((t, _)) = self.pop() {
                out.push(t);
            }
        }
        out
    }
}
