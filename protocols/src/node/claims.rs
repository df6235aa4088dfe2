//! Claims: the site entries a peer's words made this node create.
//!
//! A forwarded request names its origin, and a `SiteRef` in a message names
//! a site, by a descriptor the peer chose: for an id the node does not know,
//! that makes an entry — memory, an actor, and for a delegated reply a dial
//! to the addresses the peer listed. Each such entry is *claimed by* the
//! peer whose message made it, and a peer may hold at most a bound of
//! claims at once; beyond it the node refuses to make the entry (the
//! caller counts and reports the refusal). A claim ends when the site's
//! id is proven (a channel to it works: it is then an ordinary site, see
//! [`Action::Proven`](crate::connection::com_object::Action::Proven)) or its entry leaves the
//! table; when the *holder's* entry leaves, the claims it held stop
//! counting against anyone (their entries go their own way: each is
//! reclaimed like any other).
//!
//! Keys are whatever names an entry in the driver's table (a slab index):
//! the driver calls [`Claims::forget`] when an entry leaves, before its
//! key can name another.
//!
//! # Example
//!
//! ```
//! use sitenet_protocols::node::claims::Claims;
//!
//! let mut claims = Claims::default();
//! // Peer 1's messages name sites 10 and 11; it may hold two claims.
//! assert!(claims.try_claim(1, 10, 2));
//! assert!(claims.try_claim(1, 11, 2));
//! assert!(!claims.try_claim(1, 12, 2), "a third is refused");
//! // Site 10 answers at an address it was named at: an ordinary site now.
//! assert_eq!(claims.release(10), Some(1));
//! assert!(claims.try_claim(1, 12, 2));
//! // Peer 1 goes: what it claimed no longer counts against anyone.
//! claims.forget(1);
//! assert_eq!((claims.held_by(1), claims.len()), (0, 0));
//! ```

use std::collections::HashMap;
use std::hash::Hash;

/// Which entries are claimed, and by whom (see the module documentation).
#[derive(Debug, Clone)]
pub struct Claims<K> {
    /// Claimed entry → the peer that holds the claim.
    holder: HashMap<K, K>,
    /// Peer → how many claims it holds (no zero counts are kept).
    held: HashMap<K, u32>,
}

impl<K> Default for Claims<K> {
    fn default() -> Self {
        Self {
            holder: HashMap::new(),
            held: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> Claims<K> {
    /// Records that `holder`'s words make entry `claimed`, if `holder`
    /// holds fewer than `limit` claims; false (nothing recorded) if not.
    /// The caller makes the entry only on true.
    pub fn try_claim(&mut self, holder: K, claimed: K, limit: u32) -> bool {
        let n = self.held.get(&holder).copied().unwrap_or(0);
        if n >= limit || self.holder.contains_key(&claimed) {
            return false;
        }
        self.held.insert(holder, n + 1);
        self.holder.insert(claimed, holder);
        true
    }

    /// Ends the claim on `claimed` (its id was proven, or it left): returns
    /// who held it, if anyone still did.
    pub fn release(&mut self, claimed: K) -> Option<K> {
        let holder = self.holder.remove(&claimed)?;
        if let Some(n) = self.held.get_mut(&holder) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&holder);
            }
        }
        Some(holder)
    }

    /// Entry `key` leaves the table: a claim on it ends, and the claims it
    /// held stop counting (their entries remain, unclaimed).
    pub fn forget(&mut self, key: K) {
        self.release(key);
        if self.held.remove(&key).is_some() {
            self.holder.retain(|_, h| *h != key);
        }
    }

    /// How many claims `holder` holds.
    pub fn held_by(&self, holder: K) -> u32 {
        self.held.get(&holder).copied().unwrap_or(0)
    }

    /// Every key a claim names: each claimed entry and its holder (with
    /// duplicates). For checks that a claim never outlives an entry it
    /// names (`SiteIndex::referenced_keys`).
    pub fn keys(&self) -> impl Iterator<Item = K> + '_ {
        self.holder
            .iter()
            .flat_map(|(claimed, holder)| [*claimed, *holder])
            .chain(self.held.keys().copied())
    }

    /// How many entries are claimed.
    pub fn len(&self) -> usize {
        self.holder.len()
    }

    /// True if no entry is claimed.
    pub fn is_empty(&self) -> bool {
        self.holder.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_bounded_and_released_claims_make_room() {
        let mut c = Claims::default();
        for k in 0..16 {
            assert!(c.try_claim(1u32, 100 + k, 16));
        }
        assert!(!c.try_claim(1, 200, 16));
        assert!(c.try_claim(2, 200, 16), "another holder has its own bound");
        assert_eq!(c.held_by(1), 16);
        // A claimed entry leaving releases its claim.
        c.forget(100);
        assert_eq!(c.held_by(1), 15);
        assert!(c.try_claim(1, 201, 16));
        // An entry is claimed once.
        assert!(!c.try_claim(2, 201, 16));
    }

    #[test]
    fn a_holder_leaving_orphans_its_claims_and_its_key_starts_afresh() {
        let mut c = Claims::default();
        assert!(c.try_claim(1u32, 10, 1));
        assert!(c.try_claim(2, 11, 1));
        c.forget(1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.release(10), None, "nobody holds it any more");
        // Key 1 reused for another entry: no inherited count.
        assert!(c.try_claim(1, 12, 1));
        assert_eq!(c.release(11), Some(2));
        assert_eq!(c.held_by(2), 0);
    }
}
