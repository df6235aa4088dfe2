//! The pairs' secrets a node keeps after it forgets their sites' entries.
//!
//! A site that comes back after its entry was reclaimed still proves the
//! pair ([`Continuity`]), so a peer that kept its own entry (it holds a
//! `SiteRef` to us) does not refuse us as a stranger; and a peer that claims
//! the id of a site we kept a *confirmed* secret for must prove it, or is
//! refused ([`Claim::Unproven`](super::Claim::Unproven)). What is kept is
//! what protects a site's id from being taken over, so the bound on it
//! must never become a way to forget a confirmed site:
//!
//! * **Charged to a source.** Each secret is kept under the [`Source`] of
//!   the channel that last carried its pair (an IPv4 address, an IPv6 /64).
//!   When the memory is full, room comes from the source that holds the
//!   most — the newcomer's own if it holds as many as any — so throw-away
//!   handshakes from a few addresses push out only their own secrets, never
//!   those of the sites that talked from elsewhere.
//! * **Confirmed outweighs unconfirmed.** Within the source that gives room,
//!   an unconfirmed secret (the peer never showed it read the answer that
//!   agreed it) goes first, the oldest of them; a newcomer that is itself
//!   unconfirmed never pushes out a confirmed one: it is not kept.
//! * **The oldest confirmed secrets stay.** Among confirmed secrets of one
//!   source, the newest goes: a burst of new sites behind one address (a
//!   NAT, a test harness, an attacker beside a victim) rotates through the
//!   newest places and leaves the long-known sites' secrets alone.
//!
//! A secret that is not kept costs only this: the site, back, is a new
//! session (it proves what this node no longer holds and is let in fresh),
//! and this node, calling a peer that kept a confirmed secret for it, is
//! refused until that peer forgets too.
//!
//! # Example
//!
//! ```
//! use sitenet_protocols::slots::admission::Source;
//! use sitenet_protocols::connection::handshake::{Continuity, PairMemory, PairSecret};
//! use sitenet_protocols::SiteId;
//!
//! let from = |ip: &str| -> Result<Continuity, std::net::AddrParseError> {
//!     let source = Source::of(Some(ip.parse()?));
//!     Ok(Continuity { current: PairSecret([7; 16]), confirmed: true, source })
//! };
//! let victim = from("192.0.2.1")?;
//! let mut memory = PairMemory::new(4);
//! memory.keep(SiteId(1), victim);
//! // A flood of throw-away pairs from one address...
//! for id in 100..10_000 {
//!     memory.keep(SiteId(id), from("198.51.100.9")?);
//! }
//! // ...stays within the bound and never pushes the victim's secret out.
//! assert_eq!(memory.len(), 4);
//! assert_eq!(memory.take(SiteId(1)), Some(victim));
//! # Ok::<(), std::net::AddrParseError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::continuity::Continuity;
use crate::base::site::SiteId;
use crate::slots::admission::Source;

/// One kept secret.
#[derive(Debug, Clone, Copy)]
struct Kept {
    continuity: Continuity,
    source: Source,
    /// When it was kept (a counter: larger is newer).
    seq: u64,
}

/// What one source holds, by age.
#[derive(Debug, Default)]
struct Held {
    unconfirmed: BTreeMap<u64, SiteId>,
    confirmed: BTreeMap<u64, SiteId>,
}

impl Held {
    fn len(&self) -> usize {
        self.unconfirmed.len() + self.confirmed.len()
    }

    fn newest(&self) -> u64 {
        let last = |m: &BTreeMap<u64, SiteId>| m.last_key_value().map_or(0, |(s, _)| *s);
        last(&self.unconfirmed).max(last(&self.confirmed))
    }

    /// The record this source gives up first: its oldest unconfirmed, else
    /// its newest confirmed.
    fn first_to_go(&self) -> Option<(u64, SiteId, bool)> {
        if let Some((&seq, &id)) = self.unconfirmed.first_key_value() {
            return Some((seq, id, false));
        }
        self.confirmed
            .last_key_value()
            .map(|(&seq, &id)| (seq, id, true))
    }

    fn map(&mut self, confirmed: bool) -> &mut BTreeMap<u64, SiteId> {
        if confirmed {
            &mut self.confirmed
        } else {
            &mut self.unconfirmed
        }
    }
}

/// The pairs' secrets a node kept when it forgot their sites' entries (see
/// the module documentation): at most `capacity`, charged to the source of
/// the channel that last carried each pair.
#[derive(Debug, Default)]
pub struct PairMemory {
    capacity: usize,
    kept: HashMap<SiteId, Kept>,
    by_source: HashMap<Source, Held>,
    /// Sources ordered by what they hold, then by their newest secret: the
    /// last is the one that gives room.
    ranking: BTreeSet<(usize, u64, Source)>,
    next_seq: u64,
}

impl PairMemory {
    /// A memory of at most `capacity` secrets (0: keeps none). Nothing is
    /// allocated up front: any capacity is allowed.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// Keeps the secret of the pair with `site`, whose entry is forgotten,
    /// charged to [`Continuity::source`]. When full, room is made as the
    /// module documentation says, or the newcomer is not kept. Returns
    /// whether it was kept.
    pub fn keep(&mut self, site: SiteId, continuity: Continuity) -> bool {
        let source = continuity.source;
        if self.capacity == 0 {
            return false;
        }
        self.take(site);
        if self.kept.len() >= self.capacity && !self.make_room(continuity.confirmed, source) {
            return false;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        self.unrank(source);
        let held = self.by_source.entry(source).or_default();
        held.map(continuity.confirmed).insert(seq, site);
        self.kept.insert(
            site,
            Kept {
                continuity,
                source,
                seq,
            },
        );
        self.rank(source);
        true
    }

    /// The secret kept for `site`, if any (it leaves the memory: the
    /// site's new entry holds it now).
    pub fn take(&mut self, site: SiteId) -> Option<Continuity> {
        let k = self.kept.remove(&site)?;
        self.unrank(k.source);
        if let Some(held) = self.by_source.get_mut(&k.source) {
            held.map(k.continuity.confirmed).remove(&k.seq);
            if held.len() == 0 {
                self.by_source.remove(&k.source);
            }
        }
        self.rank(k.source);
        Some(k.continuity)
    }

    /// Secrets kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// True if none is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Secrets kept under `source`.
    pub fn held_by(&self, source: Source) -> usize {
        self.by_source.get(&source).map_or(0, Held::len)
    }

    /// Frees one place for a newcomer from `source` (`confirmed`: whether
    /// its secret is). False if the newcomer must not be kept.
    fn make_room(&mut self, confirmed: bool, source: Source) -> bool {
        let own = self.held_by(source);
        let largest = self.ranking.last().map(|&(n, _, s)| (n, s));
        let giver = match largest {
            // Another source holds more: it gives the room.
            Some((n, s)) if n > own => s,
            // The newcomer's own source holds as many as any.
            _ if own > 0 => source,
            Some((_, s)) => s,
            None => return true,
        };
        let Some((_, id, victim_confirmed)) =
            self.by_source.get(&giver).and_then(Held::first_to_go)
        else {
            return true;
        };
        if victim_confirmed && !confirmed {
            return false;
        }
        self.take(id);
        true
    }

    fn unrank(&mut self, source: Source) {
        if let Some(h) = self.by_source.get(&source) {
            self.ranking.remove(&(h.len(), h.newest(), source));
        }
    }

    fn rank(&mut self, source: Source) {
        if let Some(h) = self.by_source.get(&source) {
            self.ranking.insert((h.len(), h.newest(), source));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::continuity::PairSecret;
    use super::*;
    use proptest::prelude::*;

    fn c(b: u8, confirmed: bool) -> Continuity {
        Continuity {
            current: PairSecret([b; 16]),
            confirmed,
            source: Source::UNADDRESSED,
        }
    }

    /// `k` charged to `source`.
    fn at(k: Continuity, source: Source) -> Continuity {
        Continuity { source, ..k }
    }

    fn src(n: u8) -> Source {
        Source::of(Some(std::net::Ipv4Addr::new(192, 0, 2, n).into()))
    }

    #[test]
    fn a_flood_of_throwaway_pairs_never_pushes_out_another_sources_confirmed_secret() {
        let mut m = PairMemory::new(64);
        m.keep(SiteId(1), at(c(1, true), src(1)));
        // Throw-away pairs from four addresses, confirmed or not.
        for i in 0..20_000u128 {
            let from = src(10 + (i % 4) as u8);
            m.keep(SiteId(1_000 + i), at(c(2, i % 2 == 0), from));
        }
        assert_eq!(m.len(), 64);
        assert_eq!(m.take(SiteId(1)), Some(at(c(1, true), src(1))));
    }

    #[test]
    fn a_flood_from_the_victims_own_address_keeps_the_older_confirmed_secret() {
        let mut m = PairMemory::new(8);
        m.keep(SiteId(1), at(c(1, true), src(1)));
        for i in 0..1_000u128 {
            m.keep(SiteId(1_000 + i), at(c(2, true), src(1)));
        }
        assert_eq!(m.len(), 8);
        assert_eq!(m.take(SiteId(1)), Some(at(c(1, true), src(1))));
    }

    #[test]
    fn an_unconfirmed_newcomer_never_pushes_out_a_confirmed_secret() {
        let mut m = PairMemory::new(2);
        assert!(m.keep(SiteId(1), at(c(1, true), src(1))));
        assert!(m.keep(SiteId(2), at(c(2, true), src(2))));
        assert!(!m.keep(SiteId(3), at(c(3, false), src(3))));
        assert!(!m.keep(SiteId(3), at(c(3, false), src(1))));
        assert_eq!(m.len(), 2);
        assert_eq!(m.take(SiteId(3)), None);
        // A confirmed newcomer from a third source takes the place of the
        // newest secret of the largest source (all hold one: the newest).
        assert!(m.keep(SiteId(3), at(c(3, true), src(3))));
        assert_eq!(m.take(SiteId(2)), None);
        assert_eq!(m.take(SiteId(1)), Some(at(c(1, true), src(1))));
    }

    #[test]
    fn unconfirmed_secrets_go_first_oldest_first() {
        let mut m = PairMemory::new(3);
        m.keep(SiteId(1), at(c(1, false), src(1)));
        m.keep(SiteId(2), at(c(2, true), src(1)));
        m.keep(SiteId(3), at(c(3, false), src(1)));
        m.keep(SiteId(4), at(c(4, true), src(1)));
        assert_eq!(m.take(SiteId(1)), None, "the oldest unconfirmed went");
        m.keep(SiteId(5), at(c(5, true), src(1)));
        assert_eq!(m.take(SiteId(3)), None);
        assert!(m.take(SiteId(2)).is_some() && m.take(SiteId(4)).is_some());
    }

    #[test]
    fn keeping_and_taking_again_and_again_stays_bounded() {
        let mut m = PairMemory::new(3);
        for _ in 0..1000 {
            m.keep(SiteId(9), at(c(9, true), src(1)));
            assert_eq!(m.take(SiteId(9)), Some(at(c(9, true), src(1))));
        }
        assert!(m.is_empty() && m.by_source.is_empty() && m.ranking.is_empty());
        let mut none = PairMemory::new(0);
        assert!(!none.keep(SiteId(1), at(c(1, true), src(1))));
        assert!(none.is_empty());
        // Kept again under another source: counted there only.
        m.keep(SiteId(9), at(c(9, true), src(1)));
        m.keep(SiteId(9), at(c(9, true), src(2)));
        assert_eq!((m.held_by(src(1)), m.held_by(src(2)), m.len()), (0, 1, 1));
    }

    proptest! {
        /// Against a model: the memory never holds more than its capacity,
        /// a source that holds no more than any other never loses a
        /// confirmed secret to another source's newcomer, and what is
        /// taken is what was kept last for that site.
        #[test]
        fn the_memory_agrees_with_its_rules(
            cap in 1usize..12,
            ops in proptest::collection::vec((0u8..4, 0u128..24, any::<bool>(), any::<bool>()), 1..300),
        ) {
            let mut m = PairMemory::new(cap);
            let mut last: HashMap<SiteId, Continuity> = HashMap::new();
            for (from, id, confirmed, take) in ops {
                let id = SiteId(id);
                if take {
                    let got = m.take(id);
                    if let Some(got) = got {
                        prop_assert_eq!(Some(&got), last.get(&id));
                    }
                    last.remove(&id);
                } else {
                    let k = at(c(id.0 as u8, confirmed), src(from));
                    let before: Vec<(SiteId, Source, bool)> =
                        m.kept.iter().map(|(i, k)| (*i, k.source, k.continuity.confirmed)).collect();
                    let kept = m.keep(id, k);
                    if kept {
                        last.insert(id, k);
                    } else {
                        last.remove(&id);
                    }
                    // Who lost a place: only the largest source, or the
                    // newcomer's own, and a confirmed secret only to a
                    // confirmed newcomer.
                    for (i, s, was_confirmed) in before {
                        if i != id && !m.kept.contains_key(&i) {
                            prop_assert!(kept);
                            prop_assert!(!was_confirmed || confirmed);
                            let theirs = m.held_by(s) + 1;
                            prop_assert!(s == src(from) || theirs > m.held_by(src(from)) - 1);
                        }
                    }
                }
                prop_assert!(m.len() <= cap);
                let total: usize = m.by_source.values().map(Held::len).sum();
                prop_assert_eq!(total, m.len());
                prop_assert_eq!(m.ranking.len(), m.by_source.len());
            }
        }
    }
}
