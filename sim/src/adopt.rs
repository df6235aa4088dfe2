//! The accepted channel's way to its site's ComObject (with
//! [`SimConfig::adopt_hop`](crate::SimConfig::adopt_hop)): the runtime's
//! accept path routes the channel to an entry under its table's lock,
//! counts it there as on its way (`SiteEntry::adopting`), and sends it to
//! the entry's actor as an `Adopt` message, which the actor takes on a
//! later turn. Between the two the entry's machine goes on: it may open a
//! channel of its own (the link decision then settles which one stays),
//! fire its reclaim rule (the table's re-check keeps the entry while a
//! channel is on its way), park, fail; the channel's peer may give up and
//! close. The simulator routes at once, counts the channel on its entry,
//! and adopts it in an event up to the mailbox hop later; the audit checks
//! each entry's count against the channels on their way to it.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;

use crate::net::Role;
use crate::Sim;
use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::handshake::{Negotiate, Nonce};

/// Longest time an accepted channel spends on its way to its entry's
/// ComObject (the runtime's `Adopt` message waits in the actor's mailbox
/// behind what the actor is doing: the same bound as the outbox queue's
/// wake).
const MAILBOX_HOP_NS: u64 = 5_000_000;

/// An accepted channel on its way to its entry's ComObject.
pub(crate) struct OnItsWay {
    /// The connection and its end at this node.
    conn: (u64, usize),
    /// The entry it was routed to.
    key: SiteId,
    neg: Box<Negotiate>,
    nonce: Nonce,
    /// The slot it holds.
    holder: u64,
}

/// The channels on their way at one node, by number.
#[derive(Default)]
pub(crate) struct Adopting {
    next: u64,
    on_way: BTreeMap<u64, OnItsWay>,
}

impl Adopting {
    /// The audit's check: each entry counts exactly the channels on their
    /// way to it, and every such entry is there (the reclaim re-check kept
    /// it).
    pub(crate) fn check(&self, peers: &crate::peer::Peers) -> Result<(), String> {
        let mut on_way: BTreeMap<SiteId, u32> = BTreeMap::new();
        for a in self.on_way.values() {
            *on_way.entry(a.key).or_default() += 1;
        }
        for (key, n) in &on_way {
            match peers.get(key) {
                Some(p) if p.adopting == *n => {}
                Some(p) => {
                    return Err(format!(
                        "its entry for {key} counts {} channels on their way, {n} are",
                        p.adopting
                    ))
                }
                None => return Err(format!("{n} channels are on their way to {key}, forgotten")),
            }
        }
        match peers
            .iter()
            .find(|(k, p)| p.adopting > 0 && !on_way.contains_key(k))
        {
            Some((key, p)) => Err(format!(
                "its entry for {key} counts {} channels on their way, none is",
                p.adopting
            )),
            None => Ok(()),
        }
    }
}

impl Sim {
    /// Routes the accepted channel `c` (end `e`, holding slot `holder`) of
    /// node `m` to its entry (made if the node does not know the site),
    /// counts it there, and sends it on its way: [`Sim::on_adopt`] takes
    /// it up to the mailbox hop later.
    pub(crate) fn send_adopt(
        &mut self,
        m: usize,
        (c, e): (u64, usize),
        neg: &Negotiate,
        nonce: Nonce,
        holder: u64,
    ) {
        let peer = neg.site;
        let mut p = self.accepted_entry(m, neg);
        p.adopting += 1;
        self.drive_peer(m, peer, &mut p);
        self.put_back(m, peer, p);
        let Some(conn) = self.conns.get_mut(&c) else {
            return self.violation(format!("accepted connection {c} vanished"));
        };
        let end = &mut conn.ends[e];
        end.role = Role::Adopting;
        end.holder = Some(holder);
        let node = &mut self.nodes[m];
        node.holders.insert(holder, (c, e));
        let id = node.adopting.next;
        node.adopting.next += 1;
        node.adopting.on_way.insert(
            id,
            OnItsWay {
                conn: (c, e),
                key: peer,
                neg: Box::new(neg.clone()),
                nonce,
                holder,
            },
        );
        let inc = node.incarnation;
        let hop = Duration::from_nanos(self.rng.gen_range(0..=MAILBOX_HOP_NS));
        self.trace(m, "adopt_sent", &[peer.0, c as u128]);
        self.at(self.now + hop, crate::Ev::Adopt { node: m, inc, id });
    }

    /// The channel `id` reached its entry's ComObject at node `m`: no
    /// longer counted as on its way, it is adopted there — unless its peer
    /// closed it meanwhile (its slot went back with it).
    pub(crate) fn on_adopt(&mut self, m: usize, id: u64) {
        let Some(a) = self.nodes[m].adopting.on_way.remove(&id) else {
            return;
        };
        match self.nodes[m].peers.get_mut(&a.key) {
            Some(p) if p.adopting > 0 => p.adopting -= 1,
            _ => {
                let what = format!(
                    "{}'s entry for {}, which a channel was on its way to, is gone",
                    self.nodes[m].id, a.key
                );
                return self.violation(what);
            }
        }
        let (c, e) = a.conn;
        let Some(conn) = self.conns.get_mut(&c) else {
            return;
        };
        if !matches!(conn.ends[e].role, Role::Adopting) {
            // Closed on its way (the peer gave up, or reset it).
            return;
        }
        // Set aside as open: the adoption may refuse and close it, and
        // closing it gives its slot back.
        conn.ends[e].role = Role::NotYet;
        self.adopt_now(m, (c, e), &a.neg, a.nonce, a.holder);
    }
}
