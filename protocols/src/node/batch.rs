//! A batch's retry rule (one of the node's rules, sans-IO). A
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
//! use sitenet_protocols::node::batch::{may_retry, Tried};
//!
//! assert!(may_retry(Tried::NotSent, 0, 2));
//! assert!(!may_retry(Tried::NotSent, 2, 2), "no retries left");
//! assert!(!may_retry(Tried::MaybeDelivered, 0, 2), "could apply twice");
//! assert!(may_retry(Tried::RequestSiteFailed, 1, 2));
//! ```
//!
//! The wait of a submitted batch ([`BatchWait`], [`WaitAll`]) is here too:
//! how long is left, when the wait is over, which outcomes the report holds.

use std::time::{Duration, Instant};

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
    #[cfg(feature = "planted-bugs")]
    if crate::base::planted::active(crate::base::planted::Bug::RetryMaybeDelivered)
        && tried == Tried::MaybeDelivered
    {
        return tries < max_retry;
    }
    tries < max_retry
        && matches!(
            tried,
            Tried::NotQueuedSiteFailed | Tried::NotSent | Tried::RequestSiteFailed
        )
}

/// Why an outcome was not recorded: the runtime numbers operations itself,
/// so either is a bug in the driver — typed, so it is reported, not a
/// panic on the runtime's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// No operation has this index.
    #[error("no batch operation {index} (the batch has {len})")]
    NoSuchOperation {
        /// The index given.
        index: usize,
        /// The batch's size.
        len: usize,
    },
    /// This operation's outcome was recorded already.
    #[error("batch operation {0} completed twice")]
    AlreadyDone(usize),
}

/// The waiting side of a submitted batch, sans-IO: which operations are
/// done, what each produced, and how long a wait may still last. The
/// runtime only awaits (the next outcome, or a timer of the length this
/// says) and passes its clock in, so the rule — the report holds every
/// outcome known by the deadline, those already taken one at a time
/// included; a wait for all ends when nothing is pending or when one wait
/// found nothing — is tested here on a virtual clock.
///
/// ```
/// use std::time::{Duration, Instant};
/// use sitenet_protocols::node::batch::BatchWait;
///
/// let t0 = Instant::now(); // a virtual clock: nothing here reads one
/// let s = Duration::from_secs;
/// let mut w: BatchWait<&str> = BatchWait::new(2);
/// let all = w.wait_all(t0, s(10));
/// assert_eq!(all.next_wait(t0 + s(4), &w), Some(s(6)));
/// w.completed(1, "b").unwrap();
/// // Past the deadline a wait still looks once (for what already came).
/// assert_eq!(all.next_wait(t0 + s(12), &w), Some(Duration::ZERO));
/// w.completed(0, "a").unwrap();
/// assert_eq!(all.next_wait(t0 + s(12), &w), None, "nothing pending: over");
/// assert_eq!(w.into_results(), [Some("a"), Some("b")]);
/// ```
#[derive(Debug, Clone)]
pub struct BatchWait<R> {
    results: Vec<Option<R>>,
    left: usize,
}

/// A wait for every operation of a batch, started at one instant with one
/// timeout: each of its waits for the next outcome lasts what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitAll {
    deadline: Instant,
}

impl WaitAll {
    /// How long the next wait for an outcome lasts at `now`: what is left
    /// until the deadline (zero past it: one last look at what already
    /// came), or `None` when the wait is over because nothing is pending.
    /// The driver also ends it when a wait returns nothing.
    pub fn next_wait<R>(&self, now: Instant, batch: &BatchWait<R>) -> Option<Duration> {
        (batch.pending() > 0).then(|| self.deadline.saturating_duration_since(now))
    }

    /// The instant the wait ends at.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl<R> BatchWait<R> {
    /// A batch of `n` operations, none done.
    pub fn new(n: usize) -> Self {
        Self {
            results: std::iter::repeat_with(|| None).take(n).collect(),
            left: n,
        }
    }

    /// Operations not done yet.
    pub fn pending(&self) -> usize {
        self.left
    }

    /// How long a wait for the next outcome lasts: `timeout`, or `None` if
    /// nothing is pending (the wait returns at once, with nothing).
    pub fn wait_any(&self, timeout: Duration) -> Option<Duration> {
        (self.left > 0).then_some(timeout)
    }

    /// Starts a wait for every operation at `now`, lasting `timeout` (at
    /// most [`MAX_WAIT`](crate::base::timer::MAX_WAIT): `Duration::MAX` waits
    /// as long as anything does, and does not overflow the clock).
    pub fn wait_all(&self, now: Instant, timeout: Duration) -> WaitAll {
        WaitAll {
            deadline: crate::base::timer::later(now, timeout),
        }
    }

    /// Operation `index` completed with `outcome`: kept for the report.
    pub fn completed(&mut self, index: usize, outcome: R) -> Result<(), WaitError> {
        let len = self.results.len();
        let slot = self
            .results
            .get_mut(index)
            .ok_or(WaitError::NoSuchOperation { index, len })?;
        if slot.is_some() {
            return Err(WaitError::AlreadyDone(index));
        }
        *slot = Some(outcome);
        self.left -= 1;
        Ok(())
    }

    /// Every outcome known, by index (`None`: not done).
    pub fn results(&self) -> &[Option<R>] {
        &self.results
    }

    /// The report: every outcome known, by index.
    pub fn into_results(self) -> Vec<Option<R>> {
        self.results
    }
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

    /// Regression: a wait for all with `Duration::MAX` ("no timeout")
    /// overflowed the clock and panicked; it waits the longest a wait does.
    #[test]
    fn a_wait_for_all_of_never_waits_the_longest_wait() {
        let now = Instant::now();
        let batch = BatchWait::<()>::new(1);
        let wait = batch.wait_all(now, Duration::MAX);
        assert_eq!(
            wait.next_wait(now, &batch),
            Some(crate::base::timer::MAX_WAIT)
        );
    }

    #[test]
    fn a_send_that_may_have_been_delivered_is_never_retried() {
        assert!(!may_retry(Tried::MaybeDelivered, 0, u32::MAX));
    }
    /// A driver on a virtual clock: outcomes arrive at given instants (in
    /// arrival order); a wait of `d` at `now` takes the next one if it
    /// arrives by `now + d` (the clock jumps to it), else the clock jumps
    /// by `d` and the wait returns nothing.
    fn drive(
        arrivals: &[(u64, usize)],
        n: usize,
        timeout: u64,
        any_first: usize,
    ) -> (Vec<Option<usize>>, u64) {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut now = t0;
        let mut next = arrivals.iter().copied().peekable();
        let mut w = BatchWait::new(n);
        let mut wait = |now: &mut Instant, d: Duration, w: &mut BatchWait<usize>| match next.peek()
        {
            Some(&(at, i)) if t0 + ms(at) <= *now + d => {
                next.next();
                *now = (*now).max(t0 + ms(at));
                w.completed(i, i).unwrap();
                true
            }
            _ => {
                *now += d;
                false
            }
        };
        // Some taken one at a time first (wait_any with the full timeout).
        for _ in 0..any_first {
            match w.wait_any(ms(timeout)) {
                Some(d) => {
                    wait(&mut now, d, &mut w);
                }
                None => break,
            }
        }
        let all = w.wait_all(now, ms(timeout));
        while let Some(d) = all.next_wait(now, &w) {
            if !wait(&mut now, d, &mut w) {
                break;
            }
        }
        let ended = now.duration_since(t0).as_millis() as u64;
        (w.into_results(), ended)
    }

    #[test]
    fn wait_all_holds_what_came_by_the_deadline_and_ends_there() {
        // Three of four arrive by 10 s; the fourth at 20 s is not waited for.
        let arrivals = [(1000, 2), (4000, 0), (10_000, 3), (20_000, 1)];
        let (results, ended) = drive(&arrivals, 4, 12_000, 0);
        assert_eq!(results, [Some(0), None, Some(2), Some(3)]);
        assert_eq!(ended, 12_000, "the last wait lasted until the deadline");
        // All by the deadline: over at the last arrival, not at the deadline.
        let (results, ended) = drive(&[(1000, 2), (4000, 0), (10_000, 1)], 3, 60_000, 0);
        assert!(results.iter().all(Option::is_some));
        assert_eq!(ended, 10_000);
    }

    #[test]
    fn the_report_keeps_outcomes_taken_one_at_a_time() {
        let arrivals = [(5, 1), (7, 0), (9, 2)];
        let (results, _) = drive(&arrivals, 3, 100, 2);
        assert_eq!(results, [Some(0), Some(1), Some(2)]);
        // Nothing pending: a wait for one returns at once, wait_all is over.
        let w: BatchWait<()> = BatchWait::new(0);
        assert_eq!(w.wait_any(Duration::from_secs(1)), None);
        assert_eq!(
            w.wait_all(Instant::now(), Duration::from_secs(1))
                .next_wait(Instant::now(), &w),
            None
        );
    }

    #[test]
    fn the_time_left_shrinks_with_the_clock_and_never_goes_negative() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let w: BatchWait<u8> = BatchWait::new(1);
        let all = w.wait_all(t0, s(3));
        assert_eq!(all.deadline(), t0 + s(3));
        assert_eq!(all.next_wait(t0, &w), Some(s(3)));
        assert_eq!(all.next_wait(t0 + s(2), &w), Some(s(1)));
        assert_eq!(all.next_wait(t0 + s(9), &w), Some(Duration::ZERO));
    }

    #[test]
    fn a_bad_index_or_a_second_outcome_is_a_typed_error() {
        let mut w = BatchWait::new(2);
        assert_eq!(
            w.completed(2, 'x'),
            Err(WaitError::NoSuchOperation { index: 2, len: 2 })
        );
        assert_eq!(w.completed(0, 'a'), Ok(()));
        assert_eq!(w.completed(0, 'b'), Err(WaitError::AlreadyDone(0)));
        assert_eq!(w.pending(), 1);
        assert_eq!(w.results(), [Some('a'), None]);
    }
}
