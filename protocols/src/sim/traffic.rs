//! The applications' side of the driver: their callbacks, their sends
//! through the ComObjects (every message enveloped with the id the
//! checkers follow it by), deliveries, and the references they hold.

use bytes::Bytes;

use crate::address_book::AddressBook;
use crate::message::{InMessage, OutMessage};
use crate::priority::Priority;
use crate::site::SiteId;

use super::app::{AppCtx, Application};
use super::{envelope_id, Sim, SIM_TYPE};

impl Sim {
    /// The application lets go of the sites it has not sent to for
    /// [`SimConfig::hold_references`] (as a runtime drops its last
    /// `SiteRef`): the linger, weak close and reclaim rules then apply.
    pub(super) fn release_references(&mut self, n: usize) {
        let Some(since) = self.now.checked_sub(self.cfg.hold_references) else {
            return;
        };
        let idle: Vec<SiteId> = self.nodes[n]
            .peers
            .iter()
            .filter(|(_, p)| p.last_send.is_some_and(|t| t <= since))
            .map(|(id, _)| *id)
            .collect();
        for peer in idle {
            let mut p = self.nodes[n].peers.remove(&peer).expect("listed");
            p.last_send = None;
            p.com.set_has_refs(false, self.instant());
            self.trace(n, "unref", &[peer.0]);
            self.drive_peer(n, peer, &mut p);
            self.put_back(n, peer, p);
        }
    }

    /// Calls node `n`'s application; what it sends leaves afterwards.
    pub(super) fn app_call(
        &mut self,
        n: usize,
        f: impl FnOnce(&mut dyn Application, &mut AppCtx<'_>),
    ) {
        let node = &mut self.nodes[n];
        let mut out = Vec::new();
        let mut ctx = AppCtx {
            me: node.id,
            now: self.now,
            sites: &self.directory,
            rng: &mut self.rng,
            out: &mut out,
        };
        f(node.app.as_mut(), &mut ctx);
        let inc = node.incarnation;
        self.sends
            .extend(out.into_iter().map(|(to, p, b)| (n, inc, to, p, b)));
    }

    pub(super) fn run_sends(&mut self) {
        while !self.sends.is_empty() {
            for (n, inc, to, p, body) in std::mem::take(&mut self.sends) {
                if self.alive(n, inc) {
                    self.send(n, to, p, body);
                }
            }
        }
    }

    /// An application's send, through the ComObject as the runtime's.
    pub(super) fn send(&mut self, n: usize, to: SiteId, priority: Priority, body: Bytes) {
        let me = self.nodes[n].id;
        let Some(address) = self.addresses.get(&to).cloned() else {
            return self.violation(format!("{me} sent to {to}, a site that never existed"));
        };
        if to == me {
            return;
        }
        let id = self.oracle.sent(me, to, priority as u8, &body);
        self.trace(n, "send", &[to.0, id as u128, priority as u128]);
        let msg = OutMessage::new(
            priority,
            SIM_TYPE,
            Bytes::copy_from_slice(&id.to_le_bytes()),
            smallvec::smallvec![body],
        );
        let mut p = self.peer_or_new(n, to, AddressBook::given(&address));
        // The application holds a reference to a site it sends to.
        p.com.set_has_refs(true, self.instant());
        p.last_send = Some(self.now);
        if let Err(refused) = p.com.queue(msg) {
            let (err, m) = *refused;
            let maybe = err.handed_back() == crate::error::HandedBack::MaybeDelivered;
            self.trace(n, "refused_send", &[id as u128]);
            if let Err(e) = self.oracle.hand_back(id, maybe) {
                self.violation(e);
            }
            let body = m
                .body
                .iter()
                .flat_map(|b| b.iter().copied())
                .collect::<Vec<_>>();
            self.app_call(n, |app, ctx| app.handed_back(ctx, to, &body, maybe));
        }
        self.drive_peer(n, to, &mut p);
        self.put_back(n, to, p);
    }

    /// A message delivered at node `n` on the channel from `peer`.
    pub(super) fn delivered(&mut self, n: usize, peer: SiteId, m: InMessage) {
        let Some(id) = envelope_id(&m.header) else {
            return self.violation(format!("a message without an envelope arrived: {m:?}"));
        };
        self.trace(n, "deliver", &[peer.0, id as u128]);
        if let Err(e) = self.oracle.deliver(id, self.nodes[n].id, peer, &m.body) {
            return self.violation(e);
        }
        self.app_call(n, |app, ctx| app.received(ctx, peer, &m.body));
    }
}
