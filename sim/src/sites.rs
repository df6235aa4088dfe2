//! Each simulated node's site table: the runtime's [`SiteIndex`] over the
//! node's entries, so that its rules run under faults too: which entry an
//! address, a site id or an accepted channel names, the one moment an id
//! is bound to an entry reached by address, the merge of such an entry
//! into the one a site already has, and the reclaim re-check.
//!
//! An entry is keyed in the node's table by its site id once it has one;
//! an entry the application reached by address
//! ([`AppCtx::send_to_address_of`](crate::AppCtx::send_to_address_of)) is
//! keyed by an even stand-in until its first handshake says which site
//! answers there ([`unbound`]): then it is bound and goes on under that
//! id, or, if the node already has an entry with the id, everything it
//! holds moves there, in order ([`ComObject::merge_out`]), and it is
//! forgotten — as the runtime's `merge_into` does. The audit checks that
//! the index and the table agree ([`Sim::check_site_table`]) on every node
//! whose table changed since the last audit.
//!
//! [`ComObject::merge_out`]: sitenet_protocols::connection::com_object::ComObject::merge_out

use std::sync::Arc;

use sitenet_protocols::base::site::{SiteDescriptor, SiteId};
use sitenet_protocols::connection::address_book::AddressBook;
use sitenet_protocols::connection::com_object::{ComObject, ComState};
use sitenet_protocols::connection::error::HandedBack;
use sitenet_protocols::node::site_index::{
    At, Bind, Counts, Described, Reclaim, Route, Site, SiteIndex, Word,
};
use sitenet_protocols::node::turns::merge_line;

use crate::net::Seg;
use crate::outbox::Waiting;
use crate::peer::{unbound, Peer, Slot};
use crate::Sim;

/// The runtime's default bounds of the claims a peer's words may make:
/// forwarded origins, `SiteRef`s.
const SITE_CLAIMS: (u32, u32) = (16, 1024);

impl Sim {
    /// A node's empty site table: a peer may hold
    /// [`SimConfig::peer_claims`](crate::SimConfig::peer_claims) claims of
    /// each kind (the runtime's defaults without it).
    pub(crate) fn new_index(&self) -> SiteIndex {
        let forward = self.cfg.peer_claims.unwrap_or(SITE_CLAIMS.0);
        let refs = self.cfg.peer_claims.unwrap_or(SITE_CLAIMS.1);
        SiteIndex::new(forward, refs)
    }

    /// The entry for site `id` at node `n`, on the application's word (a
    /// site of the directory, at `address`: a runtime's
    /// `site(descriptor)`), made if the node has none.
    pub(crate) fn entry_for_id(&mut self, n: usize, id: SiteId, address: &str) -> Box<Peer> {
        let node = &mut self.nodes[n];
        let new_key = node.keys.vacant_key();
        let word = node
            .index
            .described(id, &[address.to_owned()], Word::User, new_key, |_| true);
        match word {
            Ok(Described::Known { key, .. }) => self.entry_at_key(n, key, id),
            // The user's word makes no claim, so nothing refuses it.
            Ok(Described::New) | Err(_) => {
                let book = node
                    .index
                    .take_book(new_key)
                    .unwrap_or_else(|| AddressBook::given(address));
                node.keys.insert(id);
                self.new_entry(n, id, new_key, book, None)
            }
        }
    }

    /// The entry `address` names at node `n` (its own, or an alias a merge
    /// made), made unbound if none does or if that entry failed
    /// permanently (the address may be a new incarnation's now). Returns
    /// its key in the table.
    pub(crate) fn entry_at_address(&mut self, n: usize, address: &str) -> (SiteId, Box<Peer>) {
        let node = &mut self.nodes[n];
        let new_key = node.keys.vacant_key();
        let (peers, keys) = (&node.peers, &node.keys);
        let failed = |k: usize| {
            keys.get(k)
                .and_then(|key| peers.get(key))
                .is_none_or(|p| p.state() == ComState::Failed)
        };
        match node.index.at_address(address, new_key, failed) {
            At::Existing(k) => {
                let key = node.keys[k];
                (key, self.entry_at_key(n, k, key))
            }
            At::New(text) => {
                node.next_unbound += 1;
                let key = SiteId(node.next_unbound << 1);
                node.keys.insert(key);
                let book = AddressBook::given_shared(text.clone());
                (key, self.new_entry(n, key, new_key, book, Some(text)))
            }
        }
    }

    /// The entry an accepted channel whose NEGOTIATE names site `id` goes
    /// to at node `m` ([`SiteIndex::route`](sitenet_protocols::node::site_index::SiteIndex::route)),
    /// and whether it existed (a new one calls the peer back only at the
    /// addresses it claimed).
    pub(crate) fn entry_for_accept(
        &mut self,
        m: usize,
        id: SiteId,
        listen: &[String],
    ) -> (Box<Peer>, bool) {
        let node = &mut self.nodes[m];
        let new_key = node.keys.vacant_key();
        match node.index.route(id, listen, new_key) {
            Route::Existing(k) => (self.entry_at_key(m, k, id), true),
            Route::New(book) => {
                node.keys.insert(id);
                (self.new_entry(m, id, new_key, book, None), false)
            }
        }
    }

    /// The origin of a forwarded request that `via` delivered at node `n`,
    /// as the runtime's `forward_origin` makes it: a site the node does
    /// not know becomes an entry on `via`'s word — a claim `via` holds,
    /// released when the site is proven or the entry leaves, its book
    /// tried once at each address — and beyond `via`'s bound the request
    /// is refused (false: it ends here, and its requester times out).
    /// Only with [`SimConfig::peer_claims`](crate::SimConfig::peer_claims).
    pub(crate) fn origin_entry(&mut self, n: usize, via: SiteId, origin: &SiteDescriptor) -> bool {
        self.peer_word(n, via, origin, true)
    }

    /// A site named in a one-way message `via` delivered at node `n` (a
    /// `SiteRef`, as the runtime's decoding makes it): a site the node
    /// does not know becomes an entry on `via`'s word, a claim `via`
    /// holds; beyond `via`'s bound, false (the message is not handled).
    pub(crate) fn site_ref_entry(&mut self, n: usize, via: SiteId, site: &SiteDescriptor) -> bool {
        self.peer_word(n, via, site, false)
    }

    /// Site `d` as `via` named it at node `n` (`forward`: as a forwarded
    /// request's origin; else as a `SiteRef`): known, or made an entry,
    /// or refused (false).
    fn peer_word(&mut self, n: usize, via: SiteId, d: &SiteDescriptor, forward: bool) -> bool {
        let node = &mut self.nodes[n];
        if d.id == node.id {
            return true;
        }
        let Some(peer) = node.index.id(via) else {
            let what = format!(
                "{}'s site table does not find {via}, which delivered",
                node.id
            );
            self.violation(what);
            return false;
        };
        let new_key = node.keys.vacant_key();
        let word = Word::Peer { peer, forward };
        match node
            .index
            .described(d.id, &d.addresses, word, new_key, |_| true)
        {
            Ok(Described::Known { .. }) => {
                if !forward {
                    self.counts.site_refs += 1;
                }
                true
            }
            Ok(Described::New) => {
                let book = node.index.take_book(new_key).unwrap_or_default();
                node.keys.insert(d.id);
                let mut p = self.new_entry(n, d.id, new_key, book, None);
                if forward {
                    self.counts.origins_claimed += 1;
                    self.trace(n, "origin_claimed", &[via.0, d.id.0]);
                } else {
                    self.counts.site_refs += 1;
                    self.counts.site_refs_claimed += 1;
                    self.trace(n, "site_ref_claimed", &[via.0, d.id.0]);
                }
                // The request holds a reference to its origin until it is
                // answered, the application to a site it was told of for
                // a while: held as a site the application sent to.
                self.referenced(n, &mut p);
                self.put_back(n, d.id, p);
                true
            }
            Err(_) if forward => {
                self.counts.origins_refused += 1;
                self.trace(n, "origin_refused", &[via.0, d.id.0]);
                false
            }
            Err(_) => {
                self.counts.site_refs_refused += 1;
                self.trace(n, "site_ref_refused", &[via.0, d.id.0]);
                false
            }
        }
    }

    /// Entry `k` of node `n`'s index, which the index says is `expect`'s
    /// (the table keys it so): taken out to be driven.
    fn entry_at_key(&mut self, n: usize, k: usize, expect: SiteId) -> Box<Peer> {
        let key = self.nodes[n].keys.get(k).copied();
        if let Some(p) = key
            .filter(|key| *key == expect)
            .and_then(|key| self.take_peer(n, key))
        {
            return p;
        }
        let what = format!(
            "{}'s site table names entry {k} for {expect}, which its table holds as {key:?}",
            self.nodes[n].id
        );
        self.violation(what);
        // Go on with a fresh machine until the run stops at this step.
        let book = AddressBook::default();
        self.new_entry(n, expect, k, book, None)
    }

    /// A new entry of node `n`: keyed `peer` in its table, `key` in its
    /// index.
    fn new_entry(
        &mut self,
        n: usize,
        peer: SiteId,
        key: usize,
        book: AddressBook,
        address: Option<Arc<str>>,
    ) -> Box<Peer> {
        let seed = self.rand_u64();
        let now = self.instant();
        let node = &mut self.nodes[n];
        node.next_opener += 1;
        node.table_changed = true;
        let mut com = ComObject::new(
            node.cfg.clone(),
            node.budget.clone(),
            node.id,
            book,
            node.next_opener,
            seed,
            now,
        );
        if !unbound(peer) {
            if let Some(c) = node.pairs.take(peer) {
                com.recall(c);
            }
        }
        Box::new(Peer {
            out: Default::default(),
            queued: Vec::new(),
            drain_armed: false,
            adopting: 0,
            com,
            parked: None,
            armed: None,
            slot: Slot::None,
            opening: None,
            live: None,
            reclaim: false,
            last_send: None,
            key,
            address,
        })
    }

    /// Unbound entry `peer` of node `n` connected to its address and found
    /// site `id` (its handshake said so, whether or not it then opened: on
    /// `conn`). Bound: it goes on under `id`, returned. If the node has an
    /// entry with `id` already, this one merges into it and is gone
    /// (`None`); `conn` is closed, as the runtime drops the transport.
    pub(crate) fn found(
        &mut self,
        n: usize,
        peer: SiteId,
        mut p: Box<Peer>,
        id: SiteId,
        conn: (u64, usize),
    ) -> Option<(SiteId, Box<Peer>)> {
        let node = &mut self.nodes[n];
        node.table_changed = true;
        let site = Site {
            key: p.key,
            id: None,
            address: p.address.as_ref(),
        };
        let into = match node.index.bind(site, id) {
            Bind::Same | Bind::Bound => {
                node.keys[p.key] = id;
                node.aliases.insert(peer, id);
                if let Slot::Waiting(t) = p.slot {
                    node.waiters.insert(t, id);
                }
                // Its waiting senders are known by its key too.
                if node.out.waiters.remove(&peer) {
                    node.out.waiters.insert(id);
                }
                // Its timer event names the stand-in: armed again under
                // the id when it is put back.
                p.armed = None;
                self.counts.bound += 1;
                self.trace(n, "bound", &[peer.0, id.0]);
                return Some((id, p));
            }
            Bind::MergeInto(k) => {
                let into = node.keys[k];
                node.aliases.insert(peer, into);
                into
            }
        };
        self.counts.merges += 1;
        self.trace(n, "merge", &[peer.0, into.0]);
        self.close_end(conn.0, conn.1, Seg::Fin);
        let now = self.instant();
        let Some(mut t) = self.take_peer(n, into) else {
            let what = format!(
                "{}'s site table merges into a missing entry",
                self.nodes[n].id
            );
            self.violation(what);
            return None;
        };
        if t.state() == ComState::Failed {
            // That incarnation failed here permanently: it stays failed,
            // and so does this reference to it; its messages are handed
            // back now (the runtime's `merge_into` kills it).
            self.put_back(n, into, t);
            p.com.kill(now);
            self.drive_peer(n, peer, &mut p);
            self.put_back(n, peer, p);
            return None;
        }
        // What this entry holds is older than anything sent through the
        // other from now on; it goes after what the other holds already.
        let older = p.com.merge_out();
        // Their bytes go with them (the runtime's `move_bytes_to`).
        if let Err(e) = self.nodes[n].out.move_bytes(&mut p.out, &mut t.out, &older) {
            self.violation(e);
        }
        self.drive_peer(n, peer, &mut p);
        if self.cfg.outbox_queue {
            // As the runtime's `Outbox::seal_into`: what the machine held,
            // then what its queue held, in front of the other's queue.
            let mine: Vec<_> = p.queued.iter().map(|w| w.msg.clone()).collect();
            if let Err(e) = self.nodes[n].out.move_bytes(&mut p.out, &mut t.out, &mine) {
                self.violation(e);
            }
            let mut held = Vec::with_capacity(older.len());
            for msg in older {
                let Some(id) = crate::envelope::message_id(msg.kind, &msg.header) else {
                    self.violation(format!("a merged message has no envelope: {msg:?}"));
                    continue;
                };
                let to = self.oracle.named(id).unwrap_or(into);
                held.push(Waiting { msg, id, to });
            }
            merge_line(held, &mut p.queued, &mut t.queued);
            self.arm_drain(n, into, &mut t);
        } else {
            for m in older {
                if let Err(refused) = t.com.queue(m) {
                    let (err, m) = *refused;
                    let maybe = err.handed_back() == HandedBack::MaybeDelivered;
                    if let Err(e) = self.nodes[n].out.release_msg(&mut t.out, &m) {
                        self.violation(e);
                    }
                    self.handed_back(n, into, &m, maybe);
                }
            }
        }
        // Its waiting senders follow the redirect: behind the other's, in
        // their order (see `outbox`).
        let out = &mut self.nodes[n].out;
        for (_, w) in out.leave(peer, &mut p.out) {
            out.join(into, &mut t.out, w);
        }
        self.room_freed(n);
        // The application's reference follows the messages.
        if let Some(at) = p.last_send {
            t.com.set_has_refs(true, now);
            t.last_send = Some(t.last_send.map_or(at, |s| s.max(at)));
        }
        self.drive_peer(n, into, &mut t);
        self.put_back(n, into, t);
        self.forget(n, peer, &p);
        None
    }

    /// The reclaim re-check for entry `peer` of node `n`, which nothing of
    /// the driver's holds any more but the accepted channels on their way
    /// to it: forgotten (true), it leaves the index (its id, its own
    /// address and its aliases, never another entry's); kept (false) while
    /// a channel is on its way.
    pub(crate) fn forget(&mut self, n: usize, peer: SiteId, p: &Peer) -> bool {
        if p.out.bytes() > 0 || p.out.waiting() {
            let what = format!(
                "{} forgot its entry for {peer} holding {} output bytes{}",
                self.nodes[n].id,
                p.out.bytes(),
                if p.out.waiting() {
                    " with senders waiting"
                } else {
                    ""
                }
            );
            self.violation(what);
            return true;
        }
        let node = &mut self.nodes[n];
        node.table_changed = true;
        let site = Site {
            key: p.key,
            id: (!unbound(peer)).then_some(peer),
            address: p.address.as_ref(),
        };
        let counts = Counts {
            refs: 0,
            adopting: p.adopting as usize,
            queued: 0,
            current: true,
        };
        match node.index.reclaim(site, counts) {
            Reclaim::Forget { .. } => {
                node.keys.remove(p.key);
                true
            }
            Reclaim::Keep if p.adopting > 0 => false,
            Reclaim::Keep => {
                let what = format!("{}'s site table kept {peer}, which nothing holds", node.id);
                self.violation(what);
                true
            }
        }
    }

    /// Node `n`'s site table agrees with its entries: every key of the
    /// index names an entry, every entry is the index's, and each bound
    /// one is found by its id.
    pub(crate) fn check_site_table(&self, n: usize) -> Result<(), String> {
        let node = &self.nodes[n];
        if node.keys.len() != node.peers.len() {
            return Err(format!(
                "{}'s site table has {} entries for {} ComObjects",
                node.id,
                node.keys.len(),
                node.peers.len()
            ));
        }
        for (k, key) in &node.keys {
            if node.peers.get(key).is_none_or(|p| p.key != k) {
                return Err(format!(
                    "{}'s site table entry {k} ({key}) has no ComObject",
                    node.id
                ));
            }
            if !unbound(*key) && node.index.id(*key) != Some(k) {
                return Err(format!(
                    "{}'s site table does not find {key} by its id",
                    node.id
                ));
            }
        }
        if let Some(k) = node
            .index
            .referenced_keys()
            .find(|k| !node.keys.contains(*k))
        {
            return Err(format!(
                "{}'s site table names entry {k}, which was forgotten",
                node.id
            ));
        }
        Ok(())
    }
}
