//! A batch's retry rule (issue 19: the node's rules in `protocols`). A
//! batch runs many operations, each a one-way send or a request to a site;
//! an operation whose site failed may be tried again on the site now at
//! its address (a restarted process), up to the batch's `max_retry` — but
//! only when it cannot have been applied at the failed one, or applying it
//! twice is what the caller asked for by retrying:
//!
//! * never queued (the site had already failed), or handed back as never
//!   sent: it was not delivered, so trying again cannot apply it twice;
//! * a request whose site failed before its reply: retried (its effect may
//!   have happened, but the caller never saw the answer and asked for one);
//! * a one-way send that may have been delivered: not retried — it could
//!   be applied twice and nobody would know;
//! * anything else (a timeout, a refusal for size, success): not retried.
//!
//! ```
//! use sitenet_protocols::batch::{may_retry, Tried};
//!
//! assert!(may_retry(Tried::NotSent, 0, 2));
//! assert!(!may_retry(Tried::NotSent, 2, 2), "no retries left");
//! assert!(!may_retry(Tried::MaybeDelivered, 0, 2), "could apply twice");
//! assert!(may_retry(Tried::RequestSiteFailed, 1, 2));
//! ```

/// How one try of a batch operation ended, as the retry rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tried {
    /// It completed (sent and acknowledged, or answered).
    Done,
    /// It was not queued: the site had failed permanently already.
    NotQueuedSiteFailed,
    /// A send handed back as never sent (the site failed first).
    NotSent,
    /// A send handed back as maybe delivered (sent, never acknowledged).
    MaybeDelivered,
    /// A request whose site failed before its reply.
    RequestSiteFailed,
    /// Anything else: a timeout, a refusal (too large, bad priority), the
    /// node shutting down.
    Other,
}

impl Tried {
    /// Every way a try can end (for exhaustive tests).
    pub const ALL: [Tried; 6] = [
        Tried::Done,
        Tried::NotQueuedSiteFailed,
        Tried::NotSent,
        Tried::MaybeDelivered,
        Tried::RequestSiteFailed,
        Tried::Other,
    ];
}

/// Whether an operation whose try ended as `tried`, after `tries` retries
/// already, is tried again under a batch allowing `max_retry`.
pub fn may_retry(tried: Tried, tries: u32, max_retry: u32) -> bool {
    tries < max_retry
        && matches!(
            tried,
            Tried::NotQueuedSiteFailed | Tried::NotSent | Tried::RequestSiteFailed
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ending against every count of retries: retried exactly when
    /// the operation cannot have been applied (or is a request whose
    /// answer was never seen) and retries are left.
    #[test]
    fn retried_exactly_when_it_cannot_apply_twice_and_retries_are_left() {
        for tried in Tried::ALL {
            let safe = matches!(
                tried,
                Tried::NotQueuedSiteFailed | Tried::NotSent | Tried::RequestSiteFailed
            );
            for max in 0..4 {
                for tries in 0..5 {
                    assert_eq!(
                        may_retry(tried, tries, max),
                        safe && tries < max,
                        "{tried:?}, {tries} of {max}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_send_that_may_have_been_delivered_is_never_retried() {
        assert!(!may_retry(Tried::MaybeDelivered, 0, u32::MAX));
    }
}
