//! Give-up, the linger rule and weak closes, kill, hand-back, timers and shutdown.

use super::*;

#[test]
fn temporarily_failed_for_the_give_up_time_fails_permanently() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com
        .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
    let t0 = h.now;
    // Keep failing: the give-up deadline does not move.
    loop {
        h.run_to_next_deadline();
        let acts = h.actions();
        if let Some(Action::Failed {
            failure, not_sent, ..
        }) = acts.iter().find(|a| matches!(a, Action::Failed { .. }))
        {
            assert_eq!(failure, &SiteFailure::GaveUp(Duration::from_secs(60)));
            assert_eq!(not_sent.len(), 1);
            break;
        }
        if acts.iter().any(|a| matches!(a, Action::RequestSlot)) {
            let a = h.grant();
            h.com
                .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
        }
        assert!(h.now - t0 <= Duration::from_secs(61), "never gave up");
    }
    assert_eq!(h.now - t0, Duration::from_secs(60));
}

/// A working channel with its one message acknowledged (nothing pending)
/// and no reference left on our side: its channel id, an output and an
/// input buffer.
fn unreferenced_and_idle(h: &mut H) -> (ChannelId, ByteBuffer, ByteBuffer) {
    let id = h.working();
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::Ack, 0, 1)
        .encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    h.com.take_freed(h.now);
    assert!(!h.com.has_need());
    h.com.set_has_refs(false, h.now);
    (id, out, input)
}

#[test]
fn without_references_an_idle_channel_closes_weakly_and_a_reject_holds_off() {
    let mut c = cfg();
    c.linger = Duration::from_secs(10);
    let mut h = H::new(c, true);
    let (id, mut out, mut input) = unreferenced_and_idle(&mut h);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    let t_idle = h.now;
    // The linger deadline is the next (only) ComObject timer before heartbeats matter.
    let mut fired_at = None;
    for _ in 0..100 {
        h.run_to_next_deadline();
        // Heartbeats keep the channel alive; answer them with our own input.
        input.push(&{
            let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
            crate::wire::frame::FrameHeader::control(
                crate::wire::frame::FrameKind::Heartbeat,
                0,
                1,
            )
            .encode(&mut hb);
            hb
        });
        assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
        out.clear();
        h.com.poll_transmit(h.now, &mut out);
        if h.com.state() == ComState::ClosingWeak {
            fired_at = Some(h.now);
            break;
        }
    }
    assert_eq!(fired_at, Some(t_idle + Duration::from_secs(10)));
    assert_eq!(h.com.stats().weak_closes_started, 1);
    // The peer rejects: no new weak close for the linger time.
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::CloseReject, 0, 1)
        .encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    assert_eq!(h.com.state(), ComState::Working);
    let rejected_at = h.now;
    for _ in 0..100 {
        h.run_to_next_deadline();
        if h.com.state() == ComState::ClosingWeak {
            break;
        }
        // Keep the channel from going silent.
        crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::Heartbeat, 0, 1)
            .encode(&mut hb);
        input.push(&hb);
        assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
        out.clear();
        h.com.poll_transmit(h.now, &mut out);
    }
    assert_eq!(h.com.state(), ComState::ClosingWeak);
    assert!(h.now >= rejected_at + Duration::from_secs(10));
}

/// CLEAR_REFERENCE is acted on: once the peer said it holds no reference
/// to us, and we hold none either, the idle channel closes weakly at once
/// instead of after the linger time.
#[test]
fn a_peer_that_cleared_its_reference_lets_an_unreferenced_channel_close_at_once() {
    let mut c = cfg();
    c.linger = Duration::from_secs(10);
    let mut h = H::new(c, true);
    let (id, mut out, mut input) = unreferenced_and_idle(&mut h);
    assert_eq!(h.com.state(), ComState::Working, "lingering");
    let t = h.now;
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::ClearReference, 0, 1)
        .encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    h.run_to_next_deadline();
    out.clear();
    h.com.poll_transmit(h.now, &mut out);
    assert_eq!(h.com.state(), ComState::ClosingWeak);
    assert!(
        h.now - t < Duration::from_secs(1),
        "no linger: {:?}",
        h.now - t
    );
}

#[test]
fn kill_writes_close_hard_before_the_channel_closes_then_hands_back() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    out.clear();
    h.com.kill(h.now);
    let a = h.actions();
    assert!(
        matches!(
            &a[..],
            [
                Action::CloseChannel {
                    end: ChannelEnd::Final,
                    ..
                },
                Action::Failed {
                    failure: SiteFailure::Killed,
                    ..
                },
                Action::Fault {
                    state: FaultState::PermFailed,
                    ..
                }
            ]
        ),
        "{a:?}"
    );
    if let Action::Failed {
        maybe_delivered, ..
    } = &a[1]
    {
        assert_eq!(maybe_delivered.len(), 1, "sent, never acknowledged");
    }
    // The driver flushes before closing: CLOSE_HARD goes out.
    assert!(h.com.poll_transmit(h.now, &mut out) >= crate::wire::frame::HEADER_LEN);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    assert!(out.peek(0, &mut hb));
    let fh = crate::wire::frame::FrameHeader::decode(&hb, 65_536).unwrap();
    assert_eq!(fh.kind, crate::wire::frame::FrameKind::CloseHard);
    h.com.channel_closed(id, h.now);
    out.clear();
    assert_eq!(h.com.poll_transmit(h.now, &mut out), 0);
}

#[test]
fn a_message_too_large_for_the_peer_queued_before_the_handshake_is_handed_back() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com.queue(msg(5_000)).unwrap();
    h.com.queue(msg(20)).unwrap();
    let id = h.com.open_succeeded(a, &opened(1, 1_000), h.now);
    assert!(id.is_some());
    let acts = h.actions();
    let back: Vec<_> = acts
        .iter()
        .filter_map(|a| match a {
            Action::HandBack { error, message } => Some((error.clone(), message.body_len())),
            _ => None,
        })
        .collect();
    assert_eq!(back.len(), 1, "{acts:?}");
    assert!(matches!(back[0].0, Refusal::TooLarge { max: 1_000, .. }));
    assert_eq!(back[0].1, 5_000);
    assert_eq!(h.com.session().pending_messages(), 2);
}

#[test]
fn handle_timeout_never_leaves_the_same_past_deadline_behind() {
    let mut h = H::new(cfg(), true);
    let a = h.queue_and_request_open();
    h.com
        .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
    let mut last = None;
    for _ in 0..50 {
        let Some(at) = h.com.poll_timeout() else {
            break;
        };
        assert!(Some(at) != last || at > h.now, "same past deadline again");
        h.advance(at.saturating_duration_since(h.now));
        assert!(
            h.com.poll_timeout().is_none_or(|t| t > at),
            "deadline {at:?} not consumed"
        );
        last = Some(at);
        for act in h.actions() {
            if matches!(act, Action::RequestSlot) {
                let a = h.grant();
                h.com
                    .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
            }
        }
    }
}

#[test]
fn shutdown_refuses_new_channels_and_ends_the_working_one() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    h.com.shutdown(h.now);
    let a = h.actions();
    assert!(
        matches!(&a[..], [Action::CloseChannel { id: c, end: ChannelEnd::Final }] if *c == id),
        "{a:?}"
    );
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Refuse(RefuseReason::Closing)));
}

/// A graceful shutdown writes LEAVING (after the final ack) on the working
/// channel before the driver closes it, so the peer knows the close is no
/// fault.
#[test]
fn shutdown_writes_leaving_on_the_working_channel() {
    let mut h = H::new(cfg(), true);
    h.working();
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    out.clear();
    h.com.shutdown(h.now);
    h.actions();
    h.com.poll_transmit(h.now, &mut out);
    let mut kinds = Vec::new();
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    while out.peek(0, &mut hb) {
        let fh = crate::wire::frame::FrameHeader::decode(&hb, 65_536).unwrap();
        kinds.push(fh.kind);
        out.consume(crate::wire::frame::HEADER_LEN + fh.payload_len as usize);
    }
    assert_eq!(
        kinds.last(),
        Some(&crate::wire::frame::FrameKind::Leaving),
        "{kinds:?}"
    );
}

/// The other side: a LEAVING frame fails the site at once as shut down
/// (no reconnect), handing back what it never acknowledged; a repeated one
/// changes nothing.
#[test]
fn a_peer_that_leaves_is_failed_at_once_and_what_it_never_acknowledged_handed_back() {
    let mut h = H::new(cfg(), true);
    let id = h.working(); // one message sent, not acknowledged
    h.com.poll_transmit(h.now, &mut ByteBuffer::new(65_536));
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::Leaving, 0, 0)
        .encode(&mut hb);
    input.push(&hb);
    input.push(&hb);
    h.com.handle_input(id, h.now, &mut input, &mut |_| {});
    let a = h.actions();
    let failed: Vec<_> = a
        .iter()
        .filter_map(|a| match a {
            Action::Failed {
                failure,
                not_sent,
                maybe_delivered,
            } => Some((failure.clone(), not_sent.len(), maybe_delivered.len())),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![(SiteFailure::ShutDown, 0, 1)], "{a:?}");
    assert_eq!(h.com.state(), ComState::Failed);
    assert!(!a
        .iter()
        .any(|a| matches!(a, Action::RequestSlot | Action::Open(_))));
}

/// A site that left is over: a claim on its id is refused as `Closing`,
/// unless the claimant's verified certificate names the site — then the
/// site restarted (its id comes from its certificate), and the driver is
/// told to let it in on a new entry. While this node itself shuts down,
/// even a certified claim is refused.
#[test]
fn a_certified_claim_on_a_site_that_left_is_the_site_restarted() {
    use crate::connection::handshake::PeerCertificate;
    let mut h = H::new(cfg(), true);
    let id = h.working();
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::Leaving, 0, 0)
        .encode(&mut hb);
    input.push(&hb);
    h.com.handle_input(id, h.now, &mut input, &mut |_| {});
    h.actions();
    assert_eq!(h.com.state(), ComState::Failed);
    let claim = negotiate(1, Attempt { opener: 9, seq: 1 });
    let out = h.com.accepted(&claim, NONCE, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Closing)),
        "{out:?}"
    );
    let other = PeerCertificate::Names(SiteId(0xC0FFEE));
    let out = h.com.accepted_as(&claim, NONCE, other, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Closing)),
        "{out:?}"
    );
    let out = h
        .com
        .accepted_as(&claim, NONCE, PeerCertificate::Names(PEER), h.now);
    assert!(matches!(out, AcceptOutcome::Restarted), "{out:?}");
    assert_eq!(
        h.com.state(),
        ComState::Failed,
        "the old session stays over"
    );
    // This node shutting down: refused whoever claims.
    h.com.shutdown(h.now);
    h.actions();
    let out = h
        .com
        .accepted_as(&claim, NONCE, PeerCertificate::Names(PEER), h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Closing)),
        "{out:?}"
    );
}

/// A site that connected to us and named no address we can reach, with a
/// message queued for it: its channel is lost.
fn unreachable_site_lost(c: ComConfig) -> H {
    let mut h = H::new(c, false);
    let out = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    let AcceptOutcome::Accept { id, .. } = out else {
        panic!("{out:?}")
    };
    h.com.queue(msg(10)).unwrap();
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    h.actions();
    h.com.channel_lost(id, Loss::Eof, h.now);
    assert!(h.actions().iter().any(|a| matches!(
        a,
        Action::Fault {
            state: FaultState::TempFailed,
            ..
        }
    )));
    h
}

/// A site that can never be called back fails after the unreachable
/// give-up, and the replies it was owed are handed back: held for ever,
/// they pile up (a flood of such sites can leave millions of messages, over
/// a GiB, behind once the sites are gone).
#[test]
fn a_site_that_cannot_be_called_back_is_given_up() {
    let c = ComConfig {
        give_up_after: None,
        unreachable_give_up: Duration::from_secs(15),
        ..ComConfig::default()
    };
    let mut h = unreachable_site_lost(c);
    let t0 = h.now;
    let at = h.run_to_next_deadline();
    assert_eq!(at - t0, Duration::from_secs(15));
    let acts = h.actions();
    let Some(Action::Failed {
        failure,
        not_sent,
        maybe_delivered,
    }) = acts.iter().find(|a| matches!(a, Action::Failed { .. }))
    else {
        panic!("not given up: {acts:?}")
    };
    assert_eq!(failure, &SiteFailure::Unreachable(Duration::from_secs(15)));
    assert_eq!(
        not_sent.len() + maybe_delivered.len(),
        1,
        "the message is handed back"
    );
    assert_eq!(h.com.state(), ComState::Failed);
}

/// A shorter configured give-up still wins, and a site that can be called
/// back is not given up by the unreachable rule.
#[test]
fn the_unreachable_give_up_never_lengthens_or_replaces_the_configured_one() {
    let c = ComConfig {
        give_up_after: Some(Duration::from_secs(3)),
        unreachable_give_up: Duration::from_secs(15),
        ..ComConfig::default()
    };
    let mut h = unreachable_site_lost(c);
    let t0 = h.now;
    h.run_to_next_deadline();
    assert_eq!(h.now - t0, Duration::from_secs(3));
    assert_eq!(h.com.state(), ComState::Failed);

    // Reachable, no give-up configured: retried for ever.
    let c = ComConfig {
        give_up_after: None,
        unreachable_give_up: Duration::from_secs(15),
        ..ComConfig::default()
    };
    let mut h = H::new(c, true);
    let a = h.queue_and_request_open();
    h.com
        .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
    let t0 = h.now;
    while h.now - t0 < Duration::from_secs(120) {
        h.run_to_next_deadline();
        for act in h.actions() {
            assert!(
                !matches!(act, Action::Failed { .. }),
                "gave up a reachable site"
            );
            if matches!(act, Action::RequestSlot) {
                let a = h.grant();
                h.com
                    .open_failed(a, OpenFailure::Transport("refused".into()), h.now);
            }
        }
    }
}

/// Found with 32 readers that asked for replies and vanished without
/// reading (`tests/hostile/output_release.rs`, 1 run in 4 under load):
/// the peer cleared its reference, so the idle channel began to close
/// weakly at once; the requests read meanwhile queued replies, which
/// stay for the next channel. The peer's EOF ended the weak close in
/// order: the site was left Ok, with no channel, no address to call and
/// no deadline, and its replies (6.5 MB each) held for ever. Messages
/// owed to a site that cannot be called back make it unreachable, and it
/// is given up after the unreachable give-up with them handed back.
#[test]
fn messages_owed_after_an_orderly_close_to_an_uncallable_site_are_given_up() {
    let c = ComConfig {
        give_up_after: None,
        unreachable_give_up: Duration::from_secs(15),
        ..ComConfig::default()
    };
    let mut h = H::new(c, false);
    let out = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    let AcceptOutcome::Accept { id, .. } = out else {
        panic!("{out:?}")
    };
    h.com.set_has_refs(false, h.now);
    // The peer holds no reference to us: the idle channel closes weakly.
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::ClearReference, 0, 0)
        .encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    let mut out = ByteBuffer::new(65_536);
    while h.com.state() != ComState::ClosingWeak {
        h.run_to_next_deadline();
        out.clear();
        h.com.poll_transmit(h.now, &mut out);
    }
    // A reply is queued during the close; then the peer's EOF ends it.
    h.com.queue(msg(10)).unwrap();
    out.clear();
    h.com.poll_transmit(h.now, &mut out);
    h.actions();
    h.com.channel_lost(id, Loss::Eof, h.now);
    let acts = h.actions();
    assert!(
        acts.iter().any(|a| matches!(
            a,
            Action::Fault {
                state: FaultState::TempFailed,
                ..
            }
        )),
        "not unreachable: {acts:?}"
    );
    let t0 = h.now;
    let failed = loop {
        h.run_to_next_deadline();
        assert!(h.now - t0 <= Duration::from_secs(15), "not given up");
        if let Some(a) = h
            .actions()
            .into_iter()
            .find(|a| matches!(a, Action::Failed { .. }))
        {
            break a;
        }
    };
    assert_eq!(h.now - t0, Duration::from_secs(15));
    let Action::Failed {
        failure,
        not_sent,
        maybe_delivered,
    } = failed
    else {
        unreachable!()
    };
    assert_eq!(failure, SiteFailure::Unreachable(Duration::from_secs(15)));
    assert_eq!(not_sent.len() + maybe_delivered.len(), 1, "handed back");
}
