//! Opening a channel: the slot line, the open attempt (connect and the
//! initiator's handshake at the address the machine names), its outcome,
//! and the merge of an entry that turned out to be a known site.

use std::sync::Arc;
use std::time::Instant;

use actix::fut;
use actix::prelude::*;

use sitenet_protocols::slots::dial_bound::{DialRefused, DialTicket};
use sitenet_protocols::{Initiator, OpenRequest, Opened, SiteFailure};
use sitenet_transport::controller::PreemptFn;
use sitenet_transport::{LeaseId, SlotInfo};

use super::{ComHost, ComObject, Opening, SlotGranted};
use crate::channel_io::{connect_and_open, Dial, OpenFailure};
use crate::metrics::Counters;
use crate::site_entry::SiteEntry;
use crate::trans_object::TransObject;

/// Where a ComObject stands with the slot controller.
#[derive(Debug, Default)]
pub(super) enum Slot {
    #[default]
    None,
    /// Its place in the line, while waiting for a slot.
    Waiting(sitenet_transport::WaitTicket),
    /// A slot just granted, for the open attempt it is about to start.
    Granted(sitenet_transport::SlotLease),
}

impl Slot {
    /// Takes a grant (called after every batch of actions: the common
    /// case, no grant, only reads the tag).
    pub(super) fn take_granted(&mut self) -> Option<sitenet_transport::SlotLease> {
        if !matches!(self, Slot::Granted(_)) {
            return None;
        }
        match std::mem::take(self) {
            Slot::Granted(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn take_ticket(&mut self) -> Option<sitenet_transport::WaitTicket> {
        match std::mem::take(self) {
            Slot::Waiting(t) => Some(t),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// How the slot controller asks this ComObject to give a slot back (a
/// [`super::Preempt`] through its mailbox), for a working channel or an
/// open attempt alike.
pub(super) fn preempt_fn(ctx: &mut Context<ComObject>) -> PreemptFn {
    let addr = ctx.address();
    Arc::new(move |lease, reason| addr.do_send(super::Preempt { lease, reason }))
}

/// Our open attempt `attempt` waits in the peer's line for at
/// most `hold`, the peer says.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct OpenWaiting {
    attempt: u64,
    hold: std::time::Duration,
}

impl Handler<OpenWaiting> for ComObject {
    type Result = ();

    fn handle(&mut self, msg: OpenWaiting, ctx: &mut Context<Self>) {
        if self.com.opening() == Some(msg.attempt) && !self.com.in_line() {
            Counters::add(&self.node.counters().line_waits, 1);
        }
        self.com.open_waiting(msg.attempt, msg.hold, Instant::now());
        if let (Some(report), Some(o)) = (self.com.line_wait_report(), &self.opening) {
            // A holder that moves nothing: the slot table may take it back
            // for a site waiting here.
            self.node.slots().report(&o.slot_info, &report);
        }
        self.drive(ctx);
    }
}

/// The peer on whose word this entry dials (a forwarded request's origin
/// it named) has gone (`sitenet_protocols::slots::dial_bound`): the dial in
/// progress is abandoned and the site fails as not reached, handing back
/// what it held (the reply), so its entry goes like any failed one.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AbandonDial;

impl Handler<AbandonDial> for ComObject {
    type Result = ();

    fn handle(&mut self, _: AbandonDial, ctx: &mut Context<Self>) {
        if self.live.is_some() {
            // Proven meanwhile (its channel works): an ordinary site now.
            return;
        }
        tracing::debug!(site = ?self.entry.id(), "the peer that named this site went: its dial is abandoned");
        self.take_outbox(false);
        self.com.fail(SiteFailure::NotReached, Instant::now());
        self.drive(ctx);
    }
}

/// A dial counted against the bounds on dials on a peer's word, held by
/// the open attempt's future: the count ends with it, whether the attempt
/// finishes or is abandoned (the future dropped).
struct DialPermit {
    node: Arc<dyn ComHost>,
    key: usize,
    ticket: DialTicket,
}

impl Drop for DialPermit {
    fn drop(&mut self) {
        self.node.dial_ended(self.key, self.ticket);
    }
}

impl ComObject {
    /// Asks the slot controller for a channel slot: granted now (the open
    /// starts at once), or later through [`SlotGranted`], in line.
    pub(super) fn request_slot(&mut self, ctx: &mut Context<Self>) {
        let addr = ctx.address();
        match self
            .node
            .slots()
            .request(move |lease| addr.do_send(SlotGranted(lease)))
        {
            sitenet_transport::controller::Requested::Granted(lease) => {
                self.slot = Slot::Granted(lease);
                self.recall_pair();
                self.com.slot_granted();
            }
            sitenet_transport::controller::Requested::Queued(t) => {
                Counters::add(&self.node.counters().slot_waits, 1);
                self.slot = Slot::Waiting(t);
            }
        }
    }

    pub(super) fn start_open(&mut self, req: OpenRequest, ctx: &mut Context<Self>) {
        let addr = match self.node.identity().cfg().transports.parse(&req.address) {
            Ok(a) => a,
            Err(e) => {
                // A peer listed an address this build cannot parse: that
                // address fails, the next one is tried. The slot goes back.
                self.slot.take_granted();
                let failure = sitenet_protocols::OpenFailure::Transport(e.to_string());
                self.com
                    .open_failed(req.attempt.seq, failure, Instant::now());
                return;
            }
        };
        // An address only a peer named is dialed within the bounds on such
        // dials; refused beyond them, the attempt fails at once as one
        // that did not connect (the next address is tried), and a
        // forwarded origin whose peer went fails for good.
        let permit = match self.node.dial_on_word(&self.entry, &req.address) {
            Ok(ticket) => ticket.map(|ticket| DialPermit {
                node: self.node.clone(),
                key: self.entry.key(),
                ticket,
            }),
            Err(refused) => {
                self.slot.take_granted();
                tracing::debug!(address = %req.address, reason = %refused, "dial refused");
                let now = Instant::now();
                if refused == DialRefused::AskerGone {
                    self.com.fail(SiteFailure::NotReached, now);
                } else {
                    let failure = sitenet_protocols::OpenFailure::Transport(refused.to_string());
                    self.com.open_failed(req.attempt.seq, failure, now);
                }
                return;
            }
        };
        let cfg = self.node.identity().cfg();
        let hs = Initiator::new(
            self.node.identity().local_info(),
            self.entry.id(),
            req.last_received,
            req.last_generation,
            crate::channel_io::fresh_nonce(),
        )
        .with_attempt(req.attempt)
        .with_secret(req.secret)
        .with_session(req.session)
        .with_keys(self.node.security().keys().clone());
        // Under TLS the acceptor must be the site its certificate names.
        let hs = if cfg.tls.is_some() {
            hs.require_certificate()
        } else {
            hs
        };
        let attempt = req.attempt.seq;
        // Told to wait in the peer's line: the machine waits with a give-up
        // deadline (the message arrives after this future's later events
        // only if the answer came at once, and is then ignored).
        let me = ctx.address();
        let on_wait = move |hold| me.do_send(OpenWaiting { attempt, hold });
        let lease = self.slot.take_granted();
        // Described to the slot controller while the attempt runs (not a
        // candidate until it waits in the peer's line: see `OpenWaiting`).
        let slot_info = Arc::<SlotInfo>::default();
        if let Some(l) = &lease {
            l.attach(slot_info.clone(), preempt_fn(ctx));
        }
        let lease_id = lease.as_ref().map(|l| l.id());
        let f = connect_and_open(addr, lease, Dial::new(cfg), hs, on_wait);
        let f = async move {
            let r = f.await;
            drop(permit);
            r
        };
        let handle = ctx.spawn(
            fut::wrap_future::<_, Self>(f)
                .map(move |res, act, ctx| act.on_opened(attempt, res, ctx)),
        );
        self.opening = Some(Opening {
            attempt,
            handle,
            lease: lease_id,
            slot_info,
        });
    }

    /// Our open attempt leaves the peer's line: this node's slot table took
    /// its slot back for a site waiting here (`PreemptReason::LineWait`).
    /// False if the attempt `lease` is for no longer waits in line.
    pub(super) fn leave_peer_line(&mut self, lease: LeaseId, ctx: &mut Context<Self>) -> bool {
        if self.opening.as_ref().and_then(|o| o.lease) != Some(lease)
            || !self.com.leave_peer_line(Instant::now())
        {
            return false;
        }
        Counters::add(&self.node.counters().line_yields, 1);
        self.drive(ctx);
        true
    }

    pub(super) fn on_opened(
        &mut self,
        attempt: u64,
        res: Result<(TransObject, Opened), (OpenFailure, Option<sitenet_protocols::SiteId>)>,
        ctx: &mut Context<Self>,
    ) {
        if self.opening.as_ref().map(|o| o.attempt) != Some(attempt) {
            return; // abandoned: another channel won
        }
        self.opening = None;
        let now = Instant::now();
        match res {
            Ok((t, opened)) => {
                // We connected to this entry's address and found this site:
                // the one moment an address is bound to a site id.
                if let Err(other) = self.node.bind_site_id(&self.entry, opened.present.site) {
                    return self.merge_into(other, ctx);
                }
                if let Some(id) = self.com.open_succeeded(attempt, &opened, now) {
                    self.act(ctx);
                    self.attach(id, t, ctx);
                    return;
                }
            }
            Err((e, presented)) => {
                // The peer said who it is before the open failed: if it is a
                // site known under another entry (contacted here by an alias
                // address), this entry merges into that one.
                let permanent = matches!(&e, OpenFailure::Open(oe) if oe.is_permanent());
                if let Some(id) = presented.filter(|_| !permanent) {
                    if let Err(other) = self.node.bind_site_id(&self.entry, id) {
                        return self.merge_into(other, ctx);
                    }
                    // Known now: the next attempt proves a pair this node
                    // kept (a refusal as `Unproven` said it must).
                    self.recall_pair();
                }
                tracing::debug!(address = %self.address_string(), error = %e, "open failed");
                self.com.open_failed(attempt, e.into(), now);
            }
        }
        self.drive(ctx);
    }

    /// This entry was contacted under an address the peer did not list (or
    /// a peer it was opening to connected first under its id): the peer is
    /// known under another entry. Every message this one holds moves there,
    /// in order, and `SiteRef`s follow the redirect; a send racing with the
    /// merge finds the outbox sealed and follows it too, after the moved
    /// messages (`Outbox::seal_into`). The actor stays alive to pass on an
    /// accepted channel still routed here.
    pub(super) fn merge_into(&mut self, other: Arc<SiteEntry>, ctx: &mut Context<Self>) {
        if other.failure().is_some() {
            // That incarnation failed permanently here (killed, or found
            // dead): it stays failed, and so does this reference to it —
            // its messages and requests fail now instead of waiting in the
            // failed entry's closed outbox for ever.
            tracing::debug!(site = ?other.id(), "address belongs to a permanently failed site");
            self.take_outbox(false);
            self.com.kill(Instant::now());
            self.drive(ctx);
            return;
        }
        tracing::debug!(site = ?other.id(), "address belongs to a known site; merging");
        self.merged = Some(self.node.clone().hold(other.clone()));
        // What the machine holds is older than what is still in the outbox;
        // `seal_into` moves both, in that order.
        let older = self.com.merge_out();
        let entry = self.entry.clone();
        let wake = self.entry.outbox().seal_into(other.outbox(), older, || {
            entry.redirect_to(other.clone());
        });
        if wake {
            self.node.clone().wake(&other);
        }
        // The machine's actions (abandon the open, close a channel) are
        // carried out; it does nothing more after that.
        self.act(ctx);
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
    }
}
