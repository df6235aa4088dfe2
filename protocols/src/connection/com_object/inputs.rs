//! Inputs from the user side: messages queued, references held, replies
//! awaited, and acknowledgement hints from the driver.

use std::time::Instant;

use super::{ComObject, Phase};
use crate::connection::error::Refusal;
use crate::wire::message::OutMessage;

impl ComObject {
    /// Addresses claimed for the site by someone else (a descriptor, a
    /// third site): kept as fallbacks in preference order (see
    /// [`AddressBook`](crate::connection::address_book::AddressBook)). A site that could not be
    /// called before may open now if it needs a channel.
    pub fn learn_addresses<'a>(&mut self, addresses: impl IntoIterator<Item = &'a str>) {
        if self.book.learn_with(addresses, &self.cfg.plugged) > 0 && self.phase != Phase::Failed {
            self.update();
        }
    }

    /// Queues a message. It comes back with the reason if it can never be
    /// sent: the site failed permanently (`SiteFailed`; the caller adds it to
    /// what the failure handed back, so nothing is lost) or it exceeds what
    /// the peer accepts (`TooLarge`).
    /// (The error is boxed: it is rare, and a large `Err` slows every call.)
    pub fn queue(&mut self, msg: OutMessage) -> Result<(), Box<(Refusal, OutMessage)>> {
        if self.phase == Phase::Failed {
            return Err(Box::new((Refusal::SiteFailed, msg)));
        }
        let ends_wait = self.waits_for_callback_idle();
        self.session.queue(msg)?;
        if ends_wait {
            self.need_ends_callback_wait();
        }
        self.update();
        Ok(())
    }

    /// Queues every message of `batch` (leaving it empty), as
    /// [`queue`](Self::queue) does one by one; a message that can never be
    /// sent goes to `refused` with the reason. What happens next is
    /// re-evaluated once for the whole batch, not per message: this is the
    /// driver's path for what senders queued in bulk.
    pub fn queue_all(
        &mut self,
        batch: &mut Vec<OutMessage>,
        mut refused: impl FnMut(Refusal, OutMessage),
    ) {
        if batch.is_empty() {
            return;
        }
        if self.phase == Phase::Failed {
            for m in batch.drain(..) {
                refused(Refusal::SiteFailed, m);
            }
            return;
        }
        // Only a need appearing changes what happens next (open; stop the
        // linger and reclaim clocks): a batch queued behind others does not.
        let had_need = self.has_need();
        let ends_wait = self.waits_for_callback_idle();
        for m in batch.drain(..) {
            if let Err(r) = self.session.queue(m) {
                let (e, m) = *r;
                refused(e, m);
            }
        }
        if ends_wait && self.has_messages_to_send() {
            self.need_ends_callback_wait();
            self.update();
        } else if !had_need {
            self.update();
        }
    }

    /// The last time an application message was sent, delivered or
    /// acknowledged (the linger rule's idle clock; the slot policy's
    /// "least recently active").
    pub fn last_activity(&self) -> Instant {
        self.idle_since
    }

    /// What [`set_has_refs`](Self::set_has_refs) last said.
    pub fn has_refs(&self) -> bool {
        self.has_refs
    }

    /// Tells whether the local side still holds references to the peer (a
    /// weak close is considered only without, and the peer's weak close is
    /// rejected with; the site is reclaimed only without).
    pub fn set_has_refs(&mut self, has_refs: bool, now: Instant) {
        self.tick(now);
        if self.has_refs != has_refs {
            self.has_refs = has_refs;
            self.session.set_local_need(has_refs);
            self.update();
        }
    }

    /// A connection of the peer joined (`true`) or left (`false`) this
    /// node's waiting line. While one waits, the site is calling
    /// us: its give-up timer does not run (a client that cannot be called
    /// back would otherwise be failed as unreachable while it waits its
    /// turn) and it is not forgotten (its session, with the numbers of the
    /// messages it will resend, is kept for the turn). When the last one
    /// leaves, a site still temporarily failed and without a channel gets
    /// its give-up time afresh.
    pub fn set_peer_in_line(&mut self, waiting: bool, now: Instant) {
        self.tick(now);
        if waiting {
            self.peer_in_line = self.peer_in_line.saturating_add(1);
            self.timers.stop(crate::base::timer::Timer::GiveUp);
        } else {
            self.peer_in_line = self.peer_in_line.saturating_sub(1);
            if self.peer_in_line == 0
                && self.fault == super::FaultState::TempFailed
                && self.working_channel().is_none()
            {
                self.arm_give_up(now);
            }
        }
        self.update_reclaim();
    }

    /// Holds a standalone threshold ack for one turn of the driver's event
    /// loop (see [`Session::hold_acks`](crate::connection::session::Session::hold_acks)).
    pub fn hold_acks(&mut self, hold: bool) {
        self.session.hold_acks(hold);
    }

    /// Makes an explicit ack due at once (before the node shuts down).
    pub fn ack_now(&mut self) {
        self.session.ack_now();
    }
}
