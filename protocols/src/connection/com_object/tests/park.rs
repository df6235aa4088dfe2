//! Parking: the rule, the compact form, and twin runs — one
//! machine that never parks, one that parks and unparks at every
//! opportunity, fed the same inputs on the same virtual clock — which must
//! act alike and look alike after every input.

use super::*;
use crate::connection::session::{ChannelParams, Session, SessionConfig};
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};

/// Everything a driver or a user can observe of a machine, as text.
fn view(c: &ComObject) -> String {
    let s = c.session();
    format!(
        "{:?}",
        (
            (c.state(), c.fault_state(), c.poll_timeout(), c.is_failed()),
            (c.has_refs(), c.awaiting_replies(), c.last_activity()),
            (c.opening(), c.working_channel(), c.has_need()),
            (c.stats(), s.stats()),
            (s.last_sent(), s.last_received(), s.last_generation()),
            (s.tag(), s.peer_max_message(), s.pending_messages()),
            (
                c.addresses(),
                c.continuity().map(|k| (k.current.0, k.confirmed))
            ),
        )
    )
}

/// Two machines fed alike: `parked` parks and unparks whenever the rule
/// allows, as a driver does after each input.
struct Twins {
    plain: H,
    parked: H,
    /// Times `parked` parked.
    parks: usize,
}

impl Twins {
    fn new(cfg: ComConfig, can_open: bool) -> Self {
        let mut t = Self {
            plain: H::new(cfg.clone(), can_open),
            parked: H::new(cfg, can_open),
            parks: 0,
        };
        t.parked.now = t.plain.now;
        t.parked.com.clock = t.plain.com.clock;
        t.parked.com.idle_since = t.plain.com.idle_since;
        t.park();
        t
    }

    /// Feeds both the same input, compares what they do and what they
    /// show, then parks `parked` if it may. Returns the actions.
    fn step(&mut self, f: impl Fn(&mut H)) -> Vec<Action> {
        f(&mut self.plain);
        f(&mut self.parked);
        let a = self.plain.actions();
        let b = self.parked.actions();
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "they act alike");
        // What a driver takes after each turn.
        let now = self.plain.now;
        assert_eq!(
            self.plain.com.take_freed(now),
            self.parked.com.take_freed(now)
        );
        assert_eq!(
            self.plain.com.take_delivered(),
            self.parked.com.take_delivered()
        );
        self.park();
        a
    }

    fn park(&mut self) {
        assert_eq!(view(&self.plain.com), view(&self.parked.com));
        let now = self.plain.now;
        let Some(p) = self.parked.com.park(now) else {
            assert!(
                !self.plain.com.parkable(now),
                "the rule depends on the state"
            );
            return;
        };
        assert!(self.plain.com.parkable(now));
        self.parks += 1;
        // What the parked form tells a driver without unparking.
        let c = &self.plain.com;
        assert_eq!(p.deadline(), c.poll_timeout());
        assert_eq!(p.state(), c.state());
        assert_eq!(p.fault_state(), c.fault_state());
        assert_eq!(p.session_stats(), c.session().stats());
        assert_eq!(p.stats(), c.stats());
        assert_eq!(p.addresses(), c.addresses());
        assert_eq!(p.continuity(), c.continuity());
        let cfg = self.plain.com.cfg.clone();
        let budget = ReassemblyBudget::new(1 << 30);
        self.parked.com = ComObject::unpark(p, cfg, budget);
        assert_eq!(view(&self.plain.com), view(&self.parked.com));
    }

    fn advance(&mut self, d: Duration) -> Vec<Action> {
        self.step(|h| h.advance(d))
    }

    fn run_to_deadline(&mut self) -> Vec<Action> {
        let at = self.plain.com.poll_timeout().expect("a deadline");
        self.step(|h| {
            h.now = at;
            h.com.handle_timeout(at);
        })
    }

    /// Feeds both the frames in `bytes` on channel `id`.
    fn input(&mut self, id: ChannelId, bytes: &[u8]) -> Vec<Action> {
        self.step(|h| {
            let mut input = ByteBuffer::new(65_536);
            input.push(bytes);
            h.com.handle_input(id, h.now, &mut input, &mut |_| {});
        })
    }
}

fn control(kind: FrameKind, ack: u64) -> [u8; HEADER_LEN] {
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(kind, 0, ack).encode(&mut hb);
    hb
}

/// A message from the peer, numbered `n` on its side, as frames.
fn from_the_peer(n: u64) -> Vec<u8> {
    let mut peer = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 20));
    let params = ChannelParams {
        buffer_size: 65_536,
        peer_max_message: 1 << 20,
        peer_last_received: 0,
        generation: 1,
        caps: Capabilities::ALL,
    };
    peer.channel_up(params, Instant::now()).unwrap();
    let mut out = ByteBuffer::new(65_536);
    for _ in 0..n {
        peer.queue(msg(5)).unwrap();
    }
    peer.poll_transmit(Instant::now(), &mut out);
    let (a, b) = out.chunks();
    [a, b].concat()
}

#[test]
fn a_machine_parked_at_every_opportunity_acts_as_one_never_parked() {
    let mut c = cfg();
    c.linger = Duration::from_secs(10);
    c.reopen_after_peer_hard_close = Duration::from_secs(3);
    let mut t = Twins::new(c, true);
    assert_eq!(t.parks, 1, "a new machine parks");
    // No references: the reclaim clock runs, and its deadline parks with it.
    t.step(|h| h.com.set_has_refs(false, h.now));
    t.advance(Duration::from_secs(1));
    t.step(|h| h.com.set_has_refs(true, h.now));
    let parks = t.parks;
    // A message: the slot, the open, the channel — none of it parks.
    assert!(matches!(
        t.step(|h| h.com.queue(msg(10)).unwrap())[..],
        [Action::RequestSlot]
    ));
    t.step(|h| h.com.slot_granted());
    let id = t.plain.com.opening().unwrap();
    t.step(|h| {
        h.com.open_succeeded(id, &opened(1, 1 << 20), h.now);
    });
    let id = t.plain.com.working_channel().unwrap();
    t.step(|h| {
        h.com.poll_transmit(h.now, &mut ByteBuffer::new(65_536));
    });
    assert_eq!(t.parks, parks, "nothing parks while a channel works");
    // Acknowledged, and two messages from the peer delivered.
    t.input(id, &control(FrameKind::Ack, 1));
    t.input(id, &from_the_peer(2));
    t.advance(Duration::from_millis(50)); // the ack delay
    assert_eq!(t.plain.com.session().last_received(), 2);
    // The channel is lost with nothing pending: backoff, a temporary
    // failure with its give-up deadline, and the site parks in backoff.
    t.step(|h| h.com.channel_lost(id, Loss::Eof, h.now));
    t.step(|h| h.com.channel_closed(id, h.now));
    assert_eq!(t.plain.com.state(), ComState::Backoff);
    assert!(t.parks > parks, "parked in backoff");
    let parks = t.parks;
    t.run_to_deadline(); // backoff over: closed, no need, no open
    assert_eq!(t.plain.com.state(), ComState::Closed);
    assert!(t.parks > parks);
    // The peer calls back, proving the pair's secret: the session goes on.
    let out = t.step(|h| {
        let out = h
            .com
            .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
        assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    });
    assert!(out.iter().any(|a| matches!(a, Action::Up)), "{out:?}");
    let id = t.plain.com.working_channel().unwrap();
    assert_eq!(t.plain.com.session().last_sent(), 1, "numbering kept");
    // It closes our channel hard; we grant and wait for its call.
    t.input(id, &control(FrameKind::CloseHard, 1));
    t.step(|h| h.com.channel_lost(id, Loss::Eof, h.now));
    t.step(|h| h.com.channel_closed(id, h.now));
    assert_eq!(t.plain.com.state(), ComState::WaitingForCallback);
    let parks = t.parks;
    // It does not call: with references held and no way for it to call
    // us, we reopen after the wait.
    let a = t.run_to_deadline();
    assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
    t.step(|h| h.com.slot_granted());
    let attempt = t.plain.com.opening().unwrap();
    t.step(|h| {
        h.com
            .open_failed(attempt, OpenFailure::Transport("refused".into()), h.now)
    });
    // Killed: failed for good; unreferenced, it is reclaimed after the
    // linger time — the reclaim deadline waits parked.
    t.step(|h| h.com.kill(h.now));
    t.step(|h| h.com.set_has_refs(false, h.now));
    assert_eq!(t.plain.com.state(), ComState::Failed);
    let a = t.run_to_deadline();
    assert!(matches!(a[..], [Action::Reclaim]), "{a:?}");
    assert!(t.parks >= parks + 3, "parked {} times", t.parks);
}

#[test]
fn a_machine_parks_only_when_it_waits_for_nothing_but_inputs_and_deadlines() {
    let mut h = H::new(cfg(), true);
    assert!(h.com.parkable(h.now));
    // A message queued, a slot asked for: no.
    h.com.queue(msg(10)).unwrap();
    assert!(!h.com.parkable(h.now), "a message is queued");
    h.actions();
    h.com.slot_granted();
    let a = h.actions();
    assert!(!h.com.parkable(h.now), "an open runs");
    let [Action::Open(req)] = &a[..] else {
        panic!("{a:?}")
    };
    let id = h
        .com
        .open_succeeded(req.attempt.seq, &opened(1, 1 << 20), h.now)
        .unwrap();
    h.actions();
    h.com.poll_transmit(h.now, &mut ByteBuffer::new(65_536));
    let mut input = ByteBuffer::new(4096);
    input.push(&control(FrameKind::Ack, 1));
    h.com.handle_input(id, h.now, &mut input, &mut |_| {});
    assert!(!h.com.parkable(h.now), "a channel works");
    h.com.channel_lost(id, Loss::Eof, h.now);
    assert!(!h.com.parkable(h.now), "actions not taken");
    h.actions();
    h.com.channel_closed(id, h.now);
    assert!(
        !h.com.parkable(h.now),
        "what the acknowledgement freed is not taken yet"
    );
    assert_eq!(h.com.take_freed(h.now).messages, 1);
    assert!(h.com.parkable(h.now));
    h.com.set_awaiting_replies(true);
    assert!(!h.com.parkable(h.now), "a reply is awaited");
    h.com.set_awaiting_replies(false);
    h.actions();
    assert!(h.com.parkable(h.now));
    // The peer's connection waits in this node's line: the
    // machine counts it, and a parked form would lose the count.
    h.com.set_peer_in_line(true, h.now);
    h.actions();
    assert!(!h.com.parkable(h.now), "the peer waits in our line");
    h.com.set_peer_in_line(false, h.now);
    h.actions();
    assert!(h.com.parkable(h.now));
    h.com.shutdown(h.now);
    assert!(!h.com.parkable(h.now), "the node shuts down");
}

#[test]
fn a_parked_site_keeps_little() {
    let mut h = H::new(cfg(), true);
    let id = h.working();
    h.com.poll_transmit(h.now, &mut ByteBuffer::new(65_536));
    let mut input = ByteBuffer::new(65_536);
    input.push(&control(FrameKind::Ack, 1));
    input.push(&from_the_peer(3));
    h.com.handle_input(id, h.now, &mut input, &mut |_| {});
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    h.com.channel_closed(id, h.now);
    h.com.take_freed(h.now);
    let p = h.com.park(h.now).expect("parkable");
    // Numbering, tag, timers and every counter (most of them small).
    assert!(p.packed_len() <= 96, "packed in {} bytes", p.packed_len());
    // Inline: parking allocates nothing of its own (a driver keeps the
    // parked forms of thousands of sites in one table, and a small block
    // per site made on the actor's thread would keep that thread's freed
    // memory resident).
    assert!(p.packed_inline(), "packed in {} bytes", p.packed_len());
    assert!(std::mem::size_of::<Parked>() <= 160);
    // The machine left behind is empty and opens nothing.
    assert_eq!(h.com.session().last_sent(), 0);
    h.com.queue(msg(1)).unwrap();
    assert!(h.actions().is_empty());
}

/// A site prepared but never connected parks too, its form inline.
#[test]
fn a_site_never_connected_parks_inline() {
    let mut h = H::new(cfg(), true);
    h.actions();
    let p = h.com.park(h.now).expect("parkable");
    assert!(p.packed_inline(), "packed in {} bytes", p.packed_len());
}
