//! The node's site table as a sans-IO index: which entry an address, a
//! descriptor or an accepted
//! channel's NEGOTIATE names, when an id is bound to an entry and when two
//! entries turn out to be one site, what a peer may make the node create,
//! and when an entry may be forgotten. Nothing here waits, locks or starts
//! anything: the runtime keeps the entries themselves (a slab of them, the
//! actors, the `SiteRef` counts) behind one lock, and calls these methods
//! under it; what they return says what it must do.
//!
//! The rules:
//!
//! * **An address** names the entry made for it, unless that entry failed
//!   permanently: the address then names a new entry (a restarted process
//!   is a new incarnation) ([`at_address`](SiteIndex::at_address)).
//! * **A descriptor** names the entry with its id, else a new one that
//!   calls the site at the descriptor's addresses. Those are claims, never
//!   bound to the site in the index. Only the user's word teaches a known
//!   site more addresses: a peer's could otherwise name a known site at
//!   addresses of its choosing. A new entry on a peer's word is
//!   a claim that peer holds ([`Claims`]), refused beyond its bound, and
//!   released when the site is proven ([`proven`](SiteIndex::proven)) or
//!   the entry leaves ([`described`](SiteIndex::described)).
//! * **An id is bound** to an entry only when this node connected there
//!   itself and found that site. If another entry already has the id, the
//!   entry merges into it, and its address becomes an alias of that entry,
//!   removed with it ([`bind`](SiteIndex::bind)).
//! * **An accepted channel** goes to the entry with the id its NEGOTIATE
//!   names, else to a new one that may call the peer back at its listen
//!   addresses, claimed only ([`route`](SiteIndex::route)). The entry's
//!   ComObject adopts it only if it still is that site: a merged entry, or
//!   one another entry's id contradicts, routes it again
//!   ([`adoption`](SiteIndex::adoption)).
//! * **The reclaim re-check**: an entry is forgotten only if no reference,
//!   no accepted channel on its way and nothing queued holds it, and it is
//!   still the driver's entry for its key. Its id, its own address and its
//!   aliases leave with it, but never another entry's; so do its claims
//!   and any book waiting for its ComObject ([`reclaim`](SiteIndex::reclaim)).
//!
//! Keys are the driver's (a slab index). A method that may make an entry
//! takes `new_key`, the key the driver's next entry will get (for a slab,
//! `Slab::vacant_key`): on a `New` answer the driver makes that entry
//! before anything else takes the key.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use sitenet_protocols::node::site_index::{At, Bind, Counts, Reclaim, SiteIndex, Site};
//! use sitenet_protocols::SiteId;
//!
//! let mut ix = SiteIndex::new(16, 1024);
//! // The user asks for tcp:a: a new entry, key 0, bound to it.
//! let At::New(a) = ix.at_address("tcp:a:1", 0, |_| false) else { unreachable!() };
//! // Its handshake finds site 7: bound.
//! let zero = Site { key: 0, id: None, address: Some(&a) };
//! assert_eq!(ix.bind(zero, SiteId(7)), Bind::Bound);
//! // The user asks for tcp:b, which turns out to be site 7 too: merge.
//! let At::New(b) = ix.at_address("tcp:b:1", 1, |_| false) else { unreachable!() };
//! let one = Site { key: 1, id: None, address: Some(&b) };
//! assert_eq!(ix.bind(one, SiteId(7)), Bind::MergeInto(0));
//! assert_eq!(ix.address("tcp:b:1"), Some(0), "an alias of entry 0 now");
//! // Entry 0 goes once nothing holds it: its id, address and alias with it.
//! let zero = Site { key: 0, id: Some(SiteId(7)), address: Some(&a) };
//! let idle = Counts { refs: 0, adopting: 0, queued: 0, current: true };
//! assert!(matches!(ix.reclaim(zero, idle), Reclaim::Forget { .. }));
//! assert_eq!((ix.id(SiteId(7)), ix.address("tcp:b:1")), (None, None));
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::base::site::SiteId;
use crate::connection::address_book::{AddressBook, PluggedSchemes};
use crate::node::claims::Claims;

/// The index of the node's remote sites (see the module documentation).
/// The driver owns the entries; this owns how they are found and what
/// may make or forget one.
#[derive(Debug, Default)]
pub struct SiteIndex {
    by_id: HashMap<SiteId, usize>,
    by_address: HashMap<Arc<str>, usize>,
    /// Alias addresses bound to an entry by a merge (another entry
    /// contacted the same site there), removed with it.
    aliases: HashMap<usize, Vec<Arc<str>>>,
    /// Entries made from forwarded origins, claimed by the forwarder.
    forward_claims: Claims<usize>,
    /// Entries made from `SiteRef`s in a peer's messages, claimed by that
    /// peer.
    ref_claims: Claims<usize>,
    /// The address books of entries made from a descriptor whose ComObject
    /// has not started (it starts with the first need): until then such an
    /// entry costs no actor.
    books: HashMap<usize, AddressBook>,
    /// Most forwarded origins a peer may have made entries for and not
    /// yet proven.
    forward_limit: u32,
    /// Most sites a peer's `SiteRef`s may have made entries for and not
    /// yet proven.
    ref_limit: u32,
    /// The node's plugged transports: the books made here keep their
    /// addresses.
    plugged: PluggedSchemes,
}

/// One entry as the driver knows it, for the rules that read its identity:
/// its key, the id it was set (if any) and the address it was made for (if
/// the user asked for one, [`SiteIndex::at_address`]).
#[derive(Debug, Clone, Copy)]
pub struct Site<'a> {
    /// The driver's key of the entry.
    pub key: usize,
    /// The id the entry holds, if set.
    pub id: Option<SiteId>,
    /// The address the entry was made for, if any.
    pub address: Option<&'a Arc<str>>,
}

/// What holds an entry, read by the driver under the same lock as the
/// re-check ([`SiteIndex::reclaim`]): any of them keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Live references to it (`SiteRef`s).
    pub refs: usize,
    /// Accepted channels routed to it and not yet taken by its ComObject.
    pub adopting: usize,
    /// Bytes queued for it.
    pub queued: u64,
    /// True if the entry is still the driver's entry for its key (a key
    /// reused by a newer entry must not forget that one).
    pub current: bool,
}

/// Whose word names a site by its descriptor: it decides whether a new
/// entry is a claim and whether a known site learns addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// The local user: trusted, and the only word that teaches a known
    /// site more addresses.
    User,
    /// A message the local site sent itself: makes an entry unclaimed like
    /// the user's, but teaches a known site nothing.
    Local,
    /// A peer's message: a `SiteRef` it carries (`forward` false) or a
    /// forwarded request's origin (`forward` true). A new entry is a claim
    /// the peer (entry `peer`) holds.
    Peer {
        /// The key of the peer's entry.
        peer: usize,
        /// True for a forwarded request's origin.
        forward: bool,
    },
}

/// Which entry an address names ([`SiteIndex::at_address`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// The entry already made for it (not failed permanently).
    Existing(usize),
    /// A new entry at `new_key`, now bound to the address: the driver makes
    /// it, holding this copy of the address (one text per site).
    New(Arc<str>),
}

/// Which entry a descriptor names ([`SiteIndex::described`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Described {
    /// The entry with its id. `teach`: the user named it and its ComObject
    /// runs, so the driver passes it the descriptor's addresses (a book
    /// still waiting here learned them already).
    Known {
        /// The entry's key.
        key: usize,
        /// True if the driver must hand the addresses to its ComObject.
        teach: bool,
    },
    /// A new entry at `new_key` with the descriptor's id, its address book
    /// waiting here until its ComObject starts ([`SiteIndex::take_book`]).
    New,
}

/// What binding an id to an entry means ([`SiteIndex::bind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// The entry already had it.
    Same,
    /// The entry has it now (the driver sets the entry's id).
    Bound,
    /// Another entry has it: this one merges into that one (its address is
    /// now an alias of that entry).
    MergeInto(usize),
}

/// Where an accepted channel goes ([`SiteIndex::route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To the entry with the id its NEGOTIATE names.
    Existing(usize),
    /// To a new entry at `new_key`, with the id, whose ComObject starts
    /// with this book: the peer's listen addresses, claimed only.
    New(AddressBook),
}

/// Where an accepted channel handed to an entry's ComObject is adopted
/// ([`SiteIndex::adoption`]). The channel was routed to the entry by the
/// id its NEGOTIATE names, but the entry may have changed since: it may
/// have merged into another entry (two entries turned out to be one site),
/// or not be bound to that id. Adopting it there would attach a channel to
/// an entry that no longer speaks for the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// The entry is the site: its ComObject takes the channel (and its
    /// machine still decides whether to accept or refuse it).
    Here,
    /// The entry is the site now, bound to the id by this decision: the
    /// driver sets the entry's id, then adopts as for [`Adoption::Here`].
    BoundHere,
    /// Another entry is the site (this one merged into it, or the id is
    /// bound to another entry): route the channel by id again
    /// ([`SiteIndex::route`]), which finds that entry.
    Reroute,
}

/// What the reclaim re-check decided ([`SiteIndex::reclaim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Something holds the entry: it stays.
    Keep,
    /// The entry is forgotten: the driver removes it. `id` and `addresses`
    /// are what left the index with it (an id or address another entry
    /// holds by then stays that entry's, and is not listed).
    Forget {
        /// Its id, if the index still named it by that id.
        id: Option<SiteId>,
        /// Its own address and aliases that named it.
        addresses: Vec<Arc<str>>,
    },
}

/// A peer named a site the node does not know while holding its bound of
/// such claims: no entry was made (the driver counts and reports it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sending site already named {limit} sites this node has not reached; no more until they are reached or forgotten")]
pub struct ClaimRefused {
    /// The bound the peer reached.
    pub limit: u32,
}

impl SiteIndex {
    /// An empty index. A peer may hold `forward_limit` claims made by
    /// forwarded origins and `ref_limit` made by `SiteRef`s in its
    /// messages: what its words can make this node create is bounded.
    pub fn new(forward_limit: u32, ref_limit: u32) -> Self {
        Self {
            forward_limit,
            ref_limit,
            ..Self::default()
        }
    }

    /// The index of a node with the plugged transports `plugged`: the
    /// books it makes (from descriptors, references, accepted channels'
    /// listen lists) keep their addresses.
    pub fn with_plugged(mut self, plugged: PluggedSchemes) -> Self {
        self.plugged = plugged;
        self
    }

    /// The node's plugged transports (see [`with_plugged`](Self::with_plugged)).
    pub fn plugged(&self) -> &PluggedSchemes {
        &self.plugged
    }

    /// Which entry `address` (canonical text) names: the one made for it,
    /// unless `failed` says it failed permanently; else a new entry at
    /// `new_key`, bound to the address (an entry that failed keeps its
    /// key, and stays failed).
    pub fn at_address(
        &mut self,
        address: &str,
        new_key: usize,
        failed: impl FnOnce(usize) -> bool,
    ) -> At {
        if let Some(&k) = self.by_address.get(address) {
            if !failed(k) {
                return At::Existing(k);
            }
        }
        let text: Arc<str> = address.into();
        self.by_address.insert(text.clone(), new_key);
        At::New(text)
    }

    /// Which entry a descriptor (`id`, `addresses`) names for `word`: the
    /// one with its id, else a new entry at `new_key` whose book waits here
    /// (see [`Word`] for whose word does what). `started` says whether an
    /// entry's ComObject runs (its book is then its own, not here).
    ///
    /// A peer's word for an unknown id makes a claim: refused beyond the
    /// peer's bound, nothing recorded then. A forwarded origin's book tries
    /// each address once ([`AddressBook::claimed_once`]); a `SiteRef`'s
    /// says when it is proven ([`AddressBook::on_claim`]).
    pub fn described(
        &mut self,
        id: SiteId,
        addresses: &[String],
        word: Word,
        new_key: usize,
        started: impl FnOnce(usize) -> bool,
    ) -> Result<Described, ClaimRefused> {
        if let Some(&key) = self.by_id.get(&id) {
            let mut teach = false;
            if word == Word::User {
                if started(key) {
                    teach = true;
                } else if let Some(b) = self.books.get_mut(&key) {
                    b.learn_with(addresses.iter().map(String::as_str), &self.plugged);
                }
            }
            return Ok(Described::Known { key, teach });
        }
        let listed = addresses.iter().map(String::as_str);
        let book = match word {
            Word::User | Word::Local => AddressBook::claimed_with(listed, &self.plugged),
            Word::Peer { peer, forward } => {
                let (claims, limit, book) = if forward {
                    let book = AddressBook::claimed_once_with(listed, &self.plugged);
                    (&mut self.forward_claims, self.forward_limit, book)
                } else {
                    let book = AddressBook::claimed_with(listed, &self.plugged).on_claim();
                    (&mut self.ref_claims, self.ref_limit, book)
                };
                if !claims.try_claim(peer, new_key, limit) {
                    return Err(ClaimRefused { limit });
                }
                book
            }
        };
        self.books.insert(new_key, book);
        self.by_id.insert(id, new_key);
        Ok(Described::New)
    }

    /// The book waiting for entry `key`'s ComObject, taken as it starts.
    pub fn take_book(&mut self, key: usize) -> Option<AddressBook> {
        self.books.remove(&key)
    }

    /// Entry `site` connected to its address and found site `id`: the one
    /// moment an id is bound to an entry. If another entry has the id, the
    /// entry merges into it, and its address names that entry from now on
    /// (an alias, forgotten with that entry).
    pub fn bind(&mut self, site: Site<'_>, id: SiteId) -> Bind {
        match self.by_id.get(&id) {
            Some(&k) if k == site.key => Bind::Same,
            Some(&k) => {
                if let Some(a) = site.address {
                    self.by_address.insert(a.clone(), k);
                    self.aliases.entry(k).or_default().push(a.clone());
                }
                Bind::MergeInto(k)
            }
            None => {
                self.by_id.insert(id, site.key);
                Bind::Bound
            }
        }
    }

    /// Where an accepted channel whose NEGOTIATE names site `id` goes: the
    /// entry with that id, else a new entry at `new_key` with it. The
    /// `listen` addresses the peer claims are not trusted: the new entry
    /// may call them back (the open protocol then checks who answers), but
    /// none is bound to the site, so a peer cannot take over traffic meant
    /// for the site at an address it lists.
    pub fn route(&mut self, id: SiteId, listen: &[String], new_key: usize) -> Route {
        if let Some(&k) = self.by_id.get(&id) {
            return Route::Existing(k);
        }
        self.by_id.insert(id, new_key);
        Route::New(AddressBook::claimed_with(
            listen.iter().map(String::as_str),
            &self.plugged,
        ))
    }

    /// Entry `site` (`merged`: it merged into another entry) was handed an
    /// accepted channel whose NEGOTIATE names site `claimed`: adopt it
    /// here, or route it again (see [`Adoption`]). A merged entry never
    /// adopts: its messages and its future are the other entry's. An entry
    /// not bound to `claimed` is bound to it now if no other entry is
    /// ([`bind`](Self::bind)); if another is, the channel goes there.
    pub fn adoption(&mut self, site: Site<'_>, merged: bool, claimed: SiteId) -> Adoption {
        if merged {
            return Adoption::Reroute;
        }
        if site.id == Some(claimed) {
            return Adoption::Here;
        }
        match self.bind(site, claimed) {
            Bind::Same => Adoption::Here,
            Bind::Bound => Adoption::BoundHere,
            Bind::MergeInto(_) => Adoption::Reroute,
        }
    }

    /// Entry `key`'s site is proven (its first channel works): a claim a
    /// peer held on it ends, and the peer may name another.
    pub fn proven(&mut self, key: usize) {
        self.forward_claims.release(key);
        self.ref_claims.release(key);
    }

    /// The reclaim re-check: forgets `site` unless something in `counts`
    /// holds it. Its claims, its waiting book, its id and its addresses
    /// (own and aliases) leave before its key can name another entry; an
    /// id or address that names another entry by then stays.
    pub fn reclaim(&mut self, site: Site<'_>, counts: Counts) -> Reclaim {
        #[cfg(feature = "planted-bugs")]
        let counts =
            if crate::base::planted::active(crate::base::planted::Bug::ReclaimIgnoresAdopting) {
                Counts {
                    adopting: 0,
                    ..counts
                }
            } else {
                counts
            };
        if counts.refs > 0 || counts.adopting > 0 || counts.queued > 0 || !counts.current {
            return Reclaim::Keep;
        }
        let key = site.key;
        #[cfg(feature = "planted-bugs")]
        let keep_claims =
            crate::base::planted::active(crate::base::planted::Bug::ReclaimKeepsClaims);
        #[cfg(not(feature = "planted-bugs"))]
        let keep_claims = false;
        if !keep_claims {
            self.forward_claims.forget(key);
            self.ref_claims.forget(key);
        }
        self.books.remove(&key);
        let id = site.id.filter(|id| self.by_id.get(id) == Some(&key));
        if let Some(id) = &id {
            self.by_id.remove(id);
        }
        let own = site.address.cloned();
        let aliases = self.aliases.remove(&key).unwrap_or_default();
        let mut addresses = Vec::new();
        for a in own.into_iter().chain(aliases) {
            if self.by_address.get(&a) == Some(&key) {
                self.by_address.remove(&a);
                addresses.push(a);
            }
        }
        Reclaim::Forget { id, addresses }
    }

    /// Entry `site` no longer speaks for its site, though it lives on for
    /// whoever holds it: its site failed for good and came back under the
    /// same id ([`AcceptOutcome::Restarted`](crate::connection::com_object::AcceptOutcome::Restarted)).
    /// Its id and its addresses (own and aliases) leave the index, so the
    /// next channel or contact naming them makes a new entry; what the
    /// index keeps of the entry otherwise goes when it is reclaimed
    /// ([`reclaim`](Self::reclaim) then leaves the new entry's names alone).
    pub fn retire(&mut self, site: Site<'_>) {
        let key = site.key;
        if let Some(id) = site.id {
            if self.by_id.get(&id) == Some(&key) {
                self.by_id.remove(&id);
            }
        }
        let own = site.address.cloned();
        let aliases = self.aliases.get(&key).cloned().unwrap_or_default();
        for a in own.into_iter().chain(aliases) {
            if self.by_address.get(&a) == Some(&key) {
                self.by_address.remove(&a);
            }
        }
    }

    /// The entry with site id `id`, if any.
    pub fn id(&self, id: SiteId) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The entry `address` names (its own or an alias), if any.
    pub fn address(&self, address: &str) -> Option<usize> {
        self.by_address.get(address).copied()
    }

    /// How many claims entry `peer` holds, of forwarded origins and of
    /// `SiteRef`s: what its words still cost this node.
    pub fn claims_held(&self, peer: usize) -> (u32, u32) {
        (
            self.forward_claims.held_by(peer),
            self.ref_claims.held_by(peer),
        )
    }

    /// True if entry `key` has a book waiting for its ComObject.
    pub fn has_book(&self, key: usize) -> bool {
        self.books.contains_key(&key)
    }

    /// Every key an id, address, alias list, book or claim refers to, with
    /// duplicates: for checks that each is a live entry (tests, the
    /// simulator's checkers).
    pub fn referenced_keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_id
            .values()
            .chain(self.by_address.values())
            .chain(self.aliases.keys())
            .chain(self.books.keys())
            .copied()
            .chain(self.forward_claims.keys())
            .chain(self.ref_claims.keys())
    }
}

#[cfg(test)]
mod tests;
