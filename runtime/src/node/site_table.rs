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
//!
//! The rules themselves (binding, merging, routing accepted channels,
//! claims, the reclaim re-check) are `sitenet_protocols::node::site_index`'s,
//! tested there without a runtime; this module keeps the entries, the lock
//! and the actors, and does what the index's answers say.

use std::sync::Arc;

use slab::Slab;

use sitenet_protocols::node::site_index::{
    Adoption, At, Bind, Counts, Described, Reclaim, Route, Site, SiteIndex, Word,
};
use sitenet_protocols::slots::admission::Source;
use sitenet_protocols::slots::dial_bound::{
    DialBound, DialBounds, DialHost, DialRefused, DialTicket,
};
use sitenet_protocols::{AddressBook, PluggedSchemes, SiteDescriptor, SiteId};
use sitenet_transport::Address;

use super::NodeInner;
use super::SiteRef;
use crate::com_object::{AbandonDial, Adopt, ComObject, Learn, PeerInLine, Wake};
use crate::metrics::Counters;
use crate::site_entry::{ActorState, SiteEntry};

pub(crate) use sitenet_protocols::node::site_index::ClaimRefused;

/// The entries, and the index that decides how they are found, made and
/// forgotten (`sitenet_protocols::node::site_index`): this module only drives it.
pub(crate) struct SiteTable {
    pub(crate) entries: Slab<Arc<SiteEntry>>,
    index: SiteIndex,
    /// The dials of entries made on a peer's word, and who asked
    /// (`sitenet_protocols::slots::dial_bound`).
    dials: DialBound<usize>,
}

impl SiteTable {
    /// An empty table; a peer may hold `forward_claims` claims made by
    /// forwarded origins and `ref_claims` made by its `SiteRef`s
    /// (`NodeConfig::forward_claims_per_peer`, `site_ref_claims_per_peer`),
    /// and the entries made on peers' words dial within `dials`
    /// (`NodeConfig::peer_word_dials` and its kin). Its books keep
    /// addresses of the `plugged` transports.
    pub(crate) fn new(
        forward_claims: u32,
        ref_claims: u32,
        dials: DialBounds,
        plugged: PluggedSchemes,
    ) -> Self {
        Self {
            entries: Slab::new(),
            index: SiteIndex::new(forward_claims, ref_claims).with_plugged(plugged),
            dials: DialBound::new(dials),
        }
    }
}

/// The source address of `peer`'s channel as the dial bounds count it
/// (`Source`: an IPv6 address by its /64; `None` for a channel without an
/// address, or none). Its channel is published before its first message is
/// handled, so a peer naming sites in a message has one.
fn source_of(peer: &SiteEntry) -> Source {
    let stats = peer.stats().lock();
    let channel = stats.as_ref().and_then(|s| s.channel.as_deref());
    Source::of(channel.and_then(crate::channel_io::peer_ip))
}

/// An entry's identity as the index reads it.
fn site(e: &SiteEntry) -> Site<'_> {
    Site {
        key: e.key(),
        id: e.id(),
        address: e.shared_address(),
    }
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

    /// Starts the ComObject of an entry that never had one (a site nobody
    /// sent to, killed or heard from costs its entry only: no actor, no
    /// session), with the address the user asked for or the book a
    /// descriptor gave, which waits in the index. Under the table's lock,
    /// then the entry's slot (the one lock order: see
    /// `com_object/slot.rs`); nothing if it started meanwhile or the node
    /// shut down. Such an entry is forgotten as soon as its last `SiteRef`
    /// goes (see `SiteRef`'s `Drop`): it holds nothing to keep.
    pub(crate) fn start_unstarted(self: &Arc<Self>, entry: &Arc<SiteEntry>) {
        let mut t = self.sites.lock();
        let mut slot = entry.actor().lock();
        if slot.state != ActorState::Never || self.signals().is_shut_down() {
            return;
        }
        let book = match entry.shared_address() {
            Some(a) => AddressBook::given_shared_with(a.clone(), &self.com_cfg().plugged),
            None => t.index.take_book(entry.key()).unwrap_or_default(),
        };
        ComObject::start_in(self, entry, &mut slot, book);
    }

    /// A reference to the site at an address, its entry created if new (its
    /// ComObject starts with the first message, see [`actor`](Self::actor)). A permanently failed site stays failed; the
    /// address then names a new site (for example the restarted process, a
    /// new incarnation). Counted under the table's lock (see the module
    /// documentation).
    pub(crate) fn site_at(self: &Arc<Self>, a: Address) -> SiteRef {
        let mut t = self.sites.lock();
        let t = &mut *t;
        let text = a.to_string();
        let new_key = t.entries.vacant_key();
        let entries = &t.entries;
        let e = match t
            .index
            .at_address(&text, new_key, |k| entries[k].failure().is_some())
        {
            At::Existing(k) => t.entries[k].clone(),
            At::New(text) => self.new_entry(t, Some(text)),
        };
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
    ///.
    ///
    /// A new entry on a peer's word is a claim that peer holds (see
    /// `sitenet_protocols::node::claims`): refused beyond its bound (counted),
    /// released when the site's id is proven (`Action::Proven`) or the
    /// entry leaves. A forwarded origin's entry is tried once at each
    /// address (`AddressBook::claimed_once`). Counted under the table's
    /// lock.
    ///
    /// Such an entry also dials on the peer's word: its dials count
    /// against the bounds on dials on peers' words, charged to the peer's
    /// source address ([`dial_on_word`](Self::dial_on_word)), and a
    /// forwarded origin's are abandoned when the peer's entry leaves.
    pub(crate) fn site_described(
        self: &Arc<Self>,
        d: &SiteDescriptor,
        by: Named<'_>,
    ) -> Result<SiteRef, ClaimRefused> {
        if d.id == self.identity().id() {
            return Ok(self.local_site());
        }
        let word = match by {
            Named::ByUser => Word::User,
            // The local site's own messages are the user's words (but
            // teach a known site nothing).
            Named::ByPeer { peer, .. } if peer.is_local() => Word::Local,
            Named::ByPeer { peer, forward } => Word::Peer {
                peer: peer.key(),
                forward,
            },
        };
        // Read before the table's lock (the entry's own lock is taken).
        let asker = match (word, by) {
            (Word::Peer { peer, forward }, Named::ByPeer { peer: e, .. }) => {
                Some((peer, forward, source_of(e)))
            }
            _ => None,
        };
        let mut t = self.sites.lock();
        let t = &mut *t;
        let new_key = t.entries.vacant_key();
        let entries = &t.entries;
        // Started or parked: its book is its machine's, not the index's.
        let started = |k: usize| entries[k].actor_state() != ActorState::Never;
        match t
            .index
            .described(d.id, &d.addresses, word, new_key, started)
        {
            Ok(Described::Known { key, teach }) => {
                let e = t.entries[key].clone();
                if teach {
                    // Started, so no table lock is taken (parked: it
                    // starts again to learn them).
                    ComObject::send(self, &e, Learn(d.addresses.clone()));
                }
                Ok(SiteRef::counted(e, self.clone()))
            }
            Ok(Described::New) => {
                // Its ComObject starts with the first need (`start_unstarted`):
                // a reference decoded and dropped unused costs nothing after.
                let e = self.new_entry(t, None);
                let _ = e.set_id(d.id);
                if let Some((peer, forward, source)) = asker {
                    t.dials.named(e.key(), peer, source, forward);
                }
                Ok(SiteRef::counted(e, self.clone()))
            }
            Err(refused) => {
                crate::metrics::Counters::add(&self.counters().claims_refused, 1);
                Err(refused)
            }
        }
    }

    /// The site's id is proven (its first channel works): a claim a peer
    /// held on its entry ends, and the peer may name another.
    pub(crate) fn claim_proven(&self, entry: &Arc<SiteEntry>) {
        let mut t = self.sites.lock();
        t.index.proven(entry.key());
        t.dials.proven(entry.key());
    }

    /// `entry` is about to dial `address`: allowed, and counted until the
    /// ticket is handed to [`dial_ended`](Self::dial_ended), if the entry
    /// was made on a peer's word and the bounds on such dials have room
    /// (`Ok(None)`: not on a peer's word, not counted); refused if not
    /// (see `sitenet_protocols::slots::dial_bound`).
    pub(crate) fn dial_on_word(
        &self,
        entry: &SiteEntry,
        address: &str,
    ) -> Result<Option<DialTicket>, DialRefused> {
        let mut t = self.sites.lock();
        if !t
            .entries
            .get(entry.key())
            .is_some_and(|e| std::ptr::eq(&**e, entry))
        {
            // Not (or no longer) the table's: nothing to count it under.
            return Ok(None);
        }
        t.dials.dial(entry.key(), DialHost::of(address))
    }

    /// The peer of `entry` failed for good: the dials of the forwarded
    /// origins it named are abandoned (each origin's ComObject fails it
    /// now, and one that never started is refused its first dial), as
    /// when its entry leaves ([`reclaim`](Self::reclaim)).
    pub(crate) fn asker_gone(&self, entry: &Arc<SiteEntry>) {
        let mut t = self.sites.lock();
        if !t
            .entries
            .get(entry.key())
            .is_some_and(|e| Arc::ptr_eq(e, entry))
        {
            return;
        }
        let gone = t.dials.asker_gone(entry.key());
        abandon(t, gone);
    }

    /// The dial [`dial_on_word`](Self::dial_on_word) counted for `entry`
    /// under `ticket` ended (connected, failed or abandoned).
    pub(crate) fn dial_ended(&self, key: usize, ticket: DialTicket) {
        self.sites.lock().dials.ended(key, ticket);
    }

    /// A reference to the site with this id, if the table has it.
    pub(crate) fn site_with_id(self: &Arc<Self>, id: SiteId) -> Option<SiteRef> {
        if id == self.identity().id() {
            return Some(self.local_site());
        }
        let t = self.sites.lock();
        let k = t.index.id(id)?;
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
            let new_key = t.entries.vacant_key();
            let e = match t.index.route(adopt.neg.site, &adopt.neg.listen, new_key) {
                Route::Existing(k) => t.entries[k].clone(),
                Route::New(book) => {
                    let e = self.new_entry(&mut t, None);
                    // A site met on an in-process channel runs where its
                    // end of the pair does (see `Runtime::worker_of`).
                    let home = adopt.trans.connector_thread();
                    if let Some(i) = home.and_then(|th| self.rt().worker_of(th)) {
                        let i = u16::try_from(i).unwrap_or(crate::site_entry::NO_HOME);
                        e.set_home(i);
                    }
                    if !self.signals().is_shut_down() {
                        ComObject::start_in(self, &e, &mut e.actor().lock(), book);
                    }
                    let _ = e.set_id(adopt.neg.site);
                    e
                }
            };
            e.holds().adoption_begins();
            e
        };
        // An entry found by id runs its actor already, or is parked (it
        // starts again from what it kept), or (made from a descriptor and
        // never used) starts now with its book.
        if !ComObject::send(self, &entry, adopt) {
            // The node shut down (or the entry went): the channel closes.
            entry.holds().adoption_ends();
        }
    }

    /// A connection naming site `id` waits in the node's line:
    /// the site's entry, if the node has one, counts it as on its way
    /// (`adopting`, so the table does not reclaim it) and its ComObject is
    /// told (it neither gives the site up nor forgets it meanwhile). The
    /// entry is returned, for [`left_line`](Self::left_line).
    pub(crate) fn waiting_in_line(self: &Arc<Self>, id: SiteId) -> Option<Arc<SiteEntry>> {
        let entry = {
            let t = self.sites.lock();
            let e = t.entries[t.index.id(id)?].clone();
            e.holds().adoption_begins();
            e
        };
        ComObject::send_if_started(self, &entry, PeerInLine(true));
        Some(entry)
    }

    /// The entry of site `id`, if this node has one: for the waiting line,
    /// how much this node has served it so far (the messages exchanged
    /// with it, [`SiteStats::served`](crate::stats::SiteStats::served); 0
    /// for a site it does not know) and the thread it runs on.
    pub(crate) fn known(&self, id: SiteId) -> Option<Arc<SiteEntry>> {
        let t = self.sites.lock();
        t.index.id(id).map(|k| t.entries[k].clone())
    }

    /// The connection [`waiting_in_line`](Self::waiting_in_line) counted
    /// left the line (let in, or gone).
    pub(crate) fn left_line(self: &Arc<Self>, entry: &Arc<SiteEntry>) {
        entry.holds().adoption_ends();
        ComObject::send_if_started(self, entry, PeerInLine(false));
    }

    /// Forgets an entry whose ComObject never started, once its last
    /// `SiteRef` went. Nothing can start it any more without a new
    /// `SiteRef` (one found by its id is handed out under the table's lock)
    /// or an accepted channel (counted in `adopting` under the same lock),
    /// and `reclaim` re-checks both under that lock, so either keeps it.
    pub(crate) fn reclaim_unused(&self, entry: &Arc<SiteEntry>) {
        if entry.actor_state() == ActorState::Never && self.reclaim(entry) {
            crate::metrics::Counters::add(&self.counters().sites_reclaimed, 1);
        }
    }

    /// Forgets `entry` if, checked under the table's lock, nothing refers
    /// to it: no `SiteRef`, no accepted channel on its way, nothing queued.
    /// Its ids and addresses leave the table with it. True if it was
    /// removed (its ComObject then stops).
    ///
    /// When the entry is a peer that named forwarded origins, their dials
    /// are abandoned ([`asker_gone`](Self::asker_gone)).
    pub(crate) fn reclaim(&self, entry: &Arc<SiteEntry>) -> bool {
        let mut t = self.sites.lock();
        let counts = Counts {
            refs: entry.holds().refs() as usize,
            adopting: entry.holds().adopting() as usize,
            queued: entry.outbox().bytes(),
            current: t
                .entries
                .get(entry.key())
                .is_some_and(|e| Arc::ptr_eq(e, entry)),
        };
        match t.index.reclaim(site(entry), counts) {
            Reclaim::Keep => false,
            Reclaim::Forget { .. } => {
                t.entries.remove(entry.key());
                let gone = t.dials.forget(entry.key());
                abandon(t, gone);
                true
            }
        }
    }

    /// Takes `entry`'s id and addresses from the table (see
    /// `SiteIndex::retire`): its site restarted under the same id.
    pub(crate) fn retire(&self, entry: &Arc<SiteEntry>) {
        self.sites.lock().index.retire(site(entry));
    }

    /// Whether `entry` (`merged`: it merged into another) adopts an accepted
    /// channel naming site `claimed`, or routes it again
    /// (`SiteIndex::adoption` decides; bound here, the entry's id is set).
    pub(crate) fn adoption(&self, entry: &SiteEntry, merged: bool, claimed: SiteId) -> Adoption {
        let mut t = self.sites.lock();
        let a = t.index.adoption(site(entry), merged, claimed);
        if a == Adoption::BoundHere {
            let _ = entry.set_id(claimed);
        }
        a
    }

    /// Records that `entry` is site `id`; if another entry already is, returns
    /// that one (the caller merges into it).
    pub(crate) fn bind_site_id(
        &self,
        entry: &Arc<SiteEntry>,
        id: SiteId,
    ) -> Result<(), Arc<SiteEntry>> {
        let mut t = self.sites.lock();
        match t.index.bind(site(entry), id) {
            Bind::Same => Ok(()),
            Bind::MergeInto(k) => Err(t.entries[k].clone()),
            Bind::Bound => {
                let _ = entry.set_id(id);
                Ok(())
            }
        }
    }

    /// A reference to this node as a site (`Node::local_site`), its entry
    /// made on first need; its messages are drained by `local.rs`.
    pub(crate) fn local_site(self: &Arc<Self>) -> SiteRef {
        let entry = self.local.get_or_init(|| {
            let e = SiteEntry::new(crate::site_entry::LOCAL_KEY, None, self.output.clone());
            let _ = e.set_id(self.identity().id());
            Arc::new(e)
        });
        SiteRef::counted(entry.clone(), self.clone())
    }

    /// Wakes `entry`'s ComObject (started now if it was not, or from what
    /// it kept if it parked) to drain the outbox; the local site's is
    /// drained on the runtime into the handlers (`local.rs`).
    pub(crate) fn wake_site(self: &Arc<Self>, entry: &Arc<SiteEntry>) {
        Counters::add(&self.counters().wakes, 1);
        if entry.is_local() {
            // Drained on the runtime, after the sending call returned.
            let (node, entry, drain) = (self.clone(), entry.clone(), self.drain_local);
            self.rt().spawn(async move { drain(&node, &entry) });
            return;
        }
        ComObject::send(self, entry, Wake);
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

/// Tells the ComObjects of the forwarded origins in `keys`, whose asking
/// peer went, to abandon their dials (after the table's lock `t` is let
/// go). A running actor is told; a parked or unstarted one dials nothing
/// now, and is refused when it tries.
fn abandon(t: parking_lot::MutexGuard<'_, SiteTable>, keys: Vec<usize>) {
    if keys.is_empty() {
        return;
    }
    let origins: Vec<_> = keys
        .into_iter()
        .filter_map(|k| t.entries.get(k).cloned())
        .collect();
    drop(t);
    for origin in origins {
        ComObject::if_running(&origin, |a| a.do_send(AbandonDial));
    }
}
