//! Cells: a mutable reference with an atomic `exchange`.
//!
//! * **Stationary**: every exchange runs at the home, in the order the
//!   home receives them.
//! * **Mobile** (Mozart's mobile state protocol): the content moves to the
//!   site that exchanges. A site without the content asks the manager
//!   (`Get`); the manager chains the requests: it tells the last requester
//!   (the chain's tail) to pass the content on to the new one (`Forward`)
//!   and makes the new one the tail. A site that receives the content
//!   (`Put`) tells the manager (`Got`), runs its queued exchanges in
//!   order, then passes the content on if told to. The exchanges are
//!   linearizable: the content exists once, and each exchange runs where
//!   it is. A site that holds the content but no longer refers to the cell
//!   gives it back to the manager (`Return`), which passes it to the next
//!   requester or keeps it; `Forward`s that crossed the `Return` are stale
//!   until the manager's `ReturnAck`.
//!
//! Failures: a stationary cell fails with its home. A mobile cell's
//! content is lost (every exchange then fails with `PermFail`) when its
//! home fails, or when a site that holds it or is in the chain to receive
//! it fails for good: the manager cannot tell whether the content reached
//! the next site, so it gives up on it rather than risk two copies.

use std::collections::VecDeque;

use sitenet_protocols::SiteId;

use super::{HomeState, ProxyState, Site};
use crate::entity::{EntityId, Kind, OpId, Value};
use crate::outcome::{Answer, FailMode, OpError};
use crate::wire::{Refused, Wire};

/// A mobile cell's manager, at its home.
#[derive(Debug)]
pub(super) struct Manager {
    /// The last site known to have received the content (`Got`).
    holder: SiteId,
    /// Requesters not yet known to have received it, in chain order.
    chain: VecDeque<SiteId>,
    /// Who the next request is forwarded to (the last requester).
    tail: SiteId,
    lost: bool,
}

impl Manager {
    /// The sites the content is at or on its way to.
    pub(super) fn sites(&self) -> Vec<SiteId> {
        std::iter::once(self.holder)
            .chain(self.chain.iter().copied())
            .collect()
    }

    pub(super) fn new(home: SiteId) -> Manager {
        Manager {
            holder: home,
            chain: VecDeque::new(),
            tail: home,
            lost: false,
        }
    }
}

/// A site's part of a mobile cell (the home has one too).
#[derive(Debug, Default)]
pub(super) struct MobilePart {
    pub(super) content: Option<Value>,
    /// Exchanges waiting for the content, in order.
    pending: VecDeque<(OpId, Value)>,
    /// A `Get` is out and the content will come.
    requested: bool,
    /// Who gets the content once this site is done with it.
    forward_to: Option<SiteId>,
    /// The content went back to the manager; `Forward`s are stale until
    /// its `ReturnAck`.
    returning: bool,
    lost: bool,
}

impl MobilePart {
    pub(super) fn holding(content: Value) -> MobilePart {
        MobilePart {
            content: Some(content),
            ..MobilePart::default()
        }
    }

    /// The proxy must stay (the content is here, coming, or going back).
    pub(super) fn keeps_proxy(&self) -> bool {
        self.content.is_some() || self.requested || self.returning
    }
}

impl Site {
    fn part_mut(&mut self, cell: EntityId) -> Option<&mut MobilePart> {
        if cell.kind != Kind::MobileCell {
            return None;
        }
        if cell.home == self.me {
            match self.homes.get_mut(&cell.serial).map(|h| &mut h.state) {
                Some(HomeState::Mobile { part, .. }) => Some(part),
                _ => None,
            }
        } else {
            match self.proxies.get_mut(&cell).map(|p| &mut p.state) {
                Some(ProxyState::Mobile(part)) => Some(part),
                _ => None,
            }
        }
    }

    fn manager_mut(&mut self, cell: EntityId) -> Option<&mut Manager> {
        if cell.home != self.me || cell.kind != Kind::MobileCell {
            return None;
        }
        match self.homes.get_mut(&cell.serial).map(|h| &mut h.state) {
            Some(HomeState::Mobile { manager, .. }) => Some(manager),
            _ => None,
        }
    }

    pub(super) fn cell_exchange(&mut self, op: OpId, cell: EntityId, new: Value, mode: FailMode) {
        if cell.kind == Kind::StationaryCell {
            if cell.home == self.me {
                let outcome = self.swap_stationary(cell, new);
                self.finish(op, outcome.map(Answer::Value));
                return;
            }
            if let Some(err) = self.refused_by_fault(cell, mode) {
                self.release_value(&new);
                self.finish(op, Err(err));
                return;
            }
            self.post(cell.home, Wire::Exchange { cell, op, new });
            return;
        }
        let here = self.part_mut(cell).map(|p| (p.lost, p.content.is_some()));
        let Some((lost, has_content)) = here else {
            self.release_value(&new);
            self.finish(op, Err(OpError::Gone));
            return;
        };
        if lost {
            self.release_value(&new);
            self.finish(op, Err(OpError::PermFail));
            return;
        }
        if !has_content {
            if let Some(err) = self.refused_by_fault(cell, mode) {
                self.release_value(&new);
                self.finish(op, Err(err));
                return;
            }
        }
        let part = self.part_mut(cell).expect("looked up above");
        part.pending.push_back((op, new));
        self.run_part(cell);
    }

    fn swap_stationary(&mut self, cell: EntityId, new: Value) -> Result<Value, OpError> {
        match self.homes.get_mut(&cell.serial).map(|h| &mut h.state) {
            Some(HomeState::Stationary { content }) if cell.kind == Kind::StationaryCell => {
                Ok(std::mem::replace(content, new))
            }
            _ => {
                self.release_value(&new);
                Err(OpError::Gone)
            }
        }
    }

    pub(super) fn stationary_on_exchange(
        &mut self,
        from: SiteId,
        cell: EntityId,
        op: OpId,
        new: Value,
    ) {
        if cell.home != self.me || cell.kind != Kind::StationaryCell {
            self.release_value(&new);
            return;
        }
        let old = self.swap_stationary(cell, new).map_err(|_| Refused::Gone);
        self.post(from, Wire::Exchanged { cell, op, old });
    }

    /// Runs what a site's part can do now: its queued exchanges if the
    /// content is here, then passing it on; or asking for it.
    fn run_part(&mut self, cell: EntityId) {
        let Some(part) = self.part_mut(cell) else {
            return;
        };
        if part.content.is_none() {
            if !part.pending.is_empty() && !part.requested && !part.lost {
                part.requested = true;
                self.post(cell.home, Wire::Get { cell });
            }
            return;
        }
        let pending = std::mem::take(&mut part.pending);
        for (op, new) in pending {
            let part = self.part_mut(cell).expect("still here");
            let old = part.content.replace(new).expect("the content is here");
            self.finish(op, Ok(Answer::Value(old)));
        }
        let part = self.part_mut(cell).expect("still here");
        if let Some(to) = part.forward_to.take() {
            let content = part.content.take().expect("the content is here");
            self.post(to, Wire::Put { cell, content });
        }
    }

    /// A proxy's last handle went while its part keeps it.
    pub(super) fn part_unheld(&mut self, cell: EntityId) {
        let Some(part) = self.part_mut(cell) else {
            return;
        };
        if part.forward_to.is_none() && part.pending.is_empty() && !part.returning {
            if let Some(content) = part.content.take() {
                part.returning = true;
                self.post(cell.home, Wire::Return { cell, content });
            }
        }
    }

    pub(super) fn part_on_forward(&mut self, cell: EntityId, to: SiteId) {
        let Some(part) = self.part_mut(cell) else {
            return;
        };
        if part.returning || part.lost {
            return;
        }
        part.forward_to = Some(to);
        self.run_part(cell);
    }

    pub(super) fn part_on_put(&mut self, cell: EntityId, content: Value) {
        let accept = self
            .part_mut(cell)
            .is_some_and(|p| p.requested && !p.lost && p.content.is_none());
        if !accept {
            self.release_value(&content);
            return;
        }
        let part = self.part_mut(cell).expect("looked up above");
        part.content = Some(content);
        part.requested = false;
        self.post(cell.home, Wire::Got { cell });
        self.run_part(cell);
        self.recheck_proxy(cell);
    }

    pub(super) fn part_on_return_ack(&mut self, cell: EntityId) {
        if let Some(part) = self.part_mut(cell) {
            part.returning = false;
        }
        self.recheck_proxy(cell);
    }

    pub(super) fn part_on_lost(&mut self, cell: EntityId) {
        let Some(part) = self.part_mut(cell) else {
            return;
        };
        part.lost = true;
        part.requested = false;
        part.returning = false;
        part.forward_to = None;
        let content = part.content.take();
        let pending = std::mem::take(&mut part.pending);
        if let Some(c) = content {
            self.release_value(&c);
        }
        for (op, new) in pending {
            self.release_value(&new);
            self.finish(op, Err(OpError::PermFail));
        }
        self.recheck_proxy(cell);
    }

    /// The home of `e` failed for good.
    pub(super) fn part_home_gone(&mut self, e: EntityId) {
        if e.kind == Kind::MobileCell {
            self.part_on_lost(e);
        }
    }

    /// A proxy whose part changed: look at it again if nothing holds it.
    fn recheck_proxy(&mut self, cell: EntityId) {
        if cell.home != self.me && self.proxies.get(&cell).is_some_and(|p| p.handles == 0) {
            self.unheld.push(cell);
        }
    }

    pub(super) fn manager_on_get(&mut self, from: SiteId, cell: EntityId) {
        if self.is_dead(from) && from != self.me {
            return;
        }
        let Some(m) = self.manager_mut(cell) else {
            if cell.home == self.me {
                self.post(from, Wire::Gone { entity: cell });
            }
            return;
        };
        if m.lost {
            self.post(from, Wire::Lost { cell });
            return;
        }
        let tail = std::mem::replace(&mut m.tail, from);
        m.chain.push_back(from);
        self.post(tail, Wire::Forward { cell, to: from });
    }

    pub(super) fn manager_on_got(&mut self, from: SiteId, cell: EntityId) {
        let Some(m) = self.manager_mut(cell) else {
            return;
        };
        if !m.chain.contains(&from) {
            return;
        }
        while let Some(s) = m.chain.pop_front() {
            if s == from {
                break;
            }
        }
        m.holder = from;
    }

    pub(super) fn manager_on_return(&mut self, from: SiteId, cell: EntityId, content: Value) {
        if cell.home != self.me {
            self.release_value(&content);
            return;
        }
        let me = self.me;
        let next = match self.manager_mut(cell) {
            Some(m) if !m.lost && m.holder == from => {
                if let Some(&next) = m.chain.front() {
                    Some(next)
                } else {
                    m.chain.push_back(me);
                    m.tail = me;
                    Some(me)
                }
            }
            _ => None,
        };
        self.post(from, Wire::ReturnAck { cell });
        match next {
            Some(next) => {
                if next == me {
                    if let Some(part) = self.part_mut(cell) {
                        part.requested = true;
                    }
                }
                self.post(next, Wire::Put { cell, content });
            }
            None => self.release_value(&content),
        }
    }

    /// The content this site passed to `to` never left (handed back
    /// unsent). A site gives it back to the manager, which passes it to
    /// the next site in the chain (that is `to`, reached from the home);
    /// the manager itself declares the content lost.
    pub(super) fn content_undelivered(&mut self, cell: EntityId, to: SiteId, content: Value) {
        if cell.home == self.me {
            self.release_value(&content);
            self.declare_lost(cell, Some(to));
            return;
        }
        let home_alive = !self.is_dead(cell.home);
        match self.part_mut(cell) {
            Some(part) if !part.lost && part.content.is_none() => {
                part.returning = true;
                self.post(cell.home, Wire::Return { cell, content });
            }
            // The proxy went once the content was passed on: the content
            // still goes back (the manager takes it from its last holder).
            None if home_alive => {
                self.post(cell.home, Wire::Return { cell, content });
            }
            _ => self.release_value(&content),
        }
    }

    /// A message about `cell`'s content was handed back as maybe
    /// delivered: the manager declares the content lost (this site, if it
    /// is the manager; else it asks the manager with `MaybeLost`).
    pub(super) fn content_maybe_lost(&mut self, cell: EntityId) {
        if cell.kind != Kind::MobileCell {
            return;
        }
        if cell.home == self.me {
            self.declare_lost(cell, None);
        } else if !self.is_dead(cell.home) {
            self.post(cell.home, Wire::MaybeLost { cell });
        }
    }

    /// A site of the chain, or one that holds the cell, cannot tell where
    /// the content went: the content is declared lost, and the asker told
    /// (even if it was lost already). Anyone else is not heard: it could
    /// not have had the content.
    pub(super) fn manager_on_maybe_lost(&mut self, from: SiteId, cell: EntityId) {
        let listed = cell.home == self.me
            && self
                .homes
                .get(&cell.serial)
                .is_some_and(|h| h.holders.contains(&from) || h.pins.contains_key(&from));
        let Some(m) = self.manager_mut(cell) else {
            return;
        };
        let involved = m.holder == from || m.tail == from || m.chain.contains(&from);
        if !(involved || listed) {
            return;
        }
        self.declare_lost(cell, None);
        self.post(from, Wire::Lost { cell });
    }

    /// The manager gives the content up: every site in the chain (but
    /// `skip`) learns it is lost.
    fn declare_lost(&mut self, cell: EntityId, skip: Option<SiteId>) {
        let Some(m) = self.manager_mut(cell) else {
            return;
        };
        if m.lost {
            return;
        }
        m.lost = true;
        let mut told: Vec<SiteId> = std::iter::once(m.holder).chain(m.chain.drain(..)).collect();
        told.sort();
        told.dedup();
        let me = self.me;
        if !told.contains(&me) {
            told.push(me);
        }
        for s in told {
            if Some(s) != skip {
                self.post(s, Wire::Lost { cell });
            }
        }
    }

    /// Site `site` failed for good: a mobile cell whose content it held or
    /// was to receive is lost.
    pub(super) fn manager_site_gone(&mut self, cell: EntityId, site: SiteId) {
        let Some(m) = self.manager_mut(cell) else {
            return;
        };
        if m.lost || (m.holder != site && !m.chain.contains(&site)) {
            return;
        }
        self.declare_lost(cell, Some(site));
    }
}
