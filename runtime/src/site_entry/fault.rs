//! [`Fault`]: a site's fault state, the monitors watching it and why it
//! is temporarily failed; [`FaultEvent`]: one transition, as a monitor
//! hears it.

use sitenet_protocols::FaultState;

/// A site's fault state, the monitors watching it and why it is
/// temporarily failed, under one lock.
#[derive(Debug)]
pub(crate) struct Fault {
    state: FaultState,
    /// Monitors and the reason of a temporary failure (boxed: most sites
    /// have neither, and every idle site would carry the room).
    more: Option<Box<FaultMore>>,
}

#[derive(Debug, Default)]
struct FaultMore {
    monitors: Vec<futures::channel::mpsc::UnboundedSender<FaultEvent>>,
    /// Why the site is temporarily failed, while it is (for a request
    /// that times out meanwhile: `RequestError::Unreachable`).
    unreachable: Option<String>,
}

impl Fault {
    /// A site nothing is known against yet: Ok, no monitor.
    pub(super) fn ok() -> Self {
        Self {
            state: FaultState::Ok,
            more: None,
        }
    }

    /// The state monitors were last told.
    pub(super) fn told(&self) -> FaultState {
        self.state
    }

    /// Moves to `state`, telling every monitor (and keeping `reason` while
    /// the site is temporarily failed). Returns false if unchanged, or if
    /// the site failed permanently already.
    pub(super) fn set(&mut self, state: FaultState, reason: &str) -> bool {
        if self.state == state || self.state == FaultState::PermFailed {
            return false;
        }
        self.state = state;
        let unreachable = (state == FaultState::TempFailed).then(|| reason.to_string());
        if unreachable.is_some() || self.more.is_some() {
            let more = self.more.get_or_insert_with(Box::default);
            more.unreachable = unreachable;
            let ev = FaultEvent {
                state,
                reason: reason.to_string(),
            };
            more.monitors
                .retain(|tx| tx.unbounded_send(ev.clone()).is_ok());
        }
        self.tidy();
        true
    }

    /// Why the site is temporarily failed, if a reason was kept.
    pub(super) fn unreachable(&self) -> Option<String> {
        self.more.as_ref()?.unreachable.clone()
    }

    /// A new monitor, whose first event is `first`; no transition after
    /// it is missed (the caller holds the lock the transitions take).
    pub(super) fn watch(
        &mut self,
        first: FaultEvent,
    ) -> futures::channel::mpsc::UnboundedReceiver<FaultEvent> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let _ = tx.unbounded_send(first);
        let more = self.more.get_or_insert_with(Box::default);
        // Monitors whose streams were dropped go as a new one comes.
        more.monitors.retain(|m| !m.is_closed());
        more.monitors.push(tx);
        rx
    }

    /// Drops the box once it holds nothing.
    fn tidy(&mut self) {
        if self
            .more
            .as_ref()
            .is_some_and(|m| m.monitors.is_empty() && m.unreachable.is_none())
        {
            self.more = None;
        }
    }
}

/// The reason of a monitor's first event on a site no channel has
/// reached yet: `Ok` only means nothing failed so far.
pub const NOT_CONTACTED: &str = "not contacted yet";

/// One transition of a site's fault state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The new state.
    pub state: FaultState,
    /// Why: for the initial report, empty, or [`NOT_CONTACTED`] on a site
    /// no channel has reached yet.
    pub reason: String,
}
