//! The [`TransController`]: the channel slots (file descriptors, in
//! practice) that the nodes of a process share, under a weak and a hard
//! limit, with a fair line of waiting sites and preemption.
//!
//! Its decisions are `sitenet_protocols::slots` ([`SlotTable`] and the
//! [`PreemptionPolicy`]); this type owns the shared state, hands out
//! [`SlotLease`]s, calls back the sites that waited, and runs the
//! preemption tick on a thread of its own (one per controller, so a process
//! with thousands of nodes sharing one controller has one tick thread).
//!
//! A lease is the slot: the TransObject (in `sitenet-runtime`) that owns
//! a channel holds one, and dropping it gives the slot back — to the first site in line.
//! Its owner reports what its channel is doing through a [`SlotInfo`]
//! (plain atomics, written on the owner's thread, read by the tick), which
//! the policy sees as a `Candidate`; the victim is told through the
//! preempt callback its owner attached, and closes with CLOSE_HARD.
//!
//! Accepted peers that presented themselves past the hard limit wait in
//! the table's line (`controller/line.rs`): their owner is called
//! back with a lease when their turn comes, or told that their place ended.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use sitenet_protocols::slots::{
    DefaultPolicy, Grant, PreemptReason, PreemptionPolicy, SlotConfig, SlotStats, SlotTable,
};

mod info;
mod lane;
mod line;

use info::NOT_YET;
pub use info::{SlotInfo, SlotReport};

pub use lane::Lane;
pub use line::{AcceptOrWait, LineEnd, LineFn, LineTicket};

/// Called with the lease when a waiting site's turn comes.
pub type GrantFn = Box<dyn FnOnce(SlotLease) + Send>;

/// Called (on the tick thread) when the policy chose this slot's channel,
/// with the lease it chose: its owner must close the channel holding that
/// lease with CLOSE_HARD — and only that one. The call may arrive after
/// the owner replaced the channel (the tick calls outside its lock, and the
/// owner may handle it later still): a lease it no longer holds means a
/// channel that is already gone, and the call is to be ignored.
pub type PreemptFn = Arc<dyn Fn(LeaseId, PreemptReason) + Send + Sync>;

/// A place in the line for a slot, to withdraw with
/// [`TransController::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaitTicket(u64);

/// What [`TransController::request`] did.
#[derive(Debug)]
pub enum Requested {
    /// A slot now (the grant callback is dropped unused).
    Granted(SlotLease),
    /// In line: the grant callback runs with the lease when its turn comes.
    Queued(WaitTicket),
}

/// A snapshot of a controller, for `Node::stats` and reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotSnapshot {
    /// The policy's name.
    pub policy: &'static str,
    /// Weak limit.
    pub weak: usize,
    /// Hard limit.
    pub hard: usize,
    /// Slots in use.
    pub in_use: usize,
    /// Sites waiting for one.
    pub waiting: usize,
    /// Most slots in use at once.
    pub peak_in_use: usize,
    /// Most sites waiting at once.
    pub peak_waiting: usize,
    /// Slots granted.
    pub granted: u64,
    /// Requests that had to wait.
    pub queued: u64,
    /// Accepts refused at the hard limit.
    pub accepts_refused: u64,
    /// Preemptions by reason (`naive_idle`, `least_recently_active`, …).
    pub preemptions: Vec<(&'static str, u64)>,
    /// Who gives a slot up while peers wait in line: `fifo` or `share`
    ///.
    pub admission: &'static str,
    /// Accepted peers waiting in line now.
    pub in_line: usize,
    /// How many may wait in line at most.
    pub line_limit: usize,
    /// Most peers in line at once.
    pub peak_line: usize,
    /// Peers told to wait in line.
    pub line_waits: u64,
    /// Slots granted from the line.
    pub grants: u64,
    /// Line entries whose hold time ran out.
    pub line_expired: u64,
    /// Line entries that left before their turn (the peer closed, or a
    /// newer connection of the same site replaced it).
    pub line_left: u64,
}

impl SlotSnapshot {
    /// All preemptions.
    pub fn total_preemptions(&self) -> u64 {
        self.preemptions.iter().map(|p| p.1).sum()
    }
}

struct Holder {
    info: Option<Arc<SlotInfo>>,
    preempt: Option<PreemptFn>,
}

struct State {
    table: SlotTable,
    waiters: HashMap<u64, GrantFn>,
    /// The line's entries (tickets of the same space as `waiters`).
    line: HashMap<u64, LineFn>,
    holders: HashMap<u64, Holder>,
}

struct Inner {
    state: Mutex<State>,
    /// Wakes the tick thread when a deadline may have moved earlier.
    tick: Condvar,
    /// Time origin of [`SlotInfo`]'s timestamps.
    epoch: Instant,
    /// The table's work per turn while peers wait
    /// ([`SlotTable::turn_work_due`]; [`NOT_YET`] while nobody waits),
    /// published by the tick for owners' reports to compare against
    /// without the lock.
    turn_work: AtomicU64,
    /// An owner reported its turn's work done since the last tick:
    /// the tick thread asks the table at once
    /// ([`SlotTable::handle_turn_work`]) instead of at the next tick.
    work_due: AtomicBool,
}

impl Inner {
    /// True if `info`'s channel, `served` messages now, has done the turn's
    /// work published while peers wait (never while nobody does): no lock.
    fn turn_worked(&self, info: &SlotInfo, served: u64) -> bool {
        let due = self.turn_work.load(Ordering::Relaxed);
        due != NOT_YET && info.worked(served, due)
    }
}

/// See the module documentation. Cheap to clone; all clones are one
/// controller.
///
/// # Example
///
/// One slot to connect (weak limit 1), two in all (hard limit 2): the second
/// request waits in line and gets the slot the first lease gives back.
///
/// ```
/// use std::{sync::mpsc, time::Duration};
/// use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
/// use sitenet_transport::{controller::Requested, TransController};
///
/// let policy = DefaultPolicy { min_hold: Duration::from_millis(100) };
/// let ctrl = TransController::new(SlotConfig::new(1, 2)?, Box::new(policy));
/// let Requested::Granted(first) = ctrl.request(|_| unreachable!()) else { panic!() };
///
/// let (tx, rx) = mpsc::channel();
/// let Requested::Queued(_ticket) = ctrl.request(move |lease| tx.send(lease).unwrap()) else {
///     panic!("the weak limit is reached")
/// };
/// assert_eq!((ctrl.stats().in_use, ctrl.stats().waiting), (1, 1));
///
/// drop(first); // the slot goes to the first site in line, at once
/// let second = rx.recv()?;
/// assert!(second.controller().same(&ctrl));
/// let s = ctrl.stats();
/// assert_eq!((s.policy, s.in_use, s.waiting, s.granted, s.queued), ("default", 1, 0, 2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TransController {
    inner: Arc<Inner>,
}

impl fmt::Debug for TransController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats();
        f.debug_struct("TransController")
            .field("policy", &s.policy)
            .field("weak", &s.weak)
            .field("hard", &s.hard)
            .field("in_use", &s.in_use)
            .field("waiting", &s.waiting)
            .finish()
    }
}

/// The soft RLIMIT_NOFILE of this process (1024 if it cannot be read).
///
/// ```
/// use sitenet_protocols::slots::SlotConfig;
/// use sitenet_transport::controller::fd_limit;
///
/// // What `TransController::process` derives its limits from.
/// let cfg = SlotConfig::from_fd_limit(fd_limit());
/// assert!(cfg.weak >= 1 && cfg.weak < cfg.hard);
/// ```
pub fn fd_limit() -> u64 {
    rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024)
}

impl TransController {
    /// A controller of its own, with these limits and policy. Nodes given
    /// the same controller share its slots.
    pub fn new(cfg: SlotConfig, policy: Box<dyn PreemptionPolicy>) -> Self {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                table: SlotTable::new(cfg, policy),
                waiters: HashMap::new(),
                line: HashMap::new(),
                holders: HashMap::new(),
            }),
            tick: Condvar::new(),
            epoch: Instant::now(),
            turn_work: AtomicU64::new(NOT_YET),
            work_due: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("sitenet-slots".into())
            .spawn(move || tick_loop(weak))
            .expect("spawn the slot controller's tick thread");
        Self { inner }
    }

    /// The process's controller, shared by every node not given another:
    /// descriptors are a process resource. Limits from RLIMIT_NOFILE
    /// ([`SlotConfig::from_fd_limit`]), the default policy.
    pub fn process() -> Self {
        static PROCESS: OnceLock<TransController> = OnceLock::new();
        PROCESS
            .get_or_init(|| {
                TransController::new(
                    SlotConfig::from_fd_limit(fd_limit()),
                    Box::new(DefaultPolicy::default()),
                )
            })
            .clone()
    }

    /// True if `self` and `other` are the same controller.
    pub fn same(&self, other: &TransController) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn lease(&self, holder: u64) -> SlotLease {
        SlotLease {
            ctrl: self.clone(),
            holder,
        }
    }

    /// A site wants a slot to connect: now, or in line (then `on_grant`
    /// runs with the lease, on whichever thread frees a slot). The channel
    /// counts for the calling thread's [`Lane`]: call it on the thread
    /// that will own the channel (a ComObject asks on its own).
    pub fn request(&self, on_grant: impl FnOnce(SlotLease) + Send + 'static) -> Requested {
        let mut st = self.inner.state.lock();
        let lane = Some(Lane::current().0);
        let r = match st.table.request_on(Instant::now(), lane) {
            Grant::Now(h) => {
                st.holders.insert(
                    h,
                    Holder {
                        info: None,
                        preempt: None,
                    },
                );
                Requested::Granted(self.lease(h))
            }
            Grant::Queued(w) => {
                st.waiters.insert(w, Box::new(on_grant));
                Requested::Queued(WaitTicket(w))
            }
        };
        drop(st);
        self.inner.tick.notify_one();
        r
    }

    /// Leaves the line (the site no longer needs a channel). A grant that
    /// raced with this arrives anyway; dropping that lease gives it back.
    pub fn cancel(&self, ticket: WaitTicket) {
        let mut st = self.inner.state.lock();
        st.table.cancel(ticket.0);
        let f = st.waiters.remove(&ticket.0);
        drop(st);
        drop(f);
    }

    /// An accepted channel is adopted (its peer presented itself: a
    /// connection still in its handshake takes no slot): its slot, or
    /// `None` past the hard limit (close the connection at once).
    ///
    /// ```
    /// use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
    /// use sitenet_transport::TransController;
    ///
    /// let ctrl = TransController::new(SlotConfig::new(1, 2)?, Box::new(DefaultPolicy::default()));
    /// // Accepts may use the slots between the weak and the hard limit.
    /// let a = ctrl.accept().expect("below the hard limit");
    /// let b = ctrl.accept().expect("below the hard limit");
    /// assert!(ctrl.accept().is_none()); // at the hard limit: close it at once
    /// assert_eq!(ctrl.stats().accepts_refused, 1);
    /// drop((a, b)); // dropping a lease gives its slot back
    /// assert_eq!(ctrl.stats().in_use, 0);
    /// # Ok::<(), sitenet_protocols::slots::SlotConfigError>(())
    /// ```
    pub fn accept(&self) -> Option<SlotLease> {
        let mut st = self.inner.state.lock();
        let h = st.table.accept(Instant::now())?;
        st.holders.insert(
            h,
            Holder {
                info: None,
                preempt: None,
            },
        );
        drop(st);
        self.inner.tick.notify_one();
        Some(self.lease(h))
    }

    fn release(&self, holder: u64) {
        let mut st = self.inner.state.lock();
        st.holders.remove(&holder);
        let now = Instant::now();
        let mut granted = st.table.release(holder, now);
        let mut call = None;
        while let Some((w, h)) = granted {
            let f = match st.waiters.remove(&w) {
                Some(f) => Some(Served::Connect(f)),
                None => st.line.remove(&w).map(Served::Line),
            };
            if let Some(f) = f {
                st.holders.insert(
                    h,
                    Holder {
                        info: None,
                        preempt: None,
                    },
                );
                call = Some((f, h));
                break;
            }
            // No callback for that ticket (never expected): pass it on.
            granted = st.table.release(h, now);
        }
        drop(st);
        self.inner.tick.notify_one();
        // Outside the lock: the callback may drop the lease at once.
        match call {
            Some((Served::Connect(f), h)) => f(self.lease(h)),
            Some((Served::Line(f), h)) => f(Ok(self.lease(h))),
            None => {}
        }
    }

    fn attach(&self, holder: u64, info: Arc<SlotInfo>, preempt: PreemptFn) {
        if let Some(h) = self.inner.state.lock().holders.get_mut(&holder) {
            h.info = Some(info);
            h.preempt = Some(preempt);
        }
    }

    /// Records a report of a channel's state (see [`SlotInfo`]). A holder
    /// that has done its turn's work while peers wait in line wakes the
    /// tick thread to let the next in at once, not at the next tick: an
    /// in-process pair moves thousands of messages in one 20 ms tick.
    /// Lock-free, as before: two atomic loads, and one store per turn.
    pub fn report(&self, info: &SlotInfo, report: &SlotReport) {
        info.store(self.inner.epoch, report);
        if report.closeable && self.inner.turn_worked(info, report.served) && info.first_work_told()
        {
            self.inner.work_due.store(true, Ordering::Release);
            self.inner.tick.notify_one();
        }
    }

    /// Counters and limits, now.
    pub fn stats(&self) -> SlotSnapshot {
        let st = self.inner.state.lock();
        let cfg = st.table.config();
        let s: SlotStats = st.table.stats();
        SlotSnapshot {
            admission: st.table.admission().name(),
            in_line: st.table.in_line(),
            line_limit: cfg.line,
            peak_line: s.peak_line,
            line_waits: s.line_waits,
            grants: s.grants,
            line_expired: s.line_expired,
            line_left: s.line_left,
            policy: st.table.policy_name(),
            weak: cfg.weak,
            hard: cfg.hard,
            in_use: st.table.in_use(),
            waiting: st.table.waiting(),
            peak_in_use: s.peak_in_use,
            peak_waiting: s.peak_waiting,
            granted: s.granted,
            queued: s.queued,
            accepts_refused: s.accepts_refused,
            preemptions: PreemptReason::ALL
                .iter()
                .map(|r| (r.name(), s.preemptions[*r as usize]))
                .collect(),
        }
    }
}

/// Whose callback a freed slot calls.
enum Served {
    Connect(GrantFn),
    Line(LineFn),
}

/// Which lease (slot) a preemption means: unique within its controller, so
/// the owner of a channel can tell a preemption of the channel it holds now
/// from one meant for a channel it has since replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(u64);

/// A channel slot. The channel's owner holds it; dropping it gives the slot
/// back.
pub struct SlotLease {
    ctrl: TransController,
    holder: u64,
}

impl fmt::Debug for SlotLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotLease")
            .field("holder", &self.holder)
            .finish()
    }
}

impl SlotLease {
    /// The owner of the channel says how to describe it to the policy and
    /// how to ask it to give the slot back. Until then the channel is not a
    /// candidate for preemption (it is still in its handshake). An owner
    /// may attach while its open attempt runs, and again (a new `info`)
    /// when the channel works: an attempt reported waiting in the peer's
    /// line ([`SlotReport::in_peer_line_since`]) may be asked to give
    /// its slot back (`PreemptReason::LineWait`).
    pub fn attach(&self, info: Arc<SlotInfo>, preempt: PreemptFn) {
        self.ctrl.attach(self.holder, info, preempt);
    }

    /// This lease's id (the one a preemption of it names).
    pub fn id(&self) -> LeaseId {
        LeaseId(self.holder)
    }

    /// The controller this slot belongs to.
    pub fn controller(&self) -> &TransController {
        &self.ctrl
    }

    /// Asked by the channel's owner on every turn, with the messages it
    /// has `served` so far: must it give the slot up now? True if the tick
    /// has chosen it already (its preempt callback may still be on its
    /// way), or if its turn's work has been done while peers wait in line
    /// ([`Admission::Share`](sitenet_protocols::slots::Admission)):
    /// lock-free until it has (three atomic loads); then, once per
    /// channel, the table decides on the owner's fresh `report`
    /// (`SlotTable::give_way_for_work`). True: close the channel now
    /// (CLOSE_HARD); a preempt callback that follows is stale. The owner
    /// ends its own turn because the way round (its report every few
    /// milliseconds, the tick thread, a message back to its actor queued
    /// behind the others) let an in-process pair move ten times its
    /// turn's work.
    pub fn must_give_way(
        &self,
        info: &SlotInfo,
        served: u64,
        report: impl FnOnce() -> SlotReport,
    ) -> bool {
        if info.is_preempted() {
            return true;
        }
        let inner = &self.ctrl.inner;
        if !inner.turn_worked(info, served) {
            return false;
        }
        let r = report();
        if !r.closeable || r.mid_message || !info.first_work_told() {
            return false;
        }
        info.store(inner.epoch, &r);
        let r = info.load(inner.epoch);
        let gave = inner
            .state
            .lock()
            .table
            .give_way_for_work(self.holder, Instant::now(), r);
        if gave {
            info.preempt();
            tracing::debug!(lease = ?self.id(), "turn's work done: giving the slot up");
        }
        gave
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        self.ctrl.release(self.holder);
    }
}

/// The preemption tick: sleeps until the table's next deadline (or a
/// change), asks it for a victim, and calls the victim's preempt callback
/// outside the lock. Ends when the controller is gone.
fn tick_loop(weak: Weak<Inner>) {
    const RECHECK: Duration = Duration::from_millis(500);
    loop {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let mut st = inner.state.lock();
        let now = Instant::now();
        // What owners compare their turn's work against (the line may have
        // changed since the last pass: every change wakes this thread).
        let due = st.table.turn_work_due().unwrap_or(NOT_YET);
        inner.turn_work.store(due, Ordering::Relaxed);
        let work = inner.work_due.swap(false, Ordering::Acquire);
        let next = st.table.poll_timeout();
        let timeout = next.is_some_and(|at| at <= now);
        if !timeout && !work {
            let wait = next.map_or(RECHECK, |at| (at - now).min(RECHECK));
            inner.tick.wait_for(&mut st, wait);
            continue;
        }
        let State {
            table,
            holders,
            line,
            ..
        } = &mut *st;
        let epoch = inner.epoch;
        let describe = |h| {
            holders
                .get(&h)
                .and_then(|x: &Holder| x.info.as_ref())
                .map(|i| i.load(epoch))
        };
        let tick = if timeout {
            table.handle_timeout(now, describe)
        } else {
            table.handle_turn_work(now, describe)
        };
        let calls: Vec<_> = tick
            .victims
            .iter()
            .filter_map(|&(h, reason)| {
                let holder = holders.get(&h)?;
                if let Some(info) = &holder.info {
                    info.preempt();
                }
                holder.preempt.clone().map(|f| (f, LeaseId(h), reason))
            })
            .collect();
        let expired: Vec<LineFn> = tick.expired.iter().filter_map(|t| line.remove(t)).collect();
        drop(st);
        drop(inner);
        for (f, lease, reason) in calls {
            tracing::debug!(reason = reason.name(), ?lease, "preempting a channel slot");
            f(lease, reason);
        }
        for f in expired {
            f(Err(LineEnd::Expired));
        }
    }
}

#[cfg(test)]
mod tests;
