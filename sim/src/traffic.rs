//! The applications' side of the driver: their callbacks, their sends
//! through the ComObjects (every message enveloped with the id the
//! checkers follow it by), deliveries, and the references they hold.

use std::time::Duration;

use bytes::Bytes;

use sitenet_protocols::base::site::{SiteDescriptor, SiteId};
use sitenet_protocols::node::delegation::{classify, Delivered};
use sitenet_protocols::node::requests::Reply;
use sitenet_protocols::wire::message::{wrap_origin, InMessage, MessageKind, OutMessage};

use sitenet_protocols::node::batch::Tried;

use crate::app::{Answer, AppCtx, Application, OpOutcome, Request};
use crate::coops::Awaiter;
use crate::envelope::{envelope_id, envelope_site};
use crate::ops::{Op, Outgoing};
use crate::outbox::Waiting;
use crate::peer::resolve;
use crate::peer::Peer;
use crate::{Ev, Sim, COOP_REPLY_TYPE, SIM_TYPE};

impl Sim {
    /// The application lets go of the sites it has not sent to for
    /// [`SimConfig::hold_references`] (as a runtime drops its last
    /// `SiteRef`): the linger, weak close and reclaim rules then apply.
    pub(crate) fn release_references(&mut self, n: usize) {
        // Nothing to let go of before the earliest release (the scan below
        // was a tenth of a 1,000-site run, at every tick of every site).
        if self.now < self.nodes[n].release_at {
            return;
        }
        let Some(since) = self.now.checked_sub(self.cfg.hold_references) else {
            return;
        };
        let hold = self.cfg.hold_references;
        let node = &mut self.nodes[n];
        let mut next = Duration::MAX;
        let mut idle: Vec<SiteId> = Vec::new();
        for (id, p) in &node.peers {
            if p.out.waiting() {
                // A waiting sender holds its reference (its turn renews it).
                next = next.min(self.now + hold);
                continue;
            }
            match p.last_send {
                Some(t) if t <= since => idle.push(*id),
                Some(t) => next = next.min(t + hold),
                None => {}
            }
        }
        node.release_at = next;
        idle.sort_unstable();
        for peer in idle {
            let mut p = self.take_peer(n, peer).expect("listed");
            p.last_send = None;
            p.com.set_has_refs(false, self.instant());
            self.trace(n, "unref", &[peer.0]);
            self.drive_peer(n, peer, &mut p);
            self.put_back(n, peer, p);
        }
    }

    /// Node `n`'s application refers to `p`'s site now: it holds the
    /// reference for [`SimConfig::hold_references`] from here, and the
    /// node's next release is due by then at the latest.
    pub(crate) fn referenced(&mut self, n: usize, p: &mut crate::peer::Peer) {
        p.last_send = Some(self.now);
        let node = &mut self.nodes[n];
        node.release_at = node.release_at.min(self.now + self.cfg.hold_references);
    }

    /// Calls node `n`'s application; what it sends leaves afterwards.
    pub(crate) fn app_call(
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
            waiting: node.out.sends_waiting(),
            out: &mut out,
            next_coop: &mut node.next_coop,
        };
        f(node.app.as_mut(), &mut ctx);
        let inc = node.incarnation;
        self.sends.extend(out.into_iter().map(|o| (n, inc, o)));
    }

    pub(crate) fn run_sends(&mut self) {
        loop {
            if self.sends.is_empty() {
                // Then the senders waiting where room may have freed.
                match self.serve.pop_first() {
                    Some(n) => self.serve_waiting(n),
                    None => break,
                }
                continue;
            }
            for (n, inc, op) in std::mem::take(&mut self.sends) {
                if !self.alive(n, inc) {
                    continue;
                }
                match op {
                    Op::Send(o) => self.send(n, o),
                    Op::Open {
                        coop,
                        expect,
                        timeout,
                    } => self.open_coop(n, coop, expect, timeout),
                    Op::Cancel(coop) => self.cancel_coop(n, coop),
                    Op::Batch {
                        batch,
                        ops,
                        max_retry,
                    } => self.submit_batch(n, batch, ops, max_retry),
                    Op::Retry { batch, op } => self.try_op(n, batch, op),
                    Op::WaitBatch { batch, timeout } => self.wait_batch(n, batch, timeout),
                }
            }
        }
    }

    /// An application's send, through the ComObject as the runtime's: a
    /// request is registered in the node's request table first (as the
    /// runtime's `request` does), a forwarded request carries its origin
    /// block.
    pub(crate) fn send(&mut self, n: usize, o: Outgoing) {
        let me = self.nodes[n].id;
        let to = o.to;
        let Some(address) = self.addresses.get(&to).cloned() else {
            return self.violation(format!("{me} sent to {to}, a site that never existed"));
        };
        if to == me {
            return;
        }
        // At most `timer::MAX_WAIT` away, as the runtime's `request` makes
        // it (`Duration::MAX`, "never", overflowed the clock).
        let deadline = o
            .timeout
            .map(|t| (sitenet_protocols::base::timer::later(self.instant(), t), t));
        // A batch's request is registered with the entry it goes
        // through, below.
        if deadline.is_some() && o.batch.is_none() {
            let waiter = Awaiter::App(o.corr);
            self.nodes[n]
                .requests
                .register(o.corr, to, waiter, deadline);
            if let Err(e) = self.oracle.request(me, o.corr) {
                return self.violation(e);
            }
            self.rearm_requests(n);
        }
        if let Some(coop) = o.coop {
            // As the runtime's `Cooperation::request`: registered, then
            // recorded by the cooperation (forgotten if it is not open).
            let waiter = Awaiter::Coop(coop);
            self.nodes[n].requests.register(o.corr, to, waiter, None);
            self.coop_sent(n, coop, o.corr);
        }
        let place = o.by_address.then(|| self.by_address[&address]);
        let id = self.oracle.sent(me, to, place, o.priority as u8, &o.body);
        if let Some((batch, i)) = o.batch {
            self.batch_sent(n, batch, i, id);
        }
        let how = o.kind as u128
            | u128::from(o.by_address) << 8
            | u128::from(o.type_id == COOP_REPLY_TYPE) << 9
            | u128::from(o.coop.is_some()) << 10
            | u128::from(o.site_ref.is_some()) << 11
            | u128::from(o.batch.is_some()) << 12;
        self.trace(n, "send", &[to.0, id as u128, o.priority as u128, how]);
        let envelope = Bytes::copy_from_slice(&id.to_le_bytes());
        let header = match o.origin {
            Some(origin) => {
                let d = SiteDescriptor {
                    id: origin,
                    addresses: self.addresses.get(&origin).cloned().into_iter().collect(),
                };
                wrap_origin(&d.to_string(), &envelope).expect("a short origin block")
            }
            None => match o.site_ref {
                // The envelope names the site after the id, as its
                // descriptor (a `SiteRef` serialises to one).
                Some(site) => {
                    let d = SiteDescriptor {
                        id: site,
                        addresses: self.addresses.get(&site).cloned().into_iter().collect(),
                    };
                    let mut h = envelope.to_vec();
                    h.extend_from_slice(d.to_string().as_bytes());
                    Bytes::from(h)
                }
                None => envelope,
            },
        };
        let mut msg = OutMessage::new(o.priority, o.type_id, header, smallvec::smallvec![o.body]);
        msg.kind = o.kind;
        msg.corr = o.corr;
        // A batch's send is tracked: its acknowledgement completes it.
        msg.tracked = o.batch.is_some() && o.kind == MessageKind::OneWay;
        let (key, mut p) = if o.by_address {
            self.entry_at_address(n, &address)
        } else {
            (to, self.entry_for_id(n, to, &address))
        };
        if let (Some((batch, i)), Some(_)) = (o.batch, deadline) {
            // Sent through this entry, answered by whichever site it
            // turns out to be (a retry goes to the site's address).
            let waiter = Awaiter::Batch(batch, i);
            self.nodes[n]
                .requests
                .register(o.corr, key, waiter, deadline);
            self.rearm_requests(n);
        }
        // The application holds a reference to a site it sends to.
        p.com.set_has_refs(true, self.instant());
        self.referenced(n, &mut p);
        // Within the output bounds, or in line for room (the runtime's
        // `Outbox::reserve`).
        let (class, size) = (msg.share_class(), msg.footprint());
        let out = &mut self.nodes[n].out;
        if out.try_reserve(&mut p.out, class, size) {
            self.enqueue(n, key, &mut p, Waiting { msg, id, to });
        } else {
            out.join(key, &mut p.out, Waiting { msg, id, to });
            self.counts.send_waits += 1;
            self.trace(n, "send_wait", &[id as u128, class as u128]);
        }
        self.drive_peer(n, key, &mut p);
        self.put_back(n, key, p);
    }

    /// Queues message `id` (to site `to`), its bytes reserved, in entry
    /// `p`'s ComObject; one it refuses is handed back at once.
    pub(crate) fn queue_out(
        &mut self,
        n: usize,
        p: &mut Peer,
        msg: OutMessage,
        id: u64,
        to: SiteId,
    ) {
        let Err(refused) = p.com.queue(msg) else {
            return;
        };
        let (err, m) = *refused;
        if let Err(e) = self.nodes[n].out.release_msg(&mut p.out, &m) {
            return self.violation(e);
        }
        self.room_freed(n);
        let maybe =
            err.handed_back() == sitenet_protocols::connection::error::HandedBack::MaybeDelivered;
        self.trace(n, "refused_send", &[id as u128]);
        if let Err(e) = self.oracle.hand_back(id, maybe) {
            self.violation(e);
        }
        if m.tracked {
            return self.batch_handed_back(n, m.corr, maybe);
        }
        let body = m
            .body
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect::<Vec<_>>();
        self.app_call(n, |app, ctx| app.handed_back(ctx, to, &body, maybe));
    }

    /// A message delivered at node `n` on the channel from `peer`: what it
    /// means is `delegation::classify`'s to say, as in the runtime's
    /// handlers; a reply completes its request by the request table's rule.
    pub(crate) fn delivered(&mut self, n: usize, peer: SiteId, m: InMessage) {
        let kind = m.prelude.kind;
        let corr = m.prelude.corr;
        let meaning = classify(kind, &m.header, true);
        let envelope = match &meaning {
            Delivered::Forwarded { header, .. } => envelope_id(header),
            _ => envelope_id(&m.header),
        };
        let Some(id) = envelope else {
            return self.violation(format!("a message without an envelope arrived: {m:?}"));
        };
        self.trace(n, "deliver", &[peer.0, id as u128, kind as u128]);
        self.last_message = Some(self.now);
        let me = self.nodes[n].id;
        if let Err(e) = self.oracle.deliver(id, me, n, peer, &m.body) {
            return self.violation(e);
        }
        let body = m.body;
        match meaning {
            Delivered::Handle
                if kind == MessageKind::OneWay && m.prelude.type_id == COOP_REPLY_TYPE =>
            {
                self.coop_reply(n, peer, body);
            }
            Delivered::Handle if kind == MessageKind::OneWay => match envelope_site(&m.header) {
                None => self.app_call(n, |app, ctx| app.received(ctx, peer, &body)),
                Some(Err(e)) => {
                    self.violation(format!("a site reference that is no descriptor: {e}"))
                }
                Some(Ok(d)) => {
                    // Decoded on the sender's word; refused beyond its
                    // claims, the message is not handled.
                    if self.site_ref_entry(n, peer, &d) {
                        let site = d.id;
                        self.app_call(n, |app, ctx| app.received_site_ref(ctx, peer, &body, site));
                    }
                }
            },
            Delivered::Handle => {
                let req = Request::new(peer, peer, m.priority, body, corr, kind);
                self.app_call(n, |app, ctx| app.requested(ctx, req));
            }
            Delivered::Forwarded { origin, .. } => {
                if self.cfg.peer_claims.is_some() && !self.origin_entry(n, peer, &origin) {
                    // Refused: the request ends here, answered to nobody.
                    return;
                }
                let req = Request::new(origin.id, peer, m.priority, body, corr, kind);
                self.app_call(n, |app, ctx| app.requested(ctx, req));
            }
            Delivered::Reply { delegated } => {
                let node = &mut self.nodes[n];
                let (requests, aliases) = (&mut node.requests, &node.aliases);
                match requests.reply(corr, &peer, delegated, |s, f| resolve(aliases, *s) == *f) {
                    Reply::Complete(Awaiter::App(corr)) => {
                        let answer = Answer::Reply { from: peer, body };
                        self.answered(n, corr, answer);
                        self.rearm_requests(n);
                    }
                    Reply::Complete(Awaiter::Coop(coop)) => self.coop_replied(n, coop, peer, body),
                    Reply::Complete(Awaiter::Batch(batch, i)) => {
                        let answer = OpOutcome::Reply { from: peer, body };
                        self.op_ended(n, batch, i, answer);
                        self.rearm_requests(n);
                    }
                    Reply::FromAnotherSite => {
                        self.violation(format!(
                            "{me} got a plain reply to request {corr:#x} from {peer}, \
                             which it was not sent to"
                        ));
                    }
                    // Late: the request timed out or its site failed.
                    Reply::Unknown => self.counts.late_replies += 1,
                }
            }
            Delivered::Unhandled(u) => {
                self.violation(format!(
                    "{me} could not handle a message from {peer}: {}",
                    u.reason(SIM_TYPE)
                ));
            }
        }
    }

    /// Request `corr` of node `n` ended: its application is told, once.
    pub(crate) fn answered(&mut self, n: usize, corr: u64, answer: Answer) {
        let me = self.nodes[n].id;
        let code = match &answer {
            Answer::Reply { .. } => 0,
            Answer::TimedOut => 1,
            Answer::SiteFailed => 2,
        };
        self.trace(n, "answered", &[corr as u128, code]);
        if let Err(e) = self.oracle.answered(me, corr) {
            return self.violation(e);
        }
        self.app_call(n, |app, ctx| app.answered(ctx, corr, answer));
    }

    /// Keeps one timer event at the node's earliest request deadline.
    pub(crate) fn rearm_requests(&mut self, n: usize) {
        let node = &self.nodes[n];
        let next = [
            node.requests.poll_timeout(),
            node.coop_deadlines.next_deadline(),
            node.batch_waits.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        let inc = self.nodes[n].incarnation;
        let armed = self.nodes[n].req_armed;
        self.nodes[n].req_armed = self.rearm(next, armed, Ev::Requests { node: n, inc });
    }

    /// A table's timer, as the actors keep theirs: an event is scheduled
    /// only when `next` (the table's deadline) is earlier than the one
    /// `armed`; one that fires early finds nothing due and re-arms.
    /// Returns what is armed now.
    pub(crate) fn rearm(
        &mut self,
        next: Option<std::time::Instant>,
        armed: Option<std::time::Duration>,
        ev: Ev,
    ) -> Option<std::time::Duration> {
        let at = next.map(|i| i.saturating_duration_since(self.t0).max(self.now));
        match at.filter(|t| armed.is_none_or(|a| *t < a)) {
            Some(t) => {
                self.at(t, ev);
                Some(t)
            }
            None => armed,
        }
    }

    /// Node `n`'s request deadlines: those due end as timed out.
    pub(crate) fn on_request_timer(&mut self, n: usize) {
        if self.nodes[n].req_armed != Some(self.now) {
            return;
        }
        self.nodes[n].req_armed = None;
        let now = self.instant();
        for (corr, awaiter, _, _) in self.nodes[n].requests.expire(now) {
            self.give_up_waiting(n, corr);
            // A cooperation's requests have no deadline of their own.
            match awaiter {
                Awaiter::App(_) => self.answered(n, corr, Answer::TimedOut),
                Awaiter::Batch(batch, i) => {
                    self.op_failed(n, batch, i, Tried::Other, OpOutcome::TimedOut);
                }
                Awaiter::Coop(_) => {}
            }
        }
        self.expire_coops(n, now);
        self.expire_batch_waits(n, now);
        self.rearm_requests(n);
    }

    /// A site failed permanently at node `n`: the requests awaiting it end.
    pub(crate) fn requests_failed(&mut self, n: usize, peer: SiteId) {
        let node = &mut self.nodes[n];
        let (requests, aliases) = (&mut node.requests, &node.aliases);
        let mut failed = requests.fail_site(|s| resolve(aliases, *s) == peer);
        // The table's order is a hash map's: the trace takes them sorted.
        failed.sort_unstable();
        let mut coops = Vec::new();
        for awaiter in failed {
            match awaiter {
                Awaiter::App(corr) => self.answered(n, corr, Answer::SiteFailed),
                Awaiter::Coop(coop) => coops.push(coop),
                Awaiter::Batch(batch, i) => {
                    let outcome = OpOutcome::SiteFailed;
                    self.op_failed(n, batch, i, Tried::RequestSiteFailed, outcome);
                }
            }
        }
        coops.dedup();
        self.coops_site_failed(n, peer, &coops);
        self.rearm_requests(n);
    }
}
