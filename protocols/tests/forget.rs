//! A site that forgot its peer (it reclaimed the peer's entry): both sides
//! number afresh, nothing is delivered twice, and what the forgotten
//! session never acknowledged is handed back as maybe delivered
//! (docs/protocol.md §3.3 and §4.4, "Forgotten sessions").

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{params, FrameTap, Pair};
use sitenet_protocols::{
    ChannelParams, OutMessage, Priority, ProtocolError, ReassemblyBudget, Refusal, Session,
    SessionConfig,
};

const BUF: usize = 16 * 1024;

fn msg(type_id: u32) -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        type_id,
        Bytes::new(),
        vec![Bytes::from(type_id.to_le_bytes().to_vec())],
    )
}

/// Exchanges `a_n` messages A→B and `b_n` B→A, with every ack delivered.
fn exchange(p: &mut Pair, first_id: u32, a_n: u32, b_n: u32) {
    for i in 0..a_n {
        p.a.send(msg(first_id + i));
    }
    for i in 0..b_n {
        p.b.send(msg(first_id + 100 + i));
    }
    p.pump().unwrap();
    // Explicit acks go out after the ack delay.
    p.advance(Duration::from_millis(50));
    p.pump().unwrap();
    assert_eq!(p.a.session.unacked(), 0);
    assert_eq!(p.b.session.unacked(), 0);
}

/// B is replaced by a fresh session (it reclaimed A's entry), and a new
/// channel comes up between them; `forget` says whether A applies the rule.
fn reconnect_with_b_forgotten(p: &mut Pair, forget: bool) {
    p.a.session.channel_down();
    p.a.out.clear();
    p.a.input.clear();
    p.b.out.clear();
    p.b.input.clear();
    // A new channel: the wire taps start over too.
    p.a.tap = FrameTap::new(BUF);
    p.b.tap = FrameTap::new(BUF);
    p.b.session = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 30));
    assert!(p.b.session.is_fresh());
    assert!(!p.a.session.is_fresh());
    if forget {
        p.a.session.forget_peer();
    }
    // B answered fresh with last_received 0; it ignored A's last_received.
    let gen2 = ChannelParams {
        generation: 2,
        ..params(BUF as u32)
    };
    p.a.session.channel_up(gen2, p.now).unwrap();
    p.b.session.channel_up(gen2, p.now).unwrap();
}

#[test]
fn both_sides_number_afresh_and_nothing_is_delivered_twice() {
    let mut p = Pair::new(BUF, SessionConfig::default());
    exchange(&mut p, 1, 5, 3);
    assert_eq!(p.a.session.last_sent(), 5);
    assert_eq!(p.a.session.last_received(), 3);
    let a_delivered_before = p.a.delivered.len();
    p.b.delivered.clear();

    reconnect_with_b_forgotten(&mut p, true);
    assert_eq!(p.a.session.last_sent(), 0);
    assert_eq!(p.a.session.last_received(), 0);
    assert_eq!(p.a.session.stats().peer_forgot, 1);
    assert!(p.a.session.take_refused().is_empty(), "nothing was unacked");

    exchange(&mut p, 20, 4, 2);
    let got: Vec<(u64, u32)> =
        p.b.delivered
            .iter()
            .map(|m| (m.number, m.prelude.type_id))
            .collect();
    assert_eq!(got, vec![(1, 20), (2, 21), (3, 22), (4, 23)]);
    let got: Vec<u64> = p.a.delivered[a_delivered_before..]
        .iter()
        .map(|m| m.number)
        .collect();
    assert_eq!(got, vec![1, 2]);
    assert_eq!(p.a.session.stats().duplicates, 0);
    assert_eq!(p.b.session.stats().duplicates, 0);
}

#[test]
fn without_the_rule_the_fresh_peer_sees_a_gap() {
    // The control experiment: a side that ignores the peer's freshness
    // keeps numbering from 6, and the fresh peer, expecting 1, must treat
    // it as a protocol error (it cannot know what 1..5 were).
    let mut p = Pair::new(BUF, SessionConfig::default());
    exchange(&mut p, 1, 5, 0);
    reconnect_with_b_forgotten(&mut p, false);
    // (The wire tap would object to the skip first: let the session see it.)
    p.tapping = false;
    p.a.send(msg(30));
    let r = p.pump();
    assert!(
        matches!(r, Err(ProtocolError::NumberGap { .. })),
        "expected a gap, got {r:?}"
    );
}

#[test]
fn what_the_forgotten_session_never_acknowledged_is_handed_back_not_resent() {
    let mut p = Pair::new(BUF, SessionConfig::default());
    exchange(&mut p, 1, 2, 0);
    // Message 3 reaches B and is delivered, but B's ack never comes back.
    p.a.send(msg(3));
    p.a_to_b(usize::MAX).unwrap();
    assert_eq!(p.b.delivered.last().unwrap().number, 3);
    assert_eq!(p.a.session.unacked(), 1);
    p.b.delivered.clear();

    reconnect_with_b_forgotten(&mut p, true);
    let back = p.a.session.take_refused();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].0, Refusal::PeerForgot { number: 3 });
    assert_eq!(back[0].1.type_id, 3);
    assert_eq!(p.a.session.stats().forgotten_unacked, 1);
    assert_eq!(p.a.session.pending_messages(), 0);

    // Nothing is resent: B delivers only what is sent after.
    p.a.send(msg(4));
    p.pump().unwrap();
    let got: Vec<(u64, u32)> =
        p.b.delivered
            .iter()
            .map(|m| (m.number, m.prelude.type_id))
            .collect();
    assert_eq!(got, vec![(1, 4)]);
    assert_eq!(p.a.session.stats().retransmitted, 0);
}

#[test]
fn a_partly_sent_message_goes_out_whole_after_the_peer_forgot() {
    // A big message cut in the middle has no number yet: it restarts from
    // its first fragment and is numbered in the new session.
    let mut p = Pair::new(BUF, SessionConfig::default());
    exchange(&mut p, 1, 2, 0);
    let big = OutMessage::new(
        Priority::Low,
        9,
        Bytes::new(),
        vec![common::slice(0, 100_000)],
    );
    p.a.send(big);
    p.a_to_b(30_000).unwrap();
    assert!(p.b.delivered.iter().all(|m| m.prelude.type_id != 9));
    p.b.delivered.clear();
    reconnect_with_b_forgotten(&mut p, true);
    assert!(p.a.session.take_refused().is_empty());
    p.pump().unwrap();
    assert_eq!(p.b.delivered.len(), 1);
    assert_eq!(p.b.delivered[0].number, 1);
    assert!(common::body_equals(
        &p.b.delivered[0].body,
        &[common::slice(0, 100_000)]
    ));
}
