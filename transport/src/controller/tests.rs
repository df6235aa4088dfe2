//! The controller over real threads: grants, the line, accepts, cancels,
//! and the preemption tick calling the victim back.

use std::sync::mpsc;

use sitenet_protocols::slots::Naive;

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

#[test]
fn the_naive_policy_is_available_and_named() {
    let c = TransController::new(SlotConfig::new(2, 4).unwrap(), Box::new(Naive));
    assert_eq!(c.stats().policy, "naive");
    assert!(TransController::process().same(&TransController::process()));
    assert!(!c.same(&TransController::process()));
}

/// Issue 17: a preemption named no channel, so its owner could not tell
/// it from one meant for a channel it had since replaced. The call names
/// the lease the policy chose, and a lease given back and taken again is a
/// new lease.
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
