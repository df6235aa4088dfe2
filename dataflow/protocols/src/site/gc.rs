//! Distributed collection: reference counting per holding site.
//!
//! A home counts, for each other site, the copies of a reference that
//! site received minus those it gave back. A site that sends a copy to
//! `to` first tells the home (`Lend`, or the home counts it directly when
//! it is the sender); a site whose last handle on a proxy goes tells the
//! home how many copies it received (`Unlist`). Both messages travel from
//! one site to the home, in order, so a lender's `Lend` always reaches the
//! home before its own `Unlist`: while a copy travels, its sender (or the
//! home) is still counted, and the entity is collected only when no count
//! is left and nothing on the home holds it. An `Unlist` may overtake the
//! `Lend` it answers (they come from different sites): the count goes
//! negative for a while, which also keeps the entity. A site that fails
//! for good holds nothing: its counts go, and later `Lend`s naming it are
//! ignored.

use sitenet_protocols::SiteId;

use super::{HomeState, Proxy, ProxyState, Site, MAX_HOLDERS};
use crate::entity::{EntityId, Kind, Value};
use crate::outcome::{Action, OpError};
use crate::wire::Wire;

use super::cell::MobilePart;
use super::var::VarProxy;

impl Site {
    /// One more handle on `e` here (a typed reference the driver made).
    /// A handle on an entity made elsewhere that this site has no proxy
    /// for makes one (counted by nobody: it sends no `Unlist`).
    pub fn acquire(&mut self, e: EntityId) {
        if e.home == self.me {
            if let Some(h) = self.homes.get_mut(&e.serial).filter(|h| h.kind == e.kind) {
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
            match self.homes.get_mut(&e.serial).filter(|h| h.kind == e.kind) {
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

    /// The driver is about to send a reference to `e` to site `to` inside
    /// a message of its own: counts the copy (call it before the message
    /// goes, while this site holds a handle on `e`).
    pub fn lend(&mut self, e: EntityId, to: SiteId) {
        if e.home == self.me {
            self.count_holder(e, to, 1);
        } else {
            self.post(e.home, Wire::Lend { entity: e, to });
        }
    }

    /// The driver decoded a reference to `e` from another site's message:
    /// one copy received (then [`acquire`](Site::acquire) it for each
    /// typed handle made from it, and call [`Site::settle_now`]).
    pub fn receive(&mut self, e: EntityId) {
        if e.home == self.me {
            // The sender lent it to this site, its home: that count and
            // this one cancel out, whichever arrives first.
            self.count_holder(e, self.me, -1);
        } else {
            self.proxy_entry(e).copies += 1;
        }
    }

    /// Takes `e` from a ticket: a proxy holding one copy, counted by the
    /// home through `Take`, and one handle for the caller.
    pub fn take(&mut self, e: EntityId) {
        if e.home != self.me {
            self.proxy_entry(e).copies += 1;
            self.post(e.home, Wire::Take { entity: e });
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

    pub(super) fn receive_value(&mut self, v: &Value) {
        for &r in &v.refs {
            self.receive(r);
            self.acquire(r);
        }
    }

    fn proxy_entry(&mut self, e: EntityId) -> &mut Proxy {
        if !self.proxies.contains_key(&e) {
            *self.per_home.entry(e.home).or_default() += 1;
        }
        self.proxies.entry(e).or_insert_with(|| Proxy {
            handles: 0,
            copies: 0,
            gone: false,
            state: match e.kind {
                Kind::Var => ProxyState::Var(VarProxy::default()),
                Kind::Port => ProxyState::Port,
                Kind::StationaryCell => ProxyState::Stationary,
                Kind::MobileCell => ProxyState::Mobile(MobilePart::default()),
            },
        })
    }

    fn count_holder(&mut self, e: EntityId, site: SiteId, by: i64) {
        if by > 0 && self.is_dead(site) {
            return;
        }
        let Some(h) = self.homes.get_mut(&e.serial).filter(|h| h.kind == e.kind) else {
            return;
        };
        if !h.holders.contains_key(&site) && h.holders.len() >= MAX_HOLDERS {
            tracing::warn!(entity = ?e, %site, "too many holders; a lend is ignored");
            return;
        }
        let n = h.holders.entry(site).or_default();
        *n = n.saturating_add(by);
        if *n == 0 {
            h.holders.remove(&site);
            if h.holders.is_empty() && h.handles == 0 {
                self.unheld.push(e);
            }
        }
    }

    pub(super) fn on_lend(&mut self, e: EntityId, to: SiteId) {
        if e.home == self.me {
            self.count_holder(e, to, 1);
        }
    }

    pub(super) fn on_take(&mut self, from: SiteId, e: EntityId) {
        if e.home != self.me {
            return;
        }
        if self.homes.get(&e.serial).is_some_and(|h| h.kind == e.kind) {
            self.count_holder(e, from, 1);
        } else {
            self.post(from, Wire::Gone { entity: e });
        }
    }

    pub(super) fn on_unlist(&mut self, from: SiteId, e: EntityId, copies: u64) {
        if e.home != self.me {
            return;
        }
        let copies = i64::try_from(copies).unwrap_or(i64::MAX);
        if let Some(h) = self.homes.get_mut(&e.serial).filter(|h| h.kind == e.kind) {
            if let HomeState::Var(v) = &mut h.state {
                v.registered.retain(|&s| s != from);
            }
        }
        self.count_holder(e, from, -copies);
    }

    pub(super) fn on_gone(&mut self, from: SiteId, e: EntityId) {
        if from != e.home {
            return;
        }
        if let Some(p) = self.proxies.get_mut(&e) {
            p.gone = true;
        }
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
    }

    /// Site `site` failed for good: it holds nothing of ours any more.
    pub(super) fn site_gone(&mut self, site: SiteId) {
        let serials: Vec<u64> = self.homes.keys().copied().collect();
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
            if let HomeState::Var(v) = &mut h.state {
                v.registered.retain(|&s| s != site);
            }
            if h.holders.is_empty() && h.handles == 0 {
                self.unheld.push(e);
            }
            self.manager_site_gone(e, site);
        }
        // What this site holds of entities made there.
        let theirs: Vec<EntityId> = self
            .proxies
            .keys()
            .filter(|e| e.home == site)
            .copied()
            .collect();
        for e in theirs {
            self.part_home_gone(e);
            if self.proxies.get(&e).is_some_and(|p| p.handles == 0) {
                self.unheld.push(e);
            }
        }
    }

    /// An entity whose handles ran out: collect it (made here, no holder
    /// left) or drop the proxy.
    pub(super) fn collect(&mut self, e: EntityId) {
        if e.home == self.me {
            let Some(h) = self.homes.get(&e.serial).filter(|h| h.kind == e.kind) else {
                return;
            };
            if h.handles > 0 || !h.holders.is_empty() {
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
        if p.handles > 0 {
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
        if p.copies > 0 && !self.is_dead(e.home) && !p.gone {
            self.post(
                e.home,
                Wire::Unlist {
                    entity: e,
                    copies: p.copies,
                },
            );
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
