//! A site's channel slots in the simulator: grants and releases, the
//! preemption tick, and the waiting line as the runtime's
//! accept path drives it (`runtime/src/node/line.rs`): an accepted
//! connection whose peer presented itself while every slot was in use is
//! told to wait and parked on its handshake rings in the slot table's
//! line, and handed to its site's ComObject when its turn comes; the
//! initiator's ComObject waits with its give-up deadline.

use std::time::Duration;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::handshake::{write_wait, Negotiate, Nonce, Wait};
use sitenet_protocols::slots::{Accepted, ChannelReport};
use sitenet_protocols::wire::version::Capabilities;

use crate::net::{Role, Seg};
use crate::peer::Slot;
use crate::{Ev, Sim};

impl Sim {
    /// The accepted connection `c` (end `e`) of node `m` presented itself
    /// with `neg`: a slot, a place in line, or refused.
    pub(crate) fn adopt_or_wait(
        &mut self,
        m: usize,
        c: u64,
        e: usize,
        neg: Negotiate,
        nonce: Nonce,
    ) {
        let now = self.instant();
        let can_wait = neg.caps.contains(Capabilities::LINE).then_some(neg.site);
        let served = self.nodes[m].peers.get(&neg.site).map_or(0, |p| p.served());
        match self.nodes[m].slots.accept_or_wait(now, can_wait, served) {
            Accepted::Slot(holder) => self.adopt(m, (c, e), &neg, nonce, holder),
            Accepted::Refused => {
                self.counts.accepts_refused += 1;
                self.close_end(c, e, Seg::Fin);
            }
            Accepted::Wait {
                ticket,
                position,
                replaced,
                evicted,
            } => {
                let site = neg.site;
                self.counts.line_waits += 1;
                self.trace(m, "line_wait", &[neg.site.0, c as u128, position as u128]);
                if let Some((oc, oe)) = replaced.and_then(|t| self.nodes[m].line.remove(&t)) {
                    // The same site's older connection, which it gave up.
                    self.close_end(oc, oe, Seg::Fin);
                }
                if let Some((oc, oe)) = evicted.and_then(|t| self.nodes[m].line.remove(&t)) {
                    // Another source's place, dropped to make room.
                    let other = self.in_line_site(oc, oe);
                    self.close_end(oc, oe, Seg::Fin);
                    if let Some(other) = other {
                        self.peer_in_line(m, other, false);
                    }
                }
                let hold = self.nodes[m].slots.config().line_hold;
                let wait = Wait {
                    position: u32::try_from(position).unwrap_or(u32::MAX),
                    hold_ms: u32::try_from(hold.as_millis()).unwrap_or(u32::MAX),
                };
                let conn = self.conns.get_mut(&c).expect("still open");
                let end = &mut conn.ends[e];
                if !write_wait(&mut end.outb, &wait) {
                    return self.violation("a WAIT frame does not fit a handshake ring".into());
                }
                end.role = Role::InLine {
                    neg: Box::new(neg),
                    nonce,
                    ticket,
                };
                self.nodes[m].line.insert(ticket, (c, e));
                self.send_out(c, e);
                self.peer_in_line(m, site, true);
                if replaced.is_some() {
                    self.peer_in_line(m, site, false);
                }
            }
        }
        self.rearm_slots(m);
    }

    /// A connection of `site` joined or left node `m`'s line: its
    /// ComObject there, if any, is told (as the runtime's accept path
    /// tells it: the site is calling, not to be given up or forgotten).
    pub(crate) fn peer_in_line(&mut self, m: usize, site: SiteId, waiting: bool) {
        if let Some(mut p) = self.take_peer(m, site) {
            p.com.set_peer_in_line(waiting, self.instant());
            self.drive_peer(m, site, &mut p);
            self.put_back(m, site, p);
        }
    }

    /// A slot freed for the entry `ticket` of node `m`'s line, as `holder`:
    /// its connection is adopted; gone meanwhile, the slot goes back.
    pub(crate) fn on_line_turn(&mut self, m: usize, ticket: u64, holder: u64) {
        self.nodes[m].turning.remove(&ticket);
        let Some((c, e)) = self.nodes[m].line.remove(&ticket) else {
            return self.release_slot(m, holder);
        };
        let Some(conn) = self.conns.get_mut(&c) else {
            return self.release_slot(m, holder);
        };
        // Set aside as open (not `Closed`): the adoption may refuse and
        // close it, and closing a closed end gives no slot back.
        let role = std::mem::replace(&mut conn.ends[e].role, Role::NotYet);
        let Role::InLine { neg, nonce, .. } = role else {
            conn.ends[e].role = role;
            return self.release_slot(m, holder);
        };
        self.counts.line_grants += 1;
        self.trace(m, "line_grant", &[neg.site.0, c as u128]);
        self.peer_in_line(m, neg.site, false);
        self.adopt(m, (c, e), &neg, nonce, holder);
    }

    /// Entries of node `m`'s line whose hold time is over: closed.
    pub(crate) fn line_expired(&mut self, m: usize, tickets: &[u64]) {
        for t in tickets {
            if let Some((c, e)) = self.nodes[m].line.remove(t) {
                self.trace(m, "line_expired", &[*t as u128, c as u128]);
                let site = self.in_line_site(c, e);
                self.close_end(c, e, Seg::Fin);
                if let Some(site) = site {
                    self.peer_in_line(m, site, false);
                }
            }
        }
    }

    /// The site whose connection `c` (end `e`) waits in line, if it does.
    pub(crate) fn in_line_site(&self, c: u64, e: usize) -> Option<SiteId> {
        match &self.conns.get(&c)?.ends[e].role {
            Role::InLine { neg, .. } => Some(neg.site),
            _ => None,
        }
    }

    /// Node `n`'s open attempt to `peer` on connection `c` was told to wait
    /// in the peer's line: its ComObject waits with its give-up deadline.
    pub(crate) fn told_to_wait(
        &mut self,
        n: usize,
        peer: SiteId,
        (attempt, c): (u64, u64),
        w: Wait,
    ) {
        let now = self.instant();
        let Some(mut p) = self.take_peer(n, peer) else {
            return;
        };
        if p.opening == Some((attempt, c)) {
            self.trace(n, "told_to_wait", &[peer.0, c as u128]);
            p.com
                .open_waiting(attempt, Duration::from_millis(w.hold_ms.into()), now);
            self.drive_peer(n, peer, &mut p);
        }
        self.put_back(n, peer, p);
    }

    /// Slot `h` of node `n` is free; the first in line gets one.
    pub(crate) fn release_slot(&mut self, n: usize, h: u64) {
        let now = self.instant();
        let node = &mut self.nodes[n];
        node.holders.remove(&h);
        let mut freed = node.slots.release(h, now);
        while let Some((ticket, holder)) = freed {
            let inc = node.incarnation;
            if let Some(peer) = node.waiters.remove(&ticket) {
                let ev = Ev::Grant {
                    node: n,
                    inc,
                    peer,
                    holder,
                };
                self.at(self.now, ev);
                break;
            }
            if node.line.contains_key(&ticket) {
                node.turning.insert(ticket);
                let ev = Ev::LineTurn {
                    node: n,
                    inc,
                    ticket,
                    holder,
                };
                self.at(self.now, ev);
                break;
            }
            freed = node.slots.release(holder, now);
        }
        self.rearm_slots(n);
    }

    /// The slot a site waited for.
    pub(crate) fn on_grant(&mut self, n: usize, peer: SiteId, holder: u64) {
        let Some(mut p) = self.take_peer(n, peer) else {
            return self.release_slot(n, holder);
        };
        if matches!(p.slot, Slot::Waiting(_)) {
            p.slot = Slot::Granted(holder);
            if let Some(c) = self.nodes[n].pairs.take(peer) {
                p.com.recall(c);
            }
            p.com.slot_granted();
            self.drive_peer(n, peer, &mut p);
        } else {
            self.release_slot(n, holder);
        }
        self.put_back(n, peer, p);
    }

    /// Keeps one timer event at node `n`'s slot table's deadline, as the
    /// controller's tick thread waits for it.
    pub(crate) fn rearm_slots(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        // A deadline already past fires now, and is armed as now: the
        // event checks it fires at the armed time (else it is stale).
        let at = node
            .slots
            .poll_timeout()
            .map(|i| i.saturating_duration_since(self.t0).max(self.now));
        if at != node.slot_armed {
            node.slot_armed = at;
            if let Some(t) = at {
                let inc = node.incarnation;
                self.at(t, Ev::SlotTimer { node: n, inc });
            }
        }
    }

    /// The preemption tick of node `n`.
    pub(crate) fn on_slot_timer(&mut self, n: usize) {
        let now = self.instant();
        self.nodes[n].slot_armed = None;
        let node = &mut self.nodes[n];
        let (slots, peers, holders, conns) =
            (&mut node.slots, &node.peers, &node.holders, &self.conns);
        let tick = slots.handle_timeout(now, |h| {
            let (c, e) = holders.get(&h)?;
            let end = &conns.get(c)?.ends[*e];
            let peer = match end.role {
                Role::Working { peer, .. } => peer,
                // Our attempt, told to wait in the peer's line: a holder
                // that moves nothing, which the table may take back.
                Role::Initiator { peer, .. } => {
                    let p = peers.get(&peer)?;
                    let ours = p.opening == Some((p.com.opening()?, *c));
                    return p.com.line_wait_report().filter(|_| ours);
                }
                _ => return None,
            };
            let p = peers.get(&peer)?;
            let s = p.com.session();
            Some(ChannelReport {
                closeable: p.com.state()
                    == sitenet_protocols::connection::com_object::ComState::Working,
                last_active: p.com.last_activity(),
                mid_message: s.mid_message(),
                replies_expected: p.com.awaiting_replies(),
                buffers_empty: end.inb.is_empty() && end.outb.is_empty(),
                queues_empty: s.queued_bytes() == 0,
                callable: p.com.addresses().can_open(),
                served: s.stats_ref().served(),
                served_from: None,
                in_peer_line_since: None,
                line_yields: 0,
            })
        });
        self.line_expired(n, &tick.expired);
        for (h, _) in tick.victims {
            let peer = self.nodes[n].holders.get(&h).and_then(|(c, e)| {
                match self.conns.get(c)?.ends[*e].role {
                    Role::Working { peer, .. } | Role::Initiator { peer, .. } => Some(peer),
                    _ => None,
                }
            });
            if let Some(peer) = peer {
                if let Some(mut p) = self.take_peer(n, peer) {
                    if p.com.close_hard(now) {
                        self.counts.preemptions += 1;
                        self.trace(n, "preempt", &[peer.0]);
                    } else if p.com.leave_peer_line(now) {
                        self.counts.preemptions += 1;
                        self.counts.line_yields += 1;
                        self.trace(n, "leave_line", &[peer.0]);
                    }
                    self.drive_peer(n, peer, &mut p);
                    self.put_back(n, peer, p);
                }
            }
        }
        self.rearm_slots(n);
    }
}
