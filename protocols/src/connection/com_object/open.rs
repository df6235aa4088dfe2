//! Opening: the slot grant, our own open attempts and their backoff, and
//! the decision on a channel the peer opened to us.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{AcceptOutcome, Action, ComObject, FaultState, OpenFailure, OpenRequest, Phase};
use crate::base::coverage;
use crate::base::timer::Timer;
use crate::connection::address_book::Fallback;
use crate::connection::error::{OpenError, ProtocolError};
use crate::connection::handshake::{
    Attempt, Claim, Continuity, HandshakeNonces, Negotiate, NegotiateAns, Nonce, Opened,
    PeerCertificate, RefuseReason,
};
use crate::connection::link::Decision;
use crate::connection::session::ChannelParams;
use crate::slots::admission::Source;

use super::{ChannelId, SiteFailure};

impl ComObject {
    /// Leaving `WaitingForSlot` other than by a grant: the driver withdraws
    /// the request.
    pub(super) fn leave_slot_line(&mut self) {
        if self.phase == Phase::WaitingForSlot {
            self.actions.push_back(Action::CancelSlot);
        }
    }

    /// The slot controller granted a channel slot: start an open attempt
    /// (an [`Action::Open`]). Ignored unless waiting for one.
    pub fn slot_granted(&mut self) {
        if self.phase != Phase::WaitingForSlot {
            return;
        }
        let address = match self.book.current() {
            Some(a) if self.wants_channel() && !self.closing => a.to_owned(),
            _ => {
                // The need went away while waiting (merged, acknowledged, …).
                self.phase = Phase::Closed;
                self.update();
                return;
            }
        };
        self.attempt_seq += 1;
        self.count().opens += 1;
        self.phase = Phase::Opening {
            attempt: self.attempt_seq,
        };
        self.actions.push_back(Action::Open(OpenRequest {
            address,
            attempt: Attempt {
                opener: self.opener,
                seq: self.attempt_seq,
            },
            last_received: self.session.last_received(),
            last_generation: self.session.last_generation(),
            secret: self.continuity.as_deref().map(|c| c.current),
            // Even a numbering whose fresh answer the peer may not have
            // read: a peer that never saw it holds another tag and starts a
            // new session with us; one that saw it goes on where it is.
            session: self.session.tag(),
        }));
    }

    /// Our open attempt `attempt` finished its handshake. Returns the
    /// channel's id if the ComObject works on it; `None` tells the driver to
    /// close the channel (the attempt was abandoned, or the answer
    /// contradicts the session).
    pub fn open_succeeded(
        &mut self,
        attempt: u64,
        opened: &Opened,
        now: Instant,
    ) -> Option<ChannelId> {
        self.tick(now);
        if self.opening() != Some(attempt) {
            return None;
        }
        let via_line = self.in_line();
        self.line_yields = 0;
        // The peer lists every address it listens on: later opens use the
        // best transport the two sites share.
        self.book.succeeded();
        self.book.learn_with(
            opened.present.listen.iter().map(String::as_str),
            &self.cfg.plugged,
        );
        if opened.peer_fresh && !self.session.is_fresh() {
            // The peer forgot our session (it reclaimed our entry), or
            // numbers in another (see `accepted`): number afresh, and hand
            // back what it never acknowledged.
            tracing::info!("the peer forgot the session; numbering starts again");
            self.session.forget_peer();
        }
        // This handshake settled the numbering both sides are in (the
        // initiator checked that a resumed session keeps our tag).
        self.session.set_tag(opened.session);
        if let Some(secret) = opened.pair_secret {
            // Both sides keep the secret this handshake agreed (the answer
            // itself shows that the peer holds it).
            self.continuity = Some(Box::new(Continuity {
                current: secret,
                confirmed: true,
                source: Source::UNADDRESSED,
            }));
        } else {
            // The peer checked our proof: it holds our secret.
            self.confirm_continuity();
        }
        let params = ChannelParams {
            buffer_size: opened.buffer_size,
            peer_max_message: opened.peer_max_message,
            peer_last_received: opened.peer_last_received,
            generation: opened.generation,
            caps: opened.agreed.caps,
        };
        if let Err(e) = self.session.channel_up(params, now) {
            self.protocol_fault(&e);
            self.set_fault(FaultState::TempFailed, e.to_string(), now);
            self.schedule_backoff(now);
            self.update();
            return None;
        }
        self.via_line = via_line;
        Some(self.now_working(None, now))
    }

    /// Our open attempt `attempt` failed. While the site has addresses
    /// not yet tried in this round, the next one is tried at once (through
    /// the slot line: the failed attempt gave its slot back), with no fault
    /// reported — see [`AddressBook`](crate::connection::address_book::AddressBook) for which failures fall back. After
    /// the last address: a refusal is no fault (another channel wins the
    /// link decision), except a refusal as `Closing`, which fails the site
    /// ([`SiteFailure::Refused`]: the peer gave this site up, or it shuts
    /// down, and refuses every call); a permanent failure (version,
    /// identity) fails the site; anything else is a temporary failure,
    /// retried after the backoff.
    pub fn open_failed(&mut self, attempt: u64, failure: OpenFailure, now: Instant) {
        self.tick(now);
        if self.opening() != Some(attempt) {
            return;
        }
        if self.in_line() {
            // The peer closed the line's connection (its hold time, or it
            // stopped): the give-up deadline is moot.
            self.timers.stop(Timer::ReconnectBackoff);
        }
        // The attempt is over, whatever follows.
        self.phase = Phase::Closed;
        let fallback = self.book.failed(&failure);
        if fallback == Fallback::TryNext && !self.closing {
            coverage::hit(coverage::Point::OpenTryNextAddress);
            tracing::debug!(error = %failure, next = ?self.book.current(), "open failed; trying the next address");
            self.count().fallbacks += 1;
            // Closed with the need still there: `update` asks for a slot.
            return self.update();
        }
        match failure {
            OpenFailure::Open(e) if e.is_permanent() && fallback == Fallback::Permanent => {
                coverage::hit(coverage::Point::OpenFailsForGood);
                return self.fail(SiteFailure::Open(e), now);
            }
            // A site named on a peer's word was tried once at every
            // address it was named at (`AddressBook::claimed_once`).
            _ if fallback == Fallback::Permanent => {
                coverage::hit(coverage::Point::OpenNotReached);
                return self.fail(SiteFailure::NotReached, now);
            }
            // The peer takes no channel from this site any more: calling
            // again after each backoff would keep what is queued for it
            // for ever, neither delivered nor handed back.
            OpenFailure::Open(OpenError::Refused(reason @ RefuseReason::Closing)) => {
                coverage::hit(coverage::Point::OpenRefusedClosing);
                return self.fail(SiteFailure::Refused(reason), now);
            }
            OpenFailure::Open(OpenError::Refused(reason)) => {
                coverage::hit(coverage::Point::OpenRefusedBackOff);
                tracing::debug!(?reason, "open refused; another channel wins");
            }
            OpenFailure::Open(OpenError::Protocol(e)) => {
                coverage::hit(coverage::Point::OpenProtocolFault);
                self.protocol_fault(&e);
                self.set_fault(FaultState::TempFailed, e.to_string(), now);
            }
            other => {
                coverage::hit(coverage::Point::OpenFailedBackOff);
                self.set_fault(FaultState::TempFailed, other.to_string(), now)
            }
        }
        self.schedule_backoff(now);
        self.update();
    }

    /// Our open attempt `attempt` was told to wait in the peer's line (a
    /// `WAIT` frame after our NEGOTIATE): the peer's slots are
    /// full and it answers when our turn comes. The site waits in
    /// [`ComState::WaitingForCallback`](super::ComState::WaitingForCallback)
    /// — no fault, no backoff — until the answer ends the attempt
    /// ([`open_succeeded`](Self::open_succeeded) or
    /// [`open_failed`](Self::open_failed)), or until the give-up deadline
    /// (the shorter of [`ComConfig::line_give_up`](super::ComConfig::line_give_up)
    /// and the peer's `hold`): then the attempt is abandoned
    /// ([`Action::AbandonOpen`]) and the site retries after its backoff.
    /// Only the first `WAIT` of an attempt sets the deadline; later ones
    /// (a peer telling its place again) do not move it. Ignored for any
    /// other attempt.
    pub fn open_waiting(&mut self, attempt: u64, hold: std::time::Duration, now: Instant) {
        self.tick(now);
        if self.opening() != Some(attempt) || self.in_line() {
            return;
        }
        tracing::debug!(?hold, "told to wait in the peer's line");
        self.count().line_waits += 1;
        self.phase = Phase::InLine {
            attempt,
            since: now,
        };
        let wait = self.cfg.line_give_up.min(hold);
        self.timers.set(Timer::ReconnectBackoff, now + wait);
    }

    /// The give-up deadline of a wait in the peer's line passed: the
    /// attempt is abandoned and the site retries normally (after its
    /// backoff). Not a fault: the peer is reachable, only busy.
    pub(super) fn line_given_up(&mut self, now: Instant) {
        tracing::debug!("gave up waiting in the peer's line");
        self.count().line_give_ups += 1;
        self.actions.push_back(Action::AbandonOpen);
        self.phase = Phase::Closed;
        self.schedule_backoff(now);
        self.update();
    }

    /// This node's slot table took back the slot our open attempt holds
    /// while it waits in the peer's line
    /// ([`PreemptReason::LineWait`](crate::slots::PreemptReason::LineWait)):
    /// a site waits here for a slot, and this one moves nothing until the
    /// peer lets it in. The attempt is abandoned ([`Action::AbandonOpen`]:
    /// the driver closes its connection, which gives the slot back) and
    /// the site asks for a slot again at once ([`Action::RequestSlot`]),
    /// behind those already waiting — no fault and no backoff: the peer is
    /// only busy, and this node chose. Without it, a node whose slots are
    /// all held by attempts in full peers' lines serves nobody until the
    /// first give-up deadline, and nodes that wait in each other's lines
    /// that way stall together. False, and nothing done, unless the attempt
    /// waits in line.
    pub fn leave_peer_line(&mut self, now: Instant) -> bool {
        self.tick(now);
        if !self.in_line() {
            return false;
        }
        tracing::debug!("left the peer's line: a site waits here for the slot");
        self.line_yields = self.line_yields.saturating_add(1);
        self.actions.push_back(Action::AbandonOpen);
        self.timers.stop(Timer::ReconnectBackoff);
        self.phase = Phase::Closed;
        self.update();
        true
    }

    /// A channel the peer opened reached NEGOTIATE naming this site, after
    /// a PRESENT that carried `nonce`: decide whether to work on it, and
    /// answer. Accepting may abandon our own open attempt and replace a
    /// working channel (actions for both come first).
    ///
    /// The claim is judged ([`continuity`](crate::connection::handshake::continuity)):
    /// the link rules ([`link::decide`](crate::connection::link::decide)) apply first
    /// (a stale NEGOTIATE is refused as stale); then a NEGOTIATE that does
    /// not prove the pair's secret is refused ([`RefuseReason::Unproven`],
    /// the session left untouched) while this side holds a confirmed
    /// secret for the site (kept even across a forgotten entry:
    /// [`recall`](Self::recall)). Otherwise an unproven claim is accepted
    /// as before continuity existed — a site we never worked with, or a
    /// session whose peer never showed it read the answer that agreed our
    /// secret (lost with its channel, or crossed by a simultaneous contact
    /// by address) — and agrees a new secret (`rekey`); its generation never
    /// raises ours: claiming more than we ever saw, it starts a new session
    /// (`fresh`), judged as having seen no channel.
    ///
    /// The numbering: the session goes on only if the claim names our
    /// session tag ([`SessionTag`](crate::connection::handshake::SessionTag)), proven,
    /// and neither side is fresh; otherwise the answer is `fresh` and a side
    /// that remembers a session numbers afresh, in a new session named by
    /// this handshake.
    pub fn accepted(&mut self, neg: &Negotiate, nonce: Nonce, now: Instant) -> AcceptOutcome {
        self.accepted_as(neg, nonce, PeerCertificate::NotRequired, now)
    }

    /// [`accepted`](Self::accepted), knowing what TLS proved of the peer
    ///. A peer whose verified certificate names the site it
    /// claims is that site, whatever it proves of the pair's secret: an
    /// unproven claim from it is the site restarted (a node takes its id
    /// from its certificate, so a restart keeps it), not a takeover, and it
    /// starts a new session instead of being refused.
    pub fn accepted_as(
        &mut self,
        neg: &Negotiate,
        nonce: Nonce,
        certificate: PeerCertificate,
        now: Instant,
    ) -> AcceptOutcome {
        self.tick(now);
        if self.phase == Phase::Failed && !self.closing && certificate.proves(neg.site) {
            return AcceptOutcome::Restarted;
        }
        let hs = HandshakeNonces {
            acceptor: self.cfg.local,
            acceptor_nonce: nonce,
            initiator: neg.site,
            initiator_nonce: neg.nonce,
        };
        let claim = Continuity::judge(self.continuity.as_deref(), &hs, neg.proof.as_ref());
        let proven = claim == Claim::Proven;
        // The claimant numbers in another session than ours (see
        // `SessionTag`): one of us started a new one the other never
        // learnt of (a fresh answer lost with its channel, on either side
        // of crossing channels), so the two numberings may differ.
        let diverged = neg.session != self.session.tag();
        // An unproven claim never raises our generation (no claimant picks
        // one), and its tag is no evidence: claiming more than we ever saw,
        // or another session, it starts a new session, judged as having
        // seen no channel.
        let ahead = neg.last_generation > self.session.last_generation();
        let beyond = !proven && (ahead || diverged);
        let decision = if beyond {
            let mut new = neg.clone();
            new.last_generation = 0;
            (self.cfg.decide)(self.link_view(), &new)
        } else {
            (self.cfg.decide)(self.link_view(), neg)
        };
        // The link rules refuse first (a stale NEGOTIATE of an honest race
        // is no forgery); one they would accept must prove a confirmed
        // session.
        let (generation, replaces_working, abandon_opening) = match decision {
            Decision::Refuse(reason) => return AcceptOutcome::Refuse(reason),
            Decision::Accept {
                generation,
                replaces_working,
                abandon_opening,
            } => (generation, replaces_working, abandon_opening),
        };
        if claim
            == (Claim::Unproven {
                pair_confirmed: true,
            })
            && !certificate.proves(neg.site)
        {
            return self.refuse_claim(neg);
        }
        if proven {
            self.confirm_continuity();
        }
        // Session state on each side: a side that never worked with the
        // other, or forgot it (reclaimed), is fresh, and a peer that claims
        // no generation is. Two sides go on with one numbering only if
        // both are in it: the same session tag, proven, and neither fresh.
        // Otherwise the answer is `fresh`: the initiator numbers afresh if
        // it remembers a session, and so do we (`renumber`) if we do —
        // what either sent and the other never acknowledged is handed back
        // as maybe delivered, never delivered twice and never skipped. If
        // either side numbers afresh, the new numbering takes this
        // handshake's tag; two fresh sides stay in the pair's first (0), as
        // two that contact each other at once for the first time must
        // (each may accept the other's channel: tests/two_nodes.rs).
        let forgot = self.session.is_fresh();
        let claims_none = neg.last_generation == 0;
        let fresh = forgot || claims_none || diverged || beyond;
        let renumber = !forgot && fresh;
        let peer_last_received = if fresh && !claims_none {
            0
        } else {
            neg.last_received
        };
        let sent = if renumber {
            0
        } else {
            self.session.last_sent()
        };
        if peer_last_received > sent {
            let e = ProtocolError::AckBeyondSent {
                ack: peer_last_received,
                sent,
            };
            self.protocol_fault(&e);
            return AcceptOutcome::Protocol(e);
        }
        if abandon_opening && self.opening().is_some() {
            self.actions.push_back(Action::AbandonOpen);
        }
        if replaces_working {
            if let Some(old) = self.working_channel() {
                self.session_down();
                self.actions.push_back(Action::CloseChannel {
                    id: old,
                    end: super::ChannelEnd::Replaced,
                });
            }
        }
        // The NEGOTIATE's listen list adds nothing to the book:
        // anyone may send one naming this site, and its addresses would be
        // tried on every reconnect and handed on. The driver gives a site
        // first met this way the list of the NEGOTIATE that made its
        // entry; otherwise only our own opens (PRESENT) teach addresses.
        if renumber {
            tracing::info!(site = %neg.site, "the peer forgot the session; numbering starts again");
            self.session.forget_peer();
        }
        if renumber || (fresh && !claims_none) {
            self.session.set_tag(hs.session_tag());
        }
        // Unproven (and no confirmed secret held): this handshake agrees
        // the pair's secret, confirmed once the peer sends anything on
        // this channel.
        let rekey = !proven;
        if rekey {
            self.continuity = Some(Box::new(Continuity {
                current: hs.pair_secret(),
                confirmed: false,
                source: Source::UNADDRESSED,
            }));
        }
        // The acceptor may lower the buffer size, never raise it.
        let buffer_size = self.cfg.buffer_size.min(neg.buffer_size);
        let answer = NegotiateAns::Accept {
            buffer_size,
            max_message: self.cfg.max_message,
            last_received: self.session.last_received(),
            generation,
            fresh,
            rekey,
            // The driver puts in the acceptor's proof (`with_cookie`).
            cookie: None,
            session: self.session.tag(),
        };
        let params = ChannelParams {
            buffer_size,
            peer_max_message: neg.max_message,
            peer_last_received,
            generation,
            caps: neg.caps,
        };
        self.session
            .channel_up(params, now)
            .expect("last_received checked above");
        // A channel the peer opened: no line of the peer's is waiting on it.
        self.via_line = false;
        let id = self.now_working(Some(neg.attempt), now);
        AcceptOutcome::Accept { id, answer }
    }

    /// Refuses a claim on this site that does not prove the pair's
    /// continuity: put on record, and nothing else changes.
    fn refuse_claim(&mut self, neg: &Negotiate) -> AcceptOutcome {
        self.count().unproven_claims_refused += 1;
        let why = if neg.proof.is_some() {
            "a proof that does not hold"
        } else {
            "no proof"
        };
        self.actions.push_back(Action::ClaimRefused {
            reason: format!(
                "a channel claiming site {} with {why} of continuity, while we hold a \
                 confirmed session with it",
                neg.site
            ),
        });
        coverage::hit(coverage::Point::RefuseUnproven);
        AcceptOutcome::Refuse(RefuseReason::Unproven)
    }

    /// The session is up on a new channel: the site is reachable again.
    fn now_working(&mut self, from: Option<Attempt>, now: Instant) -> ChannelId {
        let id = self.next_channel_id();
        self.leave_slot_line();
        self.owed_reopen = false;
        // A new channel: whatever the peer said of its references was
        // about the old one's time.
        self.peer_cleared = false;
        self.phase = Phase::Working { id, from };
        self.session_channel = id.0;
        self.backoff = self.cfg.reconnect_min;
        self.timers.stop(Timer::ReconnectBackoff);
        self.idle_since = now;
        self.set_fault(FaultState::Ok, "channel working".into(), now);
        if !std::mem::replace(&mut self.up, true) {
            self.actions.push_back(Action::Up);
        }
        if self.book.proven() {
            self.actions.push_back(Action::Proven);
        }
        self.update();
        id
    }

    /// Waits before the next open: the backoff doubles per failure up to
    /// its maximum, each delay jittered. A site that cannot be called (no
    /// address) or that shuts down just waits to be called.
    pub(super) fn schedule_backoff(&mut self, now: Instant) {
        if !self.book.can_open() || self.closing {
            self.phase = super::Phase::Closed;
            return;
        }
        let j = self.cfg.reconnect_jitter.clamp(0.0, 0.99);
        let factor = if j > 0.0 {
            // The jitter stream: each draw seeds a generator from the state
            // and leaves the next state behind (8 bytes per site instead of
            // a generator's 32).
            let mut rng = SmallRng::seed_from_u64(self.jitter_state);
            self.jitter_state = rng.gen();
            rng.gen_range(1.0 - j..1.0 + j)
        } else {
            1.0
        };
        let delay = self.backoff.mul_f64(factor);
        self.backoff = (self.backoff * 2).min(self.cfg.reconnect_max);
        self.phase = Phase::Backoff;
        self.timers.set(Timer::ReconnectBackoff, now + delay);
    }

    pub(super) fn protocol_fault(&mut self, e: &ProtocolError) {
        self.count().protocol_errors += 1;
        self.actions.push_back(Action::ReportFault {
            reason: e.to_string(),
        });
    }
}
