//! Distributed collection: reference listing with an acknowledged
//! hand-off (as Birrell's network objects).
//!
//! A home lists the sites that hold a proxy of its entity (`Dirty` lists,
//! `Clean` unlists). A site that sends a copy of a reference to site X
//! pins the entity for X; X, once the home listed it (`DirtyAck`, or at
//! once if it was listed already or is the home), tells the sender
//! (`Release`), which unpins. A pinned entity is kept like a held one, so
//! while a copy travels its sender stays listed (or is the home): the
//! chain of pins always ends at the home or a listed site, and the entity
//! is collected only when no site is listed, nothing is pinned and nothing
//! on the home holds it. A copy the home sent itself is released by the
//! receiver's `Dirty` (which counts it), with no `Release`.
//!
//! Failures: a site that fails for good is unlisted and its pins go (no
//! entity waits for its `Release`). A copy in flight from a site that
//! fails may arrive after the home collected the entity: its operations
//! then fail with `Gone` — nothing is kept for it.
//!
//! Audits, and failure made mutual: failure detectors disagree. A site
//! that gave a live peer up (its give-up time ran out during a
//! partition) drops what it held of the peer's, and its `Clean`s and
//! `Release`s never leave, while the peer, never told, keeps books for
//! it. A site answers every message from a peer it took for failed with
//! `Forgotten`, and a site told so takes the sender for failed in turn.
//! Each audit round ([`Site::audit`], run by the driver on a timer) asks
//! the quiet sites this one keeps books for, once per entity (`Audit`):
//! one that took it for failed answers `Forgotten`, a listed one that no
//! longer holds the entity `Clean`. Links are FIFO, so an answer follows
//! every `Clean` and `Dirty` its site sent before it: a site whose
//! `Dirty` is still on its way holds the entity and answers nothing.

use std::collections::HashMap;

use sitenet_protocols::SiteId;

use super::{HomeState, Listing, Proxy, ProxyState, Site, MAX_AUDITS, MAX_HOLDERS};
use crate::entity::{EntityId, Kind, Value};
use crate::outcome::{Action, OpError};
use crate::wire::Wire;

use super::cell::MobilePart;
use super::var::VarProxy;

impl Site {
    /// One more handle on `e` here (a typed reference the driver made).
    /// A handle on an entity made elsewhere that this site has no proxy
    /// for makes one (not listed: it sends no `Clean`).
    pub fn acquire(&mut self, e: EntityId) {
        if e.home == self.me {
            if let Some(h) = self.home_mut(e) {
                h.handles += 1;
            }
            return;
        }
        self.proxy_entry(e).handles += 1;
    }

    /// One handle fewer on `e` here: the last one lets the entity go
    /// (collected at its home, or unlisted from it).
    pub fn release(&mut self, e: EntityId) {
        let handles = if e.home == self.me {
            match self.home_mut(e) {
                Some(h) => {
                    h.handles = h.handles.saturating_sub(1);
                    h.handles
                }
                None => return,
            }
        } else {
            match self.proxies.get_mut(&e) {
                Some(p) => {
                    p.handles = p.handles.saturating_sub(1);
                    p.handles
                }
                None => return,
            }
        };
        if handles == 0 {
            self.unheld.push(e);
        }
    }

    /// Gives back the handles a value holds (after the driver decoded an
    /// [`Answer::Value`](crate::Answer::Value), or to drop one).
    pub fn release_value(&mut self, v: &Value) {
        for &r in &v.refs {
            self.release(r);
        }
    }

    /// A copy of the reference to `e` leaves for site `to` (inside a
    /// message of the driver's own): `e` is pinned here until `to`
    /// releases it. Call it before the message goes, while this site holds
    /// a handle on `e`.
    pub fn lend(&mut self, e: EntityId, to: SiteId) {
        if to == self.me || self.is_dead(to) {
            return;
        }
        let Some(pins) = self.pins_mut(e) else {
            return;
        };
        if pins.len() < MAX_HOLDERS || pins.contains_key(&to) {
            *pins.entry(to).or_default() += 1;
        }
    }

    /// The copies of `e` this site pins, by the site they went to.
    fn pins_mut(&mut self, e: EntityId) -> Option<&mut HashMap<SiteId, u64>> {
        if e.home == self.me {
            self.home_mut(e).map(|h| &mut h.pins)
        } else {
            self.proxies.get_mut(&e).map(|p| &mut p.pins)
        }
    }

    /// One copy of `e` sent to `site` is accounted for (released, or it
    /// never left): the last one lets `e` go.
    pub(super) fn unpin(&mut self, e: EntityId, site: SiteId) {
        let Some(pins) = self.pins_mut(e) else { return };
        if let Some(n) = pins.get_mut(&site) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&site);
                self.unheld.push(e);
            }
        }
    }

    /// The driver decoded a reference to `e` that site `from` sent: the
    /// copy is accounted for (this site is listed with the home, then
    /// `from` is released). Then [`acquire`](Site::acquire) it for each
    /// typed handle made from it, and call [`Site::settle_now`].
    pub fn receive(&mut self, e: EntityId, from: SiteId) {
        if from == self.me {
            return;
        }
        if e.home == self.me || self.is_dead(e.home) {
            self.post(from, Wire::Release { entity: e });
            return;
        }
        let p = self.proxy_entry(e);
        if p.gone {
            self.post(from, Wire::Release { entity: e });
            return;
        }
        match p.listed {
            Listing::Yes => self.post(from, Wire::Release { entity: e }),
            Listing::Pending => p.releases.push(from),
            Listing::No => {
                p.listed = Listing::Pending;
                // A copy from the home is released by the `Dirty` itself.
                let home_copies = if from == e.home {
                    1
                } else {
                    p.releases.push(from);
                    0
                };
                self.post(
                    e.home,
                    Wire::Dirty {
                        entity: e,
                        home_copies,
                    },
                );
            }
        }
    }

    /// Takes `e` from a ticket: a proxy listed with the home (`Dirty`),
    /// and one handle for the caller.
    pub fn take(&mut self, e: EntityId) {
        if e.home != self.me && !self.is_dead(e.home) {
            let p = self.proxy_entry(e);
            if p.listed == Listing::No {
                p.listed = Listing::Pending;
                self.post(
                    e.home,
                    Wire::Dirty {
                        entity: e,
                        home_copies: 0,
                    },
                );
            }
        }
        self.acquire(e);
        self.settle();
    }

    /// Runs what handle changes left to do (collection, unlisting). The
    /// operations call it themselves; a driver that only acquired or
    /// released calls it once done.
    pub fn settle_now(&mut self) {
        self.settle();
    }

    pub(super) fn receive_value(&mut self, from: SiteId, v: &Value) {
        for &r in &v.refs {
            self.receive(r, from);
            self.acquire(r);
        }
    }

    fn proxy_entry(&mut self, e: EntityId) -> &mut Proxy {
        if !self.proxies.contains_key(&e) {
            *self.per_home.entry(e.home).or_default() += 1;
        }
        self.proxies.entry(e).or_insert_with(|| Proxy {
            handles: 0,
            listed: Listing::No,
            releases: Vec::new(),
            pins: std::collections::HashMap::new(),
            gone: false,
            state: match e.kind {
                Kind::Var => ProxyState::Var(VarProxy::default()),
                Kind::Port => ProxyState::Port,
                Kind::StationaryCell => ProxyState::Stationary,
                Kind::MobileCell => ProxyState::Mobile(MobilePart::default()),
            },
        })
    }

    pub(super) fn on_dirty(&mut self, from: SiteId, e: EntityId, home_copies: u64) {
        if e.home != self.me || self.is_dead(from) {
            return;
        }
        let listed = match self.home_mut(e) {
            Some(h) if h.holders.len() < MAX_HOLDERS || h.holders.contains(&from) => {
                h.holders.insert(from);
                // The copies this site sent it are accounted for now.
                if let Some(n) = h.pins.get_mut(&from) {
                    *n = n.saturating_sub(home_copies);
                    if *n == 0 {
                        h.pins.remove(&from);
                    }
                }
                true
            }
            Some(_) => {
                tracing::warn!(entity = ?e, %from, "too many holders; a Dirty is refused");
                false
            }
            None => false,
        };
        let reply = if listed {
            Wire::DirtyAck { entity: e }
        } else {
            Wire::Gone { entity: e }
        };
        self.post(from, reply);
    }

    pub(super) fn on_dirty_ack(&mut self, from: SiteId, e: EntityId) {
        if from != e.home {
            return;
        }
        let Some(p) = self.proxies.get_mut(&e) else {
            return;
        };
        if p.listed != Listing::Pending {
            return;
        }
        let unheld = p.handles == 0;
        self.listing_settled(e, Listing::Yes);
        if unheld {
            self.unheld.push(e);
        }
    }

    /// The proxy of `e` is listed now, or never will be (`No`): the
    /// senders of copies that waited for its listing are released.
    fn listing_settled(&mut self, e: EntityId, listed: Listing) {
        let Some(p) = self.proxies.get_mut(&e) else {
            return;
        };
        p.listed = listed;
        let releases = std::mem::take(&mut p.releases);
        for s in releases {
            self.post(s, Wire::Release { entity: e });
        }
    }

    /// Unlists `from`. A variable's registration of `from` stays: the
    /// `Clean` may come from a proxy that went just as a binding naming
    /// the variable made a new one, which counts on the registration (at
    /// worst the binding reaches a site with no proxy, which drops it).
    pub(super) fn on_clean(&mut self, from: SiteId, e: EntityId) {
        if let Some(h) = self.home_mut(e) {
            h.holders.remove(&from);
            self.unheld.push(e);
        }
    }

    /// One audit round: each site this site heard nothing from since the
    /// last round and keeps books for — listed as holding an entity made
    /// here, pinned for, holding or waiting for a mobile cell's content
    /// made here, or home of an entity an operation here waits on — is
    /// asked, per entity (at most [`MAX_AUDITS`] questions; a round
    /// that stops there starts the next where it stopped). The driver runs
    /// it on a timer; the period bounds how long books outlive a peer that
    /// took this site for failed while it stayed up.
    pub fn audit(&mut self) {
        let heard = std::mem::take(&mut self.heard);
        let mut serials: Vec<u64> = self.homes.keys().copied().collect();
        serials.sort_unstable();
        let start = serials.partition_point(|&s| s < self.audit_from);
        self.audit_from = 0;
        let mut budget = MAX_AUDITS;
        for i in 0..serials.len() {
            let serial = serials[(start + i) % serials.len()];
            let Some(h) = self.homes.get(&serial) else {
                continue;
            };
            let e = EntityId {
                home: self.me,
                serial,
                kind: h.kind,
            };
            // Listed, pinned for, or (a mobile cell's) holding the
            // content or waiting for it.
            let chain = match &h.state {
                HomeState::Mobile { manager, .. } => manager.sites(),
                _ => Vec::new(),
            };
            let mut quiet: Vec<SiteId> = h
                .holders
                .iter()
                .chain(h.pins.keys())
                .chain(chain.iter())
                .filter(|s| **s != self.me && !heard.contains(s) && !self.is_dead(**s))
                .copied()
                .collect();
            quiet.sort_unstable();
            quiet.dedup();
            if quiet.len() > budget && budget < MAX_AUDITS {
                self.audit_from = serial;
                break;
            }
            budget = budget.saturating_sub(quiet.len());
            for s in quiet {
                self.post(s, Wire::Audit { entity: e });
            }
        }
        // Proxies: the sites their copies are pinned for, and the home of
        // an entity an operation here waits on, if quiet.
        let mut asks: Vec<(SiteId, EntityId)> = Vec::new();
        for (&e, p) in &self.proxies {
            asks.extend(p.pins.keys().map(|&s| (s, e)));
        }
        asks.extend(
            self.ops
                .values()
                .map(|p| p.entity)
                .filter(|e| e.home != self.me)
                .map(|e| (e.home, e)),
        );
        asks.retain(|(s, _)| !heard.contains(s) && !self.is_dead(*s));
        asks.sort_unstable();
        asks.dedup();
        for (s, e) in asks.into_iter().take(budget) {
            self.post(s, Wire::Audit { entity: e });
        }
    }

    /// An audit question about `e` from `from`. A site this one took for
    /// failed is told so (`Forgotten`). The home asking: a site that no
    /// longer holds `e` answers `Clean` (a proxy whose `Dirty` waits for
    /// its `DirtyAck` holds it). Anything else needs no answer.
    pub(super) fn on_audit(&mut self, from: SiteId, e: EntityId) {
        if self.is_dead(from) {
            self.post(from, Wire::Forgotten { entity: e });
            return;
        }
        if e.home == from {
            let held = self
                .proxies
                .get(&e)
                .is_some_and(|p| !p.gone && p.listed != Listing::No);
            if !held {
                self.post(from, Wire::Clean { entity: e });
            }
        }
    }

    /// `from` took this site for failed for good: this site does the same
    /// (its operations on `from`'s entities end, its listings and pins
    /// for `from` go).
    pub(super) fn on_forgotten(&mut self, from: SiteId) {
        if !self.is_dead(from) {
            tracing::debug!(site = %self.me, peer = %from, "a peer took this site for failed: taking it for failed too");
            self.site_fault(from, sitenet_protocols::FaultState::PermFailed);
        }
    }

    pub(super) fn on_release(&mut self, from: SiteId, e: EntityId) {
        self.unpin(e, from);
    }

    pub(super) fn on_gone(&mut self, from: SiteId, e: EntityId) {
        if from != e.home {
            return;
        }
        if let Some(p) = self.proxies.get_mut(&e) {
            p.gone = true;
        }
        self.listing_settled(e, Listing::No);
        let mut ended: Vec<_> = self
            .ops
            .iter()
            .filter(|(_, p)| p.entity == e)
            .map(|(&op, _)| op)
            .collect();
        ended.sort();
        for op in ended {
            self.finish(op, Err(OpError::Gone));
        }
        // A mobile cell's part waits for nothing any more.
        if e.kind == Kind::MobileCell {
            self.part_on_lost(e);
        }
        self.unheld.push(e);
    }

    /// Site `site` failed for good: it holds nothing of ours any more, and
    /// nothing here waits for it.
    pub(super) fn site_gone(&mut self, site: SiteId) {
        // In a fixed order: what this posts must not depend on a hash
        // seed (a simulated run replays exactly).
        let mut serials: Vec<u64> = self.homes.keys().copied().collect();
        serials.sort_unstable();
        for serial in serials {
            let Some(h) = self.homes.get_mut(&serial) else {
                continue;
            };
            let e = EntityId {
                home: self.me,
                serial,
                kind: h.kind,
            };
            h.holders.remove(&site);
            h.pins.remove(&site);
            if let HomeState::Var(v) = &mut h.state {
                v.registered.retain(|&s| s != site);
            }
            self.unheld.push(e);
            self.manager_site_gone(e, site);
        }
        let mut ids: Vec<EntityId> = self.proxies.keys().copied().collect();
        ids.sort_unstable();
        for e in ids {
            let mut pending = false;
            if let Some(p) = self.proxies.get_mut(&e) {
                p.pins.remove(&site);
                p.releases.retain(|&s| s != site);
                pending = p.listed == Listing::Pending;
            }
            if e.home == site && pending {
                // No home to list with: let the senders go. (A listed
                // proxy still says `Clean` when it goes: a site given up
                // on may be up, and talk again.)
                self.listing_settled(e, Listing::No);
            }
            if e.home == site {
                self.part_home_gone(e);
            }
            self.unheld.push(e);
        }
    }

    /// An entity whose handles or pins may have run out: collect it (made
    /// here, nothing listed or pinned) or drop the proxy.
    pub(super) fn collect(&mut self, e: EntityId) {
        if e.home == self.me {
            let Some(h) = self.homes.get(&e.serial).filter(|h| h.kind == e.kind) else {
                return;
            };
            if h.handles > 0 || !h.holders.is_empty() || !h.pins.is_empty() {
                return;
            }
            let h = self.homes.remove(&e.serial).expect("looked up above");
            shrink(&mut self.homes);
            self.actions.push_back(Action::Reclaimed { entity: e });
            match h.state {
                HomeState::Var(v) => {
                    if let Some(value) = v.value {
                        self.release_value(&value);
                    }
                }
                HomeState::Port { tail } => self.release(tail),
                HomeState::Stationary { content } => self.release_value(&content),
                HomeState::Mobile { part, .. } => {
                    if let Some(content) = part.content {
                        self.release_value(&content);
                    }
                }
            }
            return;
        }
        let Some(p) = self.proxies.get(&e) else {
            return;
        };
        if p.handles > 0 || !p.pins.is_empty() || p.listed == Listing::Pending {
            return;
        }
        if let ProxyState::Mobile(part) = &p.state {
            if part.keeps_proxy() {
                // The content must go back before the proxy can.
                self.part_unheld(e);
                return;
            }
        }
        let p = self.proxies.remove(&e).expect("looked up above");
        shrink(&mut self.proxies);
        if p.listed == Listing::Yes && !p.gone {
            self.post(e.home, Wire::Clean { entity: e });
        }
        match p.state {
            ProxyState::Var(v) => {
                if let Some(value) = v.value {
                    self.release_value(&value);
                }
            }
            ProxyState::Mobile(part) => {
                if let Some(content) = part.content {
                    self.release_value(&content);
                }
            }
            ProxyState::Port | ProxyState::Stationary => {}
        }
        if let Some(n) = self.per_home.get_mut(&e.home) {
            *n -= 1;
            if *n == 0 {
                self.per_home.remove(&e.home);
                shrink(&mut self.per_home);
                self.actions.push_back(Action::HomeUnused { site: e.home });
            }
        }
    }
}

/// Gives a map's memory back once it is mostly empty, so a burst of
/// short-lived entities leaves the site where it started.
fn shrink<K: std::hash::Hash + Eq, V>(m: &mut std::collections::HashMap<K, V>) {
    if m.capacity() > 64 && m.len() * 4 < m.capacity() {
        m.shrink_to(m.len() * 2);
    }
}
