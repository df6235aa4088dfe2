//! The messages a ComObject actor handles, and its handlers: each feeds
//! the machine and drives.

use std::time::Instant;

use actix::prelude::*;

use sitenet_protocols::connection::handshake::write_answer;
use sitenet_protocols::node::site_index::Adoption;
use sitenet_protocols::{AcceptOutcome, Negotiate, NegotiateAns, Nonce};

use super::ComObject;
use crate::channel_io::flush_and_close;
use crate::trans_object::TransObject;

/// Wakes the ComObject: its outbox went from empty to non-empty.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Wake;

/// An accepted channel whose initiator identified itself as this site.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Adopt {
    pub(crate) trans: TransObject,
    pub(crate) neg: Negotiate,
    /// The nonce our PRESENT carried on this channel (the NEGOTIATE's
    /// proof of continuity is bound to it).
    pub(crate) nonce: Nonce,
    /// Our cookie proof, put into an accepting answer (`None` at the open
    /// level).
    pub(crate) cookie: Option<sitenet_protocols::CookieProof>,
    /// What TLS proved of the peer (see `ComObject::accepted_as`).
    pub(crate) certificate: sitenet_protocols::PeerCertificate,
}

/// A connection of this site joined (`true`) or left (`false`) the node's
/// waiting line: while it waits, the site is calling us, and is
/// neither given up nor forgotten.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PeerInLine(pub(crate) bool);

impl Handler<PeerInLine> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: PeerInLine, ctx: &mut Context<Self>) {
        self.com.set_peer_in_line(msg.0, Instant::now());
        self.drive(ctx);
    }
}

/// Addresses a descriptor claims for this site.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Learn(pub(crate) Vec<String>);

impl Handler<Learn> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: Learn, ctx: &mut Context<Self>) {
        self.com.learn_addresses(msg.0.iter().map(String::as_str));
        self.drive(ctx);
    }
}

/// Wakes the ComObject to re-evaluate its site (the last `SiteRef` went).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Poke;

/// The slot controller's grant of a channel slot this site waited for.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SlotGranted(pub(crate) sitenet_transport::SlotLease);

/// The slot controller preempts the channel holding `lease`: close it with
/// CLOSE_HARD (nothing is lost; the site reconnects when it has a slot) —
/// unless that channel was replaced since (the call came late): then
/// nothing is closed, and the stale call is counted.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Preempt {
    pub(crate) lease: sitenet_transport::LeaseId,
    pub(crate) reason: sitenet_protocols::slots::PreemptReason,
}

/// Stop: the node is shutting down.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

/// Kill: fail the site permanently on purpose.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Kill;

/// Test hook: close the channel with CLOSE_HARD, as a preemption does. The
/// site reconnects when it needs to; nothing is lost.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CloseHard;

/// Test hook: the slot lease of the working channel, if any.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "Option<sitenet_transport::LeaseId>")]
pub(crate) struct ChannelLease;

/// Test hook: block the actor (and its thread) until released.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HoldBusy {
    pub(crate) release: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    pub(crate) started: std::sync::mpsc::Sender<()>,
}

impl Handler<Wake> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.take_outbox(true);
        self.drive(ctx);
    }
}

impl Handler<SlotGranted> for ComObject {
    type Result = ();

    fn handle(&mut self, SlotGranted(lease): SlotGranted, ctx: &mut Context<Self>) {
        self.slot = super::Slot::Granted(lease);
        self.recall_pair();
        self.com.slot_granted();
        self.drive(ctx);
    }
}

impl Handler<Preempt> for ComObject {
    type Result = ();

    fn handle(&mut self, Preempt { lease, reason }: Preempt, ctx: &mut Context<Self>) {
        let holds = self
            .live
            .as_ref()
            .and_then(|l| l.t.lease.as_ref())
            .is_some_and(|l| l.id() == lease);
        if self.gave_way == Some(lease) {
            // Given up already, on the turn that found it chosen.
            return;
        }
        if !holds && self.leave_peer_line(lease, ctx) {
            // Our open attempt, waiting in the peer's line, gave its slot
            // to a site waiting here; it asks for one again.
            tracing::debug!(site = ?self.entry.id(), reason = reason.name(), "left the peer's line");
            crate::metrics::Counters::add(&self.node.counters().preemptions, 1);
            self.preempted = self.preempted.saturating_add(1);
            return;
        }
        if !holds {
            // Meant for a channel since gone (this lease was given back).
            tracing::debug!(site = ?self.entry.id(), ?lease, "late preemption ignored");
            crate::metrics::Counters::add(&self.node.counters().preemptions_stale, 1);
            return;
        }
        tracing::debug!(site = ?self.entry.id(), reason = reason.name(), "channel slot preempted");
        if self.com.close_hard(Instant::now()) {
            crate::metrics::Counters::add(&self.node.counters().preemptions, 1);
            self.preempted = self.preempted.saturating_add(1);
            self.drive(ctx);
        }
    }
}

impl Handler<Poke> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Poke, ctx: &mut Context<Self>) {
        self.drive(ctx);
    }
}

impl Handler<Adopt> for ComObject {
    type Result = ();

    fn handle(&mut self, mut msg: Adopt, ctx: &mut Context<Self>) {
        // Taken: the entry may be reclaimed again once the machine agrees.
        self.entry.holds().adoption_ends();
        let adoption = self
            .node
            .adoption(&self.entry, self.merged.is_some(), msg.neg.site);
        if adoption == Adoption::Reroute {
            // The site is known under another entry (this one merged into
            // it, or another entry has the id): route the channel by id,
            // counted on its way there.
            self.node.clone().route_accepted(msg);
            return;
        }
        self.recall_pair();
        let outcome = self
            .com
            .accepted_as(&msg.neg, msg.nonce, msg.certificate, Instant::now());
        match outcome {
            AcceptOutcome::Refuse(reason) => {
                tracing::debug!(site = %msg.neg.site, peer = %msg.trans.peer(), ?reason, "refusing accepted channel");
                write_answer(&mut msg.trans.outb, &NegotiateAns::Refuse(reason));
                // Written by a task of its own, not the actor's: the actor
                // may park (stop) in the drive below, and a future spawned
                // in its context would go with it, leaving the peer a bare
                // close it cannot tell from a crash. Bounded by the
                // handshake timeout; the channel's slot goes back with it.
                let limit = self.node.identity().cfg().handshake_timeout;
                actix_rt::spawn(flush_and_close(msg.trans, limit));
            }
            AcceptOutcome::Restarted => {
                // The site failed for good and is back, its certificate
                // says, under the same id: a new entry takes the channel,
                // and this one stays failed for whoever holds it.
                tracing::debug!(site = %msg.neg.site, peer = %msg.trans.peer(), "a failed site is back with its certificate: a new entry takes its channel");
                self.node.retire(&self.entry);
                self.node.clone().route_accepted(msg);
                return;
            }
            AcceptOutcome::Protocol(e) => {
                // The fault is reported, and logged through the peer's rate
                // limit, by the ReportFault action: a warning here too was
                // one unlimited line per bad handshake.
                tracing::debug!(site = %msg.neg.site, error = %e, "closing accepted channel");
                drop(msg.trans);
            }
            AcceptOutcome::Accept { id, answer } => {
                let Adopt {
                    mut trans, cookie, ..
                } = msg;
                // Full-size rings only now that the channel is accepted,
                // and its socket read on this site's thread from now on.
                trans.resize(self.node.identity().cfg().buffer_size as usize);
                trans.rehome();
                write_answer(&mut trans.outb, &answer.with_cookie(cookie));
                self.act(ctx);
                self.attach(id, trans, ctx);
                return;
            }
        }
        self.drive(ctx);
    }
}

impl Handler<Stop> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        // A final ack, LEAVING, and whatever can be written now; the socket
        // closes with the actor.
        let leaving = self.node.signals().leaves_on_shutdown();
        self.com.shutdown_as(leaving, Instant::now());
        self.act(ctx);
        self.drop_live(ctx);
        ctx.stop();
    }
}

impl Handler<Kill> for ComObject {
    type Result = ();

    fn handle(&mut self, _: Kill, ctx: &mut Context<Self>) {
        // CLOSE_HARD if a channel exists (written now if the socket takes
        // it), then the site fails at once.
        self.take_outbox(false);
        self.com.kill(Instant::now());
        self.drive(ctx);
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<CloseHard> for ComObject {
    type Result = ();

    fn handle(&mut self, _: CloseHard, ctx: &mut Context<Self>) {
        if self.com.close_hard(Instant::now()) {
            self.drive(ctx);
        }
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<ChannelLease> for ComObject {
    type Result = Option<sitenet_transport::LeaseId>;

    fn handle(&mut self, _: ChannelLease, _ctx: &mut Context<Self>) -> Self::Result {
        self.live.as_ref()?.t.lease.as_ref().map(|l| l.id())
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<HoldBusy> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: HoldBusy, _ctx: &mut Context<Self>) {
        let _ = msg.started.send(());
        if let Some(rx) = msg.release.lock().take() {
            let _ = rx.recv();
        }
    }
}
