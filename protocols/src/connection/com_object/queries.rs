//! What a driver reads of a ComObject: its state, named after what it
//! waits for; its channel or open attempt (and the wait in the peer's
//! line); its addresses, fault state, session and counters; whether it
//! has need of a channel. Nothing here changes the machine.

use std::time::Instant;

use super::{ComObject, ComState, ComStats, FaultState, Phase};
use crate::connection::address_book::AddressBook;
use crate::connection::com_object::ChannelId;
use crate::connection::session::{ClosePhase, Session};
use crate::slots::ChannelReport;

impl ComObject {
    /// The state, named after what it waits for.
    pub fn state(&self) -> ComState {
        match self.phase {
            Phase::Closed => ComState::Closed,
            Phase::WaitingForSlot => ComState::WaitingForSlot,
            Phase::Opening { .. } => ComState::Opening,
            Phase::Working { .. } => match self.session.close_phase() {
                ClosePhase::Open => ComState::Working,
                ClosePhase::ClosingWeak { .. } => ComState::ClosingWeak,
                ClosePhase::ClosingHard { .. } => ComState::ClosingHard,
                ClosePhase::PeerClosing { .. } | ClosePhase::Done => ComState::WaitingForDisconnect,
            },
            Phase::WaitingForCallback | Phase::InLine { .. } => ComState::WaitingForCallback,
            Phase::Backoff => ComState::Backoff,
            Phase::Failed => ComState::Failed,
        }
    }

    /// The addresses the peer can be called at, best first (empty: it
    /// only connects to us).
    pub fn addresses(&self) -> &AddressBook {
        &self.book
    }

    /// The working channel, if any.
    pub fn working_channel(&self) -> Option<ChannelId> {
        match self.phase {
            Phase::Working { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The open attempt in progress, if any (its sequence number): one
    /// opening, or one waiting in the peer's line.
    pub fn opening(&self) -> Option<u64> {
        match self.phase {
            Phase::Opening { attempt } | Phase::InLine { attempt, .. } => Some(attempt),
            _ => None,
        }
    }

    /// True while our open attempt waits in the peer's line.
    pub fn in_line(&self) -> bool {
        matches!(self.phase, Phase::InLine { .. })
    }

    /// Since when our open attempt waits in the peer's line, if it does:
    /// the driver puts it in the slot controller's report of the attempt's
    /// slot ([`ChannelReport::in_peer_line_since`](crate::slots::ChannelReport::in_peer_line_since)),
    /// so that a node short of slots can take this one back
    /// ([`leave_peer_line`](Self::leave_peer_line)).
    pub fn in_line_since(&self) -> Option<Instant> {
        match self.phase {
            Phase::InLine { since, .. } => Some(since),
            _ => None,
        }
    }

    /// What the slot controller is told of the slot our open attempt holds
    /// while it waits in the peer's line, if it does: not a working
    /// channel (never `closeable`), waiting since then, after this many
    /// attempts in a row gave way ([`line_yields`](Self::line_yields)).
    /// The runtime's driver and the simulator's report it alike.
    pub fn line_wait_report(&self) -> Option<ChannelReport> {
        let since = self.in_line_since()?;
        let session = self.session();
        Some(ChannelReport {
            closeable: false,
            last_active: self.last_activity(),
            mid_message: false,
            replies_expected: self.awaiting_replies(),
            buffers_empty: true,
            queues_empty: session.queued_bytes() == 0,
            callable: self.addresses().can_open(),
            served: session.stats_ref().served(),
            served_from: None,
            in_peer_line_since: Some(since),
            line_yields: self.line_yields(),
        })
    }

    /// How many attempts to this site in a row left the peer's line to
    /// give their slot back, since a channel last worked (at most 255):
    /// the driver reports it with the wait
    /// ([`ChannelReport::line_yields`](crate::slots::ChannelReport::line_yields)),
    /// and each doubles how long the next attempt waits before its slot
    /// may be taken, so that an attempt that keeps being sent to the back
    /// of a long line still reaches its front.
    pub fn line_yields(&self) -> u8 {
        self.line_yields
    }

    /// True once the site failed permanently (or was merged away).
    pub fn is_failed(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// The site's fault state.
    pub fn fault_state(&self) -> FaultState {
        self.fault
    }

    /// The session (queues, numbering, counters), read-only.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Counters.
    pub fn stats(&self) -> ComStats {
        self.stats.as_deref().copied().unwrap_or_default()
    }

    /// True if messages are queued, partly sent or unacknowledged, or
    /// replies are awaited.
    pub fn has_need(&self) -> bool {
        self.awaiting_replies || self.has_messages_to_send()
    }

    /// True if messages wait to go to the peer (queued, partly sent, or
    /// sent and not acknowledged: all go on the next channel). Unlike
    /// awaited replies, which the peer brings when it calls back, only a
    /// channel we open moves these.
    pub(super) fn has_messages_to_send(&self) -> bool {
        self.session.pending_messages() > 0
    }

    /// Waiting for a peer that closed hard to call back, with nothing of
    /// our own to send: a message queued now ends the wait
    /// (`need_ends_callback_wait`). Asked before queueing, on the phase
    /// first, so that a send outside the wait costs one compare.
    pub(super) fn waits_for_callback_idle(&self) -> bool {
        self.phase == Phase::WaitingForCallback && !self.has_messages_to_send()
    }
}
