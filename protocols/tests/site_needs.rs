//! When a site needs a channel, and when it needs nothing at all — the
//! ComObject's rules, deterministic, with a virtual clock: the reclaim rule
//! and the open protocol with a site that forgot its peer (docs/protocol.md
//! §3.3 and §4.4, "Forgotten sessions"), and the reopen rules that keep
//! replies and a preempting peer's messages from being stranded.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sitenet_protocols::connection::handshake::{
    Attempt, HandshakeNonces, Negotiate, NegotiateAns, Nonce, Opened, PairSecret, Present,
};
use sitenet_protocols::{
    AcceptOutcome, Action, AddressBook, ByteBuffer, ComConfig, ComObject, ComState, Loss,
    OutMessage, Priority, ReassemblyBudget, Refusal, SiteId, PROTOCOL_VERSION,
};

const LOCAL: SiteId = SiteId(0x10);
const PEER: SiteId = SiteId(0x20);
const LINGER: Duration = Duration::from_secs(10);
/// The nonce of our PRESENT in the tests' handshakes.
const NONCE: Nonce = [0xAC; 32];
/// The secret the tests' fresh answers agree.
const PAIR: PairSecret = PairSecret([0x5E; 16]);

struct H {
    com: ComObject,
    now: Instant,
}

impl H {
    fn new(can_open: bool) -> Self {
        Self::with(can_open, false)
    }

    /// `callable`: this node listens (see `ComConfig::callable`).
    fn with(can_open: bool, callable: bool) -> Self {
        let cfg = ComConfig {
            linger: LINGER,
            callable,
            ..ComConfig::default()
        };
        Self::with_cfg(can_open, cfg)
    }

    fn with_cfg(can_open: bool, cfg: ComConfig) -> Self {
        let now = Instant::now();
        Self {
            com: ComObject::new(
                cfg,
                ReassemblyBudget::new(1 << 30),
                LOCAL,
                if can_open {
                    AddressBook::given("tcp:peer:1")
                } else {
                    AddressBook::default()
                },
                1,
                7,
                now,
            ),
            now,
        }
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.com.poll_action()).collect()
    }

    fn advance_to(&mut self, at: Instant) {
        self.now = at;
        self.com.handle_timeout(at);
    }

    fn reclaims(&mut self) -> bool {
        self.actions().iter().any(|a| matches!(a, Action::Reclaim))
    }

    /// Opens a channel as initiator; the answer says whether the peer is
    /// fresh.
    fn open(&mut self, generation: u64, peer_fresh: bool) -> sitenet_protocols::ChannelId {
        let acts = self.actions();
        assert!(
            acts.iter().any(|a| matches!(a, Action::RequestSlot)),
            "{acts:?}"
        );
        self.open_requested(generation, peer_fresh)
    }

    /// [`open`](Self::open) once the machine has asked for its slot.
    fn open_requested(
        &mut self,
        generation: u64,
        peer_fresh: bool,
    ) -> sitenet_protocols::ChannelId {
        self.com.slot_granted();
        let acts = self.actions();
        let Some(Action::Open(req)) = acts.into_iter().find(|a| matches!(a, Action::Open(_)))
        else {
            panic!("no open");
        };
        let opened = Opened {
            present: Present {
                versions: sitenet_protocols::Speaks::CURRENT.versions,
                caps: sitenet_protocols::Speaks::CURRENT.caps,
                site: PEER,
                listen: vec![],
                nonce: NONCE,
            },
            buffer_size: 65_536,
            peer_max_message: 1 << 20,
            peer_last_received: 0,
            generation,
            peer_fresh,
            pair_secret: peer_fresh.then_some(PAIR),
            session: 0,
            agreed: sitenet_protocols::Agreed::CURRENT,
        };
        self.com
            .open_succeeded(req.attempt.seq, &opened, self.now)
            .expect("working")
    }

    /// A message queued, sent on a new channel and acknowledged.
    fn working_and_acked(&mut self, peer_fresh: bool) -> sitenet_protocols::ChannelId {
        self.com.queue(msg()).unwrap();
        let id = self.open(1, peer_fresh);
        self.transmit();
        self.ack(id, 1);
        id
    }

    /// The peer's CLOSE_HARD arrives on channel `id` (it acknowledges our
    /// message 1).
    fn peer_closes_hard(&mut self, id: sitenet_protocols::ChannelId) {
        let mut input = ByteBuffer::new(4096);
        let mut hb = [0u8; sitenet_protocols::wire::frame::HEADER_LEN];
        sitenet_protocols::wire::frame::FrameHeader::control(
            sitenet_protocols::wire::frame::FrameKind::CloseHard,
            0,
            1,
        )
        .encode(&mut hb);
        input.push(&hb);
        self.com.handle_input(id, self.now, &mut input, &mut |_| {});
    }

    /// The channel ends (EOF) and the driver closes it: every action the
    /// machine asked for meanwhile.
    fn lose_with_actions(&mut self, id: sitenet_protocols::ChannelId) -> Vec<Action> {
        self.com.channel_lost(id, Loss::Eof, self.now);
        let mut acts = self.actions();
        self.com.channel_closed(id, self.now);
        acts.extend(self.actions());
        acts
    }

    /// The channel ends (EOF) and the driver closes it.
    fn lose(&mut self, id: sitenet_protocols::ChannelId) {
        self.com.channel_lost(id, Loss::Eof, self.now);
        for a in self.actions() {
            if let Action::CloseChannel { id, .. } = a {
                self.com.channel_closed(id, self.now);
            }
        }
    }

    /// Writes what the session has and returns the frames' bytes.
    fn transmit(&mut self) -> ByteBuffer {
        let mut out = ByteBuffer::new(65_536);
        self.com.poll_transmit(self.now, &mut out);
        out
    }

    /// Feeds the peer's ack of everything up to `n`.
    fn ack(&mut self, id: sitenet_protocols::ChannelId, n: u64) {
        let mut input = ByteBuffer::new(4096);
        let mut hb = [0u8; sitenet_protocols::wire::frame::HEADER_LEN];
        sitenet_protocols::wire::frame::FrameHeader::control(
            sitenet_protocols::wire::frame::FrameKind::Ack,
            0,
            n,
        )
        .encode(&mut hb);
        input.push(&hb);
        assert!(self.com.handle_input(id, self.now, &mut input, &mut |_| {}));
        self.com.take_freed(self.now);
    }
}

fn msg() -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        1,
        Bytes::new(),
        vec![Bytes::from_static(b"ten bytes!")],
    )
}

/// (last received, generation, fresh) of an accepting answer.
fn accept_fields(outcome: AcceptOutcome) -> (u64, u64, bool) {
    let AcceptOutcome::Accept {
        answer:
            NegotiateAns::Accept {
                last_received,
                generation,
                fresh,
                ..
            },
        ..
    } = outcome
    else {
        panic!("not accepted: {outcome:?}")
    };
    (last_received, generation, fresh)
}

fn negotiate(last_generation: u64, last_received: u64) -> Negotiate {
    Negotiate {
        version: PROTOCOL_VERSION,
        site: PEER,
        listen: vec![],
        buffer_size: 65_536,
        max_message: 1 << 20,
        last_received,
        last_generation,
        attempt: Attempt { opener: 5, seq: 1 },
        nonce: [0x1A; 32],
        proof: None,
        cookie: None,
        session: 0,
        caps: sitenet_protocols::Capabilities::ALL,
    }
}

/// [`negotiate`] from the peer holding `PAIR`.
fn proving(last_generation: u64, last_received: u64) -> Negotiate {
    let n = negotiate(last_generation, last_received);
    let hs = HandshakeNonces {
        acceptor: LOCAL,
        acceptor_nonce: NONCE,
        initiator: PEER,
        initiator_nonce: n.nonce,
    };
    Negotiate {
        proof: Some(hs.proof(&PAIR)),
        ..n
    }
}

#[test]
fn an_unneeded_site_is_reclaimed_after_the_linger_time_and_asked_again_if_declined() {
    let mut h = H::new(true);
    // Referenced: no reclaim timer at all.
    assert_eq!(h.com.poll_timeout(), None);
    let t0 = h.now;
    h.com.set_has_refs(false, t0);
    assert!(h.com.idle_without_channel());
    assert_eq!(h.com.poll_timeout(), Some(t0 + LINGER));
    h.advance_to(t0 + LINGER - Duration::from_millis(1));
    assert!(!h.reclaims(), "not before the linger time");
    h.advance_to(t0 + LINGER);
    assert!(h.reclaims());
    // The driver declined (a reference appeared and went again under its
    // lock): the question comes again only after another linger time.
    assert_eq!(h.com.poll_timeout(), Some(t0 + 2 * LINGER));
    h.advance_to(t0 + 2 * LINGER);
    assert!(h.reclaims());
}

#[test]
fn a_reference_a_queued_message_or_a_channel_keeps_the_site() {
    let mut h = H::new(true);
    let t0 = h.now;
    h.com.set_has_refs(false, t0);
    h.advance_to(t0 + LINGER / 2);
    // A message queued: needed again, the clock stops.
    h.com.queue(msg()).unwrap();
    assert!(!h.com.idle_without_channel());
    let id = h.open(1, true);
    assert_eq!(h.com.state(), ComState::Working);
    h.transmit();
    h.ack(id, 1);
    // Acknowledged, unreferenced, but a channel works: the linger rule
    // closes it weakly first; reclaiming waits for the channel to go.
    for _ in 0..200 {
        let Some(at) = h.com.poll_timeout() else {
            break;
        };
        if at > t0 + 10 * LINGER {
            break;
        }
        h.advance_to(at);
        assert!(!h.reclaims(), "reclaimed with a channel");
        h.transmit();
        if h.com.state() == ComState::ClosingWeak {
            break;
        }
        // Keep the channel alive (the peer's heartbeat).
        h.ack(id, 1);
    }
    assert_eq!(h.com.state(), ComState::ClosingWeak);
    // The channel ends (the weak close's EOF): the rule's clock starts now.
    h.com.channel_lost(id, Loss::Eof, h.now);
    for a in h.actions() {
        if let Action::CloseChannel { id, .. } = a {
            h.com.channel_closed(id, h.now);
        }
    }
    assert!(h.com.idle_without_channel(), "{:?}", h.com.state());
    let closed_at = h.now;
    // A reference again: nothing to reclaim.
    h.com.set_has_refs(true, h.now);
    assert!(h.com.poll_timeout().is_none_or(|t| t >= closed_at + LINGER));
    h.com
        .set_has_refs(false, closed_at + Duration::from_secs(1));
    let at = h.com.poll_timeout().expect("reclaim timer");
    assert_eq!(at, closed_at + Duration::from_secs(1) + LINGER);
    h.advance_to(at);
    assert!(h.reclaims());
}

#[test]
fn a_failed_site_is_reclaimed_once_unreferenced() {
    let mut h = H::new(true);
    h.com.kill(h.now);
    let acts = h.actions();
    assert!(acts.iter().any(|a| matches!(a, Action::Failed { .. })));
    assert_eq!(h.com.poll_timeout(), None, "referenced: kept");
    let t = h.now + Duration::from_secs(3);
    h.com.set_has_refs(false, t);
    assert_eq!(h.com.poll_timeout(), Some(t + LINGER));
    h.advance_to(t + LINGER);
    assert!(h.reclaims());
}

#[test]
fn an_initiator_whose_peer_answers_fresh_numbers_afresh_and_hands_back_the_unacked() {
    let mut h = H::new(true);
    h.com.queue(msg()).unwrap();
    let id = h.open(1, true);
    h.transmit();
    assert_eq!(h.com.session().last_sent(), 1);
    // Lost before the ack came back; the peer then forgot us.
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    h.com.channel_closed(id, h.now);
    h.com.queue(msg()).unwrap();
    let at = h.com.poll_timeout().expect("backoff");
    h.advance_to(at);
    let _ = h.open(2, true);
    let acts = h.actions();
    let back: Vec<_> = acts
        .iter()
        .filter_map(|a| match a {
            Action::HandBack { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(back, vec![Refusal::PeerForgot { number: 1 }], "{acts:?}");
    assert_eq!(h.com.session().stats().peer_forgot, 1);
    // The new message is number 1 of the new session.
    h.transmit();
    assert_eq!(h.com.session().last_sent(), 1);
    assert_eq!(h.com.session().stats().retransmitted, 0);
}

#[test]
fn an_acceptor_that_remembers_numbers_afresh_when_the_initiator_is_fresh() {
    let mut h = H::new(true);
    let id = h.working_and_acked(true);
    h.lose(id);
    // The peer forgot us and calls: NEGOTIATE with last generation 0,
    // proving the pair's secret (its node kept it).
    let answer = accept_fields(h.com.accepted(&proving(0, 0), NONCE, h.now));
    // Fresh: a new numbering starts, named by this handshake (the peer,
    // fresh itself, has nothing to forget).
    assert_eq!(answer, (0, 2, true));
    assert_eq!(h.com.session().last_sent(), 0);
    assert_eq!(h.com.session().stats().peer_forgot, 1);
    // Nothing was unacknowledged: nothing handed back.
    assert!(!h
        .actions()
        .iter()
        .any(|a| matches!(a, Action::HandBack { .. })));
}

#[test]
fn a_fresh_acceptor_ignores_what_the_initiator_received_from_the_forgotten_session() {
    let mut h = H::new(false);
    // The peer remembers a session we forgot: generation 5, it received 7.
    // We cannot check its proof: a new session, numbered by us (a claim we
    // cannot check picks no generation here).
    let answer = accept_fields(h.com.accepted(&proving(5, 7), NONCE, h.now));
    assert_eq!(answer, (0, 1, true));
    assert!(!h
        .actions()
        .iter()
        .any(|a| matches!(a, Action::ReportFault { .. })));
}

#[test]
fn a_fresh_initiator_claiming_to_have_received_messages_is_a_protocol_fault() {
    // Both fresh: the initiator cannot have received anything.
    let mut h = H::new(false);
    assert!(matches!(
        h.com.accepted(&negotiate(0, 3), NONCE, h.now),
        AcceptOutcome::Protocol(_)
    ));
}

/// Found by `sitenet stress`: a client whose request was acknowledged but
/// not yet answered lost its channel (a cut); with nothing left to send it
/// never reconnected, and the server — unable to call a client that does
/// not listen — held the reply for ever. Awaited replies are a need.
#[test]
fn a_site_awaiting_replies_reconnects_after_a_lost_channel() {
    let mut h = H::new(true);
    let id = h.working_and_acked(false);
    h.com.set_awaiting_replies(true);
    assert!(h.com.has_need());
    h.lose(id);
    let at = h.com.poll_timeout().expect("a backoff");
    h.advance_to(at);
    assert!(
        h.actions().iter().any(|a| matches!(a, Action::RequestSlot)),
        "a reply is awaited: the site must reconnect"
    );
    // Once the reply came, nothing is owed: no reconnect after a loss.
    let mut h = H::new(true);
    let id = h.working_and_acked(false);
    h.lose(id);
    let at = h.com.poll_timeout().expect("a backoff");
    h.advance_to(at);
    assert!(!h.actions().iter().any(|a| matches!(a, Action::RequestSlot)));
}

/// Found by `sitenet stress`: a server short of slots preempted a client's
/// channel (CLOSE_HARD) while it had replies queued for it; the client,
/// with nothing to send, waited to be called back — but a client that does
/// not listen cannot be. A referenced peer that closed hard is reopened
/// when it does not call back.
#[test]
fn after_the_peers_hard_close_a_referenced_site_reopens_if_not_called_back() {
    let mut h = H::new(true);
    let id = h.working_and_acked(false);
    assert!(!h.com.has_need());
    // The peer's CLOSE_HARD, then its EOF after our accept.
    h.peer_closes_hard(id);
    h.transmit();
    h.com.channel_lost(id, Loss::Eof, h.now);
    for a in h.actions() {
        if let Action::CloseChannel { id, .. } = a {
            h.com.channel_closed(id, h.now);
        }
    }
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    let at = h.com.poll_timeout().expect("the reopen wait");
    h.advance_to(at);
    assert!(
        h.actions().iter().any(|a| matches!(a, Action::RequestSlot)),
        "referenced and not called back: reopen"
    );
}

/// An idle channel may give its ring memory back: only with nothing
/// pending and no application traffic for `ring_idle`.
#[test]
fn a_channel_idles_for_its_rings_only_with_nothing_pending() {
    let mut h = H::new(true);
    let t0 = h.now;
    h.com.queue(msg()).unwrap();
    let id = h.open(1, true);
    let ring_idle = ComConfig::default().ring_idle;
    assert!(
        !h.com.rings_idle(t0 + 2 * ring_idle),
        "a message is pending"
    );
    h.transmit();
    h.ack(id, 1);
    assert!(!h.com.rings_idle(h.now), "traffic just now");
    assert!(!h.com.rings_idle(h.now + ring_idle / 2));
    assert!(h.com.rings_idle(h.now + ring_idle));
    h.com.queue(msg()).unwrap();
    assert!(!h.com.rings_idle(h.now + 2 * ring_idle), "queued again");
}

/// Found by the simulator (`sim`, 50 sites, seed 1, heavy faults): sites
/// that reference each other and listen kept reopening the channels their
/// peers had preempted, with nothing to send; each reopen took a slot that
/// forced the next preemption, and idle pairs churned through the slot
/// limits for ever. A site that can be called back waits for the call.
#[test]
fn a_callable_site_does_not_reopen_after_a_peers_hard_close_without_need() {
    let mut h = H::with(true, true);
    let id = h.working_and_acked(false);
    assert!(!h.com.has_need());
    h.peer_closes_hard(id);
    h.transmit();
    h.lose(id);
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    let at = h.com.poll_timeout().expect("the reopen wait");
    h.advance_to(at);
    assert!(
        !h.actions().iter().any(|a| matches!(a, Action::RequestSlot)),
        "nothing to send, and the peer can call back: no reopen"
    );
    assert_eq!(h.com.state(), ComState::Closed);
    // A message to send is a need again: it opens at once.
    h.com.queue(msg()).unwrap();
    assert!(h.actions().iter().any(|a| matches!(a, Action::RequestSlot)));
}

/// Found by `sitenet sim` (7 sites, 2 / 4 slots, 10 ms ticks, bursts into a
/// small output bound, sends by address, the outbox queue; seed 1): a site
/// whose channel a peer short of slots preempted (CLOSE_HARD) while it
/// still had messages queued waited the whole `reopen_after_peer_hard_close`
/// (5 s) for a callback. The preempting side calls back only when it has
/// something to send itself, so the queue sat idle for 5 s at every
/// preemption: the run's backlog drained at a tenth of its pace and had not
/// drained a minute after the faults stopped. A site with something to
/// send reopens at once (a peer at its hard limit puts it in its line).
#[test]
fn a_site_with_messages_queued_reopens_at_once_after_a_peers_hard_close() {
    let mut h = H::with(true, true);
    let id = h.working_and_acked(false);
    h.peer_closes_hard(id);
    // Queued while the close runs: it may not go out on this channel.
    h.com.queue(msg()).unwrap();
    h.transmit();
    let acts = h.lose_with_actions(id);
    assert!(h.com.has_need());
    assert!(
        acts.iter().any(|a| matches!(a, Action::RequestSlot)),
        "a message to send: reopen at once, not after the callback wait ({acts:?}, {:?})",
        h.com.state()
    );
    assert_eq!(h.com.state(), ComState::WaitingForSlot);
}

/// The same rule when the need comes while the site waits for the call:
/// a message queued then ends the wait at once.
#[test]
fn a_message_queued_while_waiting_for_the_peers_call_opens_at_once() {
    let mut h = H::with(true, true);
    let id = h.working_and_acked(false);
    h.peer_closes_hard(id);
    h.transmit();
    h.lose(id);
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    assert!(h.actions().is_empty());
    h.com.queue(msg()).unwrap();
    let acts = h.actions();
    assert!(
        acts.iter().any(|a| matches!(a, Action::RequestSlot)),
        "{acts:?}"
    );
    assert_eq!(h.com.state(), ComState::WaitingForSlot);
}

/// The attacker's side of the rule above: a peer that accepts our channel
/// and closes it hard at once, acknowledging nothing, would make a site with
/// messages queued dial it again and again with no wait at all (each open
/// works, so no backoff grows). The channel moved nothing: the site waits
/// for the callback as before, and a message queued behind the ones it
/// already had does not end the wait.
#[test]
fn a_peer_that_closes_hard_without_acknowledging_anything_is_not_redialled_at_once() {
    let mut h = H::with(true, true);
    let id = h.working_and_acked(false);
    // A message goes out; the peer's CLOSE_HARD acknowledges only the
    // first, as before this channel: nothing moved on it.
    h.com.queue(msg()).unwrap();
    h.transmit();
    h.peer_closes_hard(id);
    // That channel had moved message 1: the site reopens at once, on a
    // channel whose peer acknowledges nothing and closes it hard again.
    h.transmit();
    let acts = h.lose_with_actions(id);
    assert!(
        acts.iter().any(|a| matches!(a, Action::RequestSlot)),
        "{acts:?}"
    );
    let id = h.open_requested(2, false);
    h.transmit();
    h.peer_closes_hard(id);
    h.transmit();
    let acts = h.lose_with_actions(id);
    assert!(h.com.has_need());
    assert!(
        !acts.iter().any(|a| matches!(a, Action::RequestSlot)),
        "nothing moved on the channel: no reopen at once ({acts:?})"
    );
    assert_eq!(h.com.state(), ComState::WaitingForCallback);
    h.com.queue(msg()).unwrap();
    assert!(
        !h.actions().iter().any(|a| matches!(a, Action::RequestSlot)),
        "a message behind others does not end the wait"
    );
    // The wait ends by its timer, as before.
    let at = h.com.poll_timeout().expect("the callback wait");
    h.advance_to(at);
    assert!(h.actions().iter().any(|a| matches!(a, Action::RequestSlot)));
}

/// Regression: `Duration::MAX` in a machine's configuration, for "never"
/// (no linger, no heartbeat, no silence timeout, no give-up), overflowed
/// the clock and panicked wherever the machine made a deadline of it. Each
/// such deadline is at most `timer::MAX_WAIT` away.
#[test]
fn durations_of_never_in_the_configuration_do_not_overflow_the_machine() {
    let never = Duration::MAX;
    let session = sitenet_protocols::SessionConfig {
        ack_delay: never,
        heartbeat_interval: never,
        silence_timeout: never,
        close_timeout: never,
        reassembly_idle: never,
        turn_budget: Some(never),
        ..sitenet_protocols::SessionConfig::default()
    };
    let cfg = ComConfig {
        session: std::sync::Arc::new(session),
        reconnect_min: never,
        reconnect_max: never,
        linger: never,
        ring_idle: never,
        reopen_after_peer_hard_close: never,
        line_give_up: never,
        give_up_after: Some(never),
        unreachable_give_up: never,
        ..ComConfig::default()
    };
    let mut h = H::with_cfg(true, cfg);
    let id = h.working_and_acked(true);
    h.com.set_has_refs(false, h.now);
    h.peer_closes_hard(id);
    h.lose(id);
    let far = h.now + sitenet_protocols::base::timer::MAX_WAIT;
    let next = h.com.poll_timeout().expect("a deadline: the reclaim");
    assert!(next <= far, "{next:?} past {far:?}");
    h.advance_to(h.now + Duration::from_secs(1));
    h.com.queue(msg()).unwrap();
    let acts = h.actions();
    assert!(h.com.poll_timeout().is_none_or(|t| t <= far), "{acts:?}");
}

/// Regression: a zero heartbeat interval in a sans-IO user's
/// `SessionConfig` made a heartbeat due at every turn of the driver, at one
/// instant: each one written set the next at the same instant, so a
/// driver that follows `poll_timeout` spun, writing heartbeats. The period
/// is at least `timer::MIN_PERIOD`. Every other wait of `ComConfig` and
/// `SessionConfig` was tried at zero too, one at a time, through a
/// working channel, a queued message, the last reference dropped and a
/// lost channel: none was due again at the instant it was handled (a zero
/// silence timeout fails the channel at once; a zero give-up, the site).
#[test]
fn a_zero_heartbeat_interval_does_not_spin_the_driver() {
    type Set = fn(&mut ComConfig, &mut sitenet_protocols::SessionConfig);
    let cases: [(&str, Set); 14] = [
        ("heartbeat_interval", |_, s| {
            s.heartbeat_interval = Duration::ZERO
        }),
        ("ack_delay", |_, s| s.ack_delay = Duration::ZERO),
        ("silence_timeout", |_, s| s.silence_timeout = Duration::ZERO),
        ("close_timeout", |_, s| s.close_timeout = Duration::ZERO),
        ("reassembly_idle", |_, s| s.reassembly_idle = Duration::ZERO),
        ("promote_after", |_, s| {
            s.scheduler.promote_after = Duration::ZERO
        }),
        ("turn_budget", |_, s| s.turn_budget = Some(Duration::ZERO)),
        ("reconnect", |c, _| {
            c.reconnect_min = Duration::ZERO;
            c.reconnect_max = Duration::ZERO;
        }),
        ("linger", |c, _| c.linger = Duration::ZERO),
        ("ring_idle", |c, _| c.ring_idle = Duration::ZERO),
        ("reopen_after_peer_hard_close", |c, _| {
            c.reopen_after_peer_hard_close = Duration::ZERO
        }),
        ("line_give_up", |c, _| c.line_give_up = Duration::ZERO),
        ("give_up_after", |c, _| {
            c.give_up_after = Some(Duration::ZERO)
        }),
        ("unreachable_give_up", |c, _| {
            c.unreachable_give_up = Duration::ZERO
        }),
    ];
    for (name, set) in cases {
        let mut session = sitenet_protocols::SessionConfig::default();
        let mut cfg = ComConfig::default();
        set(&mut cfg, &mut session);
        cfg.session = std::sync::Arc::new(session);
        let mut h = H::with_cfg(true, cfg);
        let id = h.working_and_acked(true);
        // Handles every timer due now, writing what the machine has to
        // write, as a driver does: a bounded number of turns.
        let settle = |h: &mut H, at: &str| {
            let now = h.now;
            let mut turns = 0;
            while h.com.poll_timeout().is_some_and(|t| t <= now) {
                h.com.handle_timeout(now);
                let _ = h.actions();
                let _ = h.transmit();
                turns += 1;
                assert!(
                    turns < 100,
                    "{name} = 0: due at one instant for ever ({at})"
                );
            }
        };
        settle(&mut h, "working");
        h.com.queue(msg()).unwrap();
        settle(&mut h, "a message queued");
        h.com.set_has_refs(false, h.now);
        settle(&mut h, "no reference left");
        if h.com.state() == ComState::Working {
            h.lose(id);
            settle(&mut h, "its channel lost");
        }
        h.advance_to(h.now + Duration::from_secs(100));
        settle(&mut h, "100 s later");
    }
}
