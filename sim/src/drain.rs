//! The simulator's outbox queue, on the node's side: a send with room goes
//! into its entry's ComObject now or, with
//! [`SimConfig::outbox_queue`](crate::SimConfig::outbox_queue), waits in the
//! entry's queue until a drain event (the runtime's wake through the actor's
//! mailbox). The bounds and lines it applies are [`crate::outbox`]'s.

use std::time::Duration;

use rand::Rng;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::output_share::CLASSES;

use crate::outbox::{Waiting, MAILBOX_HOP_NS};
use crate::peer::{resolve, Peer};
use crate::{Ev, Sim};

impl Sim {
    /// A send with its bytes reserved goes into entry `key`'s ComObject
    /// now, or (with [`SimConfig::outbox_queue`](crate::SimConfig::outbox_queue))
    /// into its outbox queue, which the machine takes on its next turn: a
    /// drain event soon after (the runtime's wake through the actor's
    /// mailbox), scheduled by the push that finds the queue unwatched.
    pub(crate) fn enqueue(&mut self, n: usize, key: SiteId, p: &mut Peer, w: Waiting) {
        if !self.cfg.outbox_queue {
            return self.queue_out(n, p, w.msg, w.id, w.to);
        }
        p.queued.push(w);
        self.arm_drain(n, key, p);
    }

    /// Schedules entry `key`'s drain if something is queued and none is.
    pub(crate) fn arm_drain(&mut self, n: usize, key: SiteId, p: &mut Peer) {
        if p.drain_armed || p.queued.is_empty() {
            return;
        }
        p.drain_armed = true;
        let hop = Duration::from_nanos(self.rng.gen_range(0..=MAILBOX_HOP_NS));
        let inc = self.nodes[n].incarnation;
        self.at(
            self.now + hop,
            Ev::Drain {
                node: n,
                inc,
                peer: key,
            },
        );
    }

    /// Entry `peer`'s ComObject at node `n` takes its outbox queue (its key
    /// may have become another's since: a stand-in bound to its site, or
    /// an entry merged into another).
    pub(crate) fn drain(&mut self, n: usize, peer: SiteId) {
        let key = resolve(&self.nodes[n].aliases, peer);
        let Some(mut p) = self.take_peer(n, key) else {
            return;
        };
        p.drain_armed = false;
        for w in std::mem::take(&mut p.queued) {
            self.queue_out(n, &mut p, w.msg, w.id, w.to);
        }
        self.drive_peer(n, key, &mut p);
        self.put_back(n, key, p);
    }

    /// Bytes were given back at node `n`: its waiting senders are tried
    /// once the event's work is done (as a release wakes the runtime's).
    pub(crate) fn room_freed(&mut self, n: usize) {
        if !self.nodes[n].out.waiters.is_empty() {
            self.serve.insert(n);
        }
    }

    /// Request `corr` of node `n` ended (its deadline) while its message
    /// may still wait for room: the runtime's requester stops waiting and
    /// gives its turn up, so the message never goes.
    pub(crate) fn give_up_waiting(&mut self, n: usize, corr: u64) {
        let node = &mut self.nodes[n];
        if node.out.waiters.is_empty() {
            return;
        }
        let (out, peers) = (&mut node.out, &mut node.peers);
        let keys: Vec<SiteId> = out.waiters.iter().copied().collect();
        let Some(w) = keys.into_iter().find_map(|key| {
            let p = peers.get_mut(&key)?;
            out.give_up(key, &mut p.out, corr)
        }) else {
            return;
        };
        self.counts.sends_given_up += 1;
        self.trace(n, "send_given_up", &[w.id as u128]);
        if let Err(e) = self.oracle.given_up(w.id) {
            return self.violation(e);
        }
        // The next in line may have room now.
        self.serve.insert(n);
    }

    /// Serves node `n`'s waiting senders whose turn has room, entry by
    /// entry in the order of their keys, each class's line in its order.
    pub(crate) fn serve_waiting(&mut self, n: usize) {
        let keys: Vec<SiteId> = self.nodes[n].out.waiters.iter().copied().collect();
        for key in keys {
            let Some(mut p) = self.take_peer(n, key) else {
                let what = format!(
                    "{} has senders waiting at an entry for {key} it does not have",
                    self.nodes[n].id
                );
                return self.violation(what);
            };
            let mut served = false;
            for class in 0..CLASSES {
                while let Some(w) = self.nodes[n].out.serve(&mut p.out, class) {
                    self.trace(n, "send_go", &[w.id as u128, class as u128]);
                    // The sender held its reference while it waited.
                    p.last_send = Some(self.now);
                    self.enqueue(n, key, &mut p, w);
                    served = true;
                }
            }
            if !p.out.waiting() {
                self.nodes[n].out.waiters.remove(&key);
            }
            if served {
                self.drive_peer(n, key, &mut p);
            }
            self.put_back(n, key, p);
        }
    }
}
