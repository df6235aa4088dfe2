//! The close protocol of a working channel (docs/architecture.md, "The design": close):
//! where the channel stands, why it ends, and the close frames still owed
//! to the peer — kept as bounded flags, never a queue, so a peer that
//! streams close frames and never reads cannot grow our memory.

use std::time::Instant;

use crate::base::timer::Timer;
use crate::connection::error::ProtocolError;
use crate::wire::frame::FrameKind;

use super::SessionEvent;

/// Where the working channel stands in the close protocol.
///
/// ```text
///            begin_close_weak           CLOSE_ACCEPT / crossing CLOSE_WEAK / CLOSE_HARD
///   Open ─────────────────────> ClosingWeak ───────────────> (CloseChannel event)
///     │  <──── CLOSE_REJECT ────────┘   └── timer ──────────> (CloseChannel event)
///     │      begin_close_hard           CLOSE_ACCEPT / crossing close / timer
///     ├───────────────────────> ClosingHard ───────────────> (CloseChannel event)
///     │  peer CLOSE_WEAK, no local need → answer CLOSE_ACCEPT
///     ├───────────────────────> PeerClosing ─ peer closes / timer ─> (CloseChannel event)
///     │  peer CLOSE_HARD → answer CLOSE_ACCEPT
///     └───────────────────────> PeerClosing
///        peer CLOSE_WEAK with local need → answer CLOSE_REJECT, stay Open
/// ```
///
/// In every state but `Open` no new application message is sent; acks,
/// heartbeats and close frames still are. Every wait ends by its deadline
/// (the session's `Timer::Close`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosePhase {
    /// Working normally.
    Open,
    /// We sent CLOSE_WEAK; the peer may accept or reject.
    ClosingWeak {
        /// When we give up waiting.
        deadline: Instant,
    },
    /// We sent CLOSE_HARD; the peer must accept.
    ClosingHard {
        /// When we give up waiting.
        deadline: Instant,
    },
    /// We accepted the peer's close; it closes the channel.
    PeerClosing {
        /// The peer's close was hard (it will reconnect; we wait for it).
        hard: bool,
        /// When we close it ourselves.
        deadline: Instant,
    },
    /// The close protocol finished; the driver is closing the channel. No
    /// data goes out until the next channel.
    Done,
}

impl ClosePhase {
    /// The deadline of a wait, if the phase is one.
    pub fn deadline(&self) -> Option<Instant> {
        match *self {
            ClosePhase::Open | ClosePhase::Done => None,
            ClosePhase::ClosingWeak { deadline }
            | ClosePhase::ClosingHard { deadline }
            | ClosePhase::PeerClosing { deadline, .. } => Some(deadline),
        }
    }

    /// A short name for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            ClosePhase::Open => "working",
            ClosePhase::ClosingWeak { .. } => "closing weakly",
            ClosePhase::ClosingHard { .. } => "closing hard",
            ClosePhase::PeerClosing { .. } => "waiting for the peer to close",
            ClosePhase::Done => "closed",
        }
    }
}

/// Why the session asks the driver to close the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Our weak close was accepted (or crossed the peer's): the channel is no
    /// longer needed. Reopen only when a need arises.
    WeakDone,
    /// Our hard close completed: reopen when resources allow.
    HardDone,
    /// The peer closed weakly and we accepted.
    PeerWeak,
    /// The peer closed hard (it was short of resources) and will reconnect;
    /// wait for it rather than reconnecting at once.
    PeerHard,
    /// A close-protocol wait ran out.
    Timeout,
}

/// Close frames owed to the peer, one flag each, written in a fixed order
/// (the reference clear before the weak close it announces; answers before
/// our own close). Receiving the same close frame twice sets a flag twice:
/// the state is bounded whatever the peer sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Control {
    clear_reference: bool,
    reject: bool,
    accept: bool,
    close_weak: bool,
    close_hard: bool,
    leaving: bool,
}

impl Control {
    /// The frames in the order they are written.
    const ORDER: [FrameKind; 6] = [
        FrameKind::ClearReference,
        FrameKind::CloseReject,
        FrameKind::CloseAccept,
        FrameKind::CloseWeak,
        FrameKind::CloseHard,
        FrameKind::Leaving,
    ];

    fn flag(&mut self, kind: FrameKind) -> &mut bool {
        match kind {
            FrameKind::ClearReference => &mut self.clear_reference,
            FrameKind::CloseReject => &mut self.reject,
            FrameKind::CloseAccept => &mut self.accept,
            FrameKind::CloseWeak => &mut self.close_weak,
            FrameKind::CloseHard => &mut self.close_hard,
            FrameKind::Leaving => &mut self.leaving,
            other => unreachable!("{other:?} is not a close frame"),
        }
    }

    pub(crate) fn set(&mut self, kind: FrameKind) {
        *self.flag(kind) = true;
    }

    /// The next frame owed, if any.
    pub(crate) fn next(&self) -> Option<FrameKind> {
        let mut c = *self;
        Self::ORDER.into_iter().find(|&k| *c.flag(k))
    }

    pub(crate) fn clear(&mut self, kind: FrameKind) {
        *self.flag(kind) = false;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.next().is_none()
    }

    /// Number of frames owed (at most six).
    pub(crate) fn len(&self) -> usize {
        let mut c = *self;
        Self::ORDER.into_iter().filter(|&k| *c.flag(k)).count()
    }
}

/// What a received close frame leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseStep {
    /// Nothing beyond the new phase and owed frames.
    None,
    /// The close protocol finished.
    Finish(CloseReason),
    /// The peer rejected our weak close.
    Rejected,
    /// The peer cleared its reference to us.
    ClearedReference,
}

/// The close protocol's state: the phase and the frames owed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloseState {
    pub(crate) phase: ClosePhase,
    pub(crate) control: Control,
}

impl Default for CloseState {
    fn default() -> Self {
        Self {
            phase: ClosePhase::Open,
            control: Control::default(),
        }
    }
}

impl CloseState {
    /// A close frame from the peer, in our phase; `need` says whether the
    /// local side still needs the channel; `deadline` bounds a new wait.
    pub(crate) fn on_frame(
        &mut self,
        kind: FrameKind,
        need: bool,
        deadline: Instant,
    ) -> Result<CloseStep, ProtocolError> {
        Ok(match (self.phase, kind) {
            (_, FrameKind::ClearReference) => CloseStep::ClearedReference,
            (ClosePhase::Open, FrameKind::CloseWeak) => {
                if need {
                    self.control.set(FrameKind::CloseReject);
                } else {
                    self.control.set(FrameKind::CloseAccept);
                    self.phase = ClosePhase::PeerClosing {
                        hard: false,
                        deadline,
                    };
                }
                CloseStep::None
            }
            (ClosePhase::Open, FrameKind::CloseHard)
            | (ClosePhase::PeerClosing { hard: false, .. }, FrameKind::CloseHard) => {
                self.control.set(FrameKind::CloseAccept);
                self.phase = ClosePhase::PeerClosing {
                    hard: true,
                    deadline,
                };
                CloseStep::None
            }
            // Crossing weak closes count as an accept (Mozart's W4 left both
            // sides waiting for ever).
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseWeak | FrameKind::CloseAccept) => {
                CloseStep::Finish(CloseReason::WeakDone)
            }
            // A hard close from the peer while we close weakly: grant it.
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseHard) => {
                CloseStep::Finish(CloseReason::PeerHard)
            }
            (
                ClosePhase::ClosingHard { .. },
                FrameKind::CloseAccept | FrameKind::CloseHard | FrameKind::CloseWeak,
            ) => CloseStep::Finish(CloseReason::HardDone),
            (ClosePhase::ClosingWeak { .. }, FrameKind::CloseReject) => {
                self.phase = ClosePhase::Open;
                CloseStep::Rejected
            }
            // The reject answers a weak close that a hard close superseded;
            // the hard close must still be granted.
            (ClosePhase::ClosingHard { .. }, FrameKind::CloseReject) => CloseStep::None,
            // Frames the peer sent before it saw our close ended.
            (ClosePhase::Done, _) => CloseStep::None,
            // The peer repeats a close we already accepted: nothing more to do.
            (ClosePhase::PeerClosing { .. }, FrameKind::CloseWeak | FrameKind::CloseHard) => {
                CloseStep::None
            }
            (state, kind) => {
                return Err(ProtocolError::Unexpected {
                    kind,
                    state: state.name(),
                });
            }
        })
    }
}

use super::push_event;

impl super::Session {
    /// Where the working channel stands in the close protocol.
    pub fn close_phase(&self) -> ClosePhase {
        self.link
            .as_ref()
            .map_or(ClosePhase::Open, |l| l.close.phase)
    }

    /// Close frames owed to the peer and not yet written (at most five:
    /// they are flags, whatever the peer sends).
    pub fn pending_control_frames(&self) -> usize {
        self.link.as_ref().map_or(0, |l| l.close.control.len())
    }

    /// Tells the session whether the local side still holds references to
    /// the peer (a weak close from the peer is then rejected).
    pub fn set_local_need(&mut self, need: bool) {
        self.local_need = need;
    }

    pub(super) fn has_need(&self) -> bool {
        self.local_need || self.pending_messages() > 0
    }

    /// Starts a weak close ("no longer needed"). Refused (false) without a
    /// working channel, while another close runs, or while messages are
    /// queued or unacknowledged.
    pub fn begin_close_weak(&mut self, now: Instant) -> bool {
        let pending = self.pending_messages() > 0;
        let deadline = now + self.cfg.close_timeout;
        let Some(l) = self.link.as_deref_mut() else {
            return false;
        };
        if l.close.phase != ClosePhase::Open || pending {
            return false;
        }
        l.close.control.set(FrameKind::ClearReference);
        l.close.control.set(FrameKind::CloseWeak);
        l.timers.set(Timer::Close, deadline);
        l.close.phase = ClosePhase::ClosingWeak { deadline };
        true
    }

    /// Starts a hard close ("resources are short"), which the peer must grant.
    /// Queued and unacknowledged messages stay for the next channel.
    pub fn begin_close_hard(&mut self, now: Instant) -> bool {
        // From working or a weak close only: a channel the peer is already
        // closing, or whose close is done, is going away anyway.
        let deadline = now + self.cfg.close_timeout;
        let Some(l) = self.link.as_deref_mut() else {
            return false;
        };
        if !matches!(
            l.close.phase,
            ClosePhase::Open | ClosePhase::ClosingWeak { .. }
        ) {
            return false;
        }
        l.close.control.set(FrameKind::CloseHard);
        l.timers.set(Timer::Close, deadline);
        l.close.phase = ClosePhase::ClosingHard { deadline };
        true
    }

    pub(super) fn on_close_frame(
        &mut self,
        now: Instant,
        kind: FrameKind,
    ) -> Result<(), ProtocolError> {
        let need = self.has_need();
        let deadline = now + self.cfg.close_timeout;
        let Some(l) = self.link.as_deref_mut() else {
            return Ok(());
        };
        let before = l.close.phase;
        let step = l.close.on_frame(kind, need, deadline)?;
        if let (ClosePhase::Open, ClosePhase::PeerClosing { deadline, .. })
        | (
            ClosePhase::PeerClosing { hard: false, .. },
            ClosePhase::PeerClosing { deadline, .. },
        ) = (before, l.close.phase)
        {
            if before != l.close.phase {
                l.timers.set(Timer::Close, deadline);
            }
        }
        match step {
            CloseStep::None => {}
            CloseStep::Finish(reason) => self.finish_close(reason),
            CloseStep::Rejected => {
                l.timers.stop(Timer::Close);
                push_event(&mut self.events, SessionEvent::WeakCloseRejected);
            }
            CloseStep::ClearedReference => {
                let last = self.events.as_ref().and_then(|e| e.back());
                if last != Some(&SessionEvent::PeerClearedReference) {
                    push_event(&mut self.events, SessionEvent::PeerClearedReference);
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish_close(&mut self, reason: CloseReason) {
        if let Some(l) = &mut self.link {
            l.close.phase = ClosePhase::Done;
            l.timers.stop(Timer::Close);
        }
        push_event(&mut self.events, SessionEvent::CloseChannel(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_flags_are_bounded_and_ordered() {
        let mut c = Control::default();
        for _ in 0..1000 {
            c.set(FrameKind::CloseReject);
        }
        c.set(FrameKind::CloseWeak);
        c.set(FrameKind::ClearReference);
        assert_eq!(c.len(), 3);
        let mut order = Vec::new();
        while let Some(k) = c.next() {
            order.push(k);
            c.clear(k);
        }
        assert_eq!(
            order,
            vec![
                FrameKind::ClearReference,
                FrameKind::CloseReject,
                FrameKind::CloseWeak
            ]
        );
        assert!(c.is_empty());
    }
}
