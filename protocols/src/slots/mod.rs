//! The TransController's decisions, sans-IO: how many channels (file
//! descriptors, in practice) a process may hold, who gets the next one, and
//! which channel gives its slot back when they run short.
//!
//! * A **weak** and a **hard** limit. A ComObject that wants to connect
//!   ([`request`](SlotTable::request)) gets a slot at once only below the
//!   weak limit and when nobody waits; otherwise it waits in a FIFO line, so
//!   every waiter is served eventually and in order. An accepted channel
//!   whose peer has presented itself ([`accept`](SlotTable::accept), when
//!   the channel is adopted after NEGOTIATE) may take the slots between the
//!   weak and the hard limit for a while; past the hard limit it is
//!   refused, and the driver closes it at once rather than leave it
//!   hanging. A connection still in its handshake holds no slot and is no
//!   slot pressure: it is bounded by [`crate::slots::admission`] instead.
//! * **The waiting line**. A peer that presented itself when
//!   every slot up to the hard limit is in use is not refused: if it can
//!   wait (it has the `line` capability) it is told to wait and queues in
//!   a bounded line of accepted peers
//!   ([`accept_or_wait`](SlotTable::accept_or_wait); `line.rs` has the
//!   bounds and the order: first come under [`Admission::Fifo`], least
//!   served first under [`Admission::Share`]), and is let in when a slot
//!   frees. Only a full line, or a peer that cannot wait, is refused as
//!   before.
//! * A slot given back ([`release`](SlotTable::release)) goes to a line
//!   first — the connects' line below the weak limit, the accepted
//!   peers' line below the hard limit, the one that waited longest when
//!   both wait: a site whose channel was just preempted and that asks
//!   again queues behind the sites that waited, instead of taking its slot
//!   straight back.
//! * **Sources** (`sources.rs`). An accepted channel and a place in line
//!   are charged to the source address of the connection
//!   ([`accept_or_wait_from`](SlotTable::accept_or_wait_from)), since a
//!   peer chooses its site id freely: while another source wants slots, a
//!   source past its [`fair_share`] is served after the others, gives its
//!   slots back first, and loses its newest place in a full line to a
//!   newcomer from elsewhere. One source alone may still use every slot
//!   and every place.
//! * **Preemption.** While the slots in use exceed the weak limit (or reach
//!   it with sites waiting), the [`Timer::Preemption`] tick asks the
//!   [`PreemptionPolicy`] for one victim per tick; the driver closes that
//!   channel with CLOSE_HARD, and its slot comes back when the channel is
//!   gone. Slots already being preempted do not count, so one shortage does
//!   not preempt twice. While peers wait in the line, the
//!   [`Admission`] policy decides who gives way: `Fifo` leaves it to the
//!   preemption policy, `Share` rotates short turns (`turns.rs`).
//! * **An attempt waiting in a peer's line gives way.** Our own open
//!   attempt that a full peer told to wait holds its slot (its connection
//!   is open) and moves nothing. When slots are short here, one that has
//!   waited [`SlotConfig::line_yield`] is taken back after the idle
//!   holders and before those at work ([`PreemptReason::LineWait`]): the
//!   owner leaves the peer's line and asks for a slot again. Without it a
//!   node whose slots all wait in others' lines serves nobody until a
//!   give-up deadline, and nodes that wait in each other's lines stall
//!   together (found by the simulator: 4 seeds in 300 of a congested
//!   20-site run never converged).
//!
//! Time is an argument and nothing here does I/O: the runtime's
//! TransController drives it, and tests drive it with a virtual clock.

mod accepting;
pub mod admission;
mod answers;
mod config;
pub mod dial_bound;
mod lanes;
mod line;
mod policy;
mod sources;
mod turns;
mod work;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

pub use answers::{Accepted, Grant, SlotStats, Tick};
pub use config::{SlotConfig, SlotConfigError, DEFAULT_LINE, MAX_DERIVED_HARD, RESERVED_FDS};
pub use policy::{
    by_name, Candidate, ChannelReport, DefaultPolicy, Naive, PreemptReason, PreemptionPolicy,
};
pub use sources::{fair_share, Source};
pub use turns::Admission;

use crate::base::coverage::{hit, Point};
use crate::base::timer::{Timer, TimerTable};

/// A slot held: since when, and the service its site had when the table
/// first saw its report (the start of its turn's work).
#[derive(Debug, Clone, Copy)]
struct Held {
    granted_at: Instant,
    served_from: Option<u64>,
    /// The thread its channel runs on, if known (`lanes.rs`).
    lane: Option<u32>,
    /// Who it is charged to (`sources.rs`).
    source: Source,
}

/// See the module documentation.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use sitenet_protocols::slots::{
///     ChannelReport, DefaultPolicy, Grant, PreemptReason, SlotConfig, SlotTable,
/// };
///
/// let t0 = Instant::now(); // the virtual clock
/// let cfg = SlotConfig::new(2, 3)?;
/// let mut slots = SlotTable::new(cfg, Box::new(DefaultPolicy::default()));
/// let Grant::Now(first) = slots.request(t0) else { unreachable!() };
/// let Grant::Now(_second) = slots.request(t0) else { unreachable!() };
/// // At the weak limit a third site waits in line, and a preemption is due.
/// let Grant::Queued(ticket) = slots.request(t0) else { unreachable!() };
/// assert!(slots.short());
/// assert_eq!(slots.poll_timeout(), Some(t0 + cfg.preempt_interval));
///
/// // The tick: the driver describes each holder's channel (both quiet here).
/// let now = t0 + Duration::from_secs(1);
/// let quiet = ChannelReport {
///     closeable: true,
///     last_active: t0,
///     mid_message: false,
///     replies_expected: false,
///     buffers_empty: true,
///     queues_empty: true,
///     callable: true,
///     served: 0,
///     served_from: None,
///     in_peer_line_since: None,
///     line_yields: 0,
/// };
/// let tick = slots.handle_timeout(now, |_holder| Some(quiet));
/// assert_eq!(tick.victims, [(first, PreemptReason::LeastRecentlyActive)]);
/// // The driver closed that channel with CLOSE_HARD: its slot goes to the waiter.
/// let (served, _holder) = slots.release(first, now).expect("the waiter is served");
/// assert_eq!(served, ticket);
/// assert_eq!((slots.in_use(), slots.waiting()), (2, 0));
/// # Ok::<(), sitenet_protocols::slots::SlotConfigError>(())
/// ```
#[derive(Debug)]
pub struct SlotTable {
    cfg: SlotConfig,
    policy: Box<dyn PreemptionPolicy>,
    /// Holder id → its grant. Ids increase, so this is grant order.
    holders: BTreeMap<u64, Held>,
    /// Waiters, first come first served: (ticket, lane of the channel it
    /// will open).
    waiting: VecDeque<(u64, Option<u32>)>,
    /// Accepted peers waiting for a slot.
    line: line::Line,
    /// Holders asked to give their slot back.
    preempting: BTreeSet<u64>,
    /// Of those, our open attempts leaving a peer's line
    /// ([`PreemptReason::LineWait`]): their slots go to the accepted
    /// peers' line first.
    yielding: BTreeSet<u64>,
    /// Working holders (not giving way) per lane (`lanes.rs`).
    load: lanes::LaneLoad,
    /// Holders per source (`sources.rs`).
    held_by: HashMap<Source, usize>,
    next_id: u64,
    timers: TimerTable,
    stats: SlotStats,
}

impl SlotTable {
    /// An empty table.
    pub fn new(cfg: SlotConfig, policy: Box<dyn PreemptionPolicy>) -> Self {
        Self {
            cfg: cfg.bounded(),
            policy,
            holders: BTreeMap::new(),
            waiting: VecDeque::new(),
            line: line::Line::default(),
            preempting: BTreeSet::new(),
            yielding: BTreeSet::new(),
            load: lanes::LaneLoad::default(),
            held_by: HashMap::new(),
            next_id: 1,
            timers: TimerTable::default(),
            stats: SlotStats::default(),
        }
    }

    /// The limits.
    pub fn config(&self) -> SlotConfig {
        self.cfg
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.holders.len()
    }

    /// Sites waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Accepted peers waiting in line.
    pub fn in_line(&self) -> usize {
        self.line.len()
    }

    /// Who gives a slot up while peers wait (see [`Admission`]).
    pub fn admission(&self) -> Admission {
        self.cfg.admission
    }

    /// Changes the admission policy (a node configured with one sets it on
    /// the controller it uses); takes effect at the next tick.
    pub fn set_admission(&mut self, admission: Admission, now: Instant) {
        self.cfg.admission = admission;
        self.arm(now);
    }

    /// Counters.
    pub fn stats(&self) -> SlotStats {
        self.stats
    }

    /// The holders, in grant order (oldest first): what the driver describes
    /// to [`handle_timeout`](Self::handle_timeout).
    pub fn holders(&self) -> impl Iterator<Item = u64> + '_ {
        self.holders.keys().copied()
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    fn grant(&mut self, now: Instant, lane: Option<u32>, source: Source) -> u64 {
        let h = self.id();
        self.holders.insert(
            h,
            Held {
                granted_at: now,
                served_from: None,
                lane,
                source,
            },
        );
        *self.held_by.entry(source).or_default() += 1;
        self.load.add(lane);
        self.stats.granted += 1;
        self.stats.peak_in_use = self.stats.peak_in_use.max(self.holders.len());
        h
    }

    /// Slots held by channels charged to `source`.
    pub fn held_by(&self, source: Source) -> usize {
        self.held_by.get(&source).copied().unwrap_or(0)
    }

    /// Places in line held by `source`.
    pub fn in_line_from(&self, source: Source) -> usize {
        self.line.places(source)
    }

    /// The sources that hold a slot or a place in line, `also` among them.
    fn wanting(&self, also: Option<Source>) -> usize {
        let extra = also.filter(|s| !self.held_by.contains_key(s) && self.line.places(*s) == 0);
        let waiting_only = self
            .line
            .sources()
            .filter(|s| !self.held_by.contains_key(s))
            .count();
        self.held_by.len() + waiting_only + usize::from(extra.is_some())
    }

    /// True if `source` holds more than its [`fair_share`] of the slots
    /// (a source with no address never does).
    fn past_share(&self, source: Source, share: usize) -> bool {
        source.has_address() && self.held_by(source) > share
    }

    /// Checks the table's own books against its holders: every holder
    /// marked as giving way, or as leaving a peer's line, holds a slot; each
    /// lane's count of working holders, and each source's count of
    /// holders, is what the holders say. A mark left on a slot already
    /// free would grow for ever and, for the holders giving way, shrink
    /// what the table thinks it can grant. For audits (the simulator's):
    /// it walks every holder.
    pub fn check_books(&self) -> Result<(), String> {
        for (set, name) in [
            (&self.preempting, "giving way"),
            (&self.yielding, "leaving a line"),
        ] {
            if let Some(h) = set.iter().find(|h| !self.holders.contains_key(h)) {
                return Err(format!("slot {h} is marked {name} but held by nobody"));
            }
        }
        let mut lanes: BTreeMap<u32, usize> = BTreeMap::new();
        let mut sources: HashMap<Source, usize> = HashMap::new();
        for (h, held) in &self.holders {
            if let Some(l) = held.lane.filter(|_| !self.preempting.contains(h)) {
                *lanes.entry(l).or_default() += 1;
            }
            *sources.entry(held.source).or_default() += 1;
        }
        for (&lane, &n) in &lanes {
            if self.load.load(lane) != n {
                return Err(format!(
                    "lane {lane} counts {} working holders, its holders say {n}",
                    self.load.load(lane)
                ));
            }
        }
        if self.load.lanes() != lanes.len() {
            return Err(format!(
                "{} lanes count working holders, {} have them",
                self.load.lanes(),
                lanes.len()
            ));
        }
        if sources != self.held_by {
            return Err(format!(
                "holders per source {:?}, the holders say {sources:?}",
                self.held_by
            ));
        }
        Ok(())
    }

    /// A ComObject wants a slot to connect.
    pub fn request(&mut self, now: Instant) -> Grant {
        self.request_on(now, None)
    }

    /// [`request`](Self::request) for a channel that will run on `lane`
    /// (the thread its owner runs on; see [`release`](Self::release)). A
    /// site waiting to connect is served in order, whatever its lane; the
    /// lane counts once it holds the slot.
    pub fn request_on(&mut self, now: Instant, lane: Option<u32>) -> Grant {
        if self.waiting.is_empty() && self.in_use() < self.cfg.weak {
            // Our own initiative: charged to no remote source.
            hit(Point::SlotGrantNow);
            return Grant::Now(self.grant(now, lane, Source::of(None)));
        }
        hit(Point::SlotQueued);
        let w = self.id();
        self.waiting.push_back((w, lane));
        self.stats.queued += 1;
        self.stats.peak_waiting = self.stats.peak_waiting.max(self.waiting.len());
        self.arm(now);
        Grant::Queued(w)
    }

    /// A waiter no longer wants its slot (its need went away). False if it
    /// was not waiting (already served: release that slot instead).
    pub fn cancel(&mut self, waiter: u64) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|&(w, _)| w != waiter);
        let cancelled = before != self.waiting.len();
        if cancelled {
            hit(Point::SlotCancelled);
        }
        cancelled
    }

    /// Slot `holder` is free again (its channel is gone). The slot goes to
    /// a line at once: below the weak limit, a site waiting to connect;
    /// below the hard limit, the next accepted peer in line (the head, or
    /// under [`Admission::Share`] the least served — of a lane with fewer
    /// working holders than the least served's own, if one has peers in
    /// line: the holders stay spread over the threads, `lanes.rs`) — or,
    /// while both wait, the line whose head has waited longest (tickets of
    /// both lines come from one counter), so neither line starves the
    /// other; but a slot our attempt in a peer's line gave back
    /// ([`PreemptReason::LineWait`]) goes to the accepted peers' line
    /// first. Returned as (its ticket, its new holder id).
    pub fn release(&mut self, holder: u64, now: Instant) -> Option<(u64, u64)> {
        let held = self.holders.remove(&holder)?;
        if let Some(n) = self.held_by.get_mut(&held.source) {
            *n -= 1;
            if *n == 0 {
                self.held_by.remove(&held.source);
            }
        }
        #[cfg(feature = "planted-bugs")]
        let kept = crate::base::planted::active(crate::base::planted::Bug::ReleaseKeepsPreempting);
        #[cfg(not(feature = "planted-bugs"))]
        let kept = false;
        if (kept && self.preempting.contains(&holder)) || self.preempting.remove(&holder) {
            hit(Point::SlotReleasePreempted);
        } else {
            self.load.sub(held.lane);
        }
        let yielded = self.yielding.remove(&holder);
        let connect = self.waiting.front().map(|&(w, _)| w);
        let accept = self.line.front().filter(|_| self.in_use() < self.cfg.hard);
        let served = match (connect, accept) {
            // A slot an attempt in a peer's line gave back goes to a peer
            // waiting here: given to another attempt of ours, it would
            // likely wait in a line too, and when every node's slots wait
            // in others' lines, only letting a peer in moves anything.
            (Some(c), Some(a)) if c < a && !yielded => {
                hit(Point::SlotToWaiter);
                self.pop_waiting()
            }
            (Some(_), None) if self.in_use() < self.cfg.weak => {
                hit(Point::SlotToWaiter);
                self.pop_waiting()
            }
            (_, Some(_)) => {
                let least_served = self.cfg.admission == Admission::Share;
                let share = fair_share(self.cfg.hard, self.wanting(None));
                let within = |s| !self.past_share(s, share);
                let next = self
                    .line
                    .next(least_served, now, self.cfg.max_wait, &self.load, within);
                let t = next.and_then(|t| Some((t, self.line.take(t)?)));
                self.stats.grants += u64::from(t.is_some());
                hit(match t {
                    Some(_) => Point::SlotToLine,
                    None => Point::SlotToNobody,
                });
                t
            }
            _ => {
                hit(Point::SlotToNobody);
                None
            }
        };
        let granted = served.map(|(w, (lane, source))| (w, self.grant(now, lane, source)));
        self.arm(now);
        granted
    }

    /// The first site waiting to connect, with its lane; its slot is
    /// charged to no remote source (our own initiative).
    fn pop_waiting(&mut self) -> Option<(u64, (Option<u32>, Source))> {
        let (w, lane) = self.waiting.pop_front()?;
        Some((w, (lane, Source::of(None))))
    }

    /// [`Admission::Share`]'s turn now: [`SlotConfig::turn`], shortened so
    /// that the whole line is served within about [`SlotConfig::rotation`],
    /// never below [`SlotConfig::turn_min`].
    pub fn turn_now(&self) -> Duration {
        let c = &self.cfg;
        let line = u32::try_from(self.line.len().max(1)).unwrap_or(u32::MAX);
        let slots = u32::try_from(c.hard).unwrap_or(u32::MAX);
        let per_round = c.rotation.checked_mul(slots).unwrap_or(Duration::MAX) / line;
        per_round.min(c.turn).max(c.turn_min.min(c.turn))
    }

    /// [`Admission::Share`]'s work per turn now: [`SlotConfig::turn_work`]
    /// shortened as the turn is ([`turn_now`](Self::turn_now) /
    /// [`SlotConfig::turn`]), at least 1.
    pub fn turn_work_now(&self) -> u64 {
        let c = &self.cfg;
        let (now, full) = (self.turn_now().as_micros(), c.turn.as_micros().max(1));
        let work = u128::from(c.turn_work) * now / full;
        u64::try_from(work).unwrap_or(u64::MAX).max(1)
    }

    /// Slots in use, not counting those already being preempted.
    fn effective(&self) -> usize {
        self.in_use() - self.preempting.len()
    }

    /// Under [`Admission::Share`] with peers in line: how many more holders
    /// should give way (one per peer waiting, less those already asked).
    fn turns_wanted(&self) -> Option<usize> {
        (self.cfg.admission == Admission::Share && !self.line.is_empty())
            .then(|| self.line.len().saturating_sub(self.preempting.len()))
    }

    /// True while a preemption is due: past the weak limit, or at it with
    /// sites waiting to connect; under [`Admission::Share`], instead, while
    /// fewer holders are giving way than peers wait in line.
    pub fn short(&self) -> bool {
        if let Some(want) = self.turns_wanted() {
            return want > 0;
        }
        let e = self.effective();
        e > self.cfg.weak || (e >= self.cfg.weak && !self.waiting.is_empty())
    }

    fn arm(&mut self, now: Instant) {
        if self.short() {
            self.timers
                .set_if_unset(Timer::Preemption, now + self.cfg.preempt_interval);
        } else {
            self.timers.stop(Timer::Preemption);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the
    /// preemption tick, or the first line entry's hold time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let line = self.line.deadline(self.cfg.line_hold);
        match (self.timers.next_deadline(), line) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The tick's victims among `candidates`: under [`Admission::Share`]
    /// with peers in line, the turns over ([`turns::share`]); otherwise the
    /// policy's victim if it is idle, else our longest wait in a peer's
    /// line, else the policy's victim at work.
    fn victims(&self, now: Instant, candidates: &[Candidate]) -> Vec<(u64, PreemptReason)> {
        let line_yield = self.cfg.line_yield;
        match self.turns_wanted() {
            Some(want) => {
                let turn = (self.turn_now(), self.cfg.turn_idle, self.turn_work_now());
                turns::share(now, candidates, want, turn, line_yield)
            }
            None => match self.policy.choose(now, candidates) {
                Some(v)
                    if candidates
                        .iter()
                        .any(|c| c.holder == v.0 && c.channel.is_idle()) =>
                {
                    vec![v]
                }
                busy => turns::line_waiters(now, candidates, line_yield)
                    .next()
                    .or(busy)
                    .into_iter()
                    .collect(),
            },
        }
    }

    /// The tick: line entries past their hold time leave it
    /// ([`Tick::expired`]); then, if slots are still short, victims among
    /// the holders whose channel `describe` reports (a holder it returns
    /// `None` for — a channel still in its handshake — is not a
    /// candidate): under [`Admission::Share`] with peers in line, as many
    /// holders as have had their turn or gone quiet, up to one per peer
    /// waiting; otherwise the preemption policy's one. Either way an open
    /// attempt of ours that has waited [`SlotConfig::line_yield`] in a
    /// peer's line gives way after the idle holders
    /// ([`ChannelReport::is_idle`]) and before those at work
    /// ([`PreemptReason::LineWait`]). The driver closes each victim
    /// with CLOSE_HARD, or, for an attempt in a peer's line, abandons it.
    /// The tick re-arms while slots stay short.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        mut describe: impl FnMut(u64) -> Option<ChannelReport>,
    ) -> Tick {
        let expired = self.line.expire(now, self.cfg.line_hold);
        self.stats.line_expired += expired.len() as u64;
        let mut tick = Tick {
            victims: Vec::new(),
            expired,
        };
        if !self.timers.take_expired(Timer::Preemption, now) || !self.short() {
            self.arm(now);
            return tick;
        }
        let candidates = self.candidates(&mut describe);
        // The holders of sources past their share give way first, if any
        // of them can (`sources.rs`).
        let share = fair_share(self.cfg.hard, self.wanting(None));
        let heavy: Vec<Candidate> = candidates
            .iter()
            .filter(|c| {
                self.holders
                    .get(&c.holder)
                    .is_some_and(|h| self.past_share(h.source, share))
            })
            .copied()
            .collect();
        tick.victims = match heavy.is_empty() {
            true => Vec::new(),
            false => self.victims(now, &heavy),
        };
        if tick.victims.is_empty() {
            tick.victims = self.victims(now, &candidates);
        }
        self.preempt(&tick.victims);
        self.timers
            .set(Timer::Preemption, now + self.cfg.preempt_interval);
        self.arm(now);
        tick
    }
}

#[cfg(test)]
mod lanes_tests;
#[cfg(test)]
mod line_tests;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod sources_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod yield_tests;
