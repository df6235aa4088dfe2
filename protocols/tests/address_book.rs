//! Properties of the `AddressBook` under any sequence of learned lists,
//! failures and successes: addresses stay ordered mem, unix, tcp without
//! duplicates and within the bound; the address the user gave is never
//! forgotten; every round of fallbacks ends; a site fails for good only at
//! its given address or when no address is left.

use proptest::prelude::*;
use sitenet_protocols::connection::address_book::MAX_ADDRESSES;
use sitenet_protocols::{
    AddressBook, Fallback, OpenError, OpenFailure, RefuseReason, SiteId, TransportKind,
};

#[derive(Debug, Clone)]
enum Op {
    Learn(Vec<String>),
    Fail(u8),
    Succeed,
}

fn address() -> impl Strategy<Value = String> {
    (0u8..4, 0u8..6).prop_map(|(scheme, n)| match scheme {
        0 => format!("mem:m{n}"),
        1 => format!("unix:/s{n}"),
        2 => format!("tcp:h:{n}"),
        _ => format!("quic:h:{n}"),
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::collection::vec(address(), 0..20).prop_map(Op::Learn),
        (0u8..4).prop_map(Op::Fail),
        Just(Op::Succeed),
    ]
}

fn failure(k: u8) -> OpenFailure {
    match k {
        0 => OpenFailure::Transport("refused".into()),
        1 => OpenFailure::Open(OpenError::WrongIdentity {
            expected: SiteId(1),
            got: SiteId(2),
        }),
        2 => OpenFailure::Open(OpenError::Refused(RefuseReason::LostTie)),
        _ => OpenFailure::Open(OpenError::Timeout),
    }
}

proptest! {
    #[test]
    fn the_book_keeps_its_invariants(given in prop::option::of(address()), ops in prop::collection::vec(op(), 0..60)) {
        let mut b = match &given {
            Some(g) => AddressBook::given(g),
            None => AddressBook::default(),
        };
        let given = given.filter(|g| TransportKind::of(g).is_some());
        let mut tried: Vec<String> = Vec::new();
        for op in ops {
            match op {
                Op::Learn(list) => {
                    let known: Vec<String> = b.addresses().map(str::to_owned).collect();
                    b.learn(list.iter().map(String::as_str));
                    // An address learned anew (even one forgotten earlier in
                    // the round) may be tried again.
                    tried.retain(|a| known.contains(a));
                }
                Op::Succeed => {
                    b.succeeded();
                    tried.clear();
                    prop_assert_eq!(b.current(), b.addresses().next());
                }
                Op::Fail(k) => {
                    let at = b.current().map(str::to_owned);
                    let f = failure(k);
                    if let Some(a) = &at {
                        prop_assert!(!tried.contains(a), "{} tried twice in one round", a);
                        tried.push(a.clone());
                    }
                    match b.failed(&f) {
                        Fallback::Permanent => {
                            let at_given = at.is_some() && at == given;
                            prop_assert!(at_given || !b.can_open(), "permanent at a claimed address with others left");
                            return Ok(());
                        }
                        Fallback::TryNext => {}
                        Fallback::RoundOver => {
                            tried.clear();
                            prop_assert_eq!(b.current(), b.addresses().next(), "a new round starts at the best");
                        }
                    }
                }
            }
            let list: Vec<&str> = b.addresses().collect();
            let kinds: Vec<TransportKind> = list.iter().map(|a| TransportKind::of(a).unwrap()).collect();
            prop_assert!(kinds.windows(2).all(|w| w[0] <= w[1]), "ordered: {:?}", list);
            let mut dedup = list.clone();
            dedup.sort();
            dedup.dedup();
            prop_assert_eq!(dedup.len(), list.len(), "no duplicates");
            prop_assert!(list.len() <= MAX_ADDRESSES);
            if let Some(g) = &given {
                prop_assert!(list.contains(&g.as_str()), "the given address stays");
            }
            prop_assert_eq!(b.current().is_some(), b.can_open());
        }
    }
}
