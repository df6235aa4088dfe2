//! The waiting line on a virtual clock: order, bound, one entry
//! per peer, leaving and expiry, grants on release, and the two admission
//! policies; a property test against a model.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::base::site::SiteId;

pub(super) const MS: Duration = Duration::from_millis(1);

pub(super) fn table(weak: usize, hard: usize, line: usize, admission: Admission) -> SlotTable {
    let mut cfg = SlotConfig::new(weak, hard).unwrap();
    cfg.line = line;
    cfg.line_hold = 1000 * MS;
    cfg.admission = admission;
    cfg.turn = 100 * MS;
    cfg.turn_idle = 10 * MS;
    cfg.preempt_interval = 5 * MS;
    SlotTable::new(cfg, Box::new(DefaultPolicy { min_hold: 50 * MS }))
}

pub(super) fn site(n: u128) -> Option<SiteId> {
    Some(SiteId(n))
}

/// A channel busy with traffic at `at` (nothing idle about it).
pub(super) fn busy(at: Instant) -> ChannelReport {
    ChannelReport {
        closeable: true,
        last_active: at,
        mid_message: false,
        replies_expected: false,
        buffers_empty: false,
        queues_empty: false,
        callable: false,
        served: 0,
        served_from: None,
        in_peer_line_since: None,
        line_yields: 0,
    }
}

/// A channel that carried its last message at `at` and holds nothing.
pub(super) fn quiet_since(at: Instant) -> ChannelReport {
    ChannelReport {
        buffers_empty: true,
        queues_empty: true,
        ..busy(at)
    }
}

pub(super) fn full(t: &mut SlotTable, now: Instant) -> Vec<u64> {
    let hard = t.config().hard;
    (0..hard).map(|_| t.accept(now).unwrap()).collect()
}

fn wait(t: &mut SlotTable, now: Instant, peer: u128) -> (u64, usize, Option<u64>) {
    match t.accept_or_wait(now, site(peer), 0) {
        Accepted::Wait {
            ticket,
            position,
            replaced,
            evicted: None,
        } => (ticket, position, replaced),
        other => panic!("expected a place in line, got {other:?}"),
    }
}

#[test]
fn at_the_hard_limit_peers_wait_in_order_and_freed_slots_go_to_the_first() {
    let t0 = Instant::now();
    let mut t = table(2, 3, 10, Admission::Fifo);
    let held = full(&mut t, t0);
    let (a, pa, _) = wait(&mut t, t0, 1);
    let (b, pb, _) = wait(&mut t, t0, 2);
    let (c, pc, _) = wait(&mut t, t0, 3);
    assert_eq!((pa, pb, pc), (1, 2, 3));
    assert_eq!((t.in_use(), t.in_line()), (3, 3));
    // Each freed slot goes to the head of the line, at once.
    assert_eq!(t.release(held[0], t0).map(|g| g.0), Some(a));
    assert_eq!(t.release(held[1], t0).map(|g| g.0), Some(b));
    assert_eq!(t.release(held[2], t0).map(|g| g.0), Some(c));
    assert_eq!((t.in_use(), t.in_line()), (3, 0));
    let s = t.stats();
    assert_eq!((s.line_waits, s.grants, s.accepts_refused), (3, 3, 0));
    assert_eq!(s.peak_line, 3);
}

#[test]
fn a_full_line_refuses_as_a_full_table_did_and_a_peer_that_cannot_wait_is_refused() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 2, Admission::Share);
    full(&mut t, t0);
    wait(&mut t, t0, 1);
    wait(&mut t, t0, 2);
    assert_eq!(t.accept_or_wait(t0, site(3), 0), Accepted::Refused);
    // Without the line capability: refused at the hard limit, as before.
    assert_eq!(t.accept_or_wait(t0, None, 0), Accepted::Refused);
    assert_eq!(t.accept(t0), None);
    assert_eq!(t.stats().accepts_refused, 3);
    assert_eq!(t.in_line(), 2);
    // No line at all: every accept past the hard limit is refused.
    let mut none = table(1, 2, 0, Admission::Share);
    full(&mut none, t0);
    assert_eq!(none.accept_or_wait(t0, site(1), 0), Accepted::Refused);
}

#[test]
fn one_entry_per_peer_site_a_newer_connection_replaces_the_older_at_the_back() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 2, Admission::Fifo);
    let held = full(&mut t, t0);
    let (old, _, _) = wait(&mut t, t0, 7);
    let (other, _, _) = wait(&mut t, t0, 8);
    // The line is full, but site 7 already holds a place: its newer
    // connection replaces the older (whose initiator gave it up).
    let (new, position, replaced) = wait(&mut t, t0 + MS, 7);
    assert_eq!((replaced, position), (Some(old), 2));
    assert_eq!(t.in_line(), 2);
    // The replaced entry is never served; the others are, in order.
    assert_eq!(t.release(held[0], t0).map(|g| g.0), Some(other));
    assert_eq!(t.release(held[1], t0).map(|g| g.0), Some(new));
    assert_eq!(t.stats().line_left, 1);
}

#[test]
fn a_peer_that_leaves_or_outstays_its_hold_gives_its_place_back() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 4, Admission::Fifo);
    let held = full(&mut t, t0);
    let (a, _, _) = wait(&mut t, t0, 1);
    let (b, _, _) = wait(&mut t, t0 + 100 * MS, 2);
    let (c, _, _) = wait(&mut t, t0 + 200 * MS, 3);
    // The peer of `b` closed its connection: it leaves.
    assert!(t.leave_line(b, t0 + 300 * MS));
    assert!(!t.leave_line(b, t0 + 300 * MS));
    // `a` waits its whole hold time (1 s): it is expired at its deadline.
    assert_eq!(
        t.poll_timeout(),
        Some(t0 + 5 * MS).min(Some(t0 + 1000 * MS))
    );
    let tick = t.handle_timeout(t0 + 1000 * MS, |_| Some(busy(t0)));
    assert_eq!(tick.expired, [a]);
    assert_eq!(t.in_line(), 1);
    // Only `c` is left to serve.
    assert_eq!(t.release(held[0], t0 + 1000 * MS).map(|g| g.0), Some(c));
    assert_eq!(t.release(held[1], t0 + 1000 * MS), None);
    let s = t.stats();
    assert_eq!((s.line_left, s.line_expired, s.grants), (1, 1, 1));
}

#[test]
fn the_line_is_served_up_to_the_hard_limit_and_connects_alone_below_the_weak_limit() {
    let t0 = Instant::now();
    let mut t = table(2, 4, 4, Admission::Fifo);
    let held = full(&mut t, t0);
    let (accepted, _, _) = wait(&mut t, t0, 1);
    let Grant::Queued(connect) = t.request(t0) else {
        panic!("past the weak limit a connect waits")
    };
    // The peer in line waited longer: above the weak limit it gets the
    // freed slot (accepts may use the slots up to the hard limit) …
    assert_eq!(t.release(held[0], t0).map(|g| g.0), Some(accepted));
    // … and a connect waiting alone gets one only below the weak limit,
    // as before the line.
    assert_eq!(t.release(held[1], t0), None);
    assert_eq!(t.release(held[2], t0), None);
    assert_eq!(t.release(held[3], t0).map(|g| g.0), Some(connect));
    assert_eq!((t.in_use(), t.waiting(), t.in_line()), (2, 0, 0));
}

#[test]
fn share_rotates_turns_quiet_holders_first_then_the_longest_held() {
    let t0 = Instant::now();
    let mut t = table(2, 4, 10, Admission::Share);
    let held = full(&mut t, t0);
    for p in 1..=3 {
        wait(&mut t, t0, p);
    }
    assert!(t.short());
    // Within its turn nobody gives way (busy channels, 50 ms in).
    let at50 = t0 + 50 * MS;
    assert!(t
        .handle_timeout(at50, |_| Some(busy(at50)))
        .victims
        .is_empty());
    // Holder 2 went quiet 20 ms ago: it gives way at once, before its
    // turn is over.
    let at60 = t0 + 60 * MS;
    let report = |h: u64, at: Instant| {
        if h == held[2] {
            quiet_since(at - 20 * MS)
        } else {
            busy(at)
        }
    };
    let tick = t.handle_timeout(at60, |h| Some(report(h, at60)));
    assert_eq!(tick.victims, [(held[2], PreemptReason::TurnIdle)]);
    // At 100 ms every busy holder has had its turn: as many give way as
    // still wait (3 in line, 1 already giving way), longest held first.
    let at100 = t0 + 100 * MS;
    let tick = t.handle_timeout(at100, |h| Some(report(h, at100)));
    assert_eq!(
        tick.victims,
        [
            (held[0], PreemptReason::TurnOver),
            (held[1], PreemptReason::TurnOver)
        ]
    );
    assert!(!t.short(), "one holder giving way per peer in line");
    // Their slots go to the line in order; the new holders get full turns.
    for h in &held[..3] {
        assert!(t.release(*h, at100).is_some());
    }
    assert_eq!(t.in_line(), 0);
    assert_eq!(t.stats().grants, 3);
    assert_eq!(t.stats().preemptions[PreemptReason::TurnOver as usize], 2);
}

#[test]
fn share_spares_a_holder_mid_message_for_four_turns() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    let held = full(&mut t, t0);
    wait(&mut t, t0, 1);
    let mid = |at: Instant| ChannelReport {
        mid_message: true,
        ..busy(at)
    };
    let at = t0 + 250 * MS;
    let tick = t.handle_timeout(at, |h| Some(if h == held[0] { mid(at) } else { busy(at) }));
    assert_eq!(tick.victims, [(held[1], PreemptReason::TurnOver)]);
    // Alone, mid-message: only after four turns.
    let mut t = table(1, 2, 10, Admission::Share);
    let held = full(&mut t, t0);
    wait(&mut t, t0, 1);
    let at = t0 + 350 * MS;
    let only_first = |h: u64, at| (h == held[0]).then(|| mid(at));
    assert!(t
        .handle_timeout(at, |h| only_first(h, at))
        .victims
        .is_empty());
    let at = t0 + 400 * MS;
    assert_eq!(
        t.handle_timeout(at, |h| only_first(h, at)).victims,
        [(held[0], PreemptReason::TurnOver)]
    );
}

#[test]
fn fifo_keeps_a_holder_until_the_preemption_policy_takes_it() {
    let t0 = Instant::now();
    // Weak = hard - 1: one preemption (by the policy) brings the table to
    // the weak limit.
    let mut t = table(3, 4, 10, Admission::Fifo);
    let held = full(&mut t, t0);
    for p in 1..=3 {
        wait(&mut t, t0, p);
    }
    // Long past any turn, with three waiting: the policy's one victim per
    // tick (the least recently active), never a rotation of everyone.
    let at = t0 + 500 * MS;
    let report = |h: u64| Some(busy(t0 + (h as u32) * MS));
    let tick = t.handle_timeout(at, report);
    assert_eq!(tick.victims.len(), 1);
    assert_eq!(tick.victims[0].1, PreemptReason::NotCallable);
    assert_eq!(tick.victims[0].0, held[0]);
    // Under Share the same table would rotate three.
    let mut s = table(3, 4, 10, Admission::Share);
    full(&mut s, t0);
    for p in 1..=3 {
        wait(&mut s, t0, p);
    }
    assert_eq!(s.handle_timeout(at, report).victims.len(), 3);
    // The policy can be changed on a live table.
    t.set_admission(Admission::Share, at);
    assert_eq!(t.admission(), Admission::Share);
}

#[derive(Debug, Clone)]
enum Op {
    Accept(u8),
    Request,
    Release(usize),
    Leave(usize),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12).prop_map(Op::Accept),
        1 => Just(Op::Request),
        3 => (0usize..64).prop_map(Op::Release),
        1 => (0usize..64).prop_map(Op::Leave),
        2 => (0u64..400).prop_map(Op::Tick),
    ]
}

proptest! {
    /// Against a model of the line: slots never exceed the hard limit;
    /// nobody waits in line while a slot is free; the line holds at most
    /// its bound and one entry per site; entries are served strictly in
    /// arrival order (expiry and leaving only remove), and beside waiting
    /// connects, whoever waited longest first; a victim is a holder, once.
    #[test]
    fn the_line_is_bounded_one_per_site_and_served_in_order(
        weak in 1usize..4, extra in 1usize..3, bound in 0usize..6, share in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..250),
    ) {
        let hard = weak + extra;
        let admission = if share { Admission::Share } else { Admission::Fifo };
        let mut t = table(weak, hard, bound, admission);
        let mut now = Instant::now();
        let mut holders: Vec<u64> = Vec::new();
        let mut line: VecDeque<(u64, u8)> = VecDeque::new();
        let mut connects: VecDeque<u64> = VecDeque::new();
        let mut preempted: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Request => match t.request(now) {
                    Grant::Now(h) => {
                        prop_assert!(holders.len() < weak && connects.is_empty());
                        holders.push(h);
                    }
                    Grant::Queued(w) => connects.push_back(w),
                },
                Op::Accept(peer) => match t.accept_or_wait(now, site(peer as u128), 0) {
                    Accepted::Slot(h) => {
                        prop_assert!(holders.len() < hard && line.is_empty());
                        holders.push(h);
                    }
                    Accepted::Wait { ticket, position, replaced, evicted } => {
                        // No source is charged: nobody is evicted.
                        prop_assert_eq!(evicted, None);
                        prop_assert_eq!(holders.len(), hard);
                        let had = line.iter().position(|e| e.1 == peer);
                        prop_assert_eq!(replaced, had.map(|i| line[i].0));
                        if let Some(i) = had {
                            line.remove(i);
                        }
                        line.push_back((ticket, peer));
                        prop_assert_eq!(position, line.len());
                    }
                    Accepted::Refused => {
                        prop_assert_eq!(holders.len(), hard);
                        prop_assert!(line.len() >= bound);
                        prop_assert!(!line.iter().any(|e| e.1 == peer));
                    }
                },
                Op::Release(i) if !holders.is_empty() => {
                    let h = holders.remove(i % holders.len());
                    preempted.retain(|&p| p != h);
                    let after = holders.len();
                    let c = connects.front().copied();
                    let l = line.front().map(|e| e.0).filter(|_| after < hard);
                    let want = match (c, l) {
                        (Some(c), Some(l)) if c < l => connects.pop_front(),
                        (Some(_), None) if after < weak => connects.pop_front(),
                        (_, Some(_)) => line.pop_front().map(|e| e.0),
                        _ => None,
                    };
                    let got = t.release(h, now);
                    prop_assert_eq!(got.map(|g| g.0), want, "served out of order");
                    if let Some((_, nh)) = got {
                        holders.push(nh);
                    }
                }
                Op::Leave(i) if !line.is_empty() => {
                    let (w, _) = line.remove(i % line.len()).unwrap();
                    prop_assert!(t.leave_line(w, now));
                }
                Op::Tick(ms) => {
                    now += Duration::from_millis(ms);
                    let tick = t.handle_timeout(now, |_| Some(quiet_since(now - Duration::from_secs(1))));
                    for w in &tick.expired {
                        // Expiry takes the oldest entries only.
                        prop_assert_eq!(Some(*w), line.pop_front().map(|e| e.0));
                    }
                    if !share || line.is_empty() {
                        prop_assert!(tick.victims.len() <= 1);
                    }
                    prop_assert!(tick.victims.len() <= hard);
                    for (h, _) in tick.victims {
                        prop_assert!(holders.contains(&h));
                        prop_assert!(!preempted.contains(&h), "preempted twice");
                        preempted.push(h);
                    }
                }
                _ => {}
            }
            prop_assert!(t.in_use() <= hard);
            prop_assert_eq!(t.in_use(), holders.len());
            prop_assert_eq!(t.in_line(), line.len());
            prop_assert_eq!(t.waiting(), connects.len());
            prop_assert!(line.len() <= bound);
            prop_assert!(line.is_empty() || holders.len() == hard, "waiting while a slot is free");
            prop_assert!(!t.short() || t.poll_timeout().is_some());
        }
    }
}

/// A site of the node waiting to connect is not starved by the line: while
/// accepted peers wait too, a freed slot goes to whoever has waited
/// longest, connect or accept. (Before, the line was always served first
/// above the weak limit and kept the slots there, so a connect waited for
/// as long as peers kept queueing.)
#[test]
fn a_connect_waiting_beside_the_line_is_served_in_arrival_order() {
    let t0 = Instant::now();
    let mut t = table(2, 3, 10, Admission::Fifo);
    let held = full(&mut t, t0);
    let Grant::Queued(connect) = t.request(t0) else {
        panic!("past the weak limit a connect waits")
    };
    let (a, _, _) = wait(&mut t, t0, 1);
    let (b, _, _) = wait(&mut t, t0, 2);
    assert_eq!(t.release(held[0], t0).map(|g| g.0), Some(connect));
    assert_eq!(t.release(held[1], t0).map(|g| g.0), Some(a));
    // A connect asking after `b` joined waits behind it.
    let Grant::Queued(late) = t.request(t0) else {
        panic!()
    };
    assert_eq!(t.release(held[2], t0).map(|g| g.0), Some(b));
    assert_eq!((t.waiting(), t.in_line()), (1, 0));
    // With nobody in line, connects are served below the weak limit only,
    // as before.
    assert_eq!(t.in_use(), 3);
    let _ = late;
}
