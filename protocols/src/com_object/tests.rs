//! Deterministic tests of the ComObject's connection logic, with a virtual
//! clock and a seeded RNG.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::error::OpenError;
use crate::handshake::{Negotiate, NegotiateAns, Opened, Present, RefuseReason};
use crate::priority::Priority;
use crate::session::CloseReason;
use crate::PROTOCOL_VERSION;

const LOCAL: SiteId = SiteId(0x10);
const PEER: SiteId = SiteId(0x20);

struct H {
    com: ComObject,
    now: Instant,
}

fn cfg() -> ComConfig {
    ComConfig {
        give_up_after: Some(Duration::from_secs(60)),
        ..ComConfig::default()
    }
}

fn msg(len: usize) -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        1,
        Bytes::new(),
        vec![Bytes::from(vec![7u8; len])],
    )
}

fn opened(generation: u64, peer_max_message: u64) -> Opened {
    Opened {
        present: Present {
            version: PROTOCOL_VERSION,
            site: PEER,
            listen: vec![],
        },
        buffer_size: 65_536,
        peer_max_message,
        peer_last_received: 0,
        generation,
        peer_fresh: false,
    }
}

fn negotiate(last_generation: u64, attempt: Attempt) -> Negotiate {
    Negotiate {
        version: PROTOCOL_VERSION,
        site: PEER,
        listen: vec![],
        buffer_size: 16_384,
        max_message: 1 << 20,
        last_received: 0,
        last_generation,
        attempt,
    }
}

impl H {
    fn new(cfg: ComConfig, can_open: bool) -> Self {
        let now = Instant::now();
        let budget = ReassemblyBudget::new(1 << 30);
        Self {
            com: ComObject::new(cfg, budget, LOCAL, can_open, 1, 42, now),
            now,
        }
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.com.poll_action()).collect()
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.com.handle_timeout(self.now);
    }

    /// Runs to the next deadline.
    fn run_to_next_deadline(&mut self) -> Instant {
        let at = self.com.poll_timeout().expect("a deadline");
        assert!(at >= self.now, "deadline in the past");
        self.now = at;
        self.com.handle_timeout(at);
        at
    }

    /// Queues a message and opens: returns the attempt's sequence number.
    fn queue_and_request_open(&mut self) -> u64 {
        self.com.queue(msg(10)).unwrap();
        let a = self.actions();
        assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
        assert_eq!(self.com.state(), ComState::WaitingForSlot);
        self.grant()
    }

    fn grant(&mut self) -> u64 {
        self.com.slot_granted();
        let a = self.actions();
        let [Action::Open(req)] = a[..] else {
            panic!("expected an open: {a:?}")
        };
        assert_eq!(req.attempt.opener, 1);
        assert_eq!(self.com.state(), ComState::Opening);
        req.attempt.seq
    }

    fn working(&mut self) -> ChannelId {
        let attempt = self.queue_and_request_open();
        let id = self
            .com
            .open_succeeded(attempt, &opened(1, 1 << 20), self.now)
            .expect("working");
        assert_eq!(self.com.state(), ComState::Working);
        self.actions();
        id
    }
}

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
    // Already Ok: no fault transition is reported.
    assert!(h.actions().is_empty());
    // A report for another attempt is ignored.
    assert_eq!(h.com.open_succeeded(7, &opened(2, 1 << 20), h.now), None);
}

#[test]
fn a_site_without_an_address_never_opens() {
    let mut h = H::new(cfg(), false);
    h.com.queue(msg(10)).unwrap();
    assert!(h.actions().is_empty());
    assert_eq!(h.com.state(), ComState::Closed);
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
            assert!(
                matches!(
                    &a[..],
                    [Action::Fault {
                        state: FaultState::TempFailed,
                        ..
                    }]
                ),
                "{a:?}"
            );
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
    assert_eq!(err, SendError::SiteFailed);
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
    // The peer's CLOSE_HARD arrives; we grant it.
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::frame::HEADER_LEN];
    crate::frame::FrameHeader::control(crate::frame::FrameKind::CloseHard, 0, 0).encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    assert_eq!(h.com.state(), ComState::WaitingForDisconnect);
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
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), h.now);
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
            [Action::Fault {
                state: FaultState::Ok,
                ..
            }]
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
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    let a = h.actions();
    assert!(
        matches!(&a[..], [Action::CloseChannel { id: old, end: ChannelEnd::Replaced }] if *old == id),
        "{a:?}"
    );
    // A stale NEGOTIATE (older generation, not a later attempt) is refused.
    let out = h.com.accepted(&negotiate(0, Attempt::UNKNOWN), h.now);
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
        true,
        1,
        1,
        h.now,
    );
    h.queue_and_request_open();
    let out = h
        .com
        .accepted(&negotiate(0, Attempt { opener: 9, seq: 1 }), h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    assert!(matches!(h.actions()[..], [Action::AbandonOpen]));
}

#[test]
fn a_negotiate_claiming_unsent_messages_is_a_protocol_fault() {
    let mut h = H::new(cfg(), true);
    let mut neg = negotiate(0, Attempt { opener: 9, seq: 1 });
    neg.last_received = 5;
    let out = h.com.accepted(&neg, h.now);
    assert!(matches!(out, AcceptOutcome::Protocol(_)), "{out:?}");
    assert!(matches!(h.actions()[..], [Action::ReportFault { .. }]));
    assert_eq!(h.com.stats().protocol_errors, 1);
}

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

#[test]
fn without_references_an_idle_channel_closes_weakly_and_a_reject_holds_off() {
    let mut c = cfg();
    c.linger = Duration::from_secs(10);
    let mut h = H::new(c, true);
    let id = h.working();
    // Deliver the ack so nothing is pending.
    let mut out = ByteBuffer::new(65_536);
    h.com.poll_transmit(h.now, &mut out);
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; crate::frame::HEADER_LEN];
    crate::frame::FrameHeader::control(crate::frame::FrameKind::Ack, 0, 1).encode(&mut hb);
    input.push(&hb);
    assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
    h.com.take_freed(h.now);
    assert!(!h.com.has_need());
    let t_idle = h.now;
    h.com.set_has_refs(false, h.now);
    // The linger deadline is the next (only) ComObject timer before heartbeats matter.
    let mut fired_at = None;
    for _ in 0..100 {
        h.run_to_next_deadline();
        // Heartbeats keep the channel alive; answer them with our own input.
        input.push(&{
            let mut hb = [0u8; crate::frame::HEADER_LEN];
            crate::frame::FrameHeader::control(crate::frame::FrameKind::Heartbeat, 0, 1)
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
    crate::frame::FrameHeader::control(crate::frame::FrameKind::CloseReject, 0, 1).encode(&mut hb);
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
        crate::frame::FrameHeader::control(crate::frame::FrameKind::Heartbeat, 0, 1)
            .encode(&mut hb);
        input.push(&hb);
        assert!(h.com.handle_input(id, h.now, &mut input, &mut |_| {}));
        out.clear();
        h.com.poll_transmit(h.now, &mut out);
    }
    assert_eq!(h.com.state(), ComState::ClosingWeak);
    assert!(h.now >= rejected_at + Duration::from_secs(10));
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
    assert!(h.com.poll_transmit(h.now, &mut out) >= crate::frame::HEADER_LEN);
    let mut hb = [0u8; crate::frame::HEADER_LEN];
    assert!(out.peek(0, &mut hb));
    let fh = crate::frame::FrameHeader::decode(&hb, 65_536).unwrap();
    assert_eq!(fh.kind, crate::frame::FrameKind::CloseHard);
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
    assert!(matches!(back[0].0, SendError::TooLarge { max: 1_000, .. }));
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
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), h.now);
    assert!(matches!(out, AcceptOutcome::Refuse(RefuseReason::Closing)));
}
