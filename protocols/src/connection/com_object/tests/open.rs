//! Opening, backoff, accepting and replacing channels.

use super::*;

#[test]
fn need_asks_for_a_slot_then_opens_then_works() {
    let mut h = H::new(cfg(), true);
    assert_eq!(h.com.state(), ComState::Closed);
    assert_eq!(h.com.poll_timeout(), None);
    let attempt = h.queue_and_request_open();
    assert_eq!(attempt, 1);
    let id = h
        .com
        .open_succeeded(attempt, &opened(1, 1 << 20), h.now)
        .unwrap();
    assert_eq!(h.com.working_channel(), Some(id));
    // Already Ok: no fault transition is reported; the site is up.
    assert!(matches!(h.actions()[..], [Action::Up]));
    // A report for another attempt is ignored.
    assert_eq!(h.com.open_succeeded(7, &opened(2, 1 << 20), h.now), None);
}

/// It waits for the site to call, unreachable meanwhile: the give-up
/// clock runs for what is owed to it.
#[test]
fn a_site_without_an_address_never_opens() {
    let mut h = H::new(cfg(), false);
    h.com.queue(msg(10)).unwrap();
    let a = h.actions();
    assert!(only_temp_failed(&a), "{a:?}");
    assert_eq!(h.com.state(), ComState::Closed);
    assert!(h.com.poll_timeout().is_some(), "the give-up clock runs");
}

#[test]
fn failed_opens_back_off_doubling_with_jitter_up_to_the_maximum() {
    let mut c = cfg();
    c.reconnect_min = Duration::from_millis(10);
    c.reconnect_max = Duration::from_millis(80);
    let mut h = H::new(c, true);
    let mut attempt = h.queue_and_request_open();
    let mut delays = Vec::new();
    for i in 0..6 {
        h.com.open_failed(
            attempt,
            OpenFailure::Transport("connection refused".into()),
            h.now,
        );
        let a = h.actions();
        if i == 0 {
            assert!(only_temp_failed(&a), "{a:?}");
        } else {
            assert!(a.is_empty(), "fault reported once: {a:?}");
        }
        assert_eq!(h.com.state(), ComState::Backoff);
        let start = h.now;
        let at = h.run_to_next_deadline();
        delays.push(at - start);
        let a = h.actions();
        assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
        attempt = h.grant();
    }
    let base = [10u64, 20, 40, 80, 80, 80];
    for (d, b) in delays.iter().zip(base) {
        let ms = d.as_secs_f64() * 1e3;
        assert!(
            ms >= b as f64 * 0.8 && ms < b as f64 * 1.2,
            "delays {delays:?}"
        );
    }
    // Jittered: not all the capped delays are equal.
    assert!(delays[3] != delays[4] || delays[4] != delays[5]);
    // Seeded: the same seed gives the same delays.
    let mut again = H::new(
        ComConfig {
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_millis(80),
            ..cfg()
        },
        true,
    );
    let a = again.queue_and_request_open();
    again
        .com
        .open_failed(a, OpenFailure::Transport("x".into()), again.now);
    let start = again.now;
    assert_eq!(again.run_to_next_deadline() - start, delays[0]);
}

#[test]
fn a_refusal_is_no_fault_but_still_backs_off() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com.open_failed(
        a,
        OpenFailure::Open(OpenError::Refused(RefuseReason::LostTie)),
        h.now,
    );
    assert!(h.actions().is_empty());
    assert_eq!(h.com.state(), ComState::Backoff);
    assert_eq!(h.com.fault_state(), FaultState::Ok);
}

/// A peer that refuses our channel as `Closing` has given the pair up: it
/// declared this site failed (and keeps refusing it for as long as its
/// node holds that entry) or it shuts down. Calling again after each
/// backoff would hold what we queued for it for ever, neither delivered
/// nor handed back; the site fails instead, everything handed back, and
/// nothing is opened again however long the clock runs.
#[test]
fn a_peer_refusing_as_closing_is_failed_and_everything_handed_back() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com.queue(msg(20)).unwrap();
    let refused = OpenError::Refused(RefuseReason::Closing);
    h.com
        .open_failed(a, OpenFailure::Open(refused.clone()), h.now);
    let acts = h.actions();
    match &acts[..] {
        [Action::Failed {
            failure,
            not_sent,
            maybe_delivered,
        }, Action::Fault {
            state: FaultState::PermFailed,
            ..
        }] => {
            assert_eq!(failure, &SiteFailure::Refused(RefuseReason::Closing));
            assert_eq!(not_sent.len(), 2);
            assert!(maybe_delivered.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.com.state(), ComState::Failed);
    for _ in 0..60 {
        h.advance(Duration::from_secs(10));
        let a = h.actions();
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::RequestSlot | Action::Open(_))),
            "{a:?}"
        );
    }
    let (err, _) = *h.com.queue(msg(5)).unwrap_err();
    assert_eq!(err, Refusal::SiteFailed);
}

/// The other refusals say another channel wins (or must prove the pair):
/// no fault, the site backs off and calls again.
#[test]
fn a_stale_or_unproven_refusal_backs_off_without_failing_the_site() {
    for reason in [RefuseReason::Stale, RefuseReason::Unproven] {
        let mut h = H::new(cfg(), true);
        let a = h.queue_and_request_open();
        h.com
            .open_failed(a, OpenFailure::Open(OpenError::Refused(reason)), h.now);
        assert!(h.actions().is_empty(), "{reason:?}");
        assert_eq!(h.com.state(), ComState::Backoff, "{reason:?}");
        assert_eq!(h.com.fault_state(), FaultState::Ok, "{reason:?}");
    }
}

#[test]
fn a_permanent_open_failure_hands_everything_back() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com.queue(msg(20)).unwrap();
    let e = OpenError::WrongIdentity {
        expected: PEER,
        got: SiteId(0x99),
    };
    h.com.open_failed(a, OpenFailure::Open(e.clone()), h.now);
    let acts = h.actions();
    match &acts[..] {
        [Action::Failed {
            failure,
            not_sent,
            maybe_delivered,
        }, Action::Fault {
            state: FaultState::PermFailed,
            ..
        }] => {
            assert_eq!(failure, &SiteFailure::Open(e));
            assert_eq!(not_sent.len(), 2);
            assert!(maybe_delivered.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.com.state(), ComState::Failed);
    assert_eq!(h.com.poll_timeout(), None);
    // A send racing with the failure comes back, never silently dropped.
    let (err, m) = *h.com.queue(msg(5)).unwrap_err();
    assert_eq!(err, Refusal::SiteFailed);
    assert_eq!(m.body_len(), 5);
}

#[test]
fn an_eof_while_working_is_a_temporary_failure() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    h.com.channel_lost(id, Loss::Eof, h.now);
    let a = h.actions();
    assert!(
        matches!(
            &a[..],
            [
                Action::CloseChannel {
                    end: ChannelEnd::Lost,
                    ..
                },
                Action::Fault {
                    state: FaultState::TempFailed,
                    ..
                }
            ]
        ),
        "{a:?}"
    );
    assert_eq!(h.com.state(), ComState::Backoff);
    // The old channel's late reports are ignored.
    h.com.channel_lost(id, Loss::Eof, h.now);
    assert!(h.actions().is_empty());
}

#[test]
fn an_eof_after_the_peers_hard_close_waits_for_the_peer_to_call_back() {
    let mut c = cfg();
    c.reopen_after_peer_hard_close = Duration::from_secs(3);
    let mut h = H::new(c, true);
    let id = h.working();
    // Our message goes out, and the peer's CLOSE_HARD acknowledges it: we
    // have nothing left to send (with something, we would reopen at once:
    // `site_needs::a_site_with_messages_queued_reopens_at_once_after_a_peers_hard_close`).
    h.com.poll_transmit(h.now, &mut ByteBuffer::new(65_536));
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::CloseHard, 0, 1)
        .encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    assert_eq!(h.com.state(), ComState::WaitingForDisconnect);
    assert!(!h.com.has_need());
    h.com.channel_lost(id, Loss::Eof, h.now);
    let a = h.actions();
    assert!(
        matches!(
            &a[..],
            [Action::CloseChannel {
                end: ChannelEnd::Orderly(CloseReason::PeerHard),
                ..
            }]
        ),
        "{a:?}"
    );
    h.com.channel_closed(id, h.now);
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    assert_eq!(h.com.fault_state(), FaultState::Ok);
    // The peer does not call back: we reopen after the wait.
    let start = h.now;
    let at = h.run_to_next_deadline();
    assert_eq!(at - start, Duration::from_secs(3));
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
}

#[test]
fn the_peer_calling_back_is_adopted_while_waiting_for_it() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    let AcceptOutcome::Accept { answer, .. } = out else {
        panic!("{out:?}")
    };
    let NegotiateAns::Accept {
        buffer_size,
        generation,
        ..
    } = answer
    else {
        panic!()
    };
    // The acceptor lowers the buffer size to the initiator's 16 KiB, never raises it.
    assert_eq!(buffer_size, 16_384);
    assert_eq!(generation, 2);
    assert_eq!(h.com.state(), ComState::Working);
    let a = h.actions();
    assert!(
        matches!(
            &a[..],
            [
                Action::Fault {
                    state: FaultState::Ok,
                    ..
                },
                Action::Up
            ]
        ),
        "{a:?}"
    );
    // The backoff timer of the lost channel is gone.
    assert!(h
        .com
        .poll_timeout()
        .is_none_or(|t| t > h.now + Duration::from_millis(500)));
}

#[test]
fn accepting_replaces_a_channel_the_peer_lost_and_abandons_our_open() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    // The peer saw generation 1 working and lost it: a new channel replaces it.
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    let a = h.actions();
    assert!(
        matches!(&a[..], [Action::CloseChannel { id: old, end: ChannelEnd::Replaced }] if *old == id),
        "{a:?}"
    );
    // A stale NEGOTIATE (older generation, not a later attempt) is refused.
    let out = h
        .com
        .accepted(&negotiate(0, Attempt::UNKNOWN), NONCE, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Stale)),
        "{out:?}"
    );

    // Opening while the peer (smaller id) opens too: its channel wins.
    let mut h = H::new(cfg(), true);
    h.com = ComObject::new(
        cfg(),
        ReassemblyBudget::new(1 << 20),
        SiteId(0xFF),
        super::book(true),
        1,
        1,
        h.now,
    );
    h.queue_and_request_open();
    let out = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    let a = h.actions();
    assert!(matches!(a[..], [Action::AbandonOpen, Action::Up]), "{a:?}");
}

#[test]
fn a_negotiate_claiming_unsent_messages_is_a_protocol_fault() {
    let mut h = H::new(cfg(), true);
    let mut neg = negotiate(0, Attempt { opener: 9, seq: 1 });
    neg.last_received = 5;
    let out = h.com.accepted(&neg, NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Protocol(_)), "{out:?}");
    assert!(matches!(h.actions()[..], [Action::ReportFault { .. }]));
    assert_eq!(h.com.stats().protocol_errors, 1);
}

/// The site is announced up when a channel first works, not again when a
/// new channel from the peer replaces a working one, and again after a
/// temporary failure (the rule behind the runtime's `NodeEvent::SiteUp`).
#[test]
fn up_is_announced_on_the_first_channel_and_after_a_temporary_failure_only() {
    let ups = |a: &[Action]| a.iter().filter(|a| matches!(a, Action::Up)).count();
    let mut h = H::new(cfg(), true);
    let attempt = h.queue_and_request_open();
    h.com
        .open_succeeded(attempt, &opened(1, 1 << 20), h.now)
        .unwrap();
    assert_eq!(ups(&h.actions()), 1, "the first channel");
    // The peer replaces the working channel with one of its own: the site
    // never stopped being up.
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    let AcceptOutcome::Accept { id: second, .. } = out else {
        panic!("{out:?}")
    };
    let a = h.actions();
    assert_eq!(ups(&a), 0, "a replacement: {a:?}");
    // Lost: temporarily failed; the next channel announces the site again.
    h.com.channel_lost(second, Loss::Eof, h.now);
    let a = h.actions();
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::Fault {
                state: FaultState::TempFailed,
                ..
            }
        )),
        "{a:?}"
    );
    let mut a = Vec::new();
    for _ in 0..10 {
        h.run_to_next_deadline();
        a = h.actions();
        if !a.is_empty() {
            break;
        }
    }
    assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
    let attempt = h.grant();
    h.com
        .open_succeeded(attempt, &opened(3, 1 << 20), h.now)
        .expect("working again");
    let a = h.actions();
    assert!(
        matches!(
            a[..],
            [
                Action::Fault {
                    state: FaultState::Ok,
                    ..
                },
                Action::Up
            ]
        ),
        "{a:?}"
    );
}
