//! The site's fault state as users see it (ok, temporarily failed,
//! permanently failed) and the give-up rule that turns a long temporary
//! failure into a permanent one.

use std::time::Instant;

use super::{Action, ComObject, FaultState, SiteFailure};
use crate::base::coverage::{self, Point};
use crate::base::timer::Timer;

impl ComObject {
    /// Moves to `state` (reported to the driver with `reason`), arming or
    /// stopping the give-up timer.
    pub(super) fn set_fault(&mut self, state: FaultState, reason: String, now: Instant) {
        if self.fault == state || self.fault == FaultState::PermFailed {
            return;
        }
        coverage::hit(match (self.fault, state) {
            (FaultState::Ok, FaultState::TempFailed) => Point::FaultOkToTemp,
            (FaultState::Ok, _) => Point::FaultOkToPerm,
            // From `TempFailed` (a permanent failure never changes).
            (_, FaultState::Ok) => Point::FaultTempToOk,
            _ => Point::FaultTempToPerm,
        });
        self.fault = state;
        match state {
            FaultState::TempFailed => {
                self.up = false;
                self.count().temp_failures += 1;
                self.arm_give_up(now);
            }
            FaultState::Ok | FaultState::PermFailed => self.timers.stop(Timer::GiveUp),
        }
        self.actions.push_back(Action::Fault { state, reason });
    }

    /// Arms the give-up timer as the site becomes temporarily failed: the
    /// configured give-up, or the unreachable one if the site cannot be
    /// called back (and that is shorter).
    pub(super) fn arm_give_up(&mut self, now: Instant) {
        if self.peer_in_line > 0 {
            // The site is calling us: it waits in our line.
            return;
        }
        let unreachable = (!self.book.can_open()).then_some(self.cfg.unreachable_give_up);
        let limit = match (self.cfg.give_up_after, unreachable) {
            (Some(g), Some(u)) => Some((g.min(u), u < g)),
            (g, u) => g.map(|g| (g, false)).or(u.map(|u| (u, true))),
        };
        if let Some((limit, is_unreachable)) = limit {
            self.give_up_unreachable = is_unreachable;
            self.timers.set(Timer::GiveUp, now + limit);
        }
    }

    /// The give-up timer fired: the failure to declare, if any. A site
    /// armed as unreachable that learned an address meanwhile is given the
    /// rest of the configured give-up instead (none: it is not given up).
    pub(super) fn give_up_expired(&mut self, now: Instant) -> Option<SiteFailure> {
        if !self.give_up_unreachable {
            return Some(SiteFailure::GaveUp(
                self.cfg.give_up_after.unwrap_or_default(),
            ));
        }
        if !self.book.can_open() {
            return Some(SiteFailure::Unreachable(self.cfg.unreachable_give_up));
        }
        self.give_up_unreachable = false;
        if let Some(g) = self.cfg.give_up_after {
            let rest = g.saturating_sub(self.cfg.unreachable_give_up);
            self.timers.set(Timer::GiveUp, now + rest);
        }
        None
    }
}
