//! The admission rules with a virtual clock; a property test of the caps.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

fn cfg(max_pending: usize, max_per_source: usize) -> AdmissionConfig {
    AdmissionConfig {
        max_pending,
        max_per_source,
        silence: Duration::from_secs(2),
        timeout: Duration::from_secs(5),
    }
}

fn v4(last: u8) -> Source {
    Source::of(Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))))
}

/// A flood of silent sockets in small: a node of a 1,024-descriptor process
/// (cap 120), 900 silent sockets from 45 addresses and 100 from the
/// honest peer's own. An honest peer connecting afterwards from either is
/// admitted, is not dropped by the flood that follows it within its round
/// trip, and the node never holds more than its cap.
#[test]
fn an_idle_flood_never_keeps_an_honest_peer_out() {
    let t0 = Instant::now();
    let mut adm = Admission::new(cfg(handshake_fds(1024), 8));
    assert_eq!(adm.config().max_pending, 120);
    let here = v4(1);
    for i in 0..900 {
        adm.admit(t0, v4(2 + (i % 45) as u8));
        assert!(adm.pending() <= 120);
    }
    for _ in 0..100 {
        adm.admit(t0, here);
        assert!(adm.pending() <= 120);
    }
    assert_eq!(adm.pending(), 120);
    assert!(adm.pending_from(here) <= 8, "{}", adm.pending_from(here));
    // An honest peer from the attacked address and one from elsewhere.
    let honest_here = adm.admit(t0, here).ticket;
    let honest_there = adm.admit(t0, v4(200)).ticket;
    // Its round trip: PRESENT out, NEGOTIATE's first bytes in, while the
    // flood goes on (fewer new sockets than the silent ones older than it).
    for i in 0..30 {
        adm.admit(t0, v4(2 + (i % 45) as u8));
    }
    adm.spoke(honest_here);
    adm.spoke(honest_there);
    assert!(adm.finish(honest_here), "the honest peer here was dropped");
    assert!(
        adm.finish(honest_there),
        "the honest peer there was dropped"
    );
    let s = adm.stats();
    assert!(s.peak_pending <= 120, "{s:?}");
    assert!(s.dropped[Dropped::NodeFull as usize] > 0, "{s:?}");
}

#[test]
fn a_silent_socket_goes_at_the_silence_deadline_a_speaking_one_at_the_timeout() {
    let t0 = Instant::now();
    let mut adm = Admission::new(cfg(10, 10));
    let silent = adm.admit(t0, v4(1)).ticket;
    let later = t0 + Duration::from_millis(500);
    let speaking = adm.admit(later, v4(1)).ticket;
    adm.spoke(speaking);
    assert_eq!(adm.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    assert!(adm
        .handle_timeout(t0 + Duration::from_millis(1999))
        .is_empty());
    assert_eq!(
        adm.handle_timeout(t0 + Duration::from_secs(2)),
        vec![(silent, Dropped::Silent)]
    );
    assert_eq!(adm.poll_timeout(), Some(later + Duration::from_secs(5)));
    assert!(adm
        .handle_timeout(later + Duration::from_secs(4))
        .is_empty());
    assert_eq!(
        adm.handle_timeout(later + Duration::from_secs(5)),
        vec![(speaking, Dropped::TimedOut)]
    );
    assert_eq!(adm.poll_timeout(), None);
    // Already gone: its driver's finish changes nothing.
    assert!(!adm.finish(silent));
    assert_eq!(adm.stats().dropped, [0, 0, 1, 1]);
}

#[test]
fn the_silence_deadline_is_never_later_than_the_timeout() {
    let c = AdmissionConfig {
        max_pending: 0,
        max_per_source: 0,
        silence: Duration::from_secs(9),
        timeout: Duration::from_secs(3),
    }
    .normalised();
    assert_eq!((c.max_pending, c.max_per_source), (1, 1));
    assert_eq!(c.silence, Duration::from_secs(3));
}

/// Below half the node's cap one address may open a burst (a NAT, a
/// process starting many clients); past it, it makes room from its own.
#[test]
fn the_per_source_cap_applies_once_the_node_is_half_full() {
    let t0 = Instant::now();
    let mut adm = Admission::new(cfg(100, 4));
    for _ in 0..50 {
        assert_eq!(adm.admit(t0, v4(1)).dropped, None);
    }
    assert_eq!(adm.pending_from(v4(1)), 50);
    let oldest_silent = 1;
    let a = adm.admit(t0, v4(1));
    assert_eq!(a.dropped, Some((oldest_silent, Dropped::SourceFull)));
    assert_eq!(adm.pending_from(v4(1)), 50);
    // Another address is not held back by it.
    for _ in 0..4 {
        assert_eq!(adm.admit(t0, v4(2)).dropped, None);
    }
}

/// A source's own victim is its oldest silent handshake; only if all of
/// them spoke, its oldest.
#[test]
fn silent_handshakes_go_before_speaking_ones() {
    let t0 = Instant::now();
    let mut adm = Admission::new(cfg(4, 4));
    let a = adm.admit(t0, v4(1)).ticket;
    let b = adm.admit(t0, v4(1)).ticket;
    let c = adm.admit(t0, v4(1)).ticket;
    let d = adm.admit(t0, v4(1)).ticket;
    adm.spoke(a);
    adm.spoke(c);
    assert_eq!(adm.admit(t0, v4(1)).dropped, Some((b, Dropped::SourceFull)));
    adm.spoke(d);
    let e = adm.admit(t0, v4(1));
    assert_eq!(e.dropped, Some((e.ticket - 1, Dropped::SourceFull)));
    adm.spoke(e.ticket);
    // All four speak now: the oldest goes.
    assert_eq!(adm.admit(t0, v4(1)).dropped, Some((a, Dropped::SourceFull)));
}

/// At the node's cap the source holding the most makes room, not the
/// newcomer's if it holds less, and not channels without an address
/// that hold less either.
#[test]
fn at_the_node_cap_the_heaviest_source_pays() {
    let t0 = Instant::now();
    let mut adm = Admission::new(cfg(6, 6));
    let local = Source::of(None);
    let first = adm.admit(t0, local).ticket;
    let heavy: Vec<u64> = (0..4).map(|_| adm.admit(t0, v4(9)).ticket).collect();
    adm.admit(t0, v4(1));
    assert_eq!(adm.pending(), 6);
    let n = adm.admit(t0, v4(1));
    assert_eq!(n.dropped, Some((heavy[0], Dropped::NodeFull)));
    assert_eq!(adm.pending_from(local), 1);
    assert!(adm.finish(first));
}

#[test]
fn an_ipv6_source_is_its_slash_64_and_a_mapped_ipv4_its_ipv4() {
    let a = Source::of(Some("2001:db8:1:2::1".parse().unwrap()));
    let b = Source::of(Some("2001:db8:1:2:ffff:1:2:3".parse().unwrap()));
    let c = Source::of(Some("2001:db8:1:3::1".parse().unwrap()));
    assert_eq!(a, b);
    assert_ne!(a, c);
    let mapped = Source::of(Some("::ffff:192.0.2.1".parse().unwrap()));
    assert_eq!(mapped, v4(1));
    assert!(!Source::of(None).has_address());
}

#[derive(Debug, Clone)]
enum Op {
    Admit(u8),
    Speak(usize),
    Finish(usize),
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Admit),
        2 => (0usize..64).prop_map(Op::Speak),
        1 => (0usize..64).prop_map(Op::Finish),
        1 => (0u16..3000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Whatever happens: never more than the cap; a newcomer is always
    /// admitted; every handshake leaves exactly once; none outlives its
    /// deadline once the driver polls.
    #[test]
    fn the_caps_always_hold(ops in proptest::collection::vec(op(), 1..400)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut adm = Admission::new(cfg(12, 3));
        let mut live: Vec<(u64, Instant, bool)> = Vec::new();
        for op in ops {
            match op {
                Op::Admit(s) => {
                    let src = if s == 0 { Source::of(None) } else { v4(s) };
                    let a = adm.admit(now, src);
                    if let Some((v, _)) = a.dropped {
                        let i = live.iter().position(|l| l.0 == v);
                        prop_assert!(i.is_some(), "dropped an unknown ticket");
                        live.remove(i.unwrap());
                    }
                    live.push((a.ticket, now, false));
                }
                Op::Speak(i) if !live.is_empty() => {
                    let i = i % live.len();
                    adm.spoke(live[i].0);
                    live[i].2 = true;
                }
                Op::Finish(i) if !live.is_empty() => {
                    let (t, _, _) = live.remove(i % live.len());
                    prop_assert!(adm.finish(t));
                    prop_assert!(!adm.finish(t));
                }
                Op::Advance(ms) => {
                    now += Duration::from_millis(ms as u64);
                    if adm.poll_timeout().is_some_and(|at| at <= now) {
                        for (t, why) in adm.handle_timeout(now) {
                            let i = live.iter().position(|l| l.0 == t).unwrap();
                            let (_, since, spoke) = live.remove(i);
                            let limit = if spoke { Duration::from_secs(5) } else { Duration::from_secs(2) };
                            prop_assert_eq!(why, if spoke { Dropped::TimedOut } else { Dropped::Silent });
                            prop_assert!(now - since >= limit);
                        }
                    }
                    for (_, since, spoke) in &live {
                        let limit = if *spoke { Duration::from_secs(5) } else { Duration::from_secs(2) };
                        prop_assert!(now - *since < limit, "outlived its deadline");
                    }
                }
                _ => {}
            }
            prop_assert!(adm.pending() <= 12);
            prop_assert_eq!(adm.pending(), live.len());
        }
    }
}

/// Regression: `Duration::MAX` for the handshake's bounds ("never")
/// overflowed the clock where a pending handshake got its deadline.
#[test]
fn bounds_of_never_do_not_overflow_the_clock() {
    let t0 = Instant::now();
    let mut adm = Admission::new(AdmissionConfig {
        silence: Duration::MAX,
        timeout: Duration::MAX,
        ..cfg(4, 2)
    });
    let a = adm.admit(t0, v4(1));
    adm.spoke(a.ticket);
    adm.admit(t0, v4(2));
    let far = t0 + crate::base::timer::MAX_WAIT;
    assert!(adm.poll_timeout().is_some_and(|at| at <= far));
    assert!(adm.handle_timeout(t0 + Duration::from_secs(1)).is_empty());
}
