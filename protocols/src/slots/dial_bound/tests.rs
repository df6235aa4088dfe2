//! The dial bounds without a runtime: one test per rule, and a property
//! test of the counts over random operations.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn source(last: u8) -> Source {
    Source::of(Some(IpAddr::from([10, 0, 0, last])))
}

fn host(last: u8) -> DialHost {
    DialHost::of(&format!("tcp:192.0.2.{last}:7000"))
}

fn bounds(node: u32, per_source: u32, per_host: u32) -> DialBounds {
    DialBounds {
        node,
        per_source,
        per_host,
    }
}

#[test]
fn a_host_is_its_ip_an_ipv6_prefix_a_name_or_this_host() {
    let v4 = DialHost::Ip(Source::of(Some(IpAddr::from([192, 0, 2, 7]))));
    assert_eq!(DialHost::of("tcp:192.0.2.7:7000"), v4);
    assert_eq!(DialHost::of("tls:192.0.2.7:443"), v4);
    assert_eq!(DialHost::of("tcp:[::ffff:192.0.2.7]:1"), v4, "IPv4-mapped");
    assert_eq!(
        DialHost::of("tcp:2001:db8:0:1::5:7000"),
        DialHost::of("tcp:[2001:db8:0:1:ffff::9]:7001"),
        "one /64 is one host"
    );
    assert_ne!(
        DialHost::of("tcp:2001:db8:0:1::5:7000"),
        DialHost::of("tcp:2001:db8:0:2::5:7000")
    );
    assert_eq!(
        DialHost::of("tcp:Example.ORG:7000"),
        DialHost::Name("example.org".into())
    );
    assert_eq!(DialHost::of("unix:/tmp/a.sock"), DialHost::ThisHost);
    assert_eq!(DialHost::of("mem:node-a"), DialHost::ThisHost);
    assert_eq!(
        DialHost::of("quic:192.0.2.7:9"),
        v4,
        "a plugged HOST:PORT address"
    );
}

#[test]
fn an_entry_not_on_a_peers_word_is_not_counted() {
    let mut d = DialBound::<u32>::new(bounds(1, 1, 1));
    for _ in 0..3 {
        assert_eq!(d.dial(5, host(1)), Ok(None));
    }
    assert_eq!(d.dialing(), 0);
}

#[test]
fn each_bound_refuses_the_dial_beyond_it() {
    // Per host.
    let mut d = DialBound::new(bounds(64, 16, 2));
    for e in 10..13u32 {
        d.named(e, 1, source(1), true);
    }
    assert!(d.dial(10, host(1)).unwrap().is_some());
    assert!(d.dial(11, host(1)).unwrap().is_some());
    assert_eq!(d.dial(12, host(1)), Err(DialRefused::Host { limit: 2 }));
    assert!(d.dial(12, host(2)).unwrap().is_some(), "another host");
    // Per source.
    let mut d = DialBound::new(bounds(64, 2, 64));
    for e in 10..13u32 {
        d.named(e, 1, source(1), true);
    }
    d.named(20, 2, source(2), true);
    assert!(d.dial(10, host(1)).unwrap().is_some());
    assert!(d.dial(11, host(2)).unwrap().is_some());
    assert_eq!(d.dial(12, host(3)), Err(DialRefused::Source { limit: 2 }));
    assert!(d.dial(20, host(3)).unwrap().is_some(), "another source");
    assert_eq!(d.dialing_from(source(1)), 2);
    // Node-wide.
    let mut d = DialBound::new(bounds(2, 16, 16));
    for (e, s) in [(10u32, 1), (11, 2), (12, 3)] {
        d.named(e, e, source(s), false);
    }
    assert!(d.dial(10, host(1)).unwrap().is_some());
    assert!(d.dial(11, host(2)).unwrap().is_some());
    assert_eq!(d.dial(12, host(3)), Err(DialRefused::Node { limit: 2 }));
}

#[test]
fn a_dial_that_ends_makes_room_and_a_stale_ticket_ends_nothing() {
    let mut d = DialBound::new(bounds(1, 1, 1));
    d.named(10u32, 1, source(1), true);
    d.named(11, 1, source(1), true);
    let t = d.dial(10, host(1)).unwrap().unwrap();
    assert!(d.dial(11, host(1)).is_err());
    d.ended(10, t);
    let t11 = d.dial(11, host(1)).unwrap().unwrap();
    // Ending the first again (late) does not end the second's.
    d.ended(10, t);
    assert_eq!(d.dialing(), 1);
    // The entry's next attempt replaces its first: still one counted.
    let t11b = d.dial(11, host(2)).unwrap().unwrap();
    assert_eq!((d.dialing(), d.dialing_to(&host(1))), (1, 0));
    d.ended(11, t11);
    assert_eq!(d.dialing(), 1, "a ticket of an earlier attempt");
    d.ended(11, t11b);
    assert_eq!(d.dialing(), 0);
}

#[test]
fn a_proven_site_dials_on_nobodys_word() {
    let mut d = DialBound::new(bounds(1, 1, 1));
    d.named(10u32, 1, source(1), true);
    d.dial(10, host(1)).unwrap().unwrap();
    d.proven(10);
    assert_eq!(d.dialing(), 0);
    assert_eq!(d.dial(10, host(1)), Ok(None));
    assert!(d.forget(1).is_empty(), "nothing of peer 1's is left");
    assert!(d.is_empty());
}

#[test]
fn the_asker_going_abandons_its_forwarded_origins_not_its_site_refs() {
    let mut d = DialBound::new(bounds(64, 16, 16));
    d.named(10u32, 1, source(1), true);
    d.named(11, 1, source(1), true);
    d.named(12, 1, source(1), false);
    d.named(20, 2, source(1), true);
    d.dial(10, host(1)).unwrap().unwrap();
    d.dial(12, host(2)).unwrap().unwrap();
    d.dial(20, host(3)).unwrap().unwrap();
    let mut gone = d.forget(1);
    gone.sort();
    assert_eq!(gone, [10, 11]);
    // Origin 10's dial ended; the site peer 1's reference named still
    // dials, counted against its source; peer 2's origin is untouched.
    assert_eq!(d.dialing(), 2);
    assert_eq!(d.dialing_from(source(1)), 2);
    assert_eq!(d.dial(11, host(4)), Err(DialRefused::AskerGone));
    assert!(d.dial(12, host(2)).unwrap().is_some());
    // Key 1 names a new entry: it inherits nothing.
    assert!(d.forget(1).is_empty());
    // The abandoned entries leave in turn.
    d.forget(10);
    d.forget(11);
    d.forget(12);
    d.forget(20);
    assert!(d.is_empty());
    assert_eq!(d.dialing(), 0);
    assert_eq!(d.keys().count(), 0);
}

#[test]
fn an_asker_failing_abandons_its_origins_before_its_entry_leaves() {
    let mut d = DialBound::new(bounds(64, 16, 16));
    d.named(10u32, 1, source(1), true);
    d.dial(10, host(1)).unwrap().unwrap();
    assert_eq!(d.asker_gone(1), [10]);
    assert_eq!(d.dialing(), 0);
    assert!(d.asker_gone(1).is_empty(), "once");
    assert!(d.forget(1).is_empty(), "nothing more when its entry leaves");
    assert_eq!(d.dial(10, host(1)), Err(DialRefused::AskerGone));
}

#[test]
fn zero_bounds_are_raised_to_one() {
    let mut d = DialBound::new(bounds(0, 0, 0));
    assert_eq!(d.bounds(), bounds(1, 1, 1));
    d.named(10u32, 1, source(1), true);
    assert!(d.dial(10, host(1)).unwrap().is_some());
}

#[derive(Debug, Clone)]
enum Op {
    Named {
        entry: u8,
        asker: u8,
        source: u8,
        forward: bool,
    },
    Dial {
        entry: u8,
        host: u8,
    },
    End {
        entry: u8,
    },
    Proven {
        entry: u8,
    },
    Forget {
        key: u8,
    },
    AskerGone {
        key: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..12u8, 0..12u8, 0..3u8, any::<bool>()).prop_map(|(entry, asker, source, forward)| {
            Op::Named {
                entry,
                asker,
                source,
                forward,
            }
        }),
        (0..12u8, 0..4u8).prop_map(|(entry, host)| Op::Dial { entry, host }),
        (0..12u8).prop_map(|entry| Op::End { entry }),
        (0..12u8).prop_map(|entry| Op::Proven { entry }),
        (0..12u8).prop_map(|key| Op::Forget { key }),
        (0..12u8).prop_map(|key| Op::AskerGone { key }),
    ]
}

proptest! {
    /// Whatever happens, the counts are those of the dials in progress,
    /// no bound is ever exceeded, and an abandoned origin never dials.
    #[test]
    fn the_counts_match_the_dials_and_stay_within_the_bounds(
        ops in proptest::collection::vec(op(), 1..200),
        node in 1..6u32,
        per_source in 1..4u32,
        per_host in 1..3u32,
    ) {
        let mut d = DialBound::new(bounds(node, per_source, per_host));
        // Model: entry → (source, host) of its counted dial, and tickets.
        let mut live: HashMap<u8, (Source, DialHost, DialTicket)> = HashMap::new();
        let mut abandoned = std::collections::HashSet::new();
        let mut sources: HashMap<u8, Source> = HashMap::new();
        for op in ops {
            match op {
                Op::Named { entry, asker, source: s, forward } => {
                    if entry == asker { continue; }
                    d.named(entry, asker, source(s), forward);
                    live.remove(&entry);
                    abandoned.remove(&entry);
                    sources.insert(entry, source(s));
                }
                Op::Dial { entry, host: h } => {
                    live.remove(&entry);
                    match d.dial(entry, host(h)) {
                        Ok(Some(t)) => {
                            prop_assert!(!abandoned.contains(&entry));
                            live.insert(entry, (sources[&entry], host(h), t));
                        }
                        Ok(None) => {}
                        Err(DialRefused::AskerGone) => {
                            prop_assert!(abandoned.contains(&entry));
                        }
                        Err(_) => {}
                    }
                }
                Op::End { entry } => {
                    if let Some((_, _, t)) = live.remove(&entry) {
                        d.ended(entry, t);
                    }
                }
                Op::Proven { entry } => {
                    d.proven(entry);
                    live.remove(&entry);
                    sources.remove(&entry);
                }
                Op::AskerGone { key } => {
                    for e in d.asker_gone(key) {
                        live.remove(&e);
                        abandoned.insert(e);
                    }
                }
                Op::Forget { key } => {
                    live.remove(&key);
                    sources.remove(&key);
                    abandoned.remove(&key);
                    for e in d.forget(key) {
                        live.remove(&e);
                        abandoned.insert(e);
                    }
                }
            }
            prop_assert_eq!(d.dialing() as usize, live.len());
            prop_assert!(d.dialing() <= node);
            for s in 0..3 {
                let n = live.values().filter(|(src, _, _)| *src == source(s)).count();
                prop_assert_eq!(d.dialing_from(source(s)) as usize, n);
                prop_assert!(n as u32 <= per_source);
            }
            for h in 0..4 {
                let n = live.values().filter(|(_, hst, _)| *hst == host(h)).count();
                prop_assert_eq!(d.dialing_to(&host(h)) as usize, n);
                prop_assert!(n as u32 <= per_host);
            }
        }
    }
}
