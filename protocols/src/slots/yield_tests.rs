//! Our open attempts waiting in peers' lines give their slots to sites
//! waiting here ([`SlotConfig::line_yield`], [`PreemptReason::LineWait`]):
//! after the idle holders, before those at work, under both admission
//! policies and with either preemption policy.

use std::time::Instant;

use super::line_tests::{busy, quiet_since, site, MS};
use super::*;

/// An attempt told to wait in the peer's line at `since`.
fn in_line(since: Instant) -> ChannelReport {
    ChannelReport {
        closeable: false,
        in_peer_line_since: Some(since),
        ..busy(since)
    }
}

fn connect(t: &mut SlotTable, now: Instant) -> u64 {
    match t.request(now) {
        Grant::Now(h) => h,
        Grant::Queued(w) => panic!("queued as {w}"),
    }
}

/// Two slots to connect, both taken; a third site waits for one.
fn two_held_and_one_waiting(policy: Box<dyn PreemptionPolicy>) -> (SlotTable, [u64; 2], u64) {
    let t0 = Instant::now();
    let mut cfg = SlotConfig::new(2, 3).unwrap();
    cfg.admission = Admission::Fifo;
    let mut t = SlotTable::new(cfg, policy);
    let held = [connect(&mut t, t0), connect(&mut t, t0)];
    let Grant::Queued(w) = t.request(t0) else {
        panic!("the weak limit is reached")
    };
    (t, held, w)
}

fn default_policy() -> Box<dyn PreemptionPolicy> {
    Box::new(DefaultPolicy { min_hold: 50 * MS })
}

#[test]
fn an_attempt_in_a_peers_line_gives_its_slot_to_a_site_waiting_here_before_a_channel_at_work() {
    let (mut t, [a, _], waiter) = two_held_and_one_waiting(default_policy());
    let t0 = Instant::now();
    let now = t0 + 2 * t.config().line_yield;
    let tick = t.handle_timeout(now, |h| Some(if h == a { in_line(t0) } else { busy(now) }));
    assert_eq!(tick.victims, [(a, PreemptReason::LineWait)]);
    assert_eq!(t.stats().preemptions[PreemptReason::LineWait as usize], 1);
    // Not chosen twice while it leaves: one slot is already coming back.
    let again = t.handle_timeout(now + t.config().preempt_interval, |h| {
        Some(if h == a { in_line(t0) } else { busy(now) })
    });
    assert!(again.victims.is_empty(), "{again:?}");
    // The owner left the line and closed its connection: the slot is the
    // waiter's.
    assert_eq!(t.release(a, now).map(|(w, _)| w), Some(waiter));
}

#[test]
fn an_idle_channel_gives_way_before_an_attempt_in_a_peers_line() {
    let (mut t, [a, b], _) = two_held_and_one_waiting(default_policy());
    let t0 = Instant::now();
    let now = t0 + 2 * t.config().line_yield;
    let tick = t.handle_timeout(now, |h| {
        Some(if h == a { in_line(t0) } else { quiet_since(t0) })
    });
    assert_eq!(tick.victims, [(b, PreemptReason::NotCallable)]);
}

#[test]
fn an_attempt_in_line_for_less_than_line_yield_keeps_its_place() {
    let (mut t, [a, b], _) = two_held_and_one_waiting(default_policy());
    let t0 = Instant::now();
    let now = t0 + t.config().line_yield;
    let joined = now - t.config().line_yield / 2;
    // Beside a channel at work: the policy's choice, as before.
    let tick = t.handle_timeout(now, |h| {
        Some(if h == a { in_line(joined) } else { busy(now) })
    });
    assert_eq!(tick.victims, [(b, PreemptReason::NotCallable)]);
    // Alone, nothing is taken (a holder still in its handshake neither).
    let (mut t, [a, _], _) = two_held_and_one_waiting(default_policy());
    let tick = t.handle_timeout(now, |h| (h == a).then(|| in_line(joined)));
    assert!(tick.victims.is_empty(), "{tick:?}");
}

#[test]
fn the_longest_waiting_attempt_leaves_first_and_the_naive_policy_spares_channels_at_work_too() {
    let (mut t, [a, b], _) = two_held_and_one_waiting(Box::new(Naive));
    let t0 = Instant::now();
    let now = t0 + 3 * t.config().line_yield;
    let tick = t.handle_timeout(now, |h| Some(in_line(if h == a { t0 + MS } else { t0 })));
    assert_eq!(tick.victims, [(b, PreemptReason::LineWait)]);
    // Naive's own choice of a channel with queued messages comes after
    // the attempt.
    let (mut t, [a, _], _) = two_held_and_one_waiting(Box::new(Naive));
    let tick = t.handle_timeout(now, |h| Some(if h == a { in_line(t0) } else { busy(now) }));
    assert_eq!(tick.victims, [(a, PreemptReason::LineWait)]);
}

/// Two nodes whose slots are all held by their own attempts waiting in
/// each other's lines, each with a peer in its own line: under `Share`
/// each gives one attempt's slot to the peer in its line, so both lines
/// move (before, nothing moved until an attempt's give-up deadline).
#[test]
fn under_share_a_peer_in_our_line_takes_the_slot_of_our_attempt_in_another_line() {
    let t0 = Instant::now();
    let mut cfg = SlotConfig::new(1, 2).unwrap();
    cfg.admission = Admission::Share;
    let mut t = SlotTable::new(cfg, default_policy());
    let ours = connect(&mut t, t0);
    t.accept(t0).expect("below the hard limit");
    let Accepted::Wait { ticket, .. } = t.accept_or_wait(t0, site(7), 0) else {
        panic!("full: the peer waits")
    };
    let now = t0 + 2 * cfg.line_yield;
    let report = |h| Some(if h == ours { in_line(t0) } else { busy(now) });
    // The accepted channel has worked all along and its turn is over,
    // but it works: the attempt in line goes first, and one is enough.
    let tick = t.handle_timeout(now, report);
    assert_eq!(tick.victims[0], (ours, PreemptReason::LineWait));
    assert_eq!(tick.victims.len(), 1, "one per peer waiting");
    assert_eq!(t.release(ours, now).map(|(w, _)| w), Some(ticket));
}

/// A site whose attempts gave way before waits twice as long for each,
/// up to 32 times `line_yield`: sent to the back of a long line again and
/// again, it would otherwise never reach its front.
#[test]
fn each_attempt_that_gave_way_doubles_the_next_ones_patience() {
    let t0 = Instant::now();
    let again = |yields: u8, waited: u32| {
        let (mut t, [a, _], _) = two_held_and_one_waiting(default_policy());
        let line_yield = t.config().line_yield;
        let now = t0 + line_yield * waited;
        let report = ChannelReport {
            line_yields: yields,
            ..in_line(t0)
        };
        t.handle_timeout(now, |h| Some(if h == a { report } else { busy(now) }))
            .victims
            .contains(&(a, PreemptReason::LineWait))
    };
    assert!(again(0, 1));
    assert!(!again(2, 3), "two before it: four times the wait");
    assert!(again(2, 4));
    assert!(!again(200, 31), "at most 32 times");
    assert!(again(200, 32));
}
