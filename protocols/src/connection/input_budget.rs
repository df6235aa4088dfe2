//! What a peer's refused input costs it: a token bucket of refusals per
//! channel, and the pause in reading it earns when it runs dry.
//!
//! A message the node cannot use — a header that does not decode, a type
//! nobody handles, a forwarded request refused — is cheap to send and not
//! cheap to refuse: the decode attempt, a log line, the unhandled hook and,
//! for a request, an error reply the node must queue and write. A peer that
//! sends nothing else would make the node spend its thread and its memory
//! on it as fast as the socket carries it, and an honest handshake
//! waiting for the same thread times out. So the peer pays: each refused
//! message takes a token from its channel's bucket (`burst` tokens, refilled
//! at `per_second`); when the bucket is in debt the driver stops reading the
//! channel until the debt is paid back, at most [`MAX_PAUSE`] at a time
//! (the peer's heartbeats are read between pauses, so the channel is never
//! taken for dead). What an honest peer with a bug refuses now and then
//! never empties the bucket; a flood of junk is read a slice per pause.
//!
//! Sans-IO: the driver passes the time and the number of refusals of each
//! slice of input, and does the pausing.

use std::time::{Duration, Instant};

/// The longest a single pause lasts: well under any silence timeout worth
/// having, so the peer's heartbeats are still read while it pays.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Refusals a fresh channel may earn at once (`NodeConfig::refused_input_burst`'s default).
pub const DEFAULT_BURST: u32 = 1024;

/// Refusals per second a channel may earn in the long run
/// (`NodeConfig::refused_input_rate`'s default).
pub const DEFAULT_RATE: u32 = 256;

/// One channel's bucket of refusals.
#[derive(Debug, Clone)]
pub struct RefusalBudget {
    burst: f64,
    per_second: f64,
    /// Tokens left (negative: the debt).
    tokens: f64,
    /// When `tokens` was last refilled.
    at: Instant,
    /// Refusals charged in all, and pauses earned (for statistics).
    refused: u64,
    pauses: u64,
}

impl RefusalBudget {
    /// A full bucket of `burst` tokens refilled at `per_second` (each at
    /// least 1), as of `now`.
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            burst,
            per_second: f64::from(per_second.max(1)),
            tokens: burst,
            at: now,
            refused: 0,
            pauses: 0,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
    }

    /// Charges `refused` refusals at `now`. Returns when reading may
    /// resume if the bucket is now in debt (a pause counted), or `None`
    /// if reading goes on.
    pub fn charge(&mut self, refused: u64, now: Instant) -> Option<Instant> {
        self.refill(now);
        self.refused = self.refused.saturating_add(refused);
        // A debt of more than an hour's refill is paid as slowly as one
        // of an hour (and stays a finite number).
        self.tokens = (self.tokens - refused as f64).max(-3600.0 * self.per_second);
        let resume = self.resume_at(now)?;
        self.pauses += 1;
        Some(resume)
    }

    /// When reading may resume, if the bucket is in debt at `now`: once
    /// the debt is paid back, or after [`MAX_PAUSE`], whichever comes first.
    pub fn resume_at(&mut self, now: Instant) -> Option<Instant> {
        self.refill(now);
        if self.tokens >= 0.0 {
            return None;
        }
        let owed = (-self.tokens / self.per_second).min(MAX_PAUSE.as_secs_f64());
        Some(now + Duration::from_secs_f64(owed))
    }

    /// Refusals charged since the channel opened.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Pauses earned since the channel opened.
    pub fn pauses(&self) -> u64 {
        self.pauses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_within_the_burst_never_pause() {
        let t0 = Instant::now();
        let mut b = RefusalBudget::new(100, 10, t0);
        assert_eq!(b.charge(60, t0), None);
        assert_eq!(b.charge(40, t0), None);
        assert_eq!(b.pauses(), 0);
        assert_eq!(b.refused(), 100);
    }

    #[test]
    fn a_debt_pauses_until_it_is_paid_back() {
        let t0 = Instant::now();
        let mut b = RefusalBudget::new(100, 10, t0);
        // 5 refusals beyond the burst: half a second at 10 a second.
        let resume = b.charge(105, t0).expect("in debt");
        assert_eq!(resume - t0, Duration::from_millis(500));
        assert_eq!(b.pauses(), 1);
        // Still owed a little before then; nothing owed after.
        assert!(b.resume_at(t0 + Duration::from_millis(400)).is_some());
        assert_eq!(b.resume_at(resume), None);
    }

    #[test]
    fn a_large_debt_pauses_at_most_max_pause_at_a_time() {
        let t0 = Instant::now();
        let mut b = RefusalBudget::new(100, 10, t0);
        let resume = b.charge(100_000, t0).expect("in debt");
        assert_eq!(resume - t0, MAX_PAUSE);
        // The debt is not forgiven: the next slice pauses again.
        let resume = b.resume_at(resume).expect("still in debt");
        assert_eq!(resume - t0, 2 * MAX_PAUSE);
    }

    #[test]
    fn the_bucket_refills_to_its_burst_and_no_further() {
        let t0 = Instant::now();
        let mut b = RefusalBudget::new(100, 10, t0);
        assert_eq!(b.charge(100, t0), None);
        // A long quiet time refills only the burst.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.charge(100, later), None);
        assert!(b.charge(1, later).is_some());
    }

    #[test]
    fn extremes_do_not_panic() {
        let t0 = Instant::now();
        let mut b = RefusalBudget::new(0, 0, t0);
        assert!(b.charge(u64::MAX, t0).is_some());
        assert!(b.charge(u64::MAX, t0).is_some());
        // A clock that goes backwards refills nothing.
        let earlier = t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0);
        assert!(b.resume_at(earlier).is_some());
    }
}
