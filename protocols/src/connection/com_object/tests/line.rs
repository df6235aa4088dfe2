//! Waiting in the peer's line: the attempt stays ours in
//! `WaitingForCallback`, with a give-up deadline instead of the backoff.

use super::*;

const HOLD: Duration = Duration::from_secs(30);

fn line_cfg(give_up: Duration) -> ComConfig {
    ComConfig {
        line_give_up: give_up,
        ..cfg()
    }
}

#[test]
fn told_to_wait_the_site_waits_for_the_callback_without_a_fault_and_the_answer_lets_it_in() {
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    assert!(h.actions().is_empty(), "no fault, no backoff, no new open");
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    assert!(h.com.in_line());
    assert_eq!(h.com.opening(), Some(attempt), "the attempt is still ours");
    assert_eq!(h.com.fault_state(), FaultState::Ok);
    // The deadline is the shorter of ours and the peer's hold.
    assert_eq!(h.com.poll_timeout(), Some(h.now + HOLD));
    assert_eq!(h.com.stats().line_waits, 1);
    // Our turn: the answer arrives on the same attempt.
    h.now += Duration::from_secs(2);
    let id = h.com.open_succeeded(attempt, &opened(1, 1 << 20), h.now);
    assert!(id.is_some());
    assert_eq!(h.com.state(), ComState::Working);
    assert!(!h.com.in_line());
    assert!(matches!(h.actions()[..], [Action::Up]));
}

#[test]
fn at_the_give_up_deadline_the_attempt_is_abandoned_and_the_site_retries_after_its_backoff() {
    let give_up = Duration::from_secs(4);
    let mut h = H::new(line_cfg(give_up), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    // A later WAIT (the peer telling our place again) does not move it.
    h.now += Duration::from_secs(1);
    h.com.open_waiting(attempt, HOLD, h.now);
    let start = h.now - Duration::from_secs(1);
    let at = h.run_to_next_deadline();
    assert_eq!(at - start, give_up);
    let a = h.actions();
    assert!(matches!(a[..], [Action::AbandonOpen]), "{a:?}");
    assert_eq!(h.com.state(), ComState::Backoff);
    assert_eq!(h.com.opening(), None);
    assert_eq!(h.com.fault_state(), FaultState::Ok, "busy is no fault");
    assert_eq!(h.com.stats().line_give_ups, 1);
    // A late answer to the abandoned attempt is ignored.
    assert_eq!(
        h.com.open_succeeded(attempt, &opened(1, 1 << 20), h.now),
        None
    );
    // After the backoff, the next attempt as usual.
    h.run_to_next_deadline();
    assert!(matches!(h.actions()[..], [Action::RequestSlot]));
    let next = h.grant();
    assert_eq!(next, attempt + 1);
}

#[test]
fn a_peer_hold_shorter_than_ours_sets_the_deadline_and_a_stale_wait_is_ignored() {
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    // For another attempt: nothing.
    h.com.open_waiting(attempt + 1, HOLD, h.now);
    assert_eq!(h.com.state(), ComState::Opening);
    h.com
        .open_waiting(attempt, Duration::from_millis(1500), h.now);
    assert_eq!(
        h.com.poll_timeout(),
        Some(h.now + Duration::from_millis(1500))
    );
    // The peer closed the connection itself (its hold time): the open
    // failed as any transport failure does, and the stale deadline goes.
    h.com.open_failed(
        attempt,
        OpenFailure::Transport("closed by the peer during the handshake".into()),
        h.now,
    );
    assert_eq!(h.com.state(), ComState::Backoff);
    h.actions();
}

#[test]
fn a_channel_from_the_peer_while_we_wait_in_its_line_is_a_simultaneous_connect() {
    // LOCAL (0x10) < PEER (0x20): our channel wins the tie, theirs is
    // refused while ours waits in their line.
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    let out = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::LostTie)),
        "{out:?}"
    );
    assert!(h.com.in_line());
    // The other way round, the peer's channel wins and our wait ends.
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    let mut neg = negotiate(0, Attempt { opener: 9, seq: 1 });
    neg.site = SiteId(0x01);
    let hs = HandshakeNonces {
        initiator: neg.site,
        ..from_peer()
    };
    neg.proof = Some(hs.proof(&PAIR));
    let out = h.com.accepted(&neg, NONCE, h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    let a = h.actions();
    assert!(matches!(a.first(), Some(Action::AbandonOpen)), "{a:?}");
    assert_eq!(h.com.state(), ComState::Working);
    assert_eq!(h.com.opening(), None);
}

#[test]
fn shutdown_and_kill_abandon_an_attempt_waiting_in_line() {
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    h.com.kill(h.now);
    let a = h.actions();
    assert!(matches!(a.first(), Some(Action::AbandonOpen)), "{a:?}");
    assert_eq!(h.com.state(), ComState::Failed);
}

#[test]
fn a_site_let_in_from_the_line_gives_its_slot_back_as_soon_as_it_is_done() {
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    h.com.open_waiting(attempt, HOLD, h.now);
    let id = h
        .com
        .open_succeeded(attempt, &opened(1, 1 << 20), h.now)
        .unwrap();
    h.actions();
    // The message is sent and acknowledged; the last reference goes.
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    let mut ack = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::wire::frame::HEADER_LEN];
    crate::wire::frame::FrameHeader::control(crate::wire::frame::FrameKind::Ack, 0, 1)
        .encode(&mut hb);
    ack.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut ack, &mut |_| {}));
    assert!(!h.com.has_need());
    h.com.set_has_refs(false, h.now);
    // No linger: others wait in the peer's line for this slot.
    assert_eq!(h.com.poll_timeout().map(|t| t <= h.now), Some(true));
    h.com.handle_timeout(h.now);
    assert_eq!(h.com.state(), ComState::ClosingWeak);
    // A site that got its channel without waiting lingers as before.
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let id = h.working();
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    let mut ack = ByteBuffer::new(4096);
    ack.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut ack, &mut |_| {}));
    h.com.set_has_refs(false, h.now);
    h.com.handle_timeout(h.now);
    assert_eq!(h.com.state(), ComState::Working);
}

#[test]
fn a_site_waiting_in_our_line_is_neither_given_up_nor_forgotten() {
    // A client that cannot be called back (no address) lost its channel:
    // temporarily failed, given up after `unreachable_give_up`.
    let mut c = line_cfg(Duration::from_secs(60));
    c.unreachable_give_up = Duration::from_secs(15);
    c.give_up_after = None;
    let mut h = H::new(c, false);
    let id = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    let AcceptOutcome::Accept { id, .. } = id else {
        panic!("{id:?}")
    };
    h.actions();
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.com.channel_closed(id, h.now);
    h.com.set_has_refs(false, h.now);
    h.actions();
    assert_eq!(h.com.fault_state(), FaultState::TempFailed);
    // It calls back and waits in our line for 40 s: longer than the give-up
    // and the linger time. Nothing fires.
    h.com.set_peer_in_line(true, h.now);
    h.advance(Duration::from_secs(40));
    assert!(h.actions().is_empty(), "not given up, not reclaimed");
    assert!(!h.com.is_failed());
    // A newer connection replaces the older one: still waiting.
    h.com.set_peer_in_line(true, h.now);
    h.com.set_peer_in_line(false, h.now);
    h.advance(Duration::from_secs(20));
    assert!(h.actions().is_empty());
    // It leaves without being let in: the give-up runs afresh from now.
    h.com.set_peer_in_line(false, h.now);
    h.advance(Duration::from_secs(14));
    assert!(!h.com.is_failed());
    h.advance(Duration::from_secs(1));
    assert!(h.com.is_failed());
}

/// The slot table took the attempt's slot back for a site waiting at this
/// node (`PreemptReason::LineWait`): the attempt is abandoned and the site
/// asks for a slot again at once — no fault, no backoff — and a late
/// answer to the abandoned attempt is ignored.
#[test]
fn leaving_the_peers_line_abandons_the_attempt_and_asks_for_a_slot_again_at_once() {
    let mut h = H::new(line_cfg(Duration::from_secs(60)), true);
    let attempt = h.queue_and_request_open();
    // Not in line yet: nothing to leave.
    assert_eq!(h.com.in_line_since(), None);
    assert!(!h.com.leave_peer_line(h.now));
    assert!(h.actions().is_empty());
    let told = h.now;
    h.com.open_waiting(attempt, HOLD, h.now);
    h.now += Duration::from_secs(3);
    // A later WAIT does not move the time it joined.
    h.com.open_waiting(attempt, HOLD, h.now);
    assert_eq!(h.com.in_line_since(), Some(told));
    assert!(h.com.leave_peer_line(h.now));
    let a = h.actions();
    assert!(
        matches!(a[..], [Action::AbandonOpen, Action::RequestSlot]),
        "{a:?}"
    );
    assert_eq!(h.com.state(), ComState::WaitingForSlot);
    assert_eq!((h.com.opening(), h.com.in_line_since()), (None, None));
    assert_eq!(h.com.fault_state(), FaultState::Ok, "busy is no fault");
    assert_eq!(h.com.stats().line_give_ups, 0, "not a give-up");
    // The give-up deadline went with the attempt.
    assert_eq!(h.com.poll_timeout(), None);
    assert!(!h.com.leave_peer_line(h.now), "once");
    assert_eq!(h.com.line_yields(), 1);
    assert_eq!(
        h.com.open_succeeded(attempt, &opened(1, 1 << 20), h.now),
        None
    );
    // The next slot starts the next attempt; it gives way too, and the
    // count goes on until a channel works.
    let next = h.grant();
    assert_eq!(next, attempt + 1);
    h.com.open_waiting(next, HOLD, h.now);
    assert!(h.com.leave_peer_line(h.now));
    assert_eq!(h.com.line_yields(), 2);
    h.actions();
    let last = h.grant();
    assert!(h
        .com
        .open_succeeded(last, &opened(1, 1 << 20), h.now)
        .is_some());
    assert_eq!(h.com.line_yields(), 0);
}
