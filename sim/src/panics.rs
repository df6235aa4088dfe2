//! A panic in a site's code — a machine's assertion, or an application's
//! own `assert!` in `start`, a callback or its `check` — ends the run as a
//! violation at the step it happened in, with its message, rather than
//! unwinding out of the simulator: a search then names the seed that
//! panicked (and can shrink it) like any other failing one. The panic hook
//! still prints where it happened.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::Sim;

impl Sim {
    /// Runs `f` on the simulator; a panic in it becomes the run's
    /// violation (and `None`), after which nothing more of the run is run.
    pub(crate) fn guarded<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(r) => Some(r),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                self.violation(format!("a site's code panicked: {message}"));
                None
            }
        }
    }
}
