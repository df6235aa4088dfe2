//! Several addresses per site: opens try the best transport first, fall
//! back at once on a failure, and learn the peer's addresses from each
//! handshake (the rule itself is `AddressBook`'s; these tests show the
//! ComObject follows it).

use super::*;

fn with_book(book: AddressBook) -> H {
    let mut h = H::new(cfg(), false);
    h.com = ComObject::new(
        cfg(),
        ReassemblyBudget::new(1 << 20),
        LOCAL,
        book,
        1,
        42,
        h.now,
    );
    h
}

fn wrong_identity() -> OpenFailure {
    OpenFailure::Open(OpenError::WrongIdentity {
        expected: PEER,
        got: SiteId(0x77),
    })
}

#[test]
fn an_open_that_fails_at_one_address_tries_the_next_at_once_without_a_fault() {
    let mut h = with_book(AddressBook::claimed(["tcp:h:1", "mem:m"]));
    h.com.queue(msg(10)).unwrap();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let (a1, addr) = h.grant_at();
    assert_eq!(addr, "mem:m", "the best transport first");
    h.com
        .open_failed(a1, OpenFailure::Transport("no such name".into()), h.now);
    // Straight back to the slot line: no backoff, no fault reported.
    let a = h.actions();
    assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
    assert_eq!(h.com.state(), ComState::WaitingForSlot);
    assert_eq!(h.com.poll_timeout(), None, "no backoff timer");
    let (a2, addr) = h.grant_at();
    assert_eq!(addr, "tcp:h:1");
    assert!(a2 > a1);
    assert_eq!(h.com.stats().fallbacks, 1);
    // The last address failing too ends the round: a temporary failure and
    // a backoff, and the next round starts from the best address again.
    h.com
        .open_failed(a2, OpenFailure::Transport("refused".into()), h.now);
    let a = h.actions();
    assert!(only_temp_failed(&a), "{a:?}");
    assert_eq!(h.com.state(), ComState::Backoff);
    h.run_to_next_deadline();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    assert_eq!(h.grant_at().1, "mem:m");
}

#[test]
fn a_wrong_site_at_a_claimed_address_is_skipped_and_the_site_stays_reachable() {
    let mut h = with_book(AddressBook::claimed(["mem:someone-else", "tcp:h:1"]));
    h.com.queue(msg(10)).unwrap();
    h.actions();
    let (a1, _) = h.grant_at();
    h.com.open_failed(a1, wrong_identity(), h.now);
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    assert_eq!(
        h.com.addresses().addresses().collect::<Vec<_>>(),
        ["tcp:h:1"],
        "the address of another site is forgotten"
    );
    let (a2, addr) = h.grant_at();
    assert_eq!(addr, "tcp:h:1");
    assert!(h
        .com
        .open_succeeded(a2, &opened(1, 1 << 20), h.now)
        .is_some());
    assert_eq!(h.com.state(), ComState::Working);
}

#[test]
fn a_wrong_site_at_the_given_address_fails_the_site_for_good() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com.open_failed(a, wrong_identity(), h.now);
    assert_eq!(h.com.state(), ComState::Failed);
}

#[test]
fn the_peers_listen_list_from_the_handshake_is_used_by_the_next_open() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    let mut o = opened(1, 1 << 20);
    o.present.listen = vec![
        "tcp:peer:1".into(),
        "unix:/run/peer.sock".into(),
        "mem:peer".into(),
        "carrier-pigeon:coop".into(),
    ];
    let id = h.com.open_succeeded(a, &o, h.now).unwrap();
    h.actions();
    assert_eq!(
        h.com.addresses().addresses().collect::<Vec<_>>(),
        ["mem:peer", "unix:/run/peer.sock", "tcp:peer:1"]
    );
    // The channel is lost with a message unacknowledged: the reopen goes
    // to the in-process address first.
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    h.run_to_next_deadline();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    assert_eq!(h.grant_at().1, "mem:peer");
}

#[test]
fn a_site_that_only_called_us_can_be_called_back_at_the_addresses_it_lists() {
    // The driver makes the entry with the listen list of the NEGOTIATE
    // that named it (as the runtime's `route_accepted` does).
    let mut neg = negotiate(0, Attempt { opener: 9, seq: 1 });
    neg.listen = vec!["tcp:peer:9".into(), "unix:/p".into()];
    let mut h = with_book(AddressBook::claimed(neg.listen.iter().map(String::as_str)));
    let out = h.com.accepted(&neg, NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    assert!(h.com.addresses().can_open());
    assert_eq!(h.com.addresses().current(), Some("unix:/p"));
}

/// A NEGOTIATE's listen list is a peer's words, and a site's book is tried
/// on every reconnect and handed on: only the NEGOTIATE that made the entry
/// gives addresses; a later one naming the known site adds none.
#[test]
fn a_later_negotiate_adds_no_address() {
    let mut h = H::new(cfg(), false);
    let mut neg = negotiate(0, Attempt { opener: 9, seq: 1 });
    neg.listen = vec!["tcp:trap:9".into()];
    let out = h.com.accepted(&neg, NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    assert!(!h.com.addresses().can_open(), "no address learned");
}

/// A site named by a forwarded request's origin is known only on the
/// forwarder's word, at addresses the forwarder chose: it is tried once at
/// each (never retried every ≤ 5 s for ever), then fails for good and hands
/// back what it held (a delegated reply), to be reclaimed like any other
/// site.
#[test]
fn a_site_named_on_a_peers_word_gets_one_attempt_per_address() {
    let mut h = with_book(AddressBook::claimed_once(["tcp:h:1", "mem:m"]));
    h.com.queue(msg(10)).unwrap();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let (a1, addr) = h.grant_at();
    assert_eq!(addr, "mem:m");
    h.com
        .open_failed(a1, OpenFailure::Transport("no such name".into()), h.now);
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let (a2, addr) = h.grant_at();
    assert_eq!(addr, "tcp:h:1");
    h.com
        .open_failed(a2, OpenFailure::Open(OpenError::Timeout), h.now);
    let a = h.actions();
    let Some(Action::Failed {
        failure, not_sent, ..
    }) = a.iter().find(|a| matches!(a, Action::Failed { .. }))
    else {
        panic!("expected a permanent failure: {a:?}")
    };
    assert_eq!(*failure, SiteFailure::NotReached);
    assert_eq!(not_sent.len(), 1, "the reply is handed back");
    assert!(h.com.is_failed());
    assert!(!a.iter().any(|a| matches!(a, Action::RequestSlot)));
    // Nothing ties it any more: the reclaim rule forgets it.
    h.com.set_has_refs(false, h.now);
    h.advance(cfg().linger);
    assert!(h.actions().iter().any(|a| matches!(a, Action::Reclaim)));
}

#[test]
fn a_site_named_on_a_peers_word_at_no_usable_address_fails_at_its_first_need() {
    let mut h = with_book(AddressBook::claimed_once(["quic:h:1"]));
    h.com.queue(msg(10)).unwrap();
    let a = h.actions();
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::Failed {
                failure: SiteFailure::NotReached,
                ..
            }
        )),
        "{a:?}"
    );
}

#[test]
fn a_site_named_on_a_peers_word_that_answers_is_proven_and_ordinary() {
    let mut h = with_book(AddressBook::claimed_once(["tcp:h:1"]));
    h.com.queue(msg(10)).unwrap();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let (a1, _) = h.grant_at();
    assert!(h
        .com
        .open_succeeded(a1, &opened(1, 1 << 20), h.now)
        .is_some());
    let a = h.actions();
    assert_eq!(
        a.iter().filter(|a| matches!(a, Action::Proven)).count(),
        1,
        "{a:?}"
    );
    // Lost later: an ordinary site, retried after a backoff.
    let id = h.com.working_channel().unwrap();
    h.com.channel_lost(id, Loss::Eof, h.now);
    let a = h.actions();
    assert!(
        !a.iter().any(|a| matches!(a, Action::Failed { .. })),
        "{a:?}"
    );
    h.run_to_next_deadline();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let (a2, _) = h.grant_at();
    h.com
        .open_failed(a2, OpenFailure::Transport("refused".into()), h.now);
    assert!(!h.com.is_failed());
    assert_eq!(h.com.state(), ComState::Backoff);
}
