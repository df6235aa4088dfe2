//! Ending channels and sites: the mapping of a channel's end to a close
//! reason, the linger rule and the weak close, hard closes, permanent
//! failure, merging, and shutdown.

use std::time::{Duration, Instant};

use super::{Action, ChannelEnd, ChannelId, ComObject, FaultState, Loss, Phase, SiteFailure};
use crate::base::timer::Timer;
use crate::connection::session::{ClosePhase, CloseReason};
use crate::wire::message::OutMessage;

impl ComObject {
    /// Channel `id` ended (EOF, i/o error, silence, protocol error). During
    /// the close protocol an EOF or i/o error is the expected end (the peer
    /// closes after we granted its close, and may close first after granting
    /// ours); otherwise the site is temporarily failed and reconnects after
    /// the backoff. Reports about channels no longer working are ignored.
    pub fn channel_lost(&mut self, id: ChannelId, loss: Loss, now: Instant) {
        self.tick(now);
        if self.working_channel() != Some(id) {
            return;
        }
        if matches!(loss, Loss::Eof | Loss::Io(_)) {
            let reason = match self.session.close_phase() {
                ClosePhase::PeerClosing { hard: true, .. } => Some(CloseReason::PeerHard),
                ClosePhase::PeerClosing { hard: false, .. } => Some(CloseReason::PeerWeak),
                ClosePhase::ClosingHard { .. } => Some(CloseReason::HardDone),
                ClosePhase::ClosingWeak { .. } | ClosePhase::Done => Some(CloseReason::WeakDone),
                ClosePhase::Open => None,
            };
            if let Some(reason) = reason {
                return self.close_done(reason, now);
            }
        }
        if let Loss::Protocol(e) = &loss {
            self.protocol_fault(e);
        }
        tracing::info!(reason = %loss, "channel lost");
        self.session_down();
        self.actions.push_back(Action::CloseChannel {
            id,
            end: ChannelEnd::Lost,
        });
        // Giving way in a budget contention is no failure of the site.
        if loss != Loss::BudgetContention {
            self.set_fault(FaultState::TempFailed, loss.to_string(), now);
        }
        self.schedule_backoff(now);
        self.update();
    }

    /// The close protocol ended the working channel: not a failure.
    pub(super) fn close_done(&mut self, reason: CloseReason, now: Instant) {
        let Some(id) = self.working_channel() else {
            return;
        };
        self.count().orderly_closes += 1;
        // The session stays on the channel until the driver has written what
        // it has left for the peer (`channel_closed`).
        self.actions.push_back(Action::CloseChannel {
            id,
            end: ChannelEnd::Orderly(reason),
        });
        match reason {
            CloseReason::WeakDone | CloseReason::PeerWeak | CloseReason::HardDone => {
                self.phase = Phase::Closed;
            }
            CloseReason::PeerHard => {
                // The peer is short of resources and will call back when it
                // has something for us; only if it does not do we reconnect,
                // later. With messages of our own to send we do not wait:
                // the peer calls back only for its own, so our queue would
                // sit idle for the whole wait at every preemption. A peer
                // still at its hard limit puts our open in its line. But
                // only if the channel moved some of ours (the peer
                // acknowledged one on it): a peer that accepts and closes
                // hard at once, acknowledging nothing, would otherwise have
                // us dial it again and again with no wait at all.
                self.owed_reopen = true;
                if self.has_messages_to_send() && self.session.acked_on_channel() {
                    self.phase = Phase::Closed;
                } else {
                    self.phase = Phase::WaitingForCallback;
                    self.timers.set(
                        Timer::ReconnectBackoff,
                        now + self.cfg.reopen_after_peer_hard_close,
                    );
                }
            }
            CloseReason::Timeout => self.schedule_backoff(now),
        }
        self.update();
    }

    /// When the linger rule would allow a weak close, if it applies at all:
    /// no references, nothing pending, a working channel with no close
    /// running, idle for the linger time (not at all once the peer cleared
    /// its reference too, or when the channel came from the peer's waiting
    /// line), and no weak close rejected within it. (The cheap conditions are tested first: this runs on every
    /// acknowledgement.)
    pub(super) fn linger_deadline(&self) -> Option<Instant> {
        if self.has_refs
            || self.working_channel().is_none()
            || self.session.close_phase() != ClosePhase::Open
            || self.has_need()
        {
            return None;
        }
        let linger = self.cfg.linger;
        // The peer holds no reference either: nobody needs the channel, no
        // need to wait for the linger time (a reject still holds off). Nor
        // when the peer let this channel in from its waiting line: others
        // wait for the slot it holds.
        let wait = if self.peer_cleared || self.via_line {
            Duration::ZERO
        } else {
            linger
        };
        let idle = self.idle_since + wait;
        Some(self.weak_rejected_at.map_or(idle, |t| idle.max(t + linger)))
    }

    /// Keeps the linger timer. It is lazy: activity only moves
    /// `idle_since`, and a timer that fires early is moved to the real
    /// deadline then, so traffic never touches the timer.
    pub(super) fn update_linger(&mut self) {
        match self.linger_deadline() {
            // Earlier only: a later deadline is found when the timer fires
            // early; an earlier one (the peer cleared its reference) must
            // not wait for the old one.
            Some(at) => self.timers.set_if_earlier(Timer::Linger, at),
            None => self.timers.stop(Timer::Linger),
        }
    }

    pub(super) fn linger_expired(&mut self, now: Instant) {
        match self.linger_deadline() {
            Some(at) if at > now => self.timers.set(Timer::Linger, at),
            Some(_) if self.session.begin_close_weak(now) => {
                tracing::debug!("no references and idle: closing weakly");
                self.count().weak_closes_started += 1;
            }
            _ => {}
        }
    }

    /// Closes the working channel with CLOSE_HARD, which the peer must grant
    /// (preemption by the slot controller, and tests). Nothing is lost: the
    /// site reconnects when it needs to. False if there is no working
    /// channel or a close already runs.
    pub fn close_hard(&mut self, now: Instant) -> bool {
        self.tick(now);
        if self.working_channel().is_none() || !self.session.begin_close_hard(now) {
            return false;
        }
        self.count().hard_closes_started += 1;
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::PreemptionDropsLedger) {
            self.session.planted_drop_ledger();
        }
        self.update();
        true
    }

    /// Fails the site on purpose: CLOSE_HARD on a working channel (the
    /// driver writes it if the socket takes it now), then the permanent
    /// failure.
    pub fn kill(&mut self, now: Instant) {
        self.tick(now);
        if self.working_channel().is_some() && self.session.begin_close_hard(now) {
            self.count().hard_closes_started += 1;
        }
        self.fail(SiteFailure::Killed, now);
    }

    /// Fails the site permanently: every message not acknowledged is handed
    /// back ([`Action::Failed`]), and nothing is opened or accepted again.
    pub fn fail(&mut self, why: SiteFailure, now: Instant) {
        self.tick(now);
        if self.phase == Phase::Failed {
            return;
        }
        // The driver logs it with the site's name and what was handed back.
        tracing::debug!(reason = %why, "site failed permanently");
        self.end_everything();
        let (not_sent, maybe) = self.session.take_all();
        let reason = why.to_string();
        // What was handed back is on record before monitors hear of it.
        self.actions.push_back(Action::Failed {
            failure: why,
            not_sent,
            maybe_delivered: maybe.into_iter().map(|(_, m)| m).collect(),
        });
        self.set_fault(FaultState::PermFailed, reason, now);
        self.update();
    }

    /// This ComObject's site turned out to be known under another entry (it
    /// was contacted under an alias address): it stops, and hands over every
    /// message it holds, to be queued at that entry. An unidentified site
    /// has nothing numbered, so nothing is lost or duplicated.
    pub fn merge_out(&mut self) -> Vec<OutMessage> {
        self.end_everything();
        let (mut not_sent, maybe) = self.session.take_all();
        debug_assert!(
            maybe.is_empty(),
            "an unidentified site has nothing unacknowledged"
        );
        not_sent.extend(maybe.into_iter().map(|(_, m)| m));
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::MergeDropsNewest) {
            not_sent.pop();
        }
        not_sent
    }

    /// The node shuts down: a final ack and a LEAVING frame become due (the
    /// driver writes what it can, and the peer fails the site at once
    /// rather than reconnect), nothing new is opened or accepted, and the
    /// channel ends.
    pub fn shutdown(&mut self, now: Instant) {
        self.shutdown_as(true, now);
    }

    /// [`shutdown`](Self::shutdown), saying LEAVING only if `leaving`
    /// (without it the peer sees what a crash shows: a lost channel).
    pub fn shutdown_as(&mut self, leaving: bool, now: Instant) {
        self.tick(now);
        self.closing = true;
        self.session.ack_now();
        if leaving {
            self.session.leave();
        }
        if let Some(id) = self.working_channel() {
            self.actions.push_back(Action::CloseChannel {
                id,
                end: ChannelEnd::Final,
            });
        }
        if self.opening().is_some() {
            self.actions.push_back(Action::AbandonOpen);
        }
        self.timers.clear();
        self.leave_slot_line();
        if self.phase != Phase::Failed {
            self.phase = Phase::Closed;
        }
        let _ = now;
    }

    /// Stops every timer, abandons an open, and ends the working channel.
    fn end_everything(&mut self) {
        if self.opening().is_some() {
            self.actions.push_back(Action::AbandonOpen);
        }
        if let Some(id) = self.working_channel() {
            self.actions.push_back(Action::CloseChannel {
                id,
                end: ChannelEnd::Final,
            });
        }
        self.timers.clear();
        self.leave_slot_line();
        self.phase = Phase::Failed;
    }

    /// The driver closed channel `id` (after writing what the session had
    /// left for it, for an orderly or final end). The session leaves it.
    pub fn channel_closed(&mut self, id: ChannelId, now: Instant) {
        self.tick(now);
        if id.0 != 0 && self.session_channel == id.0 {
            self.session_down();
            self.update();
        }
    }

    // ------------------------------------------------------------------
    // The reclaim rule
    // ------------------------------------------------------------------

    /// True if nothing but (possibly) references ties the site to this
    /// node: nothing queued, partly sent or unacknowledged, no channel and
    /// no open attempt, and the node is not shutting down. A driver that
    /// sees this with references held should make sure it hears when the
    /// last one goes (the reclaim rule waits for it).
    pub fn idle_without_channel(&self) -> bool {
        self.session_channel == 0
            && matches!(self.phase, Phase::Closed | Phase::Failed)
            && !self.closing
            && !self.has_need()
    }

    /// True if the driver should be told at once when the last reference
    /// to the site goes: the site is [idle without a
    /// channel](Self::idle_without_channel) (the reclaim rule's clock
    /// starts then), or its working channel would be closed weakly as soon
    /// as nothing refers to it — one the peer let in from its waiting line,
    /// or whose peer cleared its own reference. Waiting for the next timer
    /// instead (the delayed ack, 20 ms later) would keep a client that is
    /// done with its work in the server's slot, and a 10,000-client line
    /// would drain 20 ms per client.
    pub fn wake_when_unreferenced(&self) -> bool {
        self.idle_without_channel()
            || ((self.via_line || self.peer_cleared)
                && self.working_channel().is_some()
                && self.session.close_phase() == ClosePhase::Open)
    }

    /// True if the site may be forgotten once the linger time has passed
    /// (not while a connection of it waits in our line).
    fn unneeded(&self) -> bool {
        !self.has_refs && self.peer_in_line == 0 && self.idle_without_channel()
    }

    /// Keeps the reclaim timer: set `linger` after the site became
    /// unneeded, stopped as soon as it is needed again.
    pub(super) fn update_reclaim(&mut self) {
        if self.unneeded() {
            let since = *self.unneeded_since.get_or_insert(self.clock);
            self.timers.set(Timer::Reclaim, since + self.cfg.linger);
        } else {
            self.unneeded_since = None;
            self.timers.stop(Timer::Reclaim);
        }
    }

    /// The reclaim timer fired: ask the driver to forget the site. If it
    /// cannot (a reference or a channel appeared under its table's lock),
    /// the rule's clock restarts, so the question comes again only after
    /// another linger time.
    pub(super) fn reclaim_expired(&mut self, now: Instant) {
        if self.unneeded() {
            self.actions.push_back(Action::Reclaim);
            self.unneeded_since = Some(now);
        }
    }

    /// Takes the session off its channel: partly sent messages restart from
    /// their first fragment on the next one.
    pub(super) fn session_down(&mut self) {
        self.session.channel_down();
        self.session_channel = 0;
    }
}
