//! The site table's rules without a runtime: one test per rule, and a
//! property test of the index's invariants over random operations.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;

use super::*;

const A: &str = "tcp:10.0.0.1:7000";
const B: &str = "tcp:10.0.0.2:7000";

fn addrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

fn idle() -> Counts {
    Counts {
        refs: 0,
        adopting: 0,
        queued: 0,
        current: true,
    }
}

fn new_at(ix: &mut SiteIndex, address: &str, key: usize) -> Arc<str> {
    match ix.at_address(address, key, |_| false) {
        At::New(a) => a,
        other => panic!("expected a new entry, got {other:?}"),
    }
}

fn peer(peer: usize, forward: bool) -> Word {
    Word::Peer { peer, forward }
}

#[test]
fn an_address_names_its_entry_until_it_fails_permanently() {
    let mut ix = SiteIndex::new(16, 1024);
    let a = new_at(&mut ix, A, 0);
    assert_eq!(&*a, A);
    assert_eq!(ix.at_address(A, 1, |_| false), At::Existing(0));
    // Entry 0 failed for good: the address names a new entry (a new
    // incarnation), and entry 0 stays failed under its key.
    assert!(matches!(ix.at_address(A, 1, |k| k == 0), At::New(_)));
    assert_eq!(ix.address(A), Some(1));
    // The failed entry leaving does not take the address from the new one.
    let gone = ix.reclaim(
        Site {
            key: 0,
            id: None,
            address: Some(&a),
        },
        idle(),
    );
    assert_eq!(
        gone,
        Reclaim::Forget {
            id: None,
            addresses: vec![]
        }
    );
    assert_eq!(ix.address(A), Some(1));
}

#[test]
fn a_peer_beyond_its_claim_bound_is_refused_until_one_is_proven_or_forgotten() {
    let mut ix = SiteIndex::new(2, 1);
    let never = |_| false;
    // Peer entry 0 forwards two origins: its bound of forward claims.
    for (key, id) in [(1, 101), (2, 102)] {
        let d = ix.described(SiteId(id), &addrs(&[A]), peer(0, true), key, never);
        assert_eq!(d, Ok(Described::New));
    }
    let third = ix.described(SiteId(103), &addrs(&[A]), peer(0, true), 3, never);
    assert_eq!(third, Err(ClaimRefused { limit: 2 }));
    assert_eq!(ix.id(SiteId(103)), None, "no entry made");
    assert!(!ix.has_book(3));
    // A forwarded origin's book tries each address once.
    assert!(ix.take_book(1).is_some_and(|b| b.is_once()));
    // The SiteRef bound is separate, and another peer has its own.
    let r = ix.described(SiteId(201), &addrs(&[A]), peer(0, false), 3, never);
    assert_eq!(r, Ok(Described::New));
    let r = ix.described(SiteId(202), &addrs(&[A]), peer(0, false), 4, never);
    assert_eq!(r, Err(ClaimRefused { limit: 1 }));
    let r = ix.described(SiteId(202), &addrs(&[A]), peer(9, false), 4, never);
    assert_eq!(r, Ok(Described::New));
    assert_eq!(ix.claims_held(0), (2, 1));
    // Site 101 is proven: peer 0 may name another origin.
    ix.proven(1);
    let r = ix.described(SiteId(103), &addrs(&[A]), peer(0, true), 5, never);
    assert_eq!(r, Ok(Described::New));
    // Entry 2 is forgotten: its claim goes with it.
    let two = Site {
        key: 2,
        id: Some(SiteId(102)),
        address: None,
    };
    assert!(matches!(ix.reclaim(two, idle()), Reclaim::Forget { .. }));
    let r = ix.described(SiteId(104), &addrs(&[A]), peer(0, true), 2, never);
    assert_eq!(r, Ok(Described::New));
    // A known id is no claim, whoever names it.
    let r = ix.described(SiteId(104), &addrs(&[B]), peer(0, true), 6, never);
    assert_eq!(
        r,
        Ok(Described::Known {
            key: 2,
            teach: false
        })
    );
    assert_eq!(ix.claims_held(0), (2, 1));
}

#[test]
fn the_user_and_the_local_site_make_entries_without_claims() {
    let mut ix = SiteIndex::new(0, 0);
    let r = ix.described(SiteId(1), &addrs(&[A]), Word::User, 0, |_| false);
    assert_eq!(r, Ok(Described::New));
    let r = ix.described(SiteId(2), &addrs(&[A]), Word::Local, 1, |_| false);
    assert_eq!(r, Ok(Described::New));
    let book = ix.take_book(1).expect("a waiting book");
    assert!(!book.is_once());
    assert_eq!(book.addresses().collect::<Vec<_>>(), [A]);
}

#[test]
fn only_the_users_word_teaches_a_known_site_addresses() {
    let mut ix = SiteIndex::new(16, 16);
    let never = |_| false;
    assert_eq!(
        ix.described(SiteId(7), &addrs(&[A]), Word::User, 0, never),
        Ok(Described::New)
    );
    // A peer's SiteRef and forward, and the local site's own message,
    // name the known site at B: it does not learn B.
    for word in [peer(5, false), peer(5, true), Word::Local] {
        let r = ix.described(SiteId(7), &addrs(&[B]), word, 1, never);
        assert_eq!(
            r,
            Ok(Described::Known {
                key: 0,
                teach: false
            })
        );
    }
    assert_eq!(ix.claims_held(5), (0, 0));
    // The user's word: learned into the waiting book...
    let r = ix.described(SiteId(7), &addrs(&[B]), Word::User, 1, never);
    assert_eq!(
        r,
        Ok(Described::Known {
            key: 0,
            teach: false
        })
    );
    let book = ix.take_book(0).expect("still waiting");
    assert_eq!(book.addresses().collect::<Vec<_>>(), [A, B]);
    // ...or, once its ComObject runs, handed to it by the driver; a peer's
    // still is not.
    let r = ix.described(SiteId(7), &addrs(&[B]), Word::User, 1, |_| true);
    assert_eq!(
        r,
        Ok(Described::Known {
            key: 0,
            teach: true
        })
    );
    let r = ix.described(SiteId(7), &addrs(&[B]), peer(5, false), 1, |_| true);
    assert_eq!(
        r,
        Ok(Described::Known {
            key: 0,
            teach: false
        })
    );
}

#[test]
fn binding_an_id_bound_elsewhere_merges_and_the_alias_leaves_with_that_entry() {
    let mut ix = SiteIndex::new(16, 16);
    let a = new_at(&mut ix, A, 0);
    let b = new_at(&mut ix, B, 1);
    let site = |key, id, address| Site { key, id, address };
    assert_eq!(ix.bind(site(0, None, Some(&a)), SiteId(7)), Bind::Bound);
    assert_eq!(
        ix.bind(site(0, Some(SiteId(7)), Some(&a)), SiteId(7)),
        Bind::Same
    );
    // Entry 1 connected to B and found site 7 too: merge into entry 0; B
    // now names entry 0.
    assert_eq!(
        ix.bind(site(1, None, Some(&b)), SiteId(7)),
        Bind::MergeInto(0)
    );
    assert_eq!(ix.address(B), Some(0));
    assert_eq!(ix.id(SiteId(7)), Some(0));
    // Entry 1 leaving takes nothing of entry 0's.
    let one = ix.reclaim(site(1, None, Some(&b)), idle());
    assert_eq!(
        one,
        Reclaim::Forget {
            id: None,
            addresses: vec![]
        }
    );
    assert_eq!((ix.id(SiteId(7)), ix.address(B)), (Some(0), Some(0)));
    // Entry 0 leaving takes its id, its address and the alias.
    let zero = ix.reclaim(site(0, Some(SiteId(7)), Some(&a)), idle());
    assert_eq!(
        zero,
        Reclaim::Forget {
            id: Some(SiteId(7)),
            addresses: vec![a.clone(), b.clone()]
        }
    );
    assert_eq!(
        (ix.id(SiteId(7)), ix.address(A), ix.address(B)),
        (None, None, None)
    );
    assert_eq!(ix.referenced_keys().count(), 0);
}

#[test]
fn an_accepted_channel_is_routed_by_id_else_to_a_new_entry() {
    let mut ix = SiteIndex::new(16, 16);
    let listen = addrs(&[A, "bogus:1"]);
    match ix.route(SiteId(7), &listen, 0) {
        Route::New(book) => {
            assert_eq!(book.addresses().collect::<Vec<_>>(), [A], "claimed only");
        }
        other => panic!("expected a new entry, got {other:?}"),
    }
    // The listen addresses are not bound to the site.
    assert_eq!(ix.address(A), None);
    assert_eq!(ix.id(SiteId(7)), Some(0));
    assert_eq!(ix.route(SiteId(7), &listen, 1), Route::Existing(0));
    // A site named by a descriptor is found by the same id.
    let _ = ix.described(SiteId(8), &[], Word::User, 1, |_| false);
    assert_eq!(ix.route(SiteId(8), &listen, 2), Route::Existing(1));
}

#[test]
fn the_reclaim_recheck_keeps_an_entry_anything_holds() {
    let mut ix = SiteIndex::new(16, 16);
    let a = new_at(&mut ix, A, 0);
    assert_eq!(
        ix.bind(
            Site {
                key: 0,
                id: None,
                address: Some(&a)
            },
            SiteId(7)
        ),
        Bind::Bound
    );
    let zero = Site {
        key: 0,
        id: Some(SiteId(7)),
        address: Some(&a),
    };
    let held = [
        Counts { refs: 1, ..idle() },
        Counts {
            adopting: 1,
            ..idle()
        },
        Counts {
            queued: 1,
            ..idle()
        },
        Counts {
            current: false,
            ..idle()
        },
    ];
    for counts in held {
        assert_eq!(ix.reclaim(zero, counts), Reclaim::Keep, "{counts:?}");
        assert_eq!((ix.id(SiteId(7)), ix.address(A)), (Some(0), Some(0)));
    }
    assert_eq!(
        ix.reclaim(zero, idle()),
        Reclaim::Forget {
            id: Some(SiteId(7)),
            addresses: vec![a]
        }
    );
}

#[test]
fn a_forgotten_entry_takes_its_book_and_never_another_entrys_id() {
    let mut ix = SiteIndex::new(16, 16);
    assert_eq!(
        ix.described(SiteId(7), &addrs(&[A]), peer(9, false), 0, |_| false),
        Ok(Described::New)
    );
    // A stale view of entry 3 claiming id 7 (another entry has it).
    let other = Site {
        key: 3,
        id: Some(SiteId(7)),
        address: None,
    };
    assert!(matches!(
        ix.reclaim(other, idle()),
        Reclaim::Forget { id: None, .. }
    ));
    assert_eq!(ix.id(SiteId(7)), Some(0));
    let zero = Site {
        key: 0,
        id: Some(SiteId(7)),
        address: None,
    };
    assert!(matches!(
        ix.reclaim(zero, idle()),
        Reclaim::Forget { id: Some(_), .. }
    ));
    assert!(!ix.has_book(0), "its waiting book went with it");
    assert_eq!(ix.claims_held(9), (0, 0));
    // Key 0, made again, starts with nothing of the old entry's.
    assert_eq!(ix.referenced_keys().count(), 0);
}

/// One operation of the property test, on keys and ids drawn small so
/// that they collide.
#[derive(Debug, Clone)]
enum Op {
    At(u8),
    Described(u8, u8, u8),
    Bind(u8, u8),
    Route(u8),
    Proven(u8),
    Fail(u8),
    Reclaim(u8, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8).prop_map(Op::At),
        (0..6u8, 0..4u8, 0..8u8).prop_map(|(i, w, p)| Op::Described(i, w, p)),
        (0..8u8, 0..6u8).prop_map(|(k, i)| Op::Bind(k, i)),
        (0..6u8).prop_map(Op::Route),
        (0..8u8).prop_map(Op::Proven),
        (0..8u8).prop_map(Op::Fail),
        (0..8u8, any::<bool>()).prop_map(|(k, h)| Op::Reclaim(k, h)),
    ]
}

/// An entry as a driver keeps it.
#[derive(Debug)]
struct Entry {
    id: Option<SiteId>,
    address: Option<Arc<str>>,
    failed: bool,
}

/// A driver in small: a slab of entries (keys reused lowest first).
#[derive(Default)]
struct Driver {
    entries: BTreeMap<usize, Entry>,
}

impl Driver {
    fn vacant(&self) -> usize {
        (0..).find(|k| !self.entries.contains_key(k)).unwrap_or(0)
    }

    fn nth(&self, n: u8) -> Option<usize> {
        let keys: Vec<_> = self.entries.keys().copied().collect();
        (!keys.is_empty()).then(|| keys[usize::from(n) % keys.len()])
    }

    fn site(&self, key: usize) -> Site<'_> {
        let e = &self.entries[&key];
        Site {
            key,
            id: e.id,
            address: e.address.as_ref(),
        }
    }

    fn make(&mut self, key: usize, id: Option<SiteId>, address: Option<Arc<str>>) {
        let e = Entry {
            id,
            address,
            failed: false,
        };
        assert!(self.entries.insert(key, e).is_none(), "new_key was vacant");
    }

    fn apply(&mut self, ix: &mut SiteIndex, op: Op) {
        let new_key = self.vacant();
        match op {
            Op::At(a) => {
                let text = format!("tcp:10.0.0.{a}:1");
                let entries = &self.entries;
                match ix.at_address(&text, new_key, |k| entries[&k].failed) {
                    At::Existing(k) => assert!(!self.entries[&k].failed),
                    At::New(t) => self.make(new_key, None, Some(t)),
                }
            }
            Op::Described(id, w, p) => {
                let word = match (w, self.nth(p)) {
                    (0, _) | (_, None) => Word::User,
                    (1, _) => Word::Local,
                    (w, Some(peer)) => Word::Peer {
                        peer,
                        forward: w == 2,
                    },
                };
                let id = SiteId(u128::from(id));
                let r = ix.described(id, &addrs(&[A]), word, new_key, |_| false);
                match r {
                    Ok(Described::New) => self.make(new_key, Some(id), None),
                    Ok(Described::Known { key, .. }) => {
                        assert_eq!(self.entries[&key].id, Some(id))
                    }
                    Err(_) => {}
                }
            }
            Op::Bind(k, id) => {
                let Some(key) = self.nth(k) else { return };
                let id = SiteId(u128::from(id));
                // A driver binds only an entry without an id, or with this
                // one (the open protocol checks an expected id).
                if self.entries[&key].id.is_some_and(|i| i != id) {
                    return;
                }
                match ix.bind(self.site(key), id) {
                    Bind::Bound => self.entries.get_mut(&key).unwrap().id = Some(id),
                    Bind::Same => assert_eq!(self.entries[&key].id, Some(id)),
                    Bind::MergeInto(k) => assert_eq!(self.entries[&k].id, Some(id)),
                }
            }
            Op::Route(id) => {
                let id = SiteId(u128::from(id));
                match ix.route(id, &addrs(&[B]), new_key) {
                    Route::Existing(k) => assert_eq!(self.entries[&k].id, Some(id)),
                    Route::New(_) => self.make(new_key, Some(id), None),
                }
            }
            Op::Proven(k) => {
                if let Some(key) = self.nth(k) {
                    ix.proven(key);
                }
            }
            Op::Fail(k) => {
                if let Some(key) = self.nth(k) {
                    self.entries.get_mut(&key).unwrap().failed = true;
                }
            }
            Op::Reclaim(k, held) => {
                let Some(key) = self.nth(k) else { return };
                let counts = Counts {
                    refs: usize::from(held),
                    ..idle()
                };
                match ix.reclaim(self.site(key), counts) {
                    Reclaim::Keep => assert!(held),
                    Reclaim::Forget { .. } => {
                        assert!(!held);
                        self.entries.remove(&key);
                    }
                }
            }
        }
    }
}

proptest! {
    /// Whatever the order of operations: every id, address, alias list and
    /// book in the index refers to a live entry; an id names the one entry
    /// that holds it; and a peer's claims never pass its bound.
    #[test]
    fn the_index_refers_only_to_live_entries(ops in proptest::collection::vec(op(), 1..80)) {
        let mut ix = SiteIndex::new(2, 3);
        let mut d = Driver::default();
        for op in ops {
            d.apply(&mut ix, op);
            let live: HashSet<usize> = d.entries.keys().copied().collect();
            for k in ix.referenced_keys() {
                prop_assert!(live.contains(&k), "key {k} is not a live entry");
            }
            for (&k, e) in &d.entries {
                if let Some(id) = e.id {
                    prop_assert_eq!(ix.id(id), Some(k), "id {:?} names its entry", id);
                }
                let (f, r) = ix.claims_held(k);
                prop_assert!(f <= 2 && r <= 3);
            }
        }
    }
}

/// The Adopt rule: a merged entry never adopts; an entry bound to the
/// claimed id adopts; an unbound one is bound and adopts unless another
/// entry has the id, when the channel is routed again and lands there.
#[test]
fn adopting_an_accepted_channel_here_or_rerouting_it() {
    let mut ix = SiteIndex::new(16, 1024);
    let a = new_at(&mut ix, A, 0);
    let b = new_at(&mut ix, B, 1);
    let zero = |id| Site {
        key: 0,
        id,
        address: Some(&a),
    };
    let one = |id| Site {
        key: 1,
        id,
        address: Some(&b),
    };
    // Entry 0 is bound to site 7 when handed a channel naming it.
    assert_eq!(
        ix.adoption(zero(None), false, SiteId(7)),
        Adoption::BoundHere
    );
    assert_eq!(ix.id(SiteId(7)), Some(0));
    assert_eq!(
        ix.adoption(zero(Some(SiteId(7))), false, SiteId(7)),
        Adoption::Here
    );
    // Bound in the index, the entry's own id not yet set: still here.
    assert_eq!(ix.adoption(zero(None), false, SiteId(7)), Adoption::Here);
    // Merged: never here, whatever its id.
    assert_eq!(
        ix.adoption(zero(Some(SiteId(7))), true, SiteId(7)),
        Adoption::Reroute
    );
    // Entry 1 handed a channel naming site 7, which entry 0 is: rerouted,
    // and routing by id finds entry 0 (entry 1's address an alias of it).
    assert_eq!(ix.adoption(one(None), false, SiteId(7)), Adoption::Reroute);
    assert_eq!(ix.route(SiteId(7), &[], 2), Route::Existing(0));
    assert_eq!(ix.address(B), Some(0));
    assert_eq!(ix.id(SiteId(7)), Some(0), "the id stays entry 0's");
}

/// A retired entry (its site failed and came back under the same id)
/// gives up its id and address: the next channel naming the id makes a new
/// entry, and the retired entry's reclaim later leaves the new one's names.
#[test]
fn a_retired_entry_gives_its_id_and_address_to_the_site_restarted() {
    let mut ix = SiteIndex::new(16, 1024);
    let a = new_at(&mut ix, A, 0);
    let id = SiteId(7);
    assert_eq!(
        ix.bind(
            Site {
                key: 0,
                id: None,
                address: Some(&a)
            },
            id
        ),
        Bind::Bound
    );
    let old = Site {
        key: 0,
        id: Some(id),
        address: Some(&a),
    };
    assert_eq!(ix.route(id, &[], 1), Route::Existing(0));
    ix.retire(old);
    assert_eq!((ix.id(id), ix.address(A)), (None, None));
    assert!(matches!(ix.route(id, &[], 1), Route::New(_)));
    assert_eq!(ix.id(id), Some(1));
    let gone = ix.reclaim(old, idle());
    assert_eq!(
        gone,
        Reclaim::Forget {
            id: None,
            addresses: vec![]
        }
    );
    assert_eq!(ix.id(id), Some(1), "the new entry keeps the id");
}
