//! A session under a hostile or unlucky peer: the reassembly budget a peer
//! holds only for bytes it has sent, close frames owed as flags (not an
//! unbounded queue), a fired deadline consumed once, silence measured from
//! the channel's start, acknowledged messages never resent, a promoted
//! background lane that does not hold level 4 back, a paused channel that
//! is not silent, and a trickling holder of the budget that has a deadline.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{frame_bytes, slice, working_session_at, Pair};
use sitenet_protocols::connection::scheduler::SchedulerConfig;
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, FLAG_FIRST, FLAG_LAST, HEADER_LEN};
use sitenet_protocols::{
    ByteBuffer, ChannelParams, InMessage, MessageKind, OutMessage, Prelude, Priority,
    ReassemblyBudget, Session, SessionConfig, SessionEvent, PRELUDE_LEN,
};

const RING: usize = 65_536;

fn data(lane: u8, flags: u8, payload: &[u8], number: u64, offset: u64) -> Vec<u8> {
    let h = FrameHeader {
        kind: FrameKind::Data,
        lane,
        flags,
        payload_len: payload.len() as u32,
        ack: 0,
        msg_number: number,
        frag_offset: offset,
    };
    frame_bytes(&h, payload)
}

fn prelude(body_len: u64) -> [u8; PRELUDE_LEN] {
    Prelude {
        type_id: 9,
        kind: MessageKind::OneWay,
        header_len: 0,
        body_len,
        corr: 0,
    }
    .encode()
}

/// The frames of one message of `body` bytes on `lane`, numbered `number`,
/// in fragments of at most `frag` payload bytes.
fn fragments(lane: u8, number: u64, body: &[u8], frag: usize) -> Vec<Vec<u8>> {
    let mut wire = prelude(body.len() as u64).to_vec();
    wire.extend_from_slice(body);
    let n = wire.len().div_ceil(frag);
    (0..n)
        .map(|i| {
            let part = &wire[i * frag..((i + 1) * frag).min(wire.len())];
            let mut flags = 0;
            if i == 0 {
                flags |= FLAG_FIRST;
            }
            if i == n - 1 {
                flags |= FLAG_LAST;
            }
            let num = if i == n - 1 { number } else { 0 };
            data(lane, flags, part, num, (i * frag) as u64)
        })
        .collect()
}

/// A session receiving on its own input ring.
struct Rx {
    s: Session,
    input: ByteBuffer,
    delivered: Vec<InMessage>,
}

impl Rx {
    fn new(cfg: SessionConfig, budget: &ReassemblyBudget, now: Instant) -> Self {
        Self {
            s: working_session_at(cfg, budget.clone(), RING as u32, now),
            input: ByteBuffer::new(RING),
            delivered: Vec::new(),
        }
    }

    /// Feeds `frame` (it must fit the ring) and processes input.
    fn push(&mut self, frame: &[u8], now: Instant) {
        assert!(self.input.free() >= frame.len(), "ring full");
        self.input.push(frame);
        self.process(now);
    }

    fn process(&mut self, now: Instant) {
        let d = &mut self.delivered;
        self.s
            .handle_input(now, &mut self.input, &mut |m| d.push(m))
            .expect("no protocol error");
    }

    fn events(&mut self) -> Vec<SessionEvent> {
        std::iter::from_fn(|| self.s.poll_event()).collect()
    }
}

/// A peer holds reassembly budget only for bytes it has sent: four first
/// fragments announcing the maximum message, a few hundred bytes, must not
/// hold the node's whole budget and make every other peer's multi-frame
/// message fail as a protocol error.
#[test]
fn announcing_the_maximum_message_on_every_lane_holds_no_budget() {
    let cfg = SessionConfig {
        max_message: 256 * 1024,
        ..SessionConfig::default()
    };
    let budget = ReassemblyBudget::new(4 * 256 * 1024);
    let now = Instant::now();
    let mut hostile = Rx::new(cfg.clone(), &budget, now);
    for lane in 1..=4u8 {
        let p = prelude(256 * 1024 - PRELUDE_LEN as u64);
        hostile.push(&data(lane, FLAG_FIRST, &p, 0, 0), now);
    }
    assert_eq!(
        budget.available(),
        budget.limit(),
        "nothing sent, nothing held"
    );
    // An innocent peer's 200 KiB message in 16 KiB fragments is delivered.
    let mut innocent = Rx::new(cfg, &budget, now);
    let body = slice(3, 200 * 1024);
    for f in fragments(2, 1, &body, 16 * 1024) {
        innocent.push(&f, now);
    }
    assert_eq!(innocent.delivered.len(), 1);
    assert_eq!(&innocent.delivered[0].body[..], &body[..]);
    assert!(!innocent.s.input_blocked());
}

/// An exhausted budget pauses reading and never fails a peer that did
/// nothing wrong; the paused session resumes when budget is given back.
#[test]
fn an_exhausted_budget_pauses_a_session_and_it_resumes_when_budget_frees() {
    let budget = ReassemblyBudget::new(128 * 1024);
    let releases = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let r = releases.clone();
    budget.set_release_hook(std::sync::Arc::new(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    let now = Instant::now();
    // S1 receives most of a 120 KiB message.
    let mut s1 = Rx::new(SessionConfig::default(), &budget, now);
    let f1 = fragments(3, 1, &slice(1, 120 * 1024), 16 * 1024);
    for f in &f1[..6] {
        s1.push(f, now);
    }
    assert!(s1.s.budget_held() > 90 * 1024);
    // S2's first fragment does not fit what is left: it pauses, holding
    // nothing, with no error.
    let mut s2 = Rx::new(SessionConfig::default(), &budget, now);
    let body2 = slice(2, 60 * 1024);
    let f2 = fragments(2, 1, &body2, 40 * 1024);
    s2.push(&f2[0], now);
    assert!(s2.s.input_blocked(), "the budget ran out");
    assert_eq!(s2.s.budget_held(), 0);
    assert!(s2.delivered.is_empty());
    // Holding nothing, it has no reason to give way, and paused it is not
    // silent: no event at all.
    s2.s.handle_timeout(now + Duration::from_secs(3600));
    assert_eq!(s2.events(), vec![]);
    // S1 completes and gives its budget back: the hook fires, S2 resumes.
    let before = releases.load(std::sync::atomic::Ordering::Relaxed);
    for f in &f1[6..] {
        s1.push(f, now);
    }
    assert_eq!(s1.delivered.len(), 1);
    assert!(releases.load(std::sync::atomic::Ordering::Relaxed) > before);
    s2.process(now);
    assert!(!s2.s.input_blocked());
    for f in &f2[1..] {
        s2.push(f, now);
    }
    assert_eq!(s2.delivered.len(), 1);
    assert_eq!(&s2.delivered[0].body[..], &body2[..]);
    assert_eq!(budget.available(), budget.limit());
}

/// A channel paused for lack of reassembly memory is paused, not silent:
/// no silence deadline runs while it waits, its own heartbeats still go out
/// (so its peer does not take it for dead either), and silence is measured
/// again from the moment it resumes. A silence timer re-armed only by input
/// the channel may not read would fail an innocent peer for a memory
/// shortage, and livelock two bulk transfers that together exceed the
/// budget.
#[test]
fn a_paused_channel_is_paused_not_silent() {
    let budget = ReassemblyBudget::new(128 * 1024);
    let cfg = SessionConfig::default();
    let t0 = Instant::now();
    let mut s1 = Rx::new(cfg.clone(), &budget, t0);
    let f1 = fragments(3, 1, &slice(1, 120 * 1024), 16 * 1024);
    for f in &f1[..7] {
        s1.push(f, t0);
    }
    let mut s2 = Rx::new(cfg.clone(), &budget, t0);
    let f2 = fragments(2, 1, &slice(2, 60 * 1024), 40 * 1024);
    s2.push(&f2[0], t0);
    assert!(s2.s.input_blocked());
    // A minute paused: every deadline that comes is fed, as a driver does.
    let mut out = ByteBuffer::new(RING);
    let mut heartbeats = 0;
    while let Some(now) = s2.s.poll_timeout() {
        if now > t0 + Duration::from_secs(60) {
            break;
        }
        s2.s.handle_timeout(now);
        if s2.s.poll_transmit(now, &mut out) > 0 {
            heartbeats += 1;
            out.clear();
        }
        assert_eq!(s2.events(), vec![], "at {:?}", now - t0);
    }
    assert!(
        heartbeats >= 50,
        "{heartbeats} heartbeats in a minute paused"
    );
    // S1 completes (its peer was merely slow): S2 resumes …
    let resumed = t0 + Duration::from_secs(60);
    for f in &f1[7..] {
        s1.push(f, resumed);
    }
    s2.process(resumed);
    assert!(!s2.s.input_blocked());
    // … and silence is measured from then: quiet for the silence timeout
    // after it resumed, it is silent.
    s2.s.handle_timeout(resumed + cfg.silence_timeout - Duration::from_millis(1));
    assert!(!s2.events().contains(&SessionEvent::Silent));
    s2.s.handle_timeout(resumed + cfg.silence_timeout);
    assert!(s2.events().contains(&SessionEvent::Silent));
}

/// Partial messages that together need more than the budget cannot all
/// finish: the holder that is not the oldest gives way after the
/// reassembly idle time (not a protocol fault: its peer resends from the
/// first fragment), and the oldest then completes.
#[test]
fn in_a_budget_contention_the_younger_holder_gives_way_and_the_oldest_completes() {
    let cfg = SessionConfig {
        reassembly_idle: Duration::from_secs(30),
        ..SessionConfig::default()
    };
    let budget = ReassemblyBudget::new(256 * 1024);
    let t0 = Instant::now();
    let mut s1 = Rx::new(cfg.clone(), &budget, t0);
    let big = fragments(3, 1, &slice(1, 250 * 1024), 16 * 1024);
    for f in &big[..10] {
        s1.push(f, t0);
    }
    let mut s2 = Rx::new(cfg, &budget, t0);
    let f2 = fragments(2, 1, &slice(2, 200 * 1024), 16 * 1024);
    let mut i = 0;
    while !s2.s.input_blocked() {
        s2.push(&f2[i], t0);
        i += 1;
    }
    assert!(s2.s.budget_held() > 0);
    // S1, the oldest holder, needs what S2 holds: both wait.
    let mut j = 10;
    while !s1.s.input_blocked() {
        s1.push(&big[j], t0);
        j += 1;
    }
    let t1 = t0 + Duration::from_secs(30);
    s1.s.handle_timeout(t1);
    s2.s.handle_timeout(t1);
    // Neither is silent (both are paused); only the younger gives way.
    assert_eq!(s1.events(), vec![], "the oldest waits");
    assert_eq!(
        s2.events(),
        vec![SessionEvent::BudgetContention],
        "the younger gives way"
    );
    // S2's channel closes (its peer will resend): S1 completes.
    s2.s.channel_down();
    s1.process(t1);
    for f in &big[j..] {
        s1.push(f, t1);
    }
    assert_eq!(s1.delivered.len(), 1);
    assert_eq!(budget.available(), budget.limit());
}

/// A partial message whose peer stops sending is abandoned after the
/// reassembly idle time, as a protocol fault.
#[test]
fn a_partial_message_that_makes_no_progress_is_abandoned() {
    let cfg = SessionConfig {
        reassembly_idle: Duration::from_secs(30),
        ..SessionConfig::default()
    };
    let budget = ReassemblyBudget::new(1 << 20);
    let t0 = Instant::now();
    let mut rx = Rx::new(cfg, &budget, t0);
    let f = fragments(2, 1, &slice(0, 100_000), 16 * 1024);
    rx.push(&f[0], t0);
    rx.push(&f[1], t0 + Duration::from_secs(20));
    // Progress moved the deadline: no stall at t0 + 30 s (the peer, not
    // paused, did go silent: nothing heard since t0 + 20 s) …
    rx.s.handle_timeout(t0 + Duration::from_secs(30));
    assert_eq!(rx.events(), vec![SessionEvent::Silent]);
    // … but 30 s after the last fragment the message is abandoned.
    rx.s.handle_timeout(t0 + Duration::from_secs(50));
    let ev = rx.events();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SessionEvent::Stalled(sitenet_protocols::ProtocolError::ReassemblyStalled { .. })
        )),
        "{ev:?}"
    );
}

/// Owed close frames are flags: a peer that streams CLOSE_WEAK while we
/// still need the channel, and never reads, is owed one CLOSE_REJECT, not a
/// queue of them that grows without bound.
#[test]
fn a_stream_of_close_weak_frames_owes_one_reject() {
    let now = Instant::now();
    let budget = ReassemblyBudget::new(1 << 20);
    let mut rx = Rx::new(SessionConfig::default(), &budget, now);
    rx.s.set_local_need(true);
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(FrameKind::CloseWeak, 0, 0).encode(&mut hb);
    for _ in 0..100_000 {
        rx.input.push(&hb);
        if rx.input.free() < HEADER_LEN {
            rx.process(now);
        }
    }
    rx.process(now);
    assert_eq!(rx.s.pending_control_frames(), 1);
    let mut out = ByteBuffer::new(16 << 20);
    let n = rx.s.poll_transmit(now, &mut out);
    assert_eq!(n, HEADER_LEN, "one CLOSE_REJECT, not 100,000");
}

/// A fired deadline is consumed: a heartbeat that could not be written
/// because the output was full, and the Silent event, are not due again on
/// every call, or a driver re-arming its timer to `poll_timeout` would
/// spin.
#[test]
fn a_fired_deadline_is_never_returned_again() {
    let t0 = Instant::now();
    let budget = ReassemblyBudget::new(1 << 20);
    let mut s = working_session_at(SessionConfig::default(), budget, RING as u32, t0);
    // Output full: the heartbeat cannot be written.
    let mut full = ByteBuffer::new(64);
    full.push(&[0u8; 64]);
    let mut now = t0;
    let mut silent = 0;
    for _ in 0..20 {
        let Some(at) = s.poll_timeout() else { break };
        assert!(at > now || at == t0, "a past deadline came back: {at:?}");
        now = now.max(at);
        s.handle_timeout(now);
        assert_eq!(s.poll_transmit(now, &mut full), 0);
        silent += std::iter::from_fn(|| s.poll_event())
            .filter(|e| *e == SessionEvent::Silent)
            .count();
        if let Some(next) = s.poll_timeout() {
            assert!(next > now, "deadline {next:?} not consumed at {now:?}");
        }
    }
    assert_eq!(silent, 1, "the Silent event is reported once");
    // The heartbeat still owed is written as soon as there is room.
    let mut out = ByteBuffer::new(RING);
    assert_eq!(s.poll_transmit(now, &mut out), HEADER_LEN);
}

/// Silence is measured from the moment the channel comes up
/// (`channel_up` takes `now`), not from the first timer call.
#[test]
fn silence_is_measured_from_channel_up() {
    let cfg = SessionConfig::default();
    let t0 = Instant::now();
    let mut s = Session::new(cfg.clone(), ReassemblyBudget::new(1 << 20));
    s.channel_up(
        ChannelParams {
            buffer_size: RING as u32,
            peer_max_message: 1 << 20,
            peer_last_received: 0,
            generation: 1,
            caps: sitenet_protocols::Capabilities::ALL,
        },
        t0,
    )
    .unwrap();
    // The driver's first timer call comes late: silence still dates from t0.
    let late = t0 + Duration::from_secs(4);
    s.handle_timeout(late);
    assert_eq!(s.poll_event(), None);
    assert_eq!(s.poll_timeout(), Some(t0 + cfg.silence_timeout));
    s.handle_timeout(t0 + cfg.silence_timeout);
    let ev: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(ev, vec![SessionEvent::Silent]);
}

/// Messages acknowledged while a resend is in progress are not resent: the
/// resend list is read as it goes, not a snapshot taken at `channel_up`.
#[test]
fn a_message_acknowledged_during_the_resend_is_not_resent() {
    let mut p = Pair::new(RING, SessionConfig::default());
    for i in 0..10u32 {
        p.a.send(OutMessage::new(
            Priority::Medium,
            i,
            Bytes::new(),
            vec![slice(i as usize, 1000)],
        ));
    }
    // A sends all ten; B never sees them (the channel is lost).
    p.a.session.poll_transmit(p.now, &mut p.a.out);
    assert_eq!(p.a.session.unacked(), 10);
    p.a.out.clear();
    let up = |peer_last_received| ChannelParams {
        buffer_size: RING as u32,
        peer_max_message: 1 << 28,
        peer_last_received,
        generation: 2,
        caps: sitenet_protocols::Capabilities::ALL,
    };
    p.a.session.channel_up(up(0), p.now).unwrap();
    // Room for the first resent message only.
    let mut small = ByteBuffer::new(HEADER_LEN + PRELUDE_LEN + 1000);
    p.a.session.poll_transmit(p.now, &mut small);
    assert_eq!(p.a.session.stats().retransmitted, 1);
    // The peer acknowledges up to 6 (it had them after all, say from the old
    // channel's last bytes): 2..=6 must not go out again.
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(FrameKind::Ack, 0, 6).encode(&mut hb);
    let mut input = ByteBuffer::new(RING);
    input.push(&hb);
    p.a.session
        .handle_input(p.now, &mut input, &mut |_| {})
        .unwrap();
    let mut out = ByteBuffer::new(RING);
    p.a.session.poll_transmit(p.now, &mut out);
    assert_eq!(
        p.a.session.stats().retransmitted,
        1 + 4,
        "only 7..=10 are resent after the first"
    );
}

/// Level 4 queued at the moment a level-1 lane is promoted goes out within
/// a frame or two: a promoted lane competing with a stale virtual time
/// would send alone until it caught up (up to about 100 ms of the channel's
/// bytes) while a small level-4 message waited.
#[test]
fn level_four_is_not_held_behind_a_promoted_background_lane() {
    let cfg = SessionConfig {
        scheduler: SchedulerConfig {
            weights: [1, 2, 4],
            promote_after: Duration::from_millis(100),
        },
        ..SessionConfig::default()
    };
    let mut p = Pair::new(RING, cfg);
    p.tapping = false;
    // Level 2 keeps the channel busy; level 1 waits behind it.
    for i in 0..400u32 {
        p.a.send(OutMessage::new(
            Priority::Low,
            i,
            Bytes::new(),
            vec![slice(i as usize, 60_000)],
        ));
    }
    for i in 0..400u32 {
        p.a.send(OutMessage::new(
            Priority::Background,
            1000 + i,
            Bytes::new(),
            vec![slice(i as usize, 60_000)],
        ));
    }
    // 150 ms of traffic, in 1 ms steps: level 1 is promoted at 100 ms.
    for _ in 0..100 {
        p.a.out.clear();
        p.a.session.poll_transmit(p.now, &mut p.a.out);
        p.advance(Duration::from_millis(1));
    }
    // The moment of promotion: a small level-4 message is queued.
    p.a.send(OutMessage::new(
        Priority::High,
        9999,
        Bytes::new(),
        vec![Bytes::from_static(b"urgent")],
    ));
    // It goes out within two frames.
    let mut lanes = Vec::new();
    for _ in 0..3 {
        let mut out = ByteBuffer::new(HEADER_LEN + 16 * 1024);
        p.a.session.poll_transmit(p.now, &mut out);
        let mut hb = [0u8; HEADER_LEN];
        if out.peek(0, &mut hb) {
            let h = FrameHeader::decode(&hb, RING).unwrap();
            lanes.push(h.lane);
        }
        p.advance(Duration::from_millis(1));
    }
    assert!(
        lanes[..2].contains(&4),
        "level 4 waited behind the promoted lane: lanes {lanes:?}"
    );
}

/// One peer must not keep the whole reassembly budget with one zero-byte
/// continuation frame per lane every 29 s while every other peer waits for
/// ever. Progress means bytes (a zero-byte frame is none), and while
/// another session waits for budget the oldest holder must keep receiving
/// at least `reassembly_min_rate` (after one `reassembly_idle` of grace) or
/// give way (after half an idle time of grace). Virtual clock: ten
/// minutes of trickling, one frame per 29 s.
#[test]
fn a_trickling_oldest_holder_has_a_deadline() {
    // What the trickle carries: nothing (the attack seen), or one byte.
    for trickle in [0usize, 1] {
        let budget = ReassemblyBudget::new(256 * 1024);
        let cfg = SessionConfig::default();
        let t0 = Instant::now();
        let mut hostile = Rx::new(cfg.clone(), &budget, t0);
        let big = fragments(3, 1, &slice(1, 1 << 20), 16 * 1024);
        for f in &big[..15] {
            hostile.push(f, t0);
        }
        assert!(hostile.s.budget_held() > 230 * 1024);
        // An innocent peer's message waits for budget.
        let mut innocent = Rx::new(cfg.clone(), &budget, t0);
        let body = slice(2, 100 * 1024);
        let f2 = fragments(2, 1, &body, 40 * 1024);
        innocent.push(&f2[0], t0);
        assert!(innocent.s.input_blocked());
        let mut offset = 15 * 16 * 1024;
        let mut now = t0;
        let mut gave_up = None;
        while now < t0 + Duration::from_secs(600) {
            let next = now + Duration::from_secs(29);
            // Every deadline before the next trickle, as a driver feeds them.
            while let Some(at) = hostile.s.poll_timeout().filter(|at| *at <= next) {
                let at = at.max(now);
                hostile.s.handle_timeout(at);
                let ev = hostile.events();
                if ev
                    .iter()
                    .any(|e| matches!(e, SessionEvent::BudgetContention | SessionEvent::Stalled(_)))
                {
                    gave_up = Some((at - t0, ev));
                    break;
                }
            }
            if gave_up.is_some() {
                break;
            }
            now = next;
            let payload = vec![7u8; trickle];
            hostile.push(&data(3, 0, &payload, 0, offset as u64), now);
            offset += trickle;
        }
        let (at, ev) = gave_up.unwrap_or_else(|| {
            panic!("a trickle of {trickle} bytes per 29 s kept the budget for 600 s")
        });
        // An empty trickle moves no deadline: the hold ends with the first
        // trickle seen after the innocent began to wait (29 s). A byte is a
        // too-slow holder: half an idle time (15 s) later it gives way.
        let bound = Duration::from_secs(if trickle == 0 { 30 } else { 45 });
        assert!(at <= bound, "{trickle}: held until {at:?}");
        if trickle > 0 {
            assert_eq!(ev, vec![SessionEvent::BudgetContention]);
        }
        hostile.s.channel_down();
        innocent.process(t0 + at);
        for f in &f2[1..] {
            innocent.push(f, t0 + at);
        }
        assert_eq!(innocent.delivered.len(), 1);
        assert_eq!(&innocent.delivered[0].body[..], &body[..]);
    }
}

/// The other side of the rule above: an honest large sender holding the
/// budget beyond its share while another session waits is never made to
/// give way as long as it keeps at least `reassembly_min_rate` (1 MiB/s),
/// however long its message takes; below it, it gives way (here with a
/// one-second idle time, half a second of grace, so the virtual run stays
/// short).
#[test]
fn a_slow_but_steady_large_sender_is_never_failed() {
    // (bytes per second, whether it must give way)
    for (rate, gives_way) in [(2u64 << 20, false), (512 << 10, true)] {
        let budget = ReassemblyBudget::new(17 << 20);
        let t0 = Instant::now();
        let grace = SessionConfig {
            reassembly_idle: Duration::from_secs(1),
            ..SessionConfig::default()
        };
        let mut honest = Rx::new(grace, &budget, t0);
        let frames = fragments(3, 1, &vec![5u8; 8 << 20], 16 * 1024);
        honest.push(&frames[0], t0);
        // Another session fills its share (half the budget) and waits for
        // more; it would give way only after an hour.
        let patient = SessionConfig {
            reassembly_idle: Duration::from_secs(3600),
            ..SessionConfig::default()
        };
        let mut waiting = Rx::new(patient, &budget, t0);
        let other = fragments(2, 1, &vec![6u8; 9 << 20], 64 * 1024 - HEADER_LEN);
        let mut k = 0;
        while !waiting.s.input_blocked() {
            waiting.push(&other[k], t0);
            k += 1;
        }
        assert_eq!(budget.waiting(), 1);
        let every = Duration::from_nanos(16 * 1024 * 1_000_000_000 / rate);
        let mut now = t0;
        let mut gave_way = None;
        'frames: for f in &frames[1..] {
            let next = now + every;
            while let Some(at) = honest.s.poll_timeout().filter(|at| *at <= next) {
                honest.s.handle_timeout(at);
                let ev = honest.events();
                if !ev.is_empty() {
                    gave_way = Some((at - t0, ev));
                    break 'frames;
                }
            }
            now = next;
            honest.push(f, now);
        }
        if gives_way {
            let (at, ev) = gave_way.expect("too slow: it gives way");
            assert_eq!(ev, vec![SessionEvent::BudgetContention]);
            // Half a second of grace, then a deficit of half a second
            // per second: about one second.
            assert!(
                at >= Duration::from_millis(900) && at <= Duration::from_millis(1200),
                "{at:?}"
            );
        } else {
            assert_eq!(gave_way, None);
            assert_eq!(honest.delivered.len(), 1);
            assert_eq!(honest.delivered[0].body.len(), 8 << 20);
            assert!(now - t0 >= Duration::from_secs(3), "{:?}", now - t0);
        }
    }
}
