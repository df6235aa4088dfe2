//! The site table: one entry per remote site, found by id and by the
//! address this node contacts it at. An address is bound to a site only when
//! this node connects there itself and finds that site (`bind_site_id`);
//! the listen addresses a peer claims are used only to call it back.
//!
//! An entry leaves the table by the reclaim rule (its ComObject decides, see
//! `sitenet_protocols::Action::Reclaim`): no `SiteRef`, nothing queued or
//! unacknowledged, no channel, for the linger time. Everything that hands
//! out a new reference or routes a channel to an entry does so under the
//! table's lock, and [`NodeInner::reclaim`] re-checks under the same lock,
//! so an entry is never forgotten while someone is about to use it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::Actor;
use slab::Slab;

use sitenet_protocols::claims::Claims;
use sitenet_protocols::{AddressBook, SiteDescriptor, SiteId};
use sitenet_transport::Address;

use super::NodeInner;
use crate::com_object::{Adopt, ComObject, Learn};
use crate::site::{SiteEntry, SiteRef};

#[derive(Default)]
pub(crate) struct SiteTable {
    pub(crate) entries: Slab<Arc<SiteEntry>>,
    pub(crate) by_id: HashMap<SiteId, usize>,
    pub(crate) by_address: HashMap<Arc<str>, usize>,
    /// Alias addresses bound to an entry by a merge (another entry
    /// contacted the same site there), removed with it.
    pub(crate) aliases: HashMap<usize, Vec<Arc<str>>>,
    /// Entries made from forwarded origins, claimed by the forwarder
    /// (`NodeConfig::forward_claims_per_peer`).
    pub(crate) forward_claims: Claims<usize>,
    /// Entries made from `SiteRef`s in a peer's messages, claimed by that
    /// peer (`NodeConfig::site_ref_claims_per_peer`).
    pub(crate) ref_claims: Claims<usize>,
    /// The address books of entries made from a descriptor whose ComObject
    /// has not started (it starts with the first need; see
    /// [`NodeInner::given_actor`]): until then such an entry costs no
    /// actor, and is forgotten as soon as its last `SiteRef` goes.
    pub(crate) books: HashMap<usize, AddressBook>,
}

/// Who names a site by its descriptor (see [`NodeInner::site_described`]).
#[derive(Clone, Copy)]
pub(crate) enum Named<'a> {
    /// The local user (`Node::site_from_descriptor`).
    ByUser,
    /// A peer, in a message it delivered: a `SiteRef` it carries
    /// (`forward` false) or a forwarded request's origin (`forward` true).
    ByPeer {
        peer: &'a Arc<SiteEntry>,
        forward: bool,
    },
}

/// A peer named a site the node does not know while holding its bound of
/// such claims: no entry was made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the sending site already named {limit} sites this node has not reached; no more until they are reached or forgotten")]
pub(crate) struct ClaimRefused {
    pub(crate) limit: u32,
}

impl NodeInner {
    /// A new entry, without its ComObject yet (see [`actor`](Self::actor)).
    /// `address` is the one the user asked for (bound to the site found
    /// there).
    pub(super) fn new_entry(
        self: &Arc<Self>,
        t: &mut SiteTable,
        address: Option<Arc<str>>,
    ) -> Arc<SiteEntry> {
        let slot = t.entries.vacant_entry();
        let entry = Arc::new(SiteEntry::new(slot.key(), address, self.output.clone()));
        slot.insert(entry.clone());
        entry
    }

    /// The site's ComObject, started on first need with the addresses in
    /// `book`. A site nobody sends to, kills or hears from costs its entry
    /// only: no actor, no mailbox, no session. Such an entry is forgotten
    /// as soon as its last `SiteRef` goes (see `SiteRef`'s `Drop`): it
    /// holds nothing to keep.
    pub(crate) fn actor<'a>(
        self: &Arc<Self>,
        entry: &'a Arc<SiteEntry>,
        book: impl FnOnce() -> AddressBook,
    ) -> &'a actix::Addr<ComObject> {
        entry.addr.get_or_init(|| {
            let (node, e, book) = (self.clone(), entry.clone(), book());
            ComObject::start_in_arbiter(self.rt.arbiter(), move |_| ComObject::new(node, e, book))
        })
    }

    /// [`actor`](Self::actor) with the address the user asked for, or the
    /// book a descriptor gave (the entries started lazily are those
    /// `Node::site` and `site_described` made). Never called under the
    /// table's lock.
    pub(crate) fn given_actor<'a>(
        self: &Arc<Self>,
        entry: &'a Arc<SiteEntry>,
    ) -> &'a actix::Addr<ComObject> {
        self.actor(entry, || match &entry.address {
            Some(a) => AddressBook::given_shared(a.clone()),
            None => self
                .sites
                .lock()
                .books
                .remove(&entry.key)
                .unwrap_or_default(),
        })
    }

    /// A reference to the site at an address, its entry created if new (its
    /// ComObject starts with the first message, see [`actor`](Self::actor)). A permanently failed site stays failed; the
    /// address then names a new site (for example the restarted process, a
    /// new incarnation). Counted under the table's lock (see the module
    /// documentation).
    pub(crate) fn site_at(self: &Arc<Self>, a: Address) -> SiteRef {
        let mut t = self.sites.lock();
        let text = a.to_string();
        if let Some(&k) = t.by_address.get(text.as_str()) {
            let e = t.entries[k].clone();
            if e.failure().is_none() {
                return SiteRef::counted(e, self.clone());
            }
        }
        let text: Arc<str> = text.into();
        let e = self.new_entry(&mut t, Some(text.clone()));
        t.by_address.insert(text, e.key);
        SiteRef::counted(e, self.clone())
    }

    /// A reference to the site a descriptor names: the entry with its id,
    /// else a new one that calls it at those addresses, best transport
    /// first. The addresses are claims: they are not bound to the site in
    /// the table, and whoever answers there must prove the id. Only the
    /// local user's descriptor (`Named::ByUser`, `Node::site_from_descriptor`)
    /// adds addresses to a site the table knows: a peer's (a `SiteRef` in a
    /// message, a forwarded origin) could otherwise name a known site at
    /// addresses of its choosing, tried on every reconnect and handed on
    /// (issue 17).
    ///
    /// A new entry on a peer's word is a claim that peer holds (see
    /// `sitenet_protocols::claims`): refused beyond its bound (counted),
    /// released when the site's id is proven (`Action::Proven`) or the
    /// entry leaves. A forwarded origin's entry is tried once at each
    /// address (`AddressBook::claimed_once`). Counted under the table's
    /// lock.
    pub(crate) fn site_described(
        self: &Arc<Self>,
        d: &SiteDescriptor,
        by: Named<'_>,
    ) -> Result<SiteRef, ClaimRefused> {
        if d.id == self.id {
            return Ok(self.local_site());
        }
        let mut t = self.sites.lock();
        if let Some(&k) = t.by_id.get(&d.id) {
            let e = t.entries[k].clone();
            if matches!(by, Named::ByUser) {
                match e.addr.get() {
                    Some(a) => a.do_send(Learn(d.addresses.clone())),
                    // Its ComObject has not started: its book waits here.
                    None => {
                        if let Some(b) = t.books.get_mut(&k) {
                            b.learn(d.addresses.iter().map(String::as_str));
                        }
                    }
                }
            }
            return Ok(SiteRef::counted(e, self.clone()));
        }
        let addresses = d.addresses.iter().map(String::as_str);
        let book = match by {
            // The local site's own messages are the user's words.
            Named::ByPeer { peer, .. } if peer.is_local() => AddressBook::claimed(addresses),
            Named::ByUser => AddressBook::claimed(addresses),
            Named::ByPeer { peer, forward } => {
                let key = t.entries.vacant_key();
                let (claims, limit, book) = if forward {
                    let limit = self.cfg.forward_claims_per_peer;
                    (
                        &mut t.forward_claims,
                        limit,
                        AddressBook::claimed_once(addresses),
                    )
                } else {
                    let limit = self.cfg.site_ref_claims_per_peer;
                    (
                        &mut t.ref_claims,
                        limit,
                        AddressBook::claimed(addresses).on_claim(),
                    )
                };
                if !claims.try_claim(peer.key, key, limit) {
                    crate::metrics::Counters::add(&self.counters.claims_refused, 1);
                    return Err(ClaimRefused { limit });
                }
                book
            }
        };
        // Its ComObject starts with the first need (`given_actor`): a
        // reference decoded and dropped unused costs nothing after.
        let e = self.new_entry(&mut t, None);
        t.books.insert(e.key, book);
        let _ = e.id.set(d.id);
        t.by_id.insert(d.id, e.key);
        Ok(SiteRef::counted(e, self.clone()))
    }

    /// The site's id is proven (its first channel works): a claim a peer
    /// held on its entry ends, and the peer may name another.
    pub(crate) fn claim_proven(&self, entry: &Arc<SiteEntry>) {
        let mut t = self.sites.lock();
        t.forward_claims.release(entry.key);
        t.ref_claims.release(entry.key);
    }

    /// A reference to the site with this id, if the table has it.
    pub(crate) fn site_with_id(self: &Arc<Self>, id: SiteId) -> Option<SiteRef> {
        if id == self.id {
            return Some(self.local_site());
        }
        let t = self.sites.lock();
        let k = *t.by_id.get(&id)?;
        Some(SiteRef::counted(t.entries[k].clone(), self.clone()))
    }

    /// Hands an accepted channel whose NEGOTIATE names site `id` to that
    /// site's ComObject: the entry by id, else a new one. The listen
    /// addresses the peer claims are not trusted: the new entry may call
    /// them back (the open protocol then checks who answers), but no
    /// address is bound to a site until we connect there ourselves and find
    /// it (`bind_site_id`), so a peer cannot take over traffic meant for the
    /// site at an address it lists. The entry counts the channel as on its
    /// way (`adopting`) from inside the lock, so it cannot be reclaimed
    /// before its ComObject takes it.
    pub(crate) fn route_accepted(self: &Arc<Self>, adopt: Adopt) {
        let entry = {
            let mut t = self.sites.lock();
            let e = match t.by_id.get(&adopt.neg.site) {
                Some(&k) => t.entries[k].clone(),
                None => {
                    let e = self.new_entry(&mut t, None);
                    self.actor(&e, || {
                        AddressBook::claimed(adopt.neg.listen.iter().map(String::as_str))
                    });
                    let _ = e.id.set(adopt.neg.site);
                    t.by_id.insert(adopt.neg.site, e.key);
                    e
                }
            };
            e.adopting.fetch_add(1, Ordering::SeqCst);
            e
        };
        // An entry found by id runs its actor already, or (made from a
        // descriptor and never used) starts it now with its book.
        self.given_actor(&entry).do_send(adopt);
    }

    /// Forgets an entry whose ComObject never started, once its last
    /// `SiteRef` went. Nothing can start it any more without a new
    /// `SiteRef` (one found by its id is handed out under the table's lock)
    /// or an accepted channel (counted in `adopting` under the same lock),
    /// and `reclaim` re-checks both under that lock, so either keeps it.
    pub(crate) fn reclaim_unused(&self, entry: &Arc<SiteEntry>) {
        if entry.addr.get().is_none() && self.reclaim(entry) {
            crate::metrics::Counters::add(&self.counters.sites_reclaimed, 1);
        }
    }

    /// Forgets `entry` if, checked under the table's lock, nothing refers
    /// to it: no `SiteRef`, no accepted channel on its way, nothing queued.
    /// Its ids and addresses leave the table with it. True if it was
    /// removed (its ComObject then stops).
    pub(crate) fn reclaim(&self, entry: &Arc<SiteEntry>) -> bool {
        let mut t = self.sites.lock();
        if entry.refs.load(Ordering::SeqCst) > 0
            || entry.adopting.load(Ordering::SeqCst) > 0
            || entry.outbox.bytes() > 0
            || !t
                .entries
                .get(entry.key)
                .is_some_and(|e| Arc::ptr_eq(e, entry))
        {
            return false;
        }
        let key = entry.key;
        t.entries.remove(key);
        // Before the key can name another entry: its claims and any book
        // waiting for its ComObject go.
        t.forward_claims.forget(key);
        t.ref_claims.forget(key);
        t.books.remove(&key);
        if let Some(id) = entry.id.get() {
            if t.by_id.get(&id) == Some(&key) {
                t.by_id.remove(&id);
            }
        }
        let own = entry.address.iter().cloned();
        let aliases = t.aliases.remove(&key).unwrap_or_default();
        for a in own.chain(aliases) {
            if t.by_address.get(&a) == Some(&key) {
                t.by_address.remove(&a);
            }
        }
        true
    }

    /// Records that `entry` is site `id`; if another entry already is, returns
    /// that one (the caller merges into it).
    pub(crate) fn bind_site_id(
        &self,
        entry: &Arc<SiteEntry>,
        id: SiteId,
    ) -> Result<(), Arc<SiteEntry>> {
        let mut t = self.sites.lock();
        match t.by_id.get(&id) {
            Some(&k) if k == entry.key => Ok(()),
            Some(&k) => {
                let other = t.entries[k].clone();
                if let Some(a) = &entry.address {
                    t.by_address.insert(a.clone(), k);
                    t.aliases.entry(k).or_default().push(a.clone());
                }
                Err(other)
            }
            None => {
                let _ = entry.id.set(id);
                t.by_id.insert(id, entry.key);
                Ok(())
            }
        }
    }

    /// Every entry, and the local site's if it was made: what a shutdown
    /// waits for and closes.
    pub(super) fn entries_and_local(&self) -> Vec<Arc<SiteEntry>> {
        let mut v = self.all_entries();
        v.extend(self.local.get().cloned());
        v
    }

    pub(super) fn all_entries(&self) -> Vec<Arc<SiteEntry>> {
        self.sites
            .lock()
            .entries
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }
}
