//! The ComObject carries out its machine's actions (`protocols::Action`):
//! opens, channels adopted and closed, messages delivered and handed back,
//! fault states reported, the slot asked for and given back.

use std::time::Instant;

use actix::prelude::*;

use sitenet_protocols::{Action, ChannelEnd, ChannelId, FaultState};

use crate::metrics::Counters;
use crate::peer_logs::LogKind;
use crate::site_entry::Returned;

use super::*;

impl ComObject {
    /// Carries out every action of the machine, in order. A slot granted
    /// for an open that did not start (the need went away) is given back.
    pub(super) fn act(&mut self, ctx: &mut Context<Self>) {
        self.act_all(ctx);
        // A grant the machine did not use goes back.
        self.slot.take_granted();
        if self.shed_pending && self.live.is_none() {
            // The channel went: an idle site keeps no spare room (the
            // outbox's and the machine's queues grow again on demand).
            self.shed_pending = false;
            self.entry.outbox().shed();
            self.com.shed();
        }
    }

    fn act_all(&mut self, ctx: &mut Context<Self>) {
        while let Some(a) = self.com.poll_action() {
            match a {
                Action::RequestSlot => self.request_slot(ctx),
                Action::CancelSlot => {
                    if let Some(t) = self.slot.take_ticket() {
                        self.node.slots().cancel(t);
                    }
                }
                Action::Open(req) => self.start_open(req, ctx),
                Action::AbandonOpen => {
                    if let Some(o) = self.opening.take() {
                        // Its slot lease, in the future, goes back with it.
                        ctx.cancel_future(o.handle);
                    }
                }
                Action::CloseChannel { id, end } => self.close_channel(id, end, ctx),
                Action::Up => self.up_pending = true,
                Action::Fault { state, reason } => self.set_fault(state, &reason),
                Action::ClaimRefused { reason } => {
                    Counters::add(&self.node.counters().unproven_claims_refused, 1);
                    if let Some(suppressed) = self.node.peer_logs().site(
                        &self.entry,
                        LogKind::ClaimRefused,
                        self.node.counters(),
                    ) {
                        tracing::warn!(site = ?self.entry.id(), %reason, suppressed, "refused a claim on a site's id");
                    }
                    self.report_fault("a channel claiming the site".into(), reason, false);
                }
                Action::ReportFault { reason } => {
                    Counters::add(&self.node.counters().protocol_errors, 1);
                    if let Some(suppressed) = self.node.peer_logs().site(
                        &self.entry,
                        LogKind::ProtocolBroken,
                        self.node.counters(),
                    ) {
                        tracing::warn!(site = ?self.entry.id(), peer = %self.peer_string(), %reason, suppressed, "peer broke the protocol");
                    }
                    self.report_fault(self.peer_string(), reason, false);
                }
                Action::HandBack { error, message } => self.hand_back(error, message),
                Action::Reclaim => self.reclaim(ctx),
                // A peer's claim on the entry (if one made it) ends.
                Action::Proven => self.node.claim_proven(&self.entry),
                Action::Failed {
                    failure,
                    not_sent,
                    maybe_delivered,
                } => {
                    let reason = self.failure_reason(&failure);
                    let mut back = Returned::default();
                    for m in not_sent {
                        self.entry.outbox().release_msg(&m);
                        back.not_sent.push(m);
                    }
                    for m in maybe_delivered {
                        self.entry.outbox().release_msg(&m);
                        back.maybe_delivered.push(m);
                    }
                    // Messages drained from the outbox after the machine
                    // failed but before this action ran were refused as
                    // `SiteFailed`: they belong to this failure's
                    // `not_sent` (newer than the machine's), not to
                    // `take_refused`.
                    if let Some(handed) = self.entry.handed().lock().as_deref_mut() {
                        let (late, other): (Vec<_>, Vec<_>) = std::mem::take(&mut handed.refused)
                            .into_iter()
                            .partition(|(e, _)| {
                                matches!(e, sitenet_protocols::Refusal::SiteFailed)
                            });
                        handed.refused = other;
                        back.not_sent.extend(late.into_iter().map(|(_, m)| m));
                    }
                    // And what is still in the outbox, never drained: it
                    // would otherwise be neither sent nor handed back. (The
                    // wake flag is cleared first, so a sender racing past
                    // its check wakes this actor, whose drain hands it back
                    // as `SiteFailed` into the failure set below.)
                    let mut queued = Vec::new();
                    self.entry.outbox().drain_on_wake(&mut queued);
                    for m in queued {
                        self.entry.outbox().release_msg(&m);
                        back.not_sent.push(m);
                    }
                    // The tracked messages' deliveries fail once the failure
                    // is on record (below): a sender told its message was
                    // not sent finds why in `SiteRef::failure`.
                    let tracked = |ms: &[OutMessage]| -> Vec<u64> {
                        ms.iter().filter(|m| m.tracked).map(|m| m.corr).collect()
                    };
                    let (not_sent, maybe) =
                        (tracked(&back.not_sent), tracked(&back.maybe_delivered));
                    self.log_failure(&failure, &reason, &back);
                    self.report_fault(self.address_string(), reason.clone(), true);
                    self.entry
                        .handed()
                        .lock()
                        .get_or_insert_with(Box::default)
                        .failed = Some((failure.clone(), back));
                    self.entry.liveness().set_failed();
                    let deliveries = self.node.deliveries();
                    for corr in not_sent {
                        let reason = reason.clone();
                        deliveries
                            .complete(corr, Err(crate::error::DeliveryError::NotSent { reason }));
                    }
                    for corr in maybe {
                        let reason = reason.clone();
                        deliveries.complete(
                            corr,
                            Err(crate::error::DeliveryError::MaybeDelivered { reason }),
                        );
                    }
                    self.entry.outbox().close();
                    self.node.fail_requests(&self.entry, &failure);
                    // Gone for good: what was dialed on its word is not.
                    self.node.asker_gone(&self.entry);
                    self.node.signals().acked();
                    // Last: whoever hears of it finds the failure and what
                    // was handed back on record (`SiteRef::failure`).
                    self.publish(|site, address| crate::NodeEvent::SiteDown {
                        site,
                        address,
                        reason: failure,
                    });
                }
            }
        }
    }

    /// What a permanent failure is reported as (the log, the fault report,
    /// each tracked message's error): a site given up on after being
    /// unreachable names what kept it away (the last open's or channel's
    /// failure, "connection refused"), which the failure alone does not.
    fn failure_reason(&self, failure: &sitenet_protocols::SiteFailure) -> String {
        use sitenet_protocols::SiteFailure::{GaveUp, Unreachable};
        match (failure, self.entry.unreachable_cause()) {
            (GaveUp(_) | Unreachable(_), Some(cause)) => format!("{failure}; last: {cause}"),
            _ => failure.to_string(),
        }
    }

    pub(super) fn set_fault(&mut self, state: FaultState, reason: &str) {
        if self.entry.set_fault(state, reason) {
            let kind = LogKind::FaultState;
            if let Some(suppressed) =
                self.node
                    .peer_logs()
                    .site(&self.entry, kind, self.node.counters())
            {
                tracing::info!(site = ?self.entry.id(), ?state, %reason, suppressed, "fault state");
            }
            let c = &self.node.counters();
            match state {
                FaultState::TempFailed => {
                    Counters::add(&c.temp_failures, 1);
                    self.publish(|site, address| crate::NodeEvent::SiteUnreachable {
                        site,
                        address,
                        since: Instant::now(),
                        cause: reason.to_string(),
                    });
                }
                FaultState::PermFailed => Counters::add(&c.perm_failures, 1),
                FaultState::Ok => {}
            }
            self.node.signals().changed();
        }
    }

    pub(super) fn close_channel(
        &mut self,
        id: ChannelId,
        end: ChannelEnd,
        ctx: &mut Context<Self>,
    ) {
        if self.live.as_ref().map(|l| l.id) != Some(id) {
            self.com.channel_closed(id, Instant::now());
            return;
        }
        if matches!(end, ChannelEnd::Orderly(_) | ChannelEnd::Final) {
            // Whatever the session still has for the peer (answers, a
            // CLOSE_HARD, a final ack) is written if the socket takes it now.
            self.write_turn(usize::MAX, Instant::now());
        }
        if let ChannelEnd::Orderly(reason) = end {
            // Counted before the channel goes, so whoever is woken by the
            // close sees it.
            Counters::add(&self.node.counters().orderly_closes, 1);
            tracing::debug!(site = ?self.entry.id(), ?reason, "channel closed by the close protocol");
        }
        if matches!(end, ChannelEnd::Final) {
            self.drop_live_after_final_frame(ctx);
        } else {
            self.drop_live(ctx);
        }
        self.com.channel_closed(id, Instant::now());
    }
}
