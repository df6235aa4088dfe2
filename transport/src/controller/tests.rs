//! The controller over real threads: grants, the line, accepts, cancels,
//! and the preemption tick calling the victim back.

use std::sync::mpsc;

use sitenet_protocols::slots::Naive;
use sitenet_protocols::SiteId;

use super::*;

const PATIENCE: Duration = Duration::from_secs(60);

fn ctrl(weak: usize, hard: usize) -> TransController {
    TransController::new(
        SlotConfig::new(weak, hard).unwrap(),
        Box::new(DefaultPolicy {
            min_hold: Duration::ZERO,
        }),
    )
}

fn report(callable: bool) -> SlotReport {
    SlotReport {
        closeable: true,
        last_active: Instant::now(),
        mid_message: false,
        replies_expected: false,
        buffers_empty: true,
        queues_empty: true,
        callable,
        served: 0,
        served_from: None,
        in_peer_line_since: None,
        line_yields: 0,
    }
}

#[test]
fn a_freed_slot_goes_to_the_first_waiter_and_a_lease_gives_it_back() {
    let c = ctrl(1, 2);
    let Requested::Granted(first) = c.request(|_| panic!("granted at once")) else {
        panic!("a slot is free")
    };
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let Requested::Queued(_) = c.request(move |l| tx.send((1, l)).unwrap()) else {
        panic!("the weak limit is reached")
    };
    let Requested::Queued(_) = c.request(move |l| tx2.send((2, l)).unwrap()) else {
        panic!()
    };
    assert_eq!((c.stats().in_use, c.stats().waiting), (1, 2));
    drop(first);
    let (who, lease) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(who, 1, "first come, first served");
    drop(lease);
    let (who, lease) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(who, 2);
    drop(lease);
    let s = c.stats();
    assert_eq!((s.in_use, s.waiting, s.queued, s.granted), (0, 0, 2, 3));
}

#[test]
fn a_cancelled_waiter_is_skipped() {
    let c = ctrl(1, 2);
    let Requested::Granted(first) = c.request(|_| {}) else {
        panic!()
    };
    let Requested::Queued(t) = c.request(|_| panic!("cancelled")) else {
        panic!()
    };
    c.cancel(t);
    drop(first);
    assert_eq!((c.stats().in_use, c.stats().waiting), (0, 0));
}

#[test]
fn accepts_stop_at_the_hard_limit() {
    let c = ctrl(1, 3);
    let held: Vec<SlotLease> = (0..3).map(|_| c.accept().expect("below hard")).collect();
    assert!(c.accept().is_none());
    assert_eq!(c.stats().accepts_refused, 1);
    assert_eq!(c.stats().peak_in_use, 3);
    drop(held);
    assert_eq!(c.stats().in_use, 0);
    assert!(c.accept().is_some());
}

#[test]
fn past_the_weak_limit_the_tick_preempts_the_policys_choice() {
    let c = ctrl(1, 3);
    let (tx, rx) = mpsc::channel();
    let mut held = Vec::new();
    for (i, callable) in [(0u32, false), (1, true), (2, false)] {
        let lease = c.accept().unwrap();
        let info = Arc::new(SlotInfo::default());
        c.report(&info, &report(callable));
        let tx = tx.clone();
        lease.attach(
            info,
            Arc::new(move |_lease, why| {
                let _ = tx.send((i, why));
            }),
        );
        held.push(Some(lease));
    }
    // Two slots over the weak limit: the callable peer goes first.
    let (victim, why) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!((victim, why), (1, PreemptReason::LeastRecentlyActive));
    held[victim as usize] = None;
    let (victim, why) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(why, PreemptReason::NotCallable);
    held[victim as usize] = None;
    // Back at the weak limit with nobody waiting: no more.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    let s = c.stats();
    assert_eq!(s.total_preemptions(), 2);
    assert_eq!(s.in_use, 1);
}

/// An open attempt's lease, attached while it runs and reported waiting in
/// the peer's line, is asked to give its slot back to a site waiting here
/// once it has waited `line_yield`; the report survives the atomics (the
/// time it joined, to the microsecond).
#[test]
fn an_attempt_reported_waiting_in_a_peers_line_gives_its_slot_to_a_waiter() {
    let mut cfg = SlotConfig::new(1, 2).unwrap();
    cfg.preempt_interval = Duration::from_millis(5);
    cfg.line_yield = Duration::from_millis(20);
    let c = TransController::new(cfg, Box::new(DefaultPolicy::default()));
    let (tx, rx) = mpsc::channel();
    let Requested::Granted(attempt) = c.request(|_| {}) else {
        panic!("below the weak limit")
    };
    let info = Arc::new(SlotInfo::default());
    attempt.attach(
        info.clone(),
        Arc::new(move |lease, why| {
            let _ = tx.send((lease, why));
        }),
    );
    let since = Instant::now();
    let waiting = SlotReport {
        closeable: false,
        in_peer_line_since: Some(since),
        line_yields: 0,
        ..report(true)
    };
    c.report(&info, &waiting);
    let loaded = info.load(c.inner.epoch);
    let lost = since.saturating_duration_since(loaded.in_peer_line_since.unwrap());
    assert!(lost < Duration::from_micros(1), "{lost:?}");
    assert!(!loaded.closeable);
    let again = SlotReport {
        line_yields: 3,
        ..waiting
    };
    c.report(&info, &again);
    assert_eq!(info.load(c.inner.epoch).line_yields, 3);
    c.report(&info, &waiting);
    // Another site wants a slot: the attempt gives its slot back.
    let (granted_tx, granted_rx) = mpsc::channel();
    let Requested::Queued(_) = c.request(move |l| {
        let _ = granted_tx.send(l);
    }) else {
        panic!("at the weak limit")
    };
    let (lease, why) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!((lease, why), (attempt.id(), PreemptReason::LineWait));
    drop(attempt);
    let next = granted_rx.recv_timeout(PATIENCE).unwrap();
    assert_ne!(next.id(), lease);
    let s = c.stats();
    assert!(s.preemptions.contains(&("line_wait", 1)), "{s:?}");
}

#[test]
fn the_naive_policy_is_available_and_named() {
    let c = TransController::new(SlotConfig::new(2, 4).unwrap(), Box::new(Naive));
    assert_eq!(c.stats().policy, "naive");
    assert!(TransController::process().same(&TransController::process()));
    assert!(!c.same(&TransController::process()));
}

/// A preemption names the lease the policy chose, and a lease given back
/// and taken again is a new lease, so the owner tells a preemption of its
/// channel from one meant for a channel it has since replaced.
#[test]
fn a_preemption_names_the_lease_it_chose() {
    let c = ctrl(1, 3);
    let (tx, rx) = mpsc::channel();
    let mut held = Vec::new();
    for callable in [false, true] {
        let lease = c.accept().unwrap();
        let info = Arc::new(SlotInfo::default());
        c.report(&info, &report(callable));
        let tx = tx.clone();
        lease.attach(
            info,
            Arc::new(move |lease, why| {
                let _ = tx.send((lease, why));
            }),
        );
        held.push(lease);
    }
    assert_ne!(held[0].id(), held[1].id());
    // One over the weak limit: the callable peer's lease is named.
    let (lease, why) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        (lease, why),
        (held[1].id(), PreemptReason::LeastRecentlyActive)
    );
    let gone = held.pop().unwrap().id();
    let again = c.accept().unwrap();
    assert_ne!(again.id(), gone, "a slot taken again is a new lease");
}

fn line_ctrl(weak: usize, hard: usize, f: impl FnOnce(&mut SlotConfig)) -> TransController {
    let mut cfg = SlotConfig::new(weak, hard).unwrap();
    f(&mut cfg);
    TransController::new(
        cfg,
        Box::new(DefaultPolicy {
            min_hold: Duration::ZERO,
        }),
    )
}

/// A place in line ends with the slot, or with why not — its
/// hold time, or a newer connection of the same site; a peer that left is
/// skipped.
#[test]
fn the_line_calls_back_with_the_slot_or_with_why_its_place_ended() {
    let c = line_ctrl(1, 2, |cfg| cfg.line_hold = Duration::from_millis(300));
    let a = c.accept().unwrap();
    let _b = c.accept().unwrap();
    let (tx, rx) = mpsc::channel();
    let wait = |site: u128| {
        let tx = tx.clone();
        // The lease itself is sent: dropping it here would give the slot
        // to the next in line at once.
        match c.accept_or_wait(Some(SiteId(site)), 0, move |r| tx.send((site, r)).unwrap()) {
            AcceptOrWait::Wait { ticket, .. } => ticket,
            other => panic!("{other:?}"),
        }
    };
    let first = wait(1);
    let _second = wait(2);
    // Site 1 calls again: its older place ends, replaced.
    let _third = wait(1);
    assert!(matches!(
        rx.recv_timeout(PATIENCE).unwrap(),
        (1, Err(LineEnd::Replaced))
    ));
    c.leave_line(first); // already replaced: nothing happens
                         // The first freed slot goes to site 2 (now the head).
    drop(a);
    let (site, turn) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(site, 2, "{turn:?}");
    let _lease = turn.expect("its turn");
    // Site 1's newer place runs out of hold time: the tick says so.
    assert!(matches!(
        rx.recv_timeout(PATIENCE).unwrap(),
        (1, Err(LineEnd::Expired))
    ));
    let s = c.stats();
    assert_eq!(
        (
            s.line_waits,
            s.grants,
            s.line_left,
            s.line_expired,
            s.in_line
        ),
        (3, 1, 1, 1, 0)
    );
    assert_eq!(s.admission, "share");
}

/// Under `Share`, while peers wait, every holder past its turn is told
/// to give way in the same tick, one per peer waiting.
#[test]
fn under_share_holders_past_their_turn_give_way_one_per_peer_waiting() {
    let c = line_ctrl(2, 3, |cfg| {
        cfg.turn = Duration::from_millis(50);
        cfg.preempt_interval = Duration::from_millis(5);
    });
    let (tx, rx) = mpsc::channel();
    let mut held = Vec::new();
    for i in 0..3u32 {
        let lease = c.accept().unwrap();
        let info = Arc::new(SlotInfo::default());
        // Busy: never quiet, so only the turn counts.
        c.report(
            &info,
            &SlotReport {
                queues_empty: false,
                ..report(true)
            },
        );
        let tx = tx.clone();
        lease.attach(info, Arc::new(move |_, why| tx.send((i, why)).unwrap()));
        held.push(lease);
    }
    let mut tickets = Vec::new();
    for site in [10u128, 11] {
        match c.accept_or_wait(Some(SiteId(site)), 0, |_| {}) {
            AcceptOrWait::Wait { ticket, .. } => tickets.push(ticket),
            other => panic!("{other:?}"),
        }
    }
    let mut victims: Vec<u32> = (0..2)
        .map(|_| {
            let (i, why) = rx.recv_timeout(PATIENCE).unwrap();
            assert_eq!(why, PreemptReason::TurnOver);
            i
        })
        .collect();
    victims.sort();
    assert_eq!(
        victims,
        [0, 1],
        "the longest held first, two for two waiting"
    );
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    // Fifo instead: the policy alone (nothing over the weak limit once
    // those two are counted as going).
    c.set_admission(sitenet_protocols::slots::Admission::Fifo);
    assert_eq!(c.stats().admission, "fifo");
    for t in tickets {
        c.leave_line(t);
    }
}

/// A holder that did its turn's work while a peer waits gives way when its
/// owner reports it, not at the next tick (here an hour away): waiting for
/// the tick, an in-process pair on two threads can move 10,000 messages in
/// the two 20 ms ticks its turn lasts while others move a hundred.
#[test]
fn a_holder_reporting_its_turns_work_done_gives_way_before_the_tick() {
    // The leases stay held for the whole test.
    let WorkingPair {
        c,
        fast: _fast,
        slow: _slow,
        infos,
        rx,
    } = WorkingPair::new();
    wait_in_line(&c);
    // The owners report as they do, every few milliseconds: the fast one
    // moves 50 messages between reports, the slow one 1.
    let mut moved = (5_000, 5_000);
    let (who, why) = loop {
        moved = (moved.0 + 50, moved.1 + 1);
        c.report(&infos[0], &served(moved.0));
        c.report(&infos[1], &served(moved.1));
        if let Ok(called) = rx.recv_timeout(Duration::from_millis(10)) {
            break called;
        }
        assert!(moved.0 < 5_000 + 50 * 6_000, "never preempted");
    };
    assert_eq!((who, why), ("fast", PreemptReason::TurnOver));
    assert!(moved.0 - 5_000 >= 100, "not before its work was done");
    // One peer waits and one holder gives way: the slow one stays.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
}

/// Two working holders, "fast" and "slow", each served 5,000 messages
/// before this turn, of a controller whose ticks are an hour away and
/// whose turn is 100 messages, unshortened: only work ends a turn here.
struct WorkingPair {
    c: TransController,
    fast: SlotLease,
    slow: SlotLease,
    infos: Vec<Arc<SlotInfo>>,
    rx: mpsc::Receiver<(&'static str, PreemptReason)>,
}

impl WorkingPair {
    fn new() -> Self {
        let c = line_ctrl(1, 2, |cfg| {
            cfg.preempt_interval = Duration::from_secs(3600);
            cfg.turn = Duration::from_secs(3600);
            cfg.turn_idle = Duration::from_secs(3600);
            cfg.turn_work = 100;
            // Else the rotation (5 s over two slots) would shorten the
            // hour's turn, and its work with it, to one message.
            cfg.rotation = Duration::from_secs(3600);
        });
        let (tx, rx) = mpsc::channel();
        let fast = c.accept().unwrap();
        let slow = c.accept().unwrap();
        let infos = attach_all(&[(&fast, "fast"), (&slow, "slow")], &tx);
        for info in &infos {
            c.report(info, &served(5_000));
        }
        Self {
            c,
            fast,
            slow,
            infos,
            rx,
        }
    }
}

/// A working channel's report, `n` messages served.
fn served(n: u64) -> SlotReport {
    SlotReport {
        served: n,
        ..report(true)
    }
}

/// A peer takes a place in `c`'s line (every slot is held).
fn wait_in_line(c: &TransController) {
    match c.accept_or_wait(Some(SiteId(9)), 0, |_| {}) {
        AcceptOrWait::Wait { .. } => {}
        other => panic!("{other:?}"),
    }
}

/// Attaches a fresh `SlotInfo` to each lease, its preemption sent on `tx`
/// under its name.
fn attach_all(
    leases: &[(&SlotLease, &'static str)],
    tx: &mpsc::Sender<(&'static str, PreemptReason)>,
) -> Vec<Arc<SlotInfo>> {
    leases
        .iter()
        .map(|(lease, who)| {
            let info = Arc::new(SlotInfo::default());
            let (tx, who) = (tx.clone(), *who);
            lease.attach(
                info.clone(),
                Arc::new(move |_lease, why| {
                    let _ = tx.send((who, why));
                }),
            );
            info
        })
        .collect()
}

#[test]
fn an_owner_past_its_turns_work_gives_way_on_its_own_turn() {
    let WorkingPair {
        c,
        fast,
        slow,
        infos,
        rx,
    } = WorkingPair::new();
    // Nobody waits: no turns, however much a channel moved.
    assert!(!fast.must_give_way(&infos[0], 50_000, || served(50_000)));
    wait_in_line(&c);
    // 99 messages into its turn, never; at 100, on its own turn once the
    // tick thread has published the turn's work (it wakes on the line's
    // change), with no preemption sent to it.
    let mut asked = 0;
    loop {
        assert!(!fast.must_give_way(&infos[0], 5_099, || served(5_099)));
        if fast.must_give_way(&infos[0], 5_100, || served(5_100)) {
            break;
        }
        assert!(rx.recv_timeout(Duration::from_millis(10)).is_err());
        asked += 1;
        assert!(asked < 6_000, "the turn's work was never published");
    }
    let turn_over = c
        .stats()
        .preemptions
        .into_iter()
        .find(|(r, _)| *r == "turn_over");
    assert_eq!(turn_over, Some(("turn_over", 1)));
    // One peer waits and one holder gives way: the slow one stays, and
    // nobody is preempted.
    assert!(!slow.must_give_way(&infos[1], 9_000, || served(9_000)));
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    // Giving the slot back lets the peer in line in.
    drop(fast);
    assert_eq!(c.stats().grants, 1);
}

#[test]
fn an_owner_chosen_by_the_tick_gives_way_before_its_preemption_arrives() {
    let c = line_ctrl(1, 2, |cfg| {
        cfg.preempt_interval = Duration::from_millis(1);
        cfg.turn = Duration::from_millis(1);
        cfg.turn_min = Duration::from_millis(1);
        cfg.turn_idle = Duration::from_millis(1);
    });
    let (tx, rx) = mpsc::channel();
    let a = c.accept().unwrap();
    let b = c.accept().unwrap();
    let infos = attach_all(&[(&a, "a"), (&b, "b")], &tx);
    for info in &infos {
        c.report(info, &report(true));
    }
    assert!(!a.must_give_way(&infos[0], 0, || report(true)));
    wait_in_line(&c);
    let (who, _) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a holder preempted");
    let (chosen, other) = match who {
        "a" => ((&a, &infos[0]), (&b, &infos[1])),
        _ => ((&b, &infos[1]), (&a, &infos[0])),
    };
    // The owner knows on its next turn, whatever its work, without the
    // callback's message.
    assert!(chosen.0.must_give_way(chosen.1, 0, || panic!("not asked")));
    assert!(!other.0.must_give_way(other.1, 0, || report(true)));
}
