//! The close protocol and channel liveness, sans-IO, on a Pair of working
//! sessions: CLOSE_WEAK (refusable), CLOSE_HARD (always granted),
//! CLOSE_ACCEPT / CLOSE_REJECT, CLEAR_REFERENCE; no new application message
//! while closing; heartbeats when idle and the silence event.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{frame_bytes, slice, Pair};
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind};
use sitenet_protocols::{
    ClosePhase, CloseReason, OutMessage, Priority, ProtocolError, SessionConfig, SessionEvent,
};

fn pair() -> Pair {
    Pair::new(65_536, SessionConfig::default())
}

fn msg(i: u32) -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        i,
        Bytes::new(),
        vec![slice(i as usize, 50)],
    )
}

fn events(s: &mut sitenet_protocols::Session) -> Vec<SessionEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

/// Kinds of the frames B received since `from`.
fn kinds_at_b(p: &Pair, from: usize) -> Vec<FrameKind> {
    p.b.tap.frames[from..]
        .iter()
        .map(|f| f.header.kind)
        .collect()
}

#[test]
fn weak_close_is_accepted_when_the_peer_no_longer_needs_the_channel() {
    let mut p = pair();
    p.b.session.set_local_need(false);
    assert!(p.a.session.begin_close_weak(p.now));
    assert!(matches!(
        p.a.session.close_phase(),
        ClosePhase::ClosingWeak { .. }
    ));
    p.pump().unwrap();
    assert_eq!(
        kinds_at_b(&p, 0),
        vec![FrameKind::ClearReference, FrameKind::CloseWeak]
    );
    assert_eq!(
        events(&mut p.b.session),
        vec![SessionEvent::PeerClearedReference]
    );
    assert!(matches!(
        p.b.session.close_phase(),
        ClosePhase::PeerClosing { hard: false, .. }
    ));
    assert_eq!(
        p.a.tap
            .frames
            .iter()
            .map(|f| f.header.kind)
            .collect::<Vec<_>>(),
        vec![FrameKind::CloseAccept]
    );
    assert_eq!(
        events(&mut p.a.session),
        vec![SessionEvent::CloseChannel(CloseReason::WeakDone)]
    );
    // B waits for A to close the channel, at most the close timeout.
    p.advance(Duration::from_secs(5));
    p.b.session.handle_timeout(p.now);
    assert_eq!(
        events(&mut p.b.session),
        vec![SessionEvent::CloseChannel(CloseReason::Timeout)]
    );
}

#[test]
fn weak_close_is_rejected_while_the_peer_needs_the_channel() {
    let mut p = pair();
    assert!(p.a.session.begin_close_weak(p.now));
    // While closing, a queued message does not go out.
    p.a.send(msg(1));
    p.a_to_b(usize::MAX).unwrap();
    assert_eq!(
        kinds_at_b(&p, 0),
        vec![FrameKind::ClearReference, FrameKind::CloseWeak]
    );
    assert!(p.b.delivered.is_empty());
    p.b_to_a(usize::MAX).unwrap();
    assert_eq!(p.a.tap.frames[0].header.kind, FrameKind::CloseReject);
    assert_eq!(
        events(&mut p.a.session),
        vec![SessionEvent::WeakCloseRejected]
    );
    assert_eq!(p.a.session.close_phase(), ClosePhase::Open);
    // Rejected: the channel works again and the message goes out.
    p.pump().unwrap();
    assert_eq!(p.b.delivered.len(), 1);
}

#[test]
fn weak_close_is_refused_locally_while_messages_are_pending() {
    let mut p = pair();
    p.a.send(msg(1));
    assert!(!p.a.session.begin_close_weak(p.now), "queued message");
    p.pump().unwrap();
    assert!(
        !p.a.session.begin_close_weak(p.now),
        "unacknowledged message"
    );
    p.advance(Duration::from_millis(25));
    p.pump().unwrap();
    assert!(p.a.session.begin_close_weak(p.now));
}

#[test]
fn hard_close_is_always_granted() {
    let mut p = pair();
    // B needs the channel and has traffic of its own: still granted.
    p.b.send(msg(7));
    assert!(p.a.session.begin_close_hard(p.now));
    p.a.send(msg(1));
    p.a_to_b(usize::MAX).unwrap();
    assert_eq!(
        kinds_at_b(&p, 0),
        vec![FrameKind::CloseHard],
        "no new application message while closing"
    );
    assert!(matches!(
        p.b.session.close_phase(),
        ClosePhase::PeerClosing { hard: true, .. }
    ));
    p.b_to_a(usize::MAX).unwrap();
    assert_eq!(
        p.a.tap
            .frames
            .iter()
            .map(|f| f.header.kind)
            .collect::<Vec<_>>(),
        vec![FrameKind::CloseAccept]
    );
    assert_eq!(
        events(&mut p.a.session),
        vec![SessionEvent::CloseChannel(CloseReason::HardDone)]
    );
    // The driver closes the channel. Nothing was lost: the queued messages
    // wait for the next channel.
    p.a.session.channel_down();
    p.b.session.channel_down();
    assert_eq!(p.a.session.pending_messages(), 1);
    assert_eq!(p.b.session.pending_messages(), 1);
    assert!(p.b.delivered.is_empty() && p.a.delivered.is_empty());
}

/// When a close completes, the session emits `CloseChannel` and returns to
/// `ClosePhase::Open` at once (`finish_close`), while the channel is still
/// up until the driver acts. The runtime flushes the session before closing
/// (to get answers and acks out), so `poll_transmit` then marshals new
/// application messages onto the channel being closed — against "while
/// closing, no new application message is sent on the channel". (Nothing is
/// lost or duplicated — numbering and the ledger cover it — but frames are
/// wasted and the rule is broken.)
#[test]
fn no_application_data_between_close_done_and_channel_down() {
    let mut p = pair();
    assert!(p.a.session.begin_close_hard(p.now));
    p.a.send(msg(1));
    p.a_to_b(usize::MAX).unwrap();
    p.b_to_a(usize::MAX).unwrap();
    assert_eq!(
        events(&mut p.a.session),
        vec![SessionEvent::CloseChannel(CloseReason::HardDone)]
    );
    // The driver's last flush before closing the channel.
    let before = p.b.tap.frames.len();
    p.a_to_b(usize::MAX).unwrap();
    assert!(
        !kinds_at_b(&p, before).contains(&FrameKind::Data),
        "application data sent after the close completed: {:?}",
        kinds_at_b(&p, before)
    );
}

#[test]
fn crossing_closes_complete_on_both_sides() {
    let mut p = pair();
    p.a.session.set_local_need(false);
    p.b.session.set_local_need(false);
    assert!(p.a.session.begin_close_weak(p.now));
    assert!(p.b.session.begin_close_weak(p.now));
    p.pump().unwrap();
    assert!(events(&mut p.a.session).contains(&SessionEvent::CloseChannel(CloseReason::WeakDone)));
    assert!(events(&mut p.b.session).contains(&SessionEvent::CloseChannel(CloseReason::WeakDone)));

    let mut p = pair();
    assert!(p.a.session.begin_close_hard(p.now));
    assert!(p.b.session.begin_close_hard(p.now));
    p.pump().unwrap();
    assert_eq!(
        events(&mut p.a.session),
        vec![SessionEvent::CloseChannel(CloseReason::HardDone)]
    );
    assert_eq!(
        events(&mut p.b.session),
        vec![SessionEvent::CloseChannel(CloseReason::HardDone)]
    );
}

#[test]
fn close_frames_carry_no_payload_and_only_answer_a_close() {
    let mut p = pair();
    let b = frame_bytes(
        &FrameHeader::control(FrameKind::CloseWeak, 3, 0),
        &[1, 2, 3],
    );
    p.b.input.push(&b);
    let e =
        p.b.session
            .handle_input(p.now, &mut p.b.input, &mut |_| {})
            .unwrap_err();
    assert!(
        matches!(
            e,
            ProtocolError::Malformed {
                what: "close frame",
                ..
            }
        ),
        "{e:?}"
    );
    // A CLOSE_ACCEPT nobody asked for is a protocol error.
    let mut p = pair();
    p.b.input.push(&frame_bytes(
        &FrameHeader::control(FrameKind::CloseAccept, 0, 0),
        &[],
    ));
    let e =
        p.b.session
            .handle_input(p.now, &mut p.b.input, &mut |_| {})
            .unwrap_err();
    assert_eq!(
        e,
        ProtocolError::Unexpected {
            kind: FrameKind::CloseAccept,
            state: "working"
        }
    );
}

#[test]
fn heartbeat_when_idle_and_silence_event() {
    let mut p = pair();
    let t0 = p.now;
    // First poll arms the heartbeat timer.
    assert_eq!(p.a.session.poll_transmit(t0, &mut p.a.out), 0);
    p.a.session.handle_timeout(t0);
    assert_eq!(
        p.a.session
            .poll_transmit(t0 + Duration::from_millis(999), &mut p.a.out),
        0
    );
    p.now = t0 + Duration::from_secs(1);
    p.a_to_b(usize::MAX).unwrap();
    assert_eq!(kinds_at_b(&p, 0), vec![FrameKind::Heartbeat]);
    assert_eq!(p.a.session.stats().heartbeats_out, 1);
    // A heard nothing for 5 s: it reports the channel silent, once.
    p.now = t0 + Duration::from_secs(5);
    assert!(p.a.session.poll_timeout().unwrap() <= p.now);
    p.a.session.handle_timeout(p.now);
    p.a.session.handle_timeout(p.now);
    assert_eq!(events(&mut p.a.session), vec![SessionEvent::Silent]);
    // B heard A's heartbeat at t0 + 1 s: not silent at t0 + 5 s.
    p.b.session.handle_timeout(p.now);
    assert_eq!(events(&mut p.b.session), vec![]);
}

/// A weak close upgraded to a hard one (e.g. the TransController preempts
/// the slot while the linger weak close runs): the peer answers the weak
/// close with CLOSE_REJECT (it still needs the channel) and then grants the
/// hard close with CLOSE_ACCEPT. `Session::on_close_frame` treats the
/// CLOSE_REJECT in `ClosingHard` like a rejected weak close — back to `Open`,
/// the hard close forgotten — so the CLOSE_ACCEPT that follows is
/// `Unexpected` in state "working" and the channel fails with a protocol
/// error, although the peer did exactly what the protocol asks.
#[test]
fn hard_close_during_a_weak_close_survives_the_weak_reject() {
    let mut p = pair();
    assert!(p.a.session.begin_close_weak(p.now));
    assert!(
        p.a.session.begin_close_hard(p.now),
        "a hard close may supersede a weak one"
    );
    p.a_to_b(usize::MAX).unwrap();
    assert_eq!(
        kinds_at_b(&p, 0),
        vec![
            FrameKind::ClearReference,
            FrameKind::CloseWeak,
            FrameKind::CloseHard
        ]
    );
    // B needs the channel: rejects the weak close, grants the hard one.
    let r = p.b_to_a(usize::MAX);
    assert_eq!(
        p.a.tap
            .frames
            .iter()
            .map(|f| f.header.kind)
            .collect::<Vec<_>>(),
        vec![FrameKind::CloseReject, FrameKind::CloseAccept]
    );
    r.expect("a valid answer to our own closes");
    assert!(events(&mut p.a.session).contains(&SessionEvent::CloseChannel(CloseReason::HardDone)));
}

/// Every wait of the close protocol ends by its timer when no answer comes:
/// a weak close, a hard close, and a granted close whose peer never closes.
#[test]
fn a_close_whose_answer_never_comes_ends_by_its_timer() {
    let t0 = std::time::Instant::now();
    let cfg = SessionConfig::default();
    let timeout = cfg.close_timeout;
    for start in ["weak", "hard", "granted"] {
        let mut s = sitenet_protocols::Session::new(
            cfg.clone(),
            sitenet_protocols::ReassemblyBudget::new(1 << 20),
        );
        s.channel_up(
            sitenet_protocols::ChannelParams {
                buffer_size: 65536,
                peer_max_message: 1 << 20,
                peer_last_received: 0,
                generation: 1,
                caps: sitenet_protocols::Capabilities::ALL,
            },
            t0,
        )
        .unwrap();
        s.set_local_need(false);
        match start {
            "weak" => assert!(s.begin_close_weak(t0)),
            "hard" => assert!(s.begin_close_hard(t0)),
            _ => {
                // The peer asks to close weakly; we grant and wait for it.
                let mut inb = sitenet_protocols::ByteBuffer::new(65536);
                let mut hb = [0u8; sitenet_protocols::HEADER_LEN];
                FrameHeader::control(FrameKind::CloseWeak, 0, 0).encode(&mut hb);
                inb.push(&hb);
                s.handle_input(t0, &mut inb, &mut |_| {}).unwrap();
                assert!(matches!(
                    s.close_phase(),
                    ClosePhase::PeerClosing { hard: false, .. }
                ));
            }
        }
        assert_eq!(
            s.poll_timeout().map(|t| t <= t0 + timeout),
            Some(true),
            "{start}: a deadline is armed"
        );
        // Just before the deadline: nothing.
        s.handle_timeout(t0 + timeout - std::time::Duration::from_millis(1));
        assert!(!std::iter::from_fn(|| s.poll_event())
            .any(|e| matches!(e, SessionEvent::CloseChannel(_))));
        // At the deadline: the channel is closed.
        s.handle_timeout(t0 + timeout);
        let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(
            evs.contains(&SessionEvent::CloseChannel(CloseReason::Timeout)),
            "{start}: {evs:?}"
        );
        assert_eq!(s.close_phase(), ClosePhase::Done);
    }
}
