//! Lanes on a virtual clock (`lanes.rs`): under
//! [`Admission::Share`] a freed slot goes to a lighter lane's peer before
//! the least served of a heavier lane, within the line's `max_wait`;
//! `Fifo` and unknown lanes keep the order; giving way frees a holder's
//! place in its lane's count; and, over many work-measured turns, the
//! holders stay spread where without lanes they pile up on one thread.

use std::time::Instant;

use proptest::prelude::*;

use super::line_tests::{busy, site, table, MS};
use super::*;

/// A holder on `lane`, below the hard limit.
fn hold(t: &mut SlotTable, now: Instant, lane: Option<u32>) -> u64 {
    match t.accept_or_wait_on(now, None, 0, lane) {
        Accepted::Slot(h) => h,
        other => panic!("expected a slot, got {other:?}"),
    }
}

/// `peer`, served `served`, its channel on `lane`, waits in line.
fn wait_on(t: &mut SlotTable, now: Instant, peer: u128, served: u64, lane: Option<u32>) -> u64 {
    match t.accept_or_wait_on(now, site(peer), served, lane) {
        Accepted::Wait { ticket, .. } => ticket,
        other => panic!("expected a place in line, got {other:?}"),
    }
}

/// Working holders per lane, counted from the holders themselves: what
/// `load` must always say.
fn counted(t: &SlotTable, lane: u32) -> usize {
    t.holders
        .iter()
        .filter(|(h, held)| held.lane == Some(lane) && !t.preempting.contains(h))
        .count()
}

/// A table of 3 weak and 4 hard slots, held on `lanes`; peer 1 and then
/// peer 2 in line, each (served so far, lane); the first holder's slot
/// freed `after` that. Returns (whom it went to, peer 1's ticket, peer 2's).
fn first_freed(
    admission: Admission,
    lanes: [Option<u32>; 4],
    one: (u64, Option<u32>),
    two: (u64, Option<u32>),
    after: std::time::Duration,
) -> (Option<u64>, u64, u64) {
    let t0 = Instant::now();
    let mut t = table(3, 4, 10, admission);
    let h = lanes.map(|l| hold(&mut t, t0, l));
    let a = wait_on(&mut t, t0, 1, one.0, one.1);
    let b = wait_on(&mut t, t0, 2, two.0, two.1);
    (t.release(h[0], t0 + after).map(|g| g.0), a, b)
}

#[test]
fn share_serves_a_lighter_lane_before_the_least_served_of_a_heavier_one() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 10, Admission::Share);
    let h: Vec<u64> = [0, 0, 0, 1].map(|l| hold(&mut t, t0, Some(l))).into();
    let a = wait_on(&mut t, t0, 1, 0, Some(0)); // least served, lane 0
    let b = wait_on(&mut t, t0, 2, 500, Some(1));
    // Lane 0 keeps 2 working holders, lane 1 has 1: the slot goes to lane
    // 1's peer although lane 0's is less served.
    assert_eq!(t.release(h[0], t0 + MS).map(|g| g.0), Some(b));
    assert_eq!((t.load.load(0), t.load.load(1)), (2, 2));
    // Balanced (and nobody else waits on a lighter lane): least served.
    assert_eq!(t.release(h[1], t0 + MS).map(|g| g.0), Some(a));
    assert_eq!((t.load.load(0), t.load.load(1)), (2, 2));
}

#[test]
fn a_peer_passed_over_for_its_lane_goes_first_once_it_waited_max_wait() {
    let heavy = [Some(0), Some(0), Some(0), Some(1)];
    let max_wait = table(3, 4, 10, Admission::Share).config().max_wait;
    let (got, a, b) = first_freed(Admission::Share, heavy, (0, Some(0)), (500, Some(1)), MS);
    assert_eq!(got, Some(b), "passed over before its bound");
    // The head has waited its bound: no lane passes it over.
    let (got, a2, _) = first_freed(
        Admission::Share,
        heavy,
        (0, Some(0)),
        (500, Some(1)),
        max_wait,
    );
    assert_eq!(got, Some(a2));
    assert_eq!(a, a2);
}

#[test]
fn fifo_and_unknown_lanes_keep_the_order() {
    let heavy = [Some(0), Some(0), Some(0), Some(1)];
    // Fifo: the head, whatever the lanes.
    let (got, a, _) = first_freed(Admission::Fifo, heavy, (0, Some(0)), (0, Some(1)), MS);
    assert_eq!(got, Some(a));
    // Share, the least served's lane unknown: never passed over.
    let (got, a, _) = first_freed(Admission::Share, heavy, (0, None), (500, Some(1)), MS);
    assert_eq!(got, Some(a));
    // Holders of unknown lanes count for none: lane 1, running none of
    // the known ones, is the lighter.
    let unknown = [None, None, None, Some(0)];
    let (got, _, b) = first_freed(Admission::Share, unknown, (0, Some(0)), (500, Some(1)), MS);
    assert_eq!(got, Some(b));
}

#[test]
fn a_connect_waiter_keeps_its_lane_once_served() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    let Grant::Now(first) = t.request_on(t0, Some(3)) else {
        panic!("below the weak limit")
    };
    let Grant::Queued(w) = t.request_on(t0, Some(4)) else {
        panic!("at the weak limit")
    };
    assert_eq!(t.load.load(3), 1);
    assert_eq!(t.release(first, t0 + MS).map(|g| g.0), Some(w));
    assert_eq!((t.load.load(3), t.load.load(4)), (0, 1));
}

#[test]
fn a_holder_giving_way_no_longer_counts_for_its_lane() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 10, Admission::Share);
    let h: Vec<u64> = [0, 0, 1, 1].map(|l| hold(&mut t, t0, Some(l))).into();
    let _ = wait_on(&mut t, t0, 1, 0, Some(0));
    // Past its turn, every holder is asked to give way (one per peer in
    // line: one of them).
    let tick = t.handle_timeout(t0 + 200 * MS, |_| Some(busy(t0)));
    assert_eq!(tick.victims.len(), 1);
    let gone = tick.victims[0].0;
    for lane in [0, 1] {
        assert_eq!(t.load.load(lane), counted(&t, lane));
    }
    assert_eq!(t.load.load(0) + t.load.load(1), 3);
    // Its slot coming back does not count it twice.
    t.release(gone, t0 + 201 * MS);
    for lane in [0, 1] {
        assert_eq!(t.load.load(lane), counted(&t, lane));
    }
    assert!(h.contains(&gone));
}

/// Work-measured turns on two threads: each step, every thread that runs
/// a holder finishes one holder's turn (a thread works at its own speed,
/// whatever the number of holders it shares it among), and the slot goes
/// to the line. Returns the steps on which a thread ran no holder, and
/// the largest difference between the threads' holders after a step.
fn idle_steps(lanes_known: bool, steps: usize) -> (usize, usize) {
    let t0 = Instant::now();
    let mut t = table(24, 30, 200, Admission::Share);
    let lane_of = |peer: u128| lanes_known.then_some((peer % 2) as u32);
    let mut holders: Vec<(u64, u128)> = (0..30u128)
        .map(|p| (hold(&mut t, t0, lane_of(p)), p))
        .collect();
    let mut line: Vec<(u64, u128)> = Vec::new();
    let mut served = [0u64; 200];
    for p in 30..200u128 {
        line.push((wait_on(&mut t, t0, p, 0, lane_of(p)), p));
    }
    let mut idle = 0;
    let mut spread = 0;
    // A fixed stream of choices (which holder of a thread ends its turn).
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for step in 1..=steps {
        let now = t0 + MS * step as u32;
        for thread in 0..2u128 {
            let on: Vec<usize> = (0..holders.len())
                .filter(|&i| holders[i].1 % 2 == thread)
                .collect();
            if on.is_empty() {
                idle += 1;
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (h, peer) = holders.swap_remove(on[(x % on.len() as u64) as usize]);
            // A turn's work varies (a burst ends past the quantum).
            served[peer as usize] += 100 + (x >> 32) % 100;
            let (ticket, nh) = t.release(h, now).expect("the line is never empty");
            let i = line.iter().position(|&(tk, _)| tk == ticket).unwrap();
            let (_, next) = line.swap_remove(i);
            holders.push((nh, next));
            line.push((
                wait_on(&mut t, now, peer, served[peer as usize], lane_of(peer)),
                peer,
            ));
        }
        let odd = holders.iter().filter(|(_, p)| p % 2 == 1).count();
        spread = spread.max(odd.abs_diff(holders.len() - odd));
    }
    (idle, spread)
}

#[test]
fn with_lanes_the_holders_stay_spread_over_the_threads() {
    // Without lanes the number of holders per thread is a random walk, and
    // a thread runs nothing for long stretches; with them, never.
    let (idle, spread) = idle_steps(true, 20_000);
    assert_eq!(idle, 0, "a thread ran no holder");
    assert!(spread <= 2, "holders {spread} apart");
    let (idle, spread) = idle_steps(false, 20_000);
    assert!(
        idle > 0 && spread >= 20,
        "expected the walk to empty a thread: {idle} idle steps, {spread} apart"
    );
}

proptest! {
    /// Whatever happens to the slots, each lane's count is its working
    /// holders, and a grant under `Share` goes to a lane no heavier than
    /// any other lane with peers in line, unless it was the head's due.
    #[test]
    fn lane_counts_hold_and_grants_go_to_the_lightest_lane(
        ops in proptest::collection::vec((0u8..4, 0u32..3, 0u64..1000, 0usize..8), 1..200)
    ) {
        let t0 = Instant::now();
        let mut t = table(4, 6, 20, Admission::Share);
        let mut held: Vec<u64> = Vec::new();
        let mut peer = 0u128;
        for (step, (op, lane, served, pick)) in ops.into_iter().enumerate() {
            let now = t0 + MS * step as u32;
            match op {
                0 | 1 => {
                    peer += 1;
                    if let Accepted::Slot(h) = t.accept_or_wait_on(now, site(peer), served, Some(lane)) {
                        held.push(h);
                    }
                }
                2 if !held.is_empty() => {
                    let h = held.swap_remove(pick % held.len());
                    let before: Vec<(u32, usize)> =
                        (0..3).map(|l| (l, t.load.load(l))).collect();
                    let lanes_waiting: Vec<u32> = t.line.lanes().collect();
                    let head_due = t.line.front().and_then(|f| t.line.since(f)).is_some_and(|s| {
                        now.saturating_duration_since(s) >= t.config().max_wait
                    });
                    let gone_lane = t.holders[&h].lane;
                    let gone_working = !t.preempting.contains(&h);
                    if let Some((ticket, nh)) = t.release(h, now) {
                        held.push(nh);
                        let got = t.holders[&nh].lane.expect("every lane is known here");
                        let load = |l: u32| {
                            let b = before[l as usize].1;
                            b - usize::from(gone_working && gone_lane == Some(l))
                        };
                        if !head_due {
                            for &l in &lanes_waiting {
                                prop_assert!(load(got) <= load(l),
                                    "ticket {ticket} on lane {got} ({}) before lane {l} ({})", load(got), load(l));
                            }
                        }
                    }
                }
                _ => {
                    let _ = t.handle_timeout(now + 200 * MS, |_| Some(busy(t0)));
                }
            }
            for l in 0..3 {
                prop_assert_eq!(t.load.load(l), counted(&t, l));
            }
        }
    }
}
