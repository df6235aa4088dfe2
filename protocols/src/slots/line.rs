//! The waiting line of accepted peers: peers that completed
//! their handshake while every channel slot was in use, told to wait
//! instead of being refused, and let in when their turn comes.
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
//!
//! **Who is next.** Under [`Admission::Fifo`](super::Admission::Fifo) the
//! head. Under [`Admission::Share`](super::Admission::Share) the peer
//! that has been served least (start-time fair queuing over the service
//! the driver reports — messages exchanged with that site so far): each
//! entry's key is its service, raised to the key of the last peer let in
//! (the line's *floor*), so a newcomer or a peer served long ago queues
//! behind those already waiting at that level instead of jumping all of
//! them, and ties go by arrival. A peer that moves many messages per turn
//! (a fast client, or one whose end of the pair shares a thread with ours)
//! thus waits while slower ones catch up, and the work done, not only the
//! slot time, is shared. Since a peer that does nothing keeps a low key,
//! the head of the line is let in first once it has waited
//! [`SlotConfig::max_wait`](super::SlotConfig::max_wait): nobody waits
//! longer than that for others to cut ahead. Under `Share` the least
//! served of a lighter lane may also go first (`lanes.rs`: holders spread
//! over the threads), within the same bound.
//!
//! **Sources.** Each entry is charged to the source address of its
//! connection (`sources.rs`): under either policy the entries of sources
//! within their share of the slots go before those of a source past it,
//! and a full line makes room for a newcomer from another source by
//! dropping the newest entry of the source holding the most places, if
//! that is more than its share of the line.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::lanes::LaneLoad;
use crate::base::site::SiteId;
use crate::slots::admission::Source;

#[derive(Debug, Clone, Copy)]
struct Entry {
    peer: SiteId,
    since: Instant,
    /// Its place in the least-served order (see the module documentation).
    key: u64,
    /// The thread its channel will run on, if known (`lanes.rs`).
    lane: Option<u32>,
    /// Who it is charged to (`sources.rs`).
    source: Source,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Line {
    /// Ticket → entry; tickets increase, so this is arrival order.
    entries: BTreeMap<u64, Entry>,
    /// Each peer's one entry.
    by_peer: HashMap<SiteId, u64>,
    /// (key, ticket) of every entry: the least served first.
    by_service: BTreeSet<(u64, u64)>,
    /// (lane, key, ticket) of every entry whose lane is known: each lane's
    /// least served first.
    by_lane: BTreeSet<(u32, u64, u64)>,
    /// The key of the last entry let in: newcomers queue at it or above.
    floor: u64,
    /// Each source's entries, oldest first.
    by_source: HashMap<Source, BTreeSet<u64>>,
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

    /// Places held by `source`.
    pub(super) fn places(&self, source: Source) -> usize {
        self.by_source.get(&source).map_or(0, BTreeSet::len)
    }

    /// The sources holding places.
    pub(super) fn sources(&self) -> impl Iterator<Item = Source> + '_ {
        self.by_source.keys().copied()
    }

    /// The source with an address, other than `except`, holding the most
    /// places (among equals, the one whose newest entry is newest), with
    /// its count and its newest entry.
    pub(super) fn heaviest_except(&self, except: Source) -> Option<(Source, usize, u64)> {
        self.by_source
            .iter()
            .filter(|(s, _)| s.has_address() && **s != except)
            .filter_map(|(s, t)| Some((*s, t.len(), *t.last()?)))
            .max_by_key(|&(_, n, newest)| (n, newest))
    }

    /// Puts `peer`, served `served` so far, its channel on `lane`, charged
    /// to `source`, in line with `ticket` (larger than every ticket given
    /// before). The caller removed its older entry first.
    pub(super) fn push(
        &mut self,
        ticket: u64,
        (peer, source): (SiteId, Source),
        now: Instant,
        served: u64,
        lane: Option<u32>,
    ) {
        debug_assert!(self
            .entries
            .last_key_value()
            .is_none_or(|(t, _)| *t < ticket));
        debug_assert!(!self.by_peer.contains_key(&peer));
        let key = served.max(self.floor);
        self.entries.insert(
            ticket,
            Entry {
                peer,
                since: now,
                key,
                lane,
                source,
            },
        );
        self.by_source.entry(source).or_default().insert(ticket);
        self.by_peer.insert(peer, ticket);
        self.by_service.insert((key, ticket));
        if let Some(l) = lane {
            self.by_lane.insert((l, key, ticket));
        }
    }

    /// The head's ticket (the longest waiting).
    pub(super) fn front(&self) -> Option<u64> {
        self.entries.first_key_value().map(|(t, _)| *t)
    }

    /// Who is let in next, among the entries whose source `within` its
    /// share of the slots if there are any, else among all: the first to
    /// come if `least_served` is false; else the head if it has waited
    /// `max_wait` at `now`; else the least served, unless a lane with
    /// fewer working holders (`load`) than that one's has peers in line:
    /// then the least served of the least loaded such lane.
    pub(super) fn next(
        &self,
        least_served: bool,
        now: Instant,
        max_wait: Duration,
        load: &LaneLoad,
        within: impl Fn(Source) -> bool,
    ) -> Option<u64> {
        let ok = |t: &u64| self.entries.get(t).is_some_and(|e| within(e.source));
        let (&head, e) = self.entries.first_key_value()?;
        if !least_served {
            return self.entries.keys().copied().find(|t| ok(t)).or(Some(head));
        }
        if now.saturating_duration_since(e.since) >= max_wait {
            return Some(head);
        }
        let least = self
            .by_service
            .iter()
            .map(|&(_, t)| t)
            .find(ok)
            .or_else(|| self.by_service.first().map(|&(_, t)| t))?;
        let Some(lane) = self.entries.get(&least).and_then(|e| e.lane) else {
            return Some(least);
        };
        let preferred = ok(&least);
        match load.lighter(lane, self.lanes()) {
            Some(l) => self
                .least_served_on(l, |t| !preferred || ok(t))
                .or(Some(least)),
            None => Some(least),
        }
    }

    /// The lanes with peers in line, each once, in order.
    pub(super) fn lanes(&self) -> impl Iterator<Item = u32> + '_ {
        let mut from = 0u32;
        std::iter::from_fn(move || {
            let &(l, _, _) = self.by_lane.range((from, 0, 0)..).next()?;
            from = l.checked_add(1)?;
            Some(l)
        })
    }

    /// The least served entry of `lane` that passes `ok`.
    fn least_served_on(&self, lane: u32, ok: impl Fn(&u64) -> bool) -> Option<u64> {
        self.by_lane
            .range((lane, 0, 0)..=(lane, u64::MAX, u64::MAX))
            .map(|&(_, _, t)| t)
            .find(ok)
    }

    /// Since when `ticket` waits, if it is in line.
    #[cfg(test)]
    pub(super) fn since(&self, ticket: u64) -> Option<Instant> {
        self.entries.get(&ticket).map(|e| e.since)
    }

    /// Lets `ticket` in: it leaves the line and raises the floor to its
    /// key. Returns the lane of its channel (`None` if not known) and its
    /// source, or `None` if it was not in line.
    pub(super) fn take(&mut self, ticket: u64) -> Option<(Option<u32>, Source)> {
        let e = self.entries.remove(&ticket)?;
        self.forget(ticket, &e);
        self.floor = self.floor.max(e.key);
        Some((e.lane, e.source))
    }

    /// Removes `ticket` (it left before its turn); false if it was not in
    /// line.
    pub(super) fn remove(&mut self, ticket: u64) -> bool {
        let Some(e) = self.entries.remove(&ticket) else {
            return false;
        };
        self.forget(ticket, &e);
        true
    }

    /// Drops the indexes of `ticket`, already out of `entries`.
    fn forget(&mut self, ticket: u64, e: &Entry) {
        if let Some(set) = self.by_source.get_mut(&e.source) {
            set.remove(&ticket);
            if set.is_empty() {
                self.by_source.remove(&e.source);
            }
        }
        self.by_peer.remove(&e.peer);
        self.by_service.remove(&(e.key, ticket));
        if let Some(l) = e.lane {
            self.by_lane.remove(&(l, e.key, ticket));
        }
    }

    /// When the head's hold time is over.
    pub(super) fn deadline(&self, hold: Duration) -> Option<Instant> {
        self.entries.first_key_value().map(|(_, e)| e.since + hold)
    }

    /// Removes every entry whose hold time is over at `now`, head first.
    pub(super) fn expire(&mut self, now: Instant, hold: Duration) -> Vec<u64> {
        let mut out = Vec::new();
        while self.deadline(hold).is_some_and(|d| d <= now) {
            if let Some(t) = self.front() {
                self.remove(t);
                out.push(t);
            }
        }
        out
    }
}
