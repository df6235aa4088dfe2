//! The slot table's side for accepted channels: a peer that presented
//! itself gets a slot below the hard limit, else a place in the line of
//! accepted peers (one per site, charged to its source address), else a
//! refusal; and it may leave the line before its turn.

use std::time::Instant;

#[cfg(doc)]
use super::Admission;
use super::{fair_share, Accepted, SlotTable, Source};
use crate::base::site::SiteId;

impl SlotTable {
    /// An accepted channel's peer presented itself and the channel is
    /// adopted: a slot if below the hard limit, else `None` (close it at
    /// once). For a peer that cannot wait in line; see
    /// [`accept_or_wait`](Self::accept_or_wait).
    pub fn accept(&mut self, now: Instant) -> Option<u64> {
        match self.accept_or_wait(now, None, 0) {
            Accepted::Slot(h) => Some(h),
            _ => None,
        }
    }

    /// An accepted channel's peer presented itself as site `peer` (`None`:
    /// it cannot wait — it lacks the `line` capability): a slot if below the
    /// hard limit; else a place in line (one per site: a newer connection
    /// replaces the site's older entry, and goes to the back); else, the
    /// line full, refused. `served` is how much this node has served the
    /// site so far (messages exchanged with it): under
    /// [`Admission::Share`] the least served in line is let in first (see
    /// `line.rs`); 0 for all makes the line first come, first served.
    pub fn accept_or_wait(&mut self, now: Instant, peer: Option<SiteId>, served: u64) -> Accepted {
        self.accept_or_wait_on(now, peer, served, None)
    }

    /// [`accept_or_wait`](Self::accept_or_wait) for a channel that will run
    /// on `lane` (the thread its owner runs on, `None` if not known):
    /// under [`Admission::Share`] a slot freed goes to a peer of a lane
    /// with fewer working holders first (see [`release`](Self::release)).
    /// Charged to no source address: see
    /// [`accept_or_wait_from`](Self::accept_or_wait_from).
    pub fn accept_or_wait_on(
        &mut self,
        now: Instant,
        peer: Option<SiteId>,
        served: u64,
        lane: Option<u32>,
    ) -> Accepted {
        self.accept_or_wait_from(now, peer, served, lane, Source::of(None))
    }

    /// [`accept_or_wait_on`](Self::accept_or_wait_on) for a channel
    /// accepted from `source`, which its slot or its place is charged to
    /// (`sources.rs`): a full line makes room for it by dropping the
    /// newest entry of the source holding the most places, if that is
    /// more than its [`fair_share`] of the line and more than `source`
    /// ([`Accepted::Wait::evicted`](Accepted::Wait)).
    pub fn accept_or_wait_from(
        &mut self,
        now: Instant,
        peer: Option<SiteId>,
        served: u64,
        lane: Option<u32>,
        source: Source,
    ) -> Accepted {
        if self.in_use() < self.cfg.hard {
            // Nobody waits in line while a slot is free: a release serves
            // the line at once.
            debug_assert!(self.line.is_empty());
            let h = self.grant(now, lane, source);
            self.arm(now);
            return Accepted::Slot(h);
        }
        let Some(peer) = peer else {
            self.stats.accepts_refused += 1;
            return Accepted::Refused;
        };
        let replaced = self.line.of(peer);
        let mut evicted = None;
        if replaced.is_none() && self.line.len() >= self.cfg.line {
            evicted = self.line_room_for(source);
            let Some(victim) = evicted else {
                self.stats.accepts_refused += 1;
                return Accepted::Refused;
            };
            self.line.remove(victim);
            self.stats.line_evicted += 1;
        }
        if let Some(old) = replaced {
            self.line.remove(old);
            self.stats.line_left += 1;
        }
        let ticket = self.id();
        self.line.push(ticket, (peer, source), now, served, lane);
        self.stats.line_waits += 1;
        self.stats.peak_line = self.stats.peak_line.max(self.line.len());
        self.arm(now);
        Accepted::Wait {
            ticket,
            position: self.line.len(),
            replaced,
            evicted,
        }
    }

    /// The entry a full line drops for a newcomer from `source`: the
    /// newest of the other source with an address holding the most
    /// places, if it holds more than its share of the line and more than
    /// `source` does (else the newcomer would only take its turn to be
    /// the heaviest).
    fn line_room_for(&self, source: Source) -> Option<u64> {
        let (_, places, newest) = self.line.heaviest_except(source)?;
        let own = self.line.places(source);
        let wanting = self.line.sources().count() + usize::from(own == 0);
        let share = fair_share(self.cfg.line, wanting);
        (places > share && places > own).then_some(newest)
    }

    /// A peer left the line before its turn (it closed its connection, or
    /// the node stops). False if it was not in line.
    pub fn leave_line(&mut self, ticket: u64, now: Instant) -> bool {
        let left = self.line.remove(ticket);
        if left {
            self.stats.line_left += 1;
            self.arm(now);
        }
        left
    }
}
