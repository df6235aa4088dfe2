//! [`Admission::Share`] on a virtual clock: the least served in
//! line goes first, newcomers queue at the line's floor, nobody waits
//! longer than the rotation for others to cut ahead, a long line shortens
//! the turns, and a turn ends with its work as well as its time.

use std::time::{Duration, Instant};

use super::line_tests::{busy, full, site, table, MS};
use super::*;

/// `peer`, served `served` so far, takes a place in line.
fn wait_served(t: &mut SlotTable, now: Instant, peer: u128, served: u64) -> u64 {
    match t.accept_or_wait(now, site(peer), served) {
        Accepted::Wait { ticket, .. } => ticket,
        other => panic!("expected a place in line, got {other:?}"),
    }
}

/// The tickets served by releasing every slot in `held`, in order.
fn serve_all(t: &mut SlotTable, held: &[u64], now: Instant) -> Vec<u64> {
    held.iter()
        .filter_map(|&h| t.release(h, now).map(|g| g.0))
        .collect()
}

#[test]
fn share_lets_the_least_served_in_first_and_fifo_the_first_come() {
    let t0 = Instant::now();
    for admission in Admission::ALL {
        let mut t = table(2, 3, 10, admission);
        let held = full(&mut t, t0);
        let a = wait_served(&mut t, t0, 1, 900);
        let b = wait_served(&mut t, t0, 2, 100);
        let c = wait_served(&mut t, t0, 3, 500);
        let order = serve_all(&mut t, &held, t0 + MS);
        match admission {
            Admission::Share => assert_eq!(order, [b, c, a], "least served first"),
            Admission::Fifo => assert_eq!(order, [a, b, c], "first come first"),
        }
    }
}

#[test]
fn a_newcomer_queues_at_the_floor_behind_those_already_waiting_there() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 10, Admission::Share);
    let held = full(&mut t, t0);
    let a = wait_served(&mut t, t0, 1, 100);
    let b = wait_served(&mut t, t0, 2, 100);
    assert_eq!(t.release(held[0], t0).map(|g| g.0), Some(a));
    // The floor is now 100: a peer never served, and one served 50, queue
    // at 100 too — behind `b`, in arrival order — not ahead of everyone.
    let c = wait_served(&mut t, t0, 3, 0);
    let d = wait_served(&mut t, t0, 4, 50);
    // One served less than the floor's newcomers? Nobody: 100 is the least.
    let e = wait_served(&mut t, t0, 5, 101);
    assert_eq!(serve_all(&mut t, &held[1..], t0), [b, c, d]);
    assert_eq!(t.in_line(), 1);
    let _ = e;
}

#[test]
fn a_peer_served_more_waits_no_longer_than_max_wait() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 100, Admission::Share);
    t.cfg.max_wait = 300 * MS;
    t.cfg.line_hold = 10 * t.cfg.max_wait;
    let mut holders = full(&mut t, t0);
    let heavy = wait_served(&mut t, t0, 1, 1_000_000);
    // Peers never served keep arriving and go first while `heavy` waits
    // less than max_wait …
    let mut now = t0;
    let mut next_peer = 2;
    let mut served_heavy_at = None;
    while served_heavy_at.is_none() {
        now += 10 * MS;
        wait_served(&mut t, now, next_peer, 0);
        next_peer += 1;
        let h = holders.remove(0);
        let (ticket, nh) = t.release(h, now).expect("the line is served");
        holders.push(nh);
        if ticket == heavy {
            served_heavy_at = Some(now);
        }
    }
    // … and it is let in at the first release once it has waited that long.
    assert_eq!(served_heavy_at, Some(t0 + 300 * MS));
}

#[test]
fn a_long_line_shortens_the_turns_to_serve_it_within_the_rotation() {
    let t0 = Instant::now();
    let mut t = table(24, 30, 20_000, Admission::Share);
    t.cfg.turn = 500 * MS;
    t.cfg.turn_min = 20 * MS;
    t.cfg.turn_idle = 10 * MS;
    t.cfg.rotation = Duration::from_secs(5);
    assert_eq!(t.turn_now(), 500 * MS, "an empty line: the full turn");
    let held = full(&mut t, t0);
    let mut peer = 0;
    let mut line_of = |t: &mut SlotTable, n: usize| {
        while t.in_line() < n {
            peer += 1;
            wait_served(t, t0, peer, 0);
        }
    };
    line_of(&mut t, 170);
    // 5 s × 30 slots / 170 = 882 ms: longer than a turn, so a turn.
    assert_eq!(t.turn_now(), 500 * MS);
    line_of(&mut t, 1_000);
    assert_eq!(t.turn_now(), 150 * MS);
    line_of(&mut t, 10_000);
    assert_eq!(t.turn_now(), 20 * MS, "never below turn_min");
    // The tick uses it: busy holders give way after 20 ms, not 500.
    let at = t0 + 20 * MS;
    let tick = t.handle_timeout(at, |_| Some(busy(at)));
    assert_eq!(tick.victims.len(), held.len());
    assert!(tick.victims.iter().all(|v| v.1 == PreemptReason::TurnOver));
}

#[test]
fn a_holder_that_moved_its_turns_work_gives_way_before_its_time() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    let held = full(&mut t, t0);
    wait_served(&mut t, t0, 1, 0);
    let report = |served: u64, at: Instant| ChannelReport { served, ..busy(at) };
    // The first report the table sees is where a turn's work starts, so a
    // site served long before this grant starts afresh.
    let at = t0 + 5 * MS;
    let first = t.handle_timeout(at, |h| {
        Some(report(if h == held[0] { 50_000 } else { 7 }, at))
    });
    assert!(
        first.victims.is_empty(),
        "within turn_idle nobody gives way"
    );
    // 30 ms in (its 100 ms turn not over): the first has moved 1,000, the
    // second 999.
    let at = t0 + 30 * MS;
    let tick = t.handle_timeout(at, |h| {
        Some(report(if h == held[0] { 51_000 } else { 1_006 }, at))
    });
    assert_eq!(tick.victims, [(held[0], PreemptReason::TurnOver)]);
    // Mid-message, the work does not end a turn (only four turns' time).
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    let held = full(&mut t, t0);
    wait_served(&mut t, t0, 1, 0);
    let mid = |served: u64, at: Instant| ChannelReport {
        mid_message: true,
        ..report(served, at)
    };
    let only_first = |h: u64, served: u64, at| (h == held[0]).then(|| mid(served, at));
    t.handle_timeout(t0 + 5 * MS, |h| only_first(h, 0, t0 + 5 * MS));
    let at = t0 + 30 * MS;
    assert!(t
        .handle_timeout(at, |h| only_first(h, 5_000, at))
        .victims
        .is_empty());
}

#[test]
fn a_holder_that_did_its_work_gives_way_even_before_turn_idle() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    t.cfg.turn_idle = 50 * MS;
    let held = full(&mut t, t0);
    wait_served(&mut t, t0, 1, 0);
    let report = |served: u64, at: Instant| ChannelReport { served, ..busy(at) };
    let first = |h: u64, served: u64, at| (h == held[0]).then(|| report(served, at));
    let tick = 5 * MS; // the table's preemption interval
    let at = t0 + tick;
    assert!(t.handle_timeout(at, |h| first(h, 0, at)).victims.is_empty());
    // 10 ms in (turn_idle is 50): a fast peer moved its turn's work.
    let at = t0 + 2 * tick;
    let done = t.handle_timeout(at, |h| first(h, 1_000, at));
    assert_eq!(done.victims, [(held[0], PreemptReason::TurnOver)]);
}

#[test]
fn a_turns_work_counts_from_the_first_report_of_a_working_channel() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    let held = full(&mut t, t0);
    wait_served(&mut t, t0, 1, 0);
    // Before its first report the owner's record is blank (not closeable,
    // served 0); the site was served 50,000 before this grant.
    let blank = |at: Instant| ChannelReport {
        closeable: false,
        served: 0,
        served_from: None,
        ..busy(at)
    };
    let working = |served: u64, at: Instant| ChannelReport { served, ..busy(at) };
    let first = |h: u64, r: ChannelReport| (h == held[0]).then_some(r);
    t.cfg.turn_idle = 50 * MS;
    let tick = 5 * MS; // the table's preemption interval
    let at = t0 + tick;
    assert!(t
        .handle_timeout(at, |h| first(h, blank(at)))
        .victims
        .is_empty());
    let at = t0 + 2 * tick;
    assert!(t
        .handle_timeout(at, |h| first(h, working(50_000, at)))
        .victims
        .is_empty());
    // 999 more: not yet (a blank first record would have counted 50,999).
    let at = t0 + 3 * tick;
    assert!(t
        .handle_timeout(at, |h| first(h, working(50_999, at)))
        .victims
        .is_empty());
    let at = t0 + 4 * tick;
    let done = t.handle_timeout(at, |h| first(h, working(51_000, at)));
    assert_eq!(done.victims, [(held[0], PreemptReason::TurnOver)]);
}

#[test]
fn a_long_line_shortens_the_turns_work_as_it_shortens_the_turn() {
    let t0 = Instant::now();
    let mut t = table(24, 30, 20_000, Admission::Share);
    t.cfg.turn = 500 * MS;
    t.cfg.turn_min = 20 * MS;
    t.cfg.rotation = Duration::from_secs(5);
    t.cfg.turn_work = 16_000;
    assert_eq!(t.turn_work_now(), 16_000);
    full(&mut t, t0);
    for peer in 0..1_000 {
        wait_served(&mut t, t0, peer, 0);
    }
    // A 150 ms turn of 500: 3/10 of the work.
    assert_eq!(t.turn_work_now(), 4_800);
    t.cfg.turn_work = 1;
    assert_eq!(t.turn_work_now(), 1, "never 0");
}

#[test]
fn a_holder_past_its_work_gives_way_between_ticks() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    let held = full(&mut t, t0);
    // Nobody waits: no turns, nothing to tell owners, nobody gives way.
    assert_eq!(t.turn_work_due(), None);
    let report = |served: u64, at: Instant| ChannelReport {
        served,
        served_from: Some(100),
        ..busy(at)
    };
    let first = |h: u64, served: u64, at| (h == held[0]).then(|| report(served, at));
    assert!(t
        .handle_turn_work(t0, |h| first(h, 5_000, t0))
        .victims
        .is_empty());
    wait_served(&mut t, t0, 1, 0);
    assert_eq!(t.turn_work_due(), Some(1_000));
    let tick = t.poll_timeout();
    // 1 ms after its grant, 999 messages since its channel first worked:
    // not yet.
    let at = t0 + MS;
    assert!(t
        .handle_turn_work(at, |h| first(h, 1_099, at))
        .victims
        .is_empty());
    assert_eq!(t.poll_timeout(), tick, "the tick is not consumed");
    // 1,000: at once, without waiting for the tick.
    let done = t.handle_turn_work(at, |h| first(h, 1_100, at));
    assert_eq!(done.victims, [(held[0], PreemptReason::TurnOver)]);
    // Already giving way: not chosen twice; one peer waits, one gives way.
    assert!(t
        .handle_turn_work(at, |h| first(h, 9_999, at))
        .victims
        .is_empty());
}

#[test]
fn a_fast_holders_work_counts_from_its_owners_record_not_the_first_tick() {
    // A tick is 20 ms; an in-process pair moved 10,000 messages before the
    // first tick read its report, and that work was not counted, so its
    // turn lasted two ticks and ten times the others' work (10,000 mem
    // clients on two threads: Jain 0.36). The owner's record of where the
    // channel's work started counts it.
    let t0 = Instant::now();
    for (served_from, gives_way) in [(None, false), (Some(0), true)] {
        let mut t = table(1, 2, 10, Admission::Share);
        t.cfg.turn_work = 1_000;
        t.cfg.turn_idle = 20 * MS;
        let held = full(&mut t, t0);
        wait_served(&mut t, t0, 1, 0);
        let at = t0 + 20 * MS;
        let r = ChannelReport {
            served: 10_000,
            served_from,
            ..busy(at)
        };
        let victims = t
            .handle_timeout(at, |h| (h == held[0]).then_some(r))
            .victims;
        assert_eq!(
            !victims.is_empty(),
            gives_way,
            "served_from {served_from:?}"
        );
    }
}

#[test]
fn under_fifo_no_holder_gives_way_for_its_work() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Fifo);
    t.cfg.turn_work = 1;
    let held = full(&mut t, t0);
    wait_served(&mut t, t0, 1, 0);
    assert_eq!(t.turn_work_due(), None);
    let r = ChannelReport {
        served: 10_000,
        served_from: Some(0),
        ..busy(t0)
    };
    assert!(t
        .handle_turn_work(t0, |h| (h == held[0]).then_some(r))
        .victims
        .is_empty());
}

#[test]
fn an_owner_past_its_turns_work_gives_way_itself() {
    let t0 = Instant::now();
    let mut t = table(1, 2, 10, Admission::Share);
    t.cfg.turn_work = 1_000;
    let held = full(&mut t, t0);
    let r = |served: u64| ChannelReport {
        served,
        served_from: Some(100),
        ..busy(t0)
    };
    // Nobody waits: no turns, nobody gives way, however much it moved.
    assert!(!t.give_way_for_work(held[0], t0, r(50_000)));
    wait_served(&mut t, t0, 1, 0);
    let at = t0 + MS;
    assert!(!t.give_way_for_work(held[0], at, r(1_099)), "999: not yet");
    let mid = ChannelReport {
        mid_message: true,
        ..r(5_000)
    };
    assert!(
        !t.give_way_for_work(held[0], at, mid),
        "mid-message: spared"
    );
    assert!(!t.give_way_for_work(99, at, r(5_000)), "not a holder");
    assert!(t.short());
    assert!(t.give_way_for_work(held[0], at, r(1_100)));
    assert_eq!(
        t.stats().preemptions[PreemptReason::TurnOver as usize],
        1,
        "counted as a turn over"
    );
    assert!(!t.short(), "one waits, one gives way: no preemption due");
    // Once; and one peer waiting has its slot coming: nobody else gives way.
    assert!(!t.give_way_for_work(held[0], at, r(9_999)));
    assert!(!t.give_way_for_work(held[1], at, r(9_999)));
    // Its channel closed, the slot goes to the peer in line.
    assert!(t.release(held[0], at).is_some());
}
