//! Every wait of the protocol is a variant of one [`Timer`] enum, and a
//! [`TimerTable`] holds one deadline per variant.
//!
//! A state machine sets, moves and stops its timers as it changes state;
//! its `poll_timeout` is the table's [`next`](TimerTable::next), and its
//! `handle_timeout(now)` takes the expired ones with
//! [`expire`](TimerTable::expire). Taking consumes the deadline: a timer that
//! fired is stopped until the machine sets it again — to a *later* instant —
//! so `poll_timeout` never returns the same past deadline twice and a driver
//! that re-arms its one timer to `poll_timeout` cannot spin. (Before this
//! table a heartbeat that could not be written because the output was full,
//! and the silence event, were due again on every call.)
//!
//! Time is always an argument: nothing here reads a clock.

use std::time::{Duration, Instant};

/// The longest any wait lasts: 10^9 seconds (about 31 years). A longer
/// one, such as `Duration::MAX` given for "no timeout", is taken as this:
/// a deadline the clock holds rather than an overflow (which panics).
pub const MAX_WAIT: Duration = Duration::from_secs(1_000_000_000);

/// `now` plus `d`, at most [`MAX_WAIT`] later: where a deadline is made
/// from a duration a caller gave.
///
/// ```
/// use std::time::{Duration, Instant};
/// use sitenet_protocols::base::timer::{later, MAX_WAIT};
///
/// let now = Instant::now();
/// assert_eq!(later(now, Duration::from_secs(5)), now + Duration::from_secs(5));
/// assert_eq!(later(now, Duration::MAX), now + MAX_WAIT); // no overflow
/// ```
pub fn later(now: Instant, d: Duration) -> Instant {
    now + d.min(MAX_WAIT)
}

/// The shortest period of a wait that repeats (the heartbeat, the slot
/// table's preemption tick): 1 ms. At zero the machine is due again at the
/// very instant it handled the wait, so a driver that follows
/// `poll_timeout` spins there for ever (a session with a zero heartbeat
/// interval wrote a heartbeat on every turn of its driver, at one
/// instant). A shorter period given is taken as this.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// Raises each of `periods` to at least [`MIN_PERIOD`]; true if one was
/// shorter. What a configuration does to the periods of its repeating
/// waits.
///
/// ```
/// use std::time::Duration;
/// use sitenet_protocols::base::timer::{at_least_min_period, MIN_PERIOD};
///
/// let (mut heartbeat, mut tick) = (Duration::ZERO, Duration::from_secs(1));
/// assert!(at_least_min_period([&mut heartbeat, &mut tick]));
/// assert_eq!((heartbeat, tick), (MIN_PERIOD, Duration::from_secs(1)));
/// ```
pub fn at_least_min_period<const N: usize>(periods: [&mut Duration; N]) -> bool {
    let mut changed = false;
    for d in periods {
        changed |= *d < MIN_PERIOD;
        *d = (*d).max(MIN_PERIOD);
    }
    changed
}

/// Bounds each of `waits` to [`MAX_WAIT`]; true if one was longer. What
/// every configuration with waits in it does to the ones it was given.
pub fn bound<const N: usize>(waits: [&mut Duration; N]) -> bool {
    let mut changed = false;
    for d in waits {
        changed |= *d > MAX_WAIT;
        *d = (*d).min(MAX_WAIT);
    }
    changed
}

/// One wait of the protocol. Each variant has at most one deadline per state
/// machine (one session, one ComObject).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Timer {
    /// Send an explicit ack at the latest this long after the first
    /// unacknowledged message arrived (when no frame carried one).
    AckDelay = 0,
    /// Nothing was written for the heartbeat interval: write a heartbeat.
    Heartbeat = 1,
    /// Nothing was heard for the silence timeout: presume the channel dead.
    Silence = 2,
    /// A wait of the close protocol (our close unanswered, or the peer's
    /// granted close not followed by its disconnect).
    Close = 3,
    /// The open protocol of a channel did not finish in time.
    Handshake = 4,
    /// A partly received message made no progress for too long: abandon it
    /// and close the channel (its budget goes back to innocent peers).
    ReassemblyIdle = 5,
    /// Wait before opening a channel again after a failed or lost one.
    ReconnectBackoff = 6,
    /// No references and nothing pending for the linger time: close weakly.
    Linger = 7,
    /// Temporarily failed for the configured give-up time: fail for good.
    GiveUp = 8,
    /// No references, nothing pending and no channel for the linger time:
    /// the site's entry may be forgotten (its memory returned).
    Reclaim = 9,
    /// Level 1 waited unserved for the promotion interval: promote it.
    BackgroundPromotion = 10,
    /// The slot controller is past its weak limit (or at it, with sites
    /// waiting): preempt one channel slot.
    Preemption = 11,
}

impl Timer {
    /// Every timer, in table order.
    pub const ALL: [Timer; 12] = [
        Timer::AckDelay,
        Timer::Heartbeat,
        Timer::Silence,
        Timer::Close,
        Timer::Handshake,
        Timer::ReassemblyIdle,
        Timer::ReconnectBackoff,
        Timer::Linger,
        Timer::GiveUp,
        Timer::Reclaim,
        Timer::BackgroundPromotion,
        Timer::Preemption,
    ];

    /// Number of timers (the table's size).
    pub const COUNT: usize = Self::ALL.len();

    /// A short name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Timer::AckDelay => "ack_delay",
            Timer::Heartbeat => "heartbeat",
            Timer::Silence => "silence",
            Timer::Close => "close",
            Timer::Handshake => "handshake",
            Timer::ReassemblyIdle => "reassembly_idle",
            Timer::ReconnectBackoff => "reconnect_backoff",
            Timer::Linger => "linger",
            Timer::GiveUp => "give_up",
            Timer::BackgroundPromotion => "background_promotion",
            Timer::Reclaim => "reclaim",
            Timer::Preemption => "preemption",
        }
    }
}

/// One optional deadline per [`Timer`] of the range `FIRST .. FIRST + N`
/// (by default every timer). A state machine that uses only some timers
/// holds a table of just their range, so thousands of idle sites do not
/// each carry deadlines they can never set: the session's are
/// [`SessionTimers`], the ComObject's [`ComTimers`].
///
/// Using a timer outside the table's range is a bug in the machine, caught
/// by its tests: it panics (an index out of bounds).
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use sitenet_protocols::{SessionTimers, Timer};
///
/// let t0 = Instant::now(); // a virtual clock: the table never reads one
/// let ms = Duration::from_millis;
/// let mut timers = SessionTimers::default();
/// timers.set(Timer::Heartbeat, t0 + ms(1000));
/// timers.set_if_earlier(Timer::AckDelay, t0 + ms(20));
/// timers.set_if_earlier(Timer::AckDelay, t0 + ms(50)); // later: ignored
/// assert_eq!(timers.next(), Some((Timer::AckDelay, t0 + ms(20))));
///
/// // At 2 s both are due, earliest first; taking them stops them.
/// let fired: Vec<Timer> = timers.expire(t0 + ms(2000)).collect();
/// assert_eq!(fired, [Timer::AckDelay, Timer::Heartbeat]);
/// assert_eq!(timers.next_deadline(), None); // never the same past deadline twice
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerTable<const FIRST: usize = 0, const N: usize = { Timer::COUNT }> {
    data: [Option<Instant>; N],
}

/// The session's timers: ack delay, heartbeat, silence, close, handshake,
/// reassembly idle.
pub type SessionTimers = TimerTable<0, 6>;

/// The ComObject's timers: reconnect backoff, linger, give-up, reclaim.
pub type ComTimers = TimerTable<6, 4>;

impl<const FIRST: usize, const N: usize> Default for TimerTable<FIRST, N> {
    fn default() -> Self {
        Self { data: [None; N] }
    }
}

impl<const FIRST: usize, const N: usize> TimerTable<FIRST, N> {
    /// The timers this table holds, in variant order.
    fn timers() -> &'static [Timer] {
        &Timer::ALL[FIRST..FIRST + N]
    }

    fn slot(timer: Timer) -> usize {
        debug_assert!(
            (FIRST..FIRST + N).contains(&(timer as usize)),
            "timer {} is not in this table",
            timer.name()
        );
        timer as usize - FIRST
    }

    /// Sets (or moves) `timer` to fire at `at`.
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.data[Self::slot(timer)] = Some(at);
    }

    /// Sets `timer` to `at` unless it is already set to an earlier instant
    /// (for "at the latest" waits such as the ack delay).
    pub fn set_if_earlier(&mut self, timer: Timer, at: Instant) {
        let slot = &mut self.data[Self::slot(timer)];
        if slot.is_none_or(|t| at < t) {
            *slot = Some(at);
        }
    }

    /// Sets `timer` to `at` only if it is not set.
    pub fn set_if_unset(&mut self, timer: Timer, at: Instant) {
        self.data[Self::slot(timer)].get_or_insert(at);
    }

    /// The deadline of `timer`, if set.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.data[Self::slot(timer)]
    }

    /// True if `timer` is set.
    pub fn is_set(&self, timer: Timer) -> bool {
        self.data[Self::slot(timer)].is_some()
    }

    /// Stops `timer`.
    pub fn stop(&mut self, timer: Timer) {
        self.data[Self::slot(timer)] = None;
    }

    /// Stops every timer.
    pub fn clear(&mut self) {
        self.data = [None; N];
    }

    /// The earliest deadline and its timer (the lowest variant on a tie).
    pub fn next(&self) -> Option<(Timer, Instant)> {
        Self::timers()
            .iter()
            .filter_map(|&t| self.get(t).map(|at| (t, at)))
            .min_by_key(|&(t, at)| (at, t))
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.data.iter().flatten().min().copied()
    }

    /// True if `timer` is set and its deadline is at or before `now`.
    pub fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// Takes `timer` if it expired at `now`: it is stopped and `true` is
    /// returned, so the caller acts on it exactly once.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        if self.is_expired(timer, now) {
            self.stop(timer);
            true
        } else {
            false
        }
    }

    /// Takes every timer expired at `now`, earliest first (each is stopped).
    /// The iterator owns what it returns (no borrow of the table, no
    /// allocation: this runs at every heartbeat of every channel).
    pub fn expire(&mut self, now: Instant) -> impl Iterator<Item = Timer> {
        let mut due = [(now, Timer::ALL[FIRST]); N];
        let mut k = 0;
        for (&t, slot) in Self::timers().iter().zip(&mut self.data) {
            if let Some(at) = slot.filter(|&at| at <= now) {
                due[k] = (at, t);
                k += 1;
                *slot = None;
            }
        }
        due[..k].sort_unstable();
        due.into_iter().take(k).map(|(_, t)| t)
    }
}

/// Many deadlines of one kind of wait, one per key (the node's pending
/// requests: one deadline each, thousands at once). It keeps
/// [`TimerTable`]'s contract so a driver treats both alike — its
/// `poll_timeout` is [`next_deadline`](Self::next_deadline), its timeout
/// handling [`expire`](Self::expire), and taking a deadline consumes it, so
/// the same past deadline is never returned twice and a driver that sleeps
/// until `next_deadline` cannot spin. The table by variant cannot hold
/// these: its size is fixed, one slot per [`Timer`].
///
/// The owner knows each key's deadline (it keeps it with the key's state),
/// so [`stop`](Self::stop) takes it too: one ordered set entry per key, no
/// second map.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use sitenet_protocols::base::timer::TimerQueue;
///
/// let t0 = Instant::now(); // a virtual clock: the queue never reads one
/// let s = Duration::from_secs;
/// let mut q = TimerQueue::default();
/// assert!(q.set(7u64, t0 + s(5)), "the first deadline is the earliest");
/// assert!(q.set(8, t0 + s(1)), "earlier: a sleeping driver must wake");
/// assert!(!q.set(9, t0 + s(9)));
/// q.stop(7, t0 + s(5));
/// assert_eq!(q.next(), Some((8, t0 + s(1))));
/// assert_eq!(q.expire(t0 + s(9)).collect::<Vec<_>>(), [8, 9]);
/// assert_eq!(q.next_deadline(), None); // consumed: never twice
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerQueue<K: Ord> {
    /// Deadlines, earliest first (ties by key).
    deadlines: std::collections::BTreeSet<(Instant, K)>,
}

impl<K: Ord> Default for TimerQueue<K> {
    fn default() -> Self {
        Self {
            deadlines: std::collections::BTreeSet::new(),
        }
    }
}

impl<K: Ord + Copy> TimerQueue<K> {
    /// Sets `key`'s deadline `at`. Returns true if it is now the earliest
    /// (a driver sleeping until a later one must wake). A key set twice
    /// must be [`stop`](Self::stop)ped in between: its owner says which
    /// deadline it held.
    pub fn set(&mut self, key: K, at: Instant) -> bool {
        self.deadlines.insert((at, key));
        self.deadlines.first() == Some(&(at, key))
    }

    /// Stops `key`'s deadline `at` (nothing if it is not set).
    pub fn stop(&mut self, key: K, at: Instant) {
        self.deadlines.remove(&(at, key));
    }

    /// Stops every deadline.
    pub fn clear(&mut self) {
        self.deadlines.clear();
    }

    /// The earliest deadline and its key (the lowest key on a tie).
    pub fn next(&self) -> Option<(K, Instant)> {
        self.deadlines.first().map(|&(at, k)| (k, at))
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|d| d.0)
    }

    /// How many deadlines are set.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// No deadline is set.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Takes every deadline at or before `now`, earliest first (ties by
    /// key); each is stopped as it is taken.
    pub fn expire(&mut self, now: Instant) -> impl Iterator<Item = K> + '_ {
        std::iter::from_fn(move || {
            let &(at, key) = self.deadlines.first()?;
            if at > now {
                return None;
            }
            self.deadlines.pop_first();
            Some(key)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fired_timer_is_consumed() {
        let t0 = Instant::now();
        let mut tt: TimerTable = TimerTable::default();
        tt.set(Timer::Heartbeat, t0 + Duration::from_secs(1));
        tt.set(Timer::AckDelay, t0 + Duration::from_millis(20));
        assert_eq!(
            tt.next(),
            Some((Timer::AckDelay, t0 + Duration::from_millis(20)))
        );
        let now = t0 + Duration::from_secs(2);
        let fired: Vec<_> = tt.expire(now).collect();
        assert_eq!(fired, vec![Timer::AckDelay, Timer::Heartbeat]);
        // Never the same past deadline again.
        assert_eq!(tt.next(), None);
        assert_eq!(tt.expire(now).count(), 0);
    }

    #[test]
    fn set_if_earlier_keeps_the_earlier_deadline() {
        let t0 = Instant::now();
        let mut tt: TimerTable = TimerTable::default();
        tt.set_if_earlier(Timer::AckDelay, t0 + Duration::from_millis(20));
        tt.set_if_earlier(Timer::AckDelay, t0 + Duration::from_millis(30));
        assert_eq!(
            tt.get(Timer::AckDelay),
            Some(t0 + Duration::from_millis(20))
        );
        tt.set_if_earlier(Timer::AckDelay, t0 + Duration::from_millis(10));
        assert_eq!(
            tt.get(Timer::AckDelay),
            Some(t0 + Duration::from_millis(10))
        );
        tt.set_if_unset(Timer::AckDelay, t0);
        assert_eq!(
            tt.get(Timer::AckDelay),
            Some(t0 + Duration::from_millis(10))
        );
    }

    #[test]
    fn ties_go_to_the_lower_variant_and_take_expired_is_once() {
        let t0 = Instant::now();
        let mut tt: TimerTable = TimerTable::default();
        tt.set(Timer::Linger, t0);
        tt.set(Timer::Silence, t0);
        assert_eq!(tt.next(), Some((Timer::Silence, t0)));
        assert!(tt.take_expired(Timer::Linger, t0));
        assert!(!tt.take_expired(Timer::Linger, t0));
        assert!(!tt.is_set(Timer::Linger));
        assert_eq!(Timer::ALL.len(), Timer::COUNT);
        for (i, t) in Timer::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i, "{}", t.name());
        }
    }

    #[test]
    fn a_range_table_holds_only_its_timers() {
        let t0 = Instant::now();
        let mut com = ComTimers::default();
        assert_eq!(std::mem::size_of::<ComTimers>(), 4 * 16);
        com.set(Timer::Reclaim, t0 + Duration::from_secs(2));
        com.set(Timer::ReconnectBackoff, t0 + Duration::from_secs(1));
        assert_eq!(
            com.next(),
            Some((Timer::ReconnectBackoff, t0 + Duration::from_secs(1)))
        );
        let fired: Vec<_> = com.expire(t0 + Duration::from_secs(3)).collect();
        assert_eq!(fired, [Timer::ReconnectBackoff, Timer::Reclaim]);
        let mut session = SessionTimers::default();
        session.set(Timer::ReassemblyIdle, t0);
        assert_eq!(session.next_deadline(), Some(t0));
    }

    #[test]
    #[should_panic]
    fn a_timer_outside_the_table_is_a_bug() {
        SessionTimers::default().set(Timer::Reclaim, Instant::now());
    }
    #[test]
    fn a_queue_takes_due_keys_earliest_first_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut q = TimerQueue::default();
        assert!(q.set(3u64, t0 + s(3)));
        assert!(
            !q.set(5, t0 + s(3)),
            "a tie with a higher key is not earlier"
        );
        assert!(q.set(2, t0 + s(1)));
        assert_eq!(q.next(), Some((2, t0 + s(1))));
        assert_eq!(q.expire(t0).count(), 0, "nothing due yet");
        // Ties by key; each taken once.
        assert_eq!(q.expire(t0 + s(3)).collect::<Vec<_>>(), [2, 3, 5]);
        assert!(q.is_empty());
        assert_eq!(q.expire(t0 + s(3)).count(), 0);
        // Stopping the wrong deadline stops nothing; the right one does.
        q.set(4, t0 + s(4));
        q.stop(4, t0 + s(5));
        assert_eq!(q.len(), 1);
        q.stop(4, t0 + s(4));
        assert_eq!(q.next_deadline(), None);
        q.set(5, t0);
        q.clear();
        assert!(q.is_empty());
    }

    /// Partly consumed: an iterator dropped early leaves the rest set.
    #[test]
    fn a_queue_expire_taken_in_part_keeps_the_rest() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        for k in 0..5u64 {
            q.set(k, t0 + Duration::from_millis(k));
        }
        assert_eq!(q.expire(t0 + Duration::from_secs(1)).take(2).count(), 2);
        assert_eq!(q.next(), Some((2, t0 + Duration::from_millis(2))));
    }
}
