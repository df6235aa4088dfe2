//! Deterministic tests of the slot table and the policies, with a virtual
//! clock; a property test against a simple model.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::base::site::SiteId;

fn table(weak: usize, hard: usize) -> SlotTable {
    SlotTable::new(
        SlotConfig::new(weak, hard).unwrap(),
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(100),
        }),
    )
}

/// A table of `cfg` whose policy may preempt at once.
fn table_of(cfg: SlotConfig) -> SlotTable {
    SlotTable::new(
        cfg,
        Box::new(DefaultPolicy {
            min_hold: Duration::ZERO,
        }),
    )
}

fn quiet(now: Instant) -> ChannelReport {
    ChannelReport {
        closeable: true,
        last_active: now,
        mid_message: false,
        replies_expected: false,
        buffers_empty: true,
        queues_empty: true,
        callable: true,
        served: 0,
        served_from: None,
        in_peer_line_since: None,
        line_yields: 0,
    }
}

fn candidate(holder: u64, granted_at: Instant, channel: ChannelReport) -> Candidate {
    Candidate {
        holder,
        granted_at,
        channel,
        moved: 0,
    }
}

#[test]
fn limits_are_checked_and_one_slot_is_kept_for_accepts() {
    assert_eq!(SlotConfig::new(1, 1), Err(SlotConfigError::HardTooSmall(1)));
    assert_eq!(SlotConfig::new(0, 5), Err(SlotConfigError::WeakZero));
    assert_eq!(SlotConfig::new(10, 5).unwrap().weak, 4);
    let d = SlotConfig::from_fd_limit(1024);
    assert_eq!((d.weak, d.hard, d.line), (540, 720, 120));
    let small = SlotConfig::from_fd_limit(10);
    assert_eq!((small.weak, small.hard), (1, 2));
    assert_eq!(SlotConfig::from_fd_limit(1 << 20).hard, MAX_DERIVED_HARD);
}

#[test]
fn below_the_weak_limit_a_slot_is_granted_then_sites_wait_in_order() {
    let now = Instant::now();
    let mut t = table(2, 4);
    let Grant::Now(a) = t.request(now) else {
        panic!()
    };
    let Grant::Now(_b) = t.request(now) else {
        panic!()
    };
    let Grant::Queued(w1) = t.request(now) else {
        panic!()
    };
    let Grant::Queued(w2) = t.request(now) else {
        panic!()
    };
    assert_eq!((t.in_use(), t.waiting()), (2, 2));
    // Freed slots go to the waiters in the order they came.
    let (served, _) = t.release(a, now).unwrap();
    assert_eq!(served, w1);
    assert_eq!(t.waiting(), 1);
    assert!(t.cancel(w2));
    assert!(!t.cancel(w2));
    assert_eq!(t.waiting(), 0);
}

#[test]
fn accepts_use_the_slots_up_to_the_hard_limit_then_are_refused() {
    let now = Instant::now();
    let mut t = table(2, 3);
    for _ in 0..3 {
        assert!(t.accept(now).is_some());
    }
    assert_eq!(t.accept(now), None);
    assert_eq!(t.stats().accepts_refused, 1);
    assert_eq!(t.stats().peak_in_use, 3);
    // Past the weak limit: connects wait.
    assert!(matches!(t.request(now), Grant::Queued(_)));
}

#[test]
fn a_preempted_site_asking_again_queues_behind_the_waiters() {
    let now = Instant::now();
    let mut t = table(1, 2);
    let Grant::Now(victim) = t.request(now) else {
        panic!()
    };
    let Grant::Queued(waiter) = t.request(now) else {
        panic!()
    };
    // The victim's channel closes; its slot goes to the waiter, and the
    // victim, asking again at once, waits.
    let (served, _) = t.release(victim, now).unwrap();
    assert_eq!(served, waiter);
    assert!(matches!(t.request(now), Grant::Queued(_)));
}

#[test]
fn the_preemption_tick_preempts_one_slot_per_tick_while_slots_are_short() {
    let t0 = Instant::now();
    let mut t = table(2, 4);
    let hs: Vec<u64> = (0..4).map(|_| t.accept(t0).unwrap()).collect();
    assert!(t.short());
    let due = t.poll_timeout().expect("armed past the weak limit");
    assert_eq!(due, t0 + Duration::from_millis(20));
    let describe = |_h: u64| Some(quiet(t0));
    let victim = |t: &mut SlotTable, at| t.handle_timeout(at, describe).victims.first().copied();
    // Everything is younger than the minimum hold: nobody yet.
    assert_eq!(victim(&mut t, due), None);
    let late = t0 + Duration::from_millis(200);
    let (v1, why) = victim(&mut t, late).expect("a victim");
    assert_eq!(why, PreemptReason::LeastRecentlyActive);
    assert!(hs.contains(&v1));
    // One per tick; the one being preempted is not counted or chosen again.
    assert_eq!(victim(&mut t, late), None);
    let next = t.poll_timeout().unwrap();
    let (v2, _) = victim(&mut t, next).expect("a second victim");
    assert_ne!(v1, v2);
    // At the weak limit with nobody waiting: no more preemption.
    assert!(!t.short());
    assert_eq!(t.poll_timeout(), None);
    t.release(v1, next);
    t.release(v2, next);
    assert_eq!(t.in_use(), 2);
    assert_eq!(t.stats().total_preemptions(), 2);
}

#[test]
fn a_holder_the_driver_cannot_describe_is_not_a_candidate() {
    let t0 = Instant::now();
    let mut t = table(1, 3);
    let a = t.accept(t0).unwrap();
    let b = t.accept(t0).unwrap();
    let late = t0 + Duration::from_secs(1);
    let got = t.handle_timeout(late, |h| (h == b).then(|| quiet(t0)));
    assert_eq!(got.victims.first().map(|g| g.0), Some(b));
    let _ = a;
}

#[test]
fn naive_takes_the_first_closeable_preferring_empty_buffers_and_queues() {
    let now = Instant::now();
    let mk = |holder, closeable, buffers_empty, queues_empty| {
        candidate(
            holder,
            now,
            ChannelReport {
                closeable,
                buffers_empty,
                queues_empty,
                ..quiet(now)
            },
        )
    };
    let p = Naive;
    let c = [
        mk(1, false, true, true),
        mk(2, true, false, false),
        mk(3, true, true, false),
        mk(4, true, true, true),
    ];
    assert_eq!(p.choose(now, &c), Some((4, PreemptReason::NaiveIdle)));
    assert_eq!(
        p.choose(now, &c[..3]),
        Some((3, PreemptReason::NaiveBuffersEmpty))
    );
    assert_eq!(p.choose(now, &c[..2]), Some((2, PreemptReason::NaiveFirst)));
    assert_eq!(p.choose(now, &c[..1]), None);
}

#[test]
fn default_prefers_quiet_callable_least_recently_active_and_spares_young_channels() {
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(10);
    let p = DefaultPolicy {
        min_hold: Duration::from_secs(1),
    };
    let at = |s: u64| t0 + Duration::from_secs(s);
    let c = |holder, last, callable, busy, granted: u64| {
        candidate(
            holder,
            at(granted),
            ChannelReport {
                last_active: at(last),
                callable,
                mid_message: busy,
                ..quiet(t0)
            },
        )
    };
    // Least recently active among quiet callable ones.
    let set = [
        c(1, 5, true, false, 0),
        c(2, 3, true, false, 0),
        c(3, 1, false, false, 0),
        c(4, 0, true, true, 0),
        c(5, 0, true, false, 9 + 1), // just granted (10 s): too young
    ];
    assert_eq!(
        p.choose(now, &set),
        Some((2, PreemptReason::LeastRecentlyActive))
    );
    // No quiet callable one: an accept-only client.
    assert_eq!(
        p.choose(now, &[set[2], set[3], set[4]]),
        Some((3, PreemptReason::NotCallable))
    );
    // Only busy ones old enough: the last resort.
    assert_eq!(
        p.choose(now, &[set[3], set[4]]),
        Some((4, PreemptReason::Busy))
    );
    // Only a young one: nobody.
    assert_eq!(p.choose(now, &[set[4]]), None);
    assert!(by_name("naive", Duration::ZERO).is_some());
    assert!(by_name("default", Duration::ZERO).is_some());
    assert!(by_name("lru", Duration::ZERO).is_none());
}

#[derive(Debug, Clone)]
enum Op {
    Request,
    Accept,
    Release(usize),
    Cancel(usize),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Request),
        2 => Just(Op::Accept),
        4 => (0usize..64).prop_map(Op::Release),
        1 => (0usize..64).prop_map(Op::Cancel),
        2 => (0u64..300).prop_map(Op::Tick),
    ]
}

proptest! {
    /// Against a model: slots never exceed the hard limit; a connect is
    /// granted only below the weak limit; waiters are served strictly in
    /// order; a preemption names a holder, once, and only while short; the
    /// table's books agree with its holders.
    #[test]
    fn the_table_keeps_its_limits_and_serves_waiters_in_order(
        weak in 1usize..6, extra in 1usize..4, ops in proptest::collection::vec(op(), 1..200)
    ) {
        let hard = weak + extra;
        let mut t = table(weak, hard);
        let mut now = Instant::now();
        let mut holders: Vec<u64> = Vec::new();
        let mut waiters: std::collections::VecDeque<u64> = Default::default();
        let mut preempted: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Request => match t.request(now) {
                    Grant::Now(h) => {
                        prop_assert!(holders.len() < weak && waiters.is_empty());
                        holders.push(h);
                    }
                    Grant::Queued(w) => waiters.push_back(w),
                },
                Op::Accept => match t.accept(now) {
                    Some(h) => holders.push(h),
                    None => prop_assert_eq!(holders.len(), hard),
                },
                Op::Release(i) if !holders.is_empty() => {
                    let h = holders.remove(i % holders.len());
                    preempted.retain(|&p| p != h);
                    if let Some((w, nh)) = t.release(h, now) {
                        prop_assert_eq!(Some(w), waiters.pop_front(), "served out of order");
                        prop_assert!(holders.len() < weak);
                        holders.push(nh);
                    }
                }
                Op::Cancel(i) if !waiters.is_empty() => {
                    let w = waiters.remove(i % waiters.len()).unwrap();
                    prop_assert!(t.cancel(w));
                }
                Op::Tick(ms) => {
                    now += Duration::from_millis(ms);
                    let short = t.short();
                    if t.poll_timeout().is_some_and(|d| d <= now) {
                        let tick = t.handle_timeout(now, |_| Some(quiet(now - Duration::from_secs(1))));
                        prop_assert!(tick.victims.len() <= 1, "one victim per tick with nobody in line");
                        if let Some(&(h, _)) = tick.victims.first() {
                            prop_assert!(short);
                            prop_assert!(holders.contains(&h));
                            prop_assert!(!preempted.contains(&h), "preempted twice");
                            preempted.push(h);
                        }
                    }
                }
                _ => {}
            }
            prop_assert!(t.in_use() <= hard);
            prop_assert_eq!(t.in_use(), holders.len());
            // The marks and counts agree with the holders after every step.
            prop_assert_eq!(t.check_books(), Ok(()));
            prop_assert_eq!(t.waiting(), waiters.len());
            // Nobody waits while a connect slot is free.
            prop_assert!(waiters.is_empty() || holders.len() >= weak);
            // While short, a tick is armed (a stale one after a cancel is
            // harmless: the tick finds nothing short and stops).
            prop_assert!(!t.short() || t.poll_timeout().is_some());
        }
    }
}

/// Regression: `Duration::MAX` in a `SlotConfig`, for "never" (no
/// preemption tick, no hold in line, no turn), overflowed the clock and
/// panicked where the table armed its timer; each wait is at most
/// `timer::MAX_WAIT` away.
#[test]
fn durations_of_never_do_not_overflow_the_table() {
    let never = Duration::MAX;
    let mut cfg = SlotConfig::new(1, 2).unwrap();
    cfg.preempt_interval = never;
    cfg.line_hold = never;
    cfg.turn = never;
    cfg.turn_min = never;
    cfg.rotation = never;
    cfg.max_wait = never;
    cfg.turn_idle = never;
    cfg.line_yield = never;
    let mut t = table_of(cfg);
    let now = Instant::now();
    for _ in 0..2 {
        t.accept(now).expect("below the hard limit");
    }
    let _ = t.request(now);
    let _ = t.accept_or_wait(now, Some(SiteId(9)), 0);
    let far = now + crate::base::timer::MAX_WAIT;
    assert!(t.poll_timeout().is_none_or(|at| at <= far));
    let later = now + Duration::from_secs(1);
    let _ = t.handle_timeout(later, |_| Some(quiet(later)));
    assert_eq!(t.config().preempt_interval, crate::base::timer::MAX_WAIT);
}

/// Regression: a preemption tick of zero period was due again at the
/// instant it ran, for as long as slots were short: a driver that follows
/// `poll_timeout` spun there (here, with no holder it may preempt, for
/// ever). The period is at least `timer::MIN_PERIOD`.
#[test]
fn a_tick_of_zero_period_is_not_due_again_at_once() {
    let mut cfg = SlotConfig::new(1, 2).unwrap();
    cfg.preempt_interval = Duration::ZERO;
    let mut t = table_of(cfg);
    let now = Instant::now();
    for _ in 0..2 {
        t.accept(now).expect("below the hard limit");
    }
    assert!(t.short(), "two holders above a weak limit of one");
    let mut ticks = 0;
    while let Some(at) = t.poll_timeout().filter(|at| *at <= now) {
        // Every holder is still in its handshake: none may be preempted.
        let _ = t.handle_timeout(at, |_| None);
        ticks += 1;
        assert!(ticks < 100, "the tick is due at {now:?} for ever");
    }
    assert_eq!(
        t.poll_timeout(),
        Some(now + crate::base::timer::MIN_PERIOD),
        "the next tick a period later"
    );
    assert_eq!(t.config().preempt_interval, crate::base::timer::MIN_PERIOD);
}
