//! What one source address may hold (`sources.rs`) on a virtual clock: the
//! whole table while nobody else wants it; a place in a full line, the next
//! freed slot and the first preemption for another source once it does;
//! and a property test over random sources, accepts and releases.

use std::time::Instant;

use proptest::prelude::*;

use super::line_tests::{busy, quiet_since, site, table, MS};
use super::*;

fn source(n: u8) -> Source {
    Source::of(Some(std::net::Ipv4Addr::new(192, 0, 2, n).into()))
}

fn accept(t: &mut SlotTable, now: Instant, peer: u128, from: Source) -> Accepted {
    t.accept_or_wait_from(now, site(peer), 0, None, from)
}

fn slot(a: Accepted) -> u64 {
    match a {
        Accepted::Slot(h) => h,
        other => panic!("expected a slot, got {other:?}"),
    }
}

/// (ticket, evicted) of a place in line.
fn place(a: Accepted) -> (u64, Option<u64>) {
    match a {
        Accepted::Wait {
            ticket, evicted, ..
        } => (ticket, evicted),
        other => panic!("expected a place in line, got {other:?}"),
    }
}

#[test]
fn one_source_may_hold_every_slot_and_place_while_nobody_else_wants_them() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 4, Admission::Share);
    let nat = source(1);
    for p in 0..4 {
        slot(accept(&mut t, t0, p, nat));
    }
    for p in 4..8 {
        assert_eq!(place(accept(&mut t, t0, p, nat)).1, None);
    }
    assert_eq!((t.held_by(nat), t.in_line_from(nat)), (4, 4));
    // The line is full of its own: the next is refused, as before.
    assert_eq!(accept(&mut t, t0, 8, nat), Accepted::Refused);
}

#[test]
fn a_full_line_makes_room_for_another_source_from_the_one_past_its_share() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 4, Admission::Fifo);
    let (hog, other) = (source(1), source(2));
    for p in 0..4 {
        slot(accept(&mut t, t0, p, hog));
    }
    let hogs: Vec<u64> = (4..8)
        .map(|p| place(accept(&mut t, t0, p, hog)).0)
        .collect();
    // Each newcomer from elsewhere takes the hog's newest place while the
    // hog holds more than its share of the line (4 / 2 sources = 2).
    let (_, first) = place(accept(&mut t, t0, 20, other));
    assert_eq!(first, Some(hogs[3]));
    let (others_newest, second) = place(accept(&mut t, t0, 21, other));
    assert_eq!(second, Some(hogs[2]));
    assert_eq!((t.in_line_from(hog), t.in_line_from(other)), (2, 2));
    // Both at their share now: newcomers of either are refused.
    assert_eq!(accept(&mut t, t0, 22, other), Accepted::Refused);
    assert_eq!(accept(&mut t, t0, 9, hog), Accepted::Refused);
    assert_eq!(t.in_line(), 4);
    assert_eq!(t.stats().line_evicted, 2);
    // A third source still finds room (share 4 / 3 = 1): of the two
    // holding 2 each, the one whose newest entry is newest gives it up.
    let (_, third) = place(accept(&mut t, t0, 30, source(3)));
    assert_eq!(third, Some(others_newest));
    assert_eq!(t.in_line(), 4);
}

#[test]
fn a_freed_slot_goes_to_a_source_within_its_share_first() {
    for admission in Admission::ALL {
        let t0 = Instant::now();
        let mut t = table(3, 4, 8, admission);
        let (hog, other) = (source(1), source(2));
        let held: Vec<u64> = (0..4).map(|p| slot(accept(&mut t, t0, p, hog))).collect();
        let (early, _) = place(accept(&mut t, t0, 4, hog));
        let (late, _) = place(accept(&mut t, t0 + MS, 20, other));
        // The hog holds 4 of 4 slots, past its share of 2: the other
        // source's later entry is let in first.
        let (served, _) = t.release(held[0], t0 + 2 * MS).expect("a grant");
        assert_eq!(served, late, "{admission}");
        // Now the hog holds 3 (past 2) and the other 1: the hog's entry is
        // the only one left, and it is let in.
        let (served, _) = t.release(held[1], t0 + 3 * MS).expect("a grant");
        assert_eq!(served, early, "{admission}");
        assert_eq!((t.held_by(hog), t.held_by(other)), (3, 1));
    }
}

#[test]
fn within_their_shares_sources_are_served_in_the_policy_order() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 8, Admission::Fifo);
    let (a, b) = (source(1), source(2));
    let held: Vec<u64> = (0..4)
        .map(|p| slot(accept(&mut t, t0, p, if p < 2 { a } else { b })))
        .collect();
    let (first, _) = place(accept(&mut t, t0, 10, a));
    place(accept(&mut t, t0, 11, b));
    // 2 each of 4: both within their share; first come, first served.
    let (served, _) = t.release(held[3], t0 + MS).expect("a grant");
    assert_eq!(served, first);
}

#[test]
fn holders_of_a_source_past_its_share_give_way_first() {
    let t0 = Instant::now();
    let mut t = table(2, 4, 8, Admission::Fifo);
    let (hog, other) = (source(1), source(2));
    // The other source's channel is the quietest: the policy alone would
    // take it back.
    let honest = slot(accept(&mut t, t0, 0, other));
    let hogs: Vec<u64> = (1..4).map(|p| slot(accept(&mut t, t0, p, hog))).collect();
    place(accept(&mut t, t0, 9, other));
    let now = t0 + 100 * MS;
    let tick = t.handle_timeout(now, |h| {
        Some(if h == honest {
            quiet_since(t0)
        } else {
            quiet_since(t0 + 50 * MS)
        })
    });
    assert_eq!(tick.victims.len(), 1);
    assert!(hogs.contains(&tick.victims[0].0), "{tick:?}");
    // Without another source wanting a slot, the policy's choice stands.
    let mut t = table(2, 4, 8, Admission::Fifo);
    let first = slot(accept(&mut t, t0, 0, hog));
    for p in 1..4 {
        slot(accept(&mut t, t0, p, hog));
    }
    let tick = t.handle_timeout(now, |h| {
        Some(if h == first {
            quiet_since(t0)
        } else {
            busy(now)
        })
    });
    assert_eq!(
        tick.victims.iter().map(|v| v.0).collect::<Vec<_>>(),
        [first]
    );
}

#[test]
fn unaddressed_channels_and_our_own_are_never_past_a_share() {
    let t0 = Instant::now();
    let mut t = table(3, 4, 4, Admission::Fifo);
    let none = Source::of(None);
    let Grant::Now(_ours) = t.request(t0) else {
        panic!("a slot to connect")
    };
    for p in 0..3 {
        slot(accept(&mut t, t0, p, none));
    }
    assert_eq!(t.held_by(none), 4);
    for p in 3..7 {
        place(accept(&mut t, t0, p, none));
    }
    // A source with an address finds the line full of the unaddressed
    // group, which loses no place to it.
    assert_eq!(accept(&mut t, t0, 20, source(1)), Accepted::Refused);
}

#[derive(Debug, Clone)]
enum Op {
    /// A peer from source `n` presents itself.
    Accept(u8),
    /// The `n`th holder (mod their number) gives its slot back.
    Release(usize),
    /// The `n`th entry in line (mod) leaves.
    Leave(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4).prop_map(Op::Accept),
        2 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Leave),
    ]
}

proptest! {
    /// Over random accepts from four sources, releases and departures:
    /// the table and the line keep their bounds; a newcomer is refused
    /// only if no other source holds more than its share of a full line;
    /// a freed slot never goes to a source past its share while a source
    /// within its share waits.
    #[test]
    fn no_source_keeps_another_out_and_the_bounds_hold(
        hard in 2usize..6, line in 1usize..6, share in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let admission = if share { Admission::Share } else { Admission::Fifo };
        let mut t = table(hard - 1, hard, line, admission);
        let t0 = Instant::now();
        let mut holders: Vec<(u64, Source)> = Vec::new();
        let mut in_line: Vec<(u64, Source)> = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let now = t0 + MS * i as u32;
            match op {
                Op::Accept(n) => {
                    let from = source(n);
                    let before: Vec<(Source, usize)> = (0..4)
                        .map(|m| (source(m), in_line.iter().filter(|e| e.1 == source(m)).count()))
                        .collect();
                    match t.accept_or_wait_from(now, site(i as u128), 0, None, from) {
                        Accepted::Slot(h) => {
                            prop_assert!(holders.len() < hard);
                            holders.push((h, from));
                        }
                        Accepted::Wait { ticket, evicted, .. } => {
                            prop_assert_eq!(holders.len(), hard);
                            if let Some(e) = evicted {
                                let at = in_line.iter().position(|x| x.0 == e);
                                prop_assert!(at.is_some(), "evicted an entry not in line");
                                let gone = in_line.remove(at.unwrap());
                                prop_assert!(gone.1 != from);
                            }
                            in_line.push((ticket, from));
                        }
                        Accepted::Refused => {
                            prop_assert_eq!(holders.len(), hard);
                            prop_assert_eq!(in_line.len(), line);
                            let wanting = before.iter().filter(|b| b.1 > 0 || b.0 == from).count();
                            let fair = fair_share(line, wanting);
                            let own = before.iter().find(|b| b.0 == from).map_or(0, |b| b.1);
                            prop_assert!(
                                before.iter().all(|b| b.0 == from || b.1 <= fair || b.1 <= own),
                                "refused while another source held more than its share: {:?}",
                                before
                            );
                        }
                    }
                }
                Op::Release(k) if !holders.is_empty() => {
                    let (h, _) = holders.remove(k % holders.len());
                    // Who waits, and how many each holds, before the grant.
                    let wanting = {
                        let mut s: Vec<Source> = holders.iter().chain(&in_line).map(|x| x.1).collect();
                        s.sort();
                        s.dedup();
                        s.len()
                    };
                    let fair = fair_share(hard, wanting);
                    let held = |s: Source| holders.iter().filter(|x| x.1 == s).count();
                    let within_waits = in_line.iter().any(|e| held(e.1) <= fair);
                    let held_then: Vec<(Source, usize)> =
                        (0..4).map(|m| (source(m), held(source(m)))).collect();
                    if let Some((ticket, holder)) = t.release(h, now) {
                        let at = in_line.iter().position(|e| e.0 == ticket);
                        prop_assert!(at.is_some(), "served an entry not in line");
                        let (_, from) = in_line.remove(at.unwrap());
                        let had = held_then.iter().find(|x| x.0 == from).map_or(0, |x| x.1);
                        // Share's head may go first after max_wait (20 s):
                        // never within this run's clock.
                        prop_assert!(!within_waits || had <= fair,
                            "a source past its share ({had} > {fair}) served first");
                        holders.push((holder, from));
                    }
                }
                Op::Leave(k) if !in_line.is_empty() => {
                    let (ticket, _) = in_line.remove(k % in_line.len());
                    prop_assert!(t.leave_line(ticket, now));
                }
                _ => {}
            }
            prop_assert_eq!(t.in_use(), holders.len());
            prop_assert_eq!(t.in_line(), in_line.len());
            prop_assert!(t.in_line() <= line && t.in_use() <= hard);
        }
    }
}
