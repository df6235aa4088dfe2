//! The slot table's limits and knobs ([`SlotConfig`]): the weak and hard
//! limits, the preemption tick, the waiting line's bound and hold, and the
//! turns of [`Admission::Share`].

use std::time::Duration;

use super::Admission;

pub use crate::base::limits::RESERVED_FDS;

/// Largest hard limit derived from the descriptor limit: beyond it the
/// transport memory (two buffers per slot) matters more than descriptors.
pub const MAX_DERIVED_HARD: usize = 16_384;

/// The waiting line's length when the limits are given rather than derived
/// ([`SlotConfig::new`]): each entry holds a connection (a descriptor, on
/// TCP) and its two handshake rings.
pub const DEFAULT_LINE: usize = 1024;

/// The limits and the preemption tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotConfig {
    /// Slots a ComObject may take to connect (the stable size). At most
    /// `hard - 1`: one slot is always left for accepts.
    pub weak: usize,
    /// Slots never exceeded, accepts included.
    pub hard: usize,
    /// Time between two preemption ticks while slots are short.
    pub preempt_interval: Duration,
    /// Accepted peers that may wait in line for a slot at most;
    /// 0: none, every accept past the hard limit is refused. Each holds a
    /// connection — a descriptor on TCP — beside the hard limit's.
    pub line: usize,
    /// How long a peer may wait in line; then its connection is closed and
    /// it retries after its backoff.
    pub line_hold: Duration,
    /// Who gives a slot up while peers wait in line (see [`Admission`]).
    pub admission: Admission,
    /// [`Admission::Share`]: a holder gives way after this long while peers
    /// wait — at most; a long line shortens the turns (see `rotation`).
    pub turn: Duration,
    /// [`Admission::Share`]: the shortest turn, however long the line (a
    /// turn costs the peer a reconnect).
    pub turn_min: Duration,
    /// [`Admission::Share`]: a holder that has exchanged this many messages
    /// with its site since its grant has had its turn, however short: a
    /// peer that moves a hundred times the
    /// messages per millisecond of another does not keep its slot for the
    /// same time. A long line shortens it as it shortens the turn
    /// (`SlotTable::turn_work_now`).
    pub turn_work: u64,
    /// [`Admission::Share`]: how long one round of the whole line should
    /// take. Turns shrink to `rotation × hard / peers in line` (within
    /// `turn_min..=turn`), so 10,000 peers on 30 slots each get a turn in
    /// seconds rather than minutes.
    pub rotation: Duration,
    /// [`Admission::Share`]: a peer that has waited in line this long is let
    /// in next even if others have been served less (the least served go
    /// first otherwise, and a peer that does nothing stays least served).
    /// Above `rotation`, or the fast are let back before the slow catch
    /// up; below `line_hold`, or it never applies.
    pub max_wait: Duration,
    /// [`Admission::Share`]: a holder with nothing in flight that has
    /// carried no message for this long gives way while peers wait (and a
    /// new holder keeps its slot at least this long).
    pub turn_idle: Duration,
    /// An open attempt of ours that has waited this long in a full peer's
    /// line gives its slot back when a site (or a peer) waits here for one
    /// ([`PreemptReason::LineWait`](super::PreemptReason::LineWait)): after
    /// the quiet channels, before the busy ones. Short enough that a node
    /// whose slots all wait in others' lines does not stall its own sites
    /// (nodes that wait in each other's lines that way would stall
    /// together until a give-up deadline); long enough that an attempt
    /// near the front of a line is not sent to the back at every tick.
    pub line_yield: Duration,
}

/// A limit that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotConfigError {
    /// The hard limit leaves no slot to connect and one to accept.
    #[error("hard slot limit {0} is below 2: one slot to connect and one to accept are needed")]
    HardTooSmall(usize),
    /// The weak limit is zero: no site could ever connect.
    #[error("weak slot limit is 0: no site could connect; use at least 1")]
    WeakZero,
}

impl SlotConfig {
    /// This configuration with every wait at most
    /// [`MAX_WAIT`](crate::base::timer::MAX_WAIT) and the preemption tick's
    /// period at least [`MIN_PERIOD`](crate::base::timer::MIN_PERIOD):
    /// `Duration::MAX` given for "never" made a deadline past what the clock
    /// holds, and the table panicked where it armed its timer; a zero
    /// period made the tick due again at the instant it ran, for as long as
    /// slots were short. [`SlotTable::new`](super::SlotTable::new) takes it
    /// so.
    pub fn bounded(mut self) -> Self {
        crate::base::timer::at_least_min_period([&mut self.preempt_interval]);
        crate::base::timer::bound([
            &mut self.preempt_interval,
            &mut self.line_hold,
            &mut self.turn,
            &mut self.turn_min,
            &mut self.rotation,
            &mut self.max_wait,
            &mut self.turn_idle,
            &mut self.line_yield,
        ]);
        self
    }

    /// Limits as given; the weak limit is lowered to `hard - 1` if needed
    /// (as in Mozart: one slot is always kept for accepts).
    ///
    /// # Example
    ///
    /// ```
    /// use sitenet_protocols::slots::{SlotConfig, SlotConfigError};
    ///
    /// let cfg = SlotConfig::new(100, 50)?;
    /// assert_eq!((cfg.weak, cfg.hard), (49, 50)); // one slot kept for accepts
    /// assert_eq!(SlotConfig::new(1, 1), Err(SlotConfigError::HardTooSmall(1)));
    /// assert_eq!(SlotConfig::new(0, 10), Err(SlotConfigError::WeakZero));
    ///
    /// // Derived from RLIMIT_NOFILE: 64 descriptors kept, 120 for pending
    /// // handshakes, 120 for the waiting line, 3/4 of the rest to connect.
    /// let cfg = SlotConfig::from_fd_limit(1024);
    /// assert_eq!((cfg.weak, cfg.hard, cfg.line), (540, 720, 120));
    /// # Ok::<(), SlotConfigError>(())
    /// ```
    pub fn new(weak: usize, hard: usize) -> Result<Self, SlotConfigError> {
        if hard < 2 {
            return Err(SlotConfigError::HardTooSmall(hard));
        }
        if weak == 0 {
            return Err(SlotConfigError::WeakZero);
        }
        Ok(Self {
            weak: weak.min(hard - 1),
            hard,
            preempt_interval: Duration::from_millis(20),
            line: DEFAULT_LINE,
            line_hold: Duration::from_secs(30),
            admission: Admission::default(),
            turn: Duration::from_millis(500),
            turn_min: Duration::from_millis(20),
            turn_work: 16_384,
            rotation: Duration::from_secs(5),
            max_wait: Duration::from_secs(20),
            turn_idle: Duration::from_millis(50),
            line_yield: Duration::from_secs(1),
        })
    }

    /// Limits derived from the process's descriptor limit (RLIMIT_NOFILE's
    /// soft value): the hard limit leaves [`RESERVED_FDS`] descriptors for
    /// everything else, [`handshake_fds`](crate::slots::admission::handshake_fds)
    /// for pending handshakes, which hold a descriptor but no slot, and as
    /// many for the waiting line (at most [`MAX_DERIVED_HARD`]); the weak
    /// limit is three quarters of it, the rest kept for accepts.
    pub fn from_fd_limit(nofile: u64) -> Self {
        let pending = crate::slots::admission::handshake_fds(nofile) as u64;
        let hard =
            (nofile.saturating_sub(RESERVED_FDS + 2 * pending) as usize).clamp(2, MAX_DERIVED_HARD);
        let weak = (hard * 3 / 4).max(1);
        let mut cfg = Self::new(weak, hard).expect("derived limits are valid");
        cfg.line = pending as usize;
        cfg
    }
}
