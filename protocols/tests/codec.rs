//! The codec end to end: two working sessions joined by ByteBuffers, bytes
//! moved in arbitrary chunks. Whatever is sent is delivered exactly once,
//! unchanged, FIFO within each priority, numbered 1, 2, 3, …; and the
//! acknowledgements flow back (piggy-backed, explicit after 100 messages or
//! 64 KiB, or after the 20 ms ack delay).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{body_equals, slice, Pair};
use proptest::prelude::*;
use sitenet_protocols::connection::handshake::MIN_BUFFER;
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use sitenet_protocols::{MessageKind, OutMessage, Priority, SessionConfig};

/// One message of the property test, with its direction.
#[derive(Debug, Clone)]
struct Msg {
    a_to_b: bool,
    msg: OutMessage,
}

fn part() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        30 => (0usize..3000, any::<u32>()).prop_map(|(len, off)| slice(off as usize, len)),
        1 => (1usize << 20..=4 << 20, any::<u32>()).prop_map(|(len, off)| slice(off as usize, len)),
    ]
}

fn message() -> impl Strategy<Value = Msg> {
    (
        any::<bool>(),
        any::<u32>(),
        1u8..=4,
        0u8..3,
        any::<u64>(),
        (0usize..64, any::<u32>()).prop_map(|(len, off)| slice(off as usize, len)),
        prop::collection::vec(part(), 0..=4),
    )
        .prop_map(|(a_to_b, type_id, lane, kind, corr, header, body)| {
            let kind = [
                MessageKind::OneWay,
                MessageKind::Request,
                MessageKind::Reply,
            ][kind as usize];
            let mut msg =
                OutMessage::new(Priority::from_lane(lane).unwrap(), type_id, header, body);
            msg.kind = kind;
            // A one-way message has no request id (its corr is 0 on the wire).
            msg.corr = if kind == MessageKind::OneWay { 0 } else { corr };
            Msg { a_to_b, msg }
        })
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1 => 1usize..=4, 1 => 1usize..=300, 2 => 300usize..=70_000],
        1..8,
    )
}

/// Checks that `delivered` is `sent`, FIFO per priority, numbered 1, 2, 3….
fn check_delivery(
    sent: &[OutMessage],
    delivered: &[sitenet_protocols::InMessage],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(delivered.len(), sent.len(), "message count");
    for (i, m) in delivered.iter().enumerate() {
        prop_assert_eq!(m.number, i as u64 + 1, "numbers in delivery order");
    }
    for p in Priority::ALL {
        let s: Vec<&OutMessage> = sent.iter().filter(|m| m.priority == p).collect();
        let d: Vec<&sitenet_protocols::InMessage> =
            delivered.iter().filter(|m| m.priority == p).collect();
        prop_assert_eq!(s.len(), d.len(), "count at {:?}", p);
        for (k, (s, d)) in s.iter().zip(d).enumerate() {
            prop_assert_eq!(d.prelude.type_id, s.type_id, "type_id of #{} at {:?}", k, p);
            prop_assert_eq!(d.prelude.kind, s.kind);
            prop_assert_eq!(d.prelude.corr, s.corr);
            prop_assert_eq!(&d.header, &s.header);
            prop_assert!(
                body_equals(&d.body, &s.body),
                "body of #{} at {:?} differs",
                k,
                p
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 200, ..ProptestConfig::default() })]

    /// Any messages, any buffer size, any chunking: delivered exactly as
    /// sent, FIFO within each priority, numbered 1, 2, 3… in delivery order;
    /// afterwards every message is acknowledged.
    #[test]
    fn delivers_what_was_sent(
        msgs in prop::collection::vec(message(), 0..24),
        buffer_size in MIN_BUFFER as usize..=131_072,
        chunks in chunk_sizes(),
    ) {
        // Keep each case cheap: at most 12 MiB in total.
        let mut total = 0u64;
        let msgs: Vec<Msg> = msgs.into_iter().take_while(|m| { total += m.msg.wire_len(); total <= 12 << 20 }).collect();
        let mut pair = Pair::new(buffer_size, SessionConfig::default());
        pair.chunks = chunks;
        let mut sent_ab = Vec::new();
        let mut sent_ba = Vec::new();
        for m in &msgs {
            if m.a_to_b {
                pair.a.send(m.msg.clone());
                sent_ab.push(m.msg.clone());
            } else {
                pair.b.send(m.msg.clone());
                sent_ba.push(m.msg.clone());
            }
        }
        pair.pump().map_err(|e| TestCaseError::fail(format!("protocol error: {e}")))?;
        check_delivery(&sent_ab, &pair.b.delivered)?;
        check_delivery(&sent_ba, &pair.a.delivered)?;
        // Frames never exceed the negotiated size.
        prop_assert!(pair.b.tap.max_frame <= buffer_size.min(65_536));
        prop_assert!(pair.a.tap.max_frame <= buffer_size.min(65_536));
        // After the ack delay everything is acknowledged, both ways.
        pair.advance(Duration::from_millis(25));
        pair.pump().map_err(|e| TestCaseError::fail(format!("protocol error: {e}")))?;
        prop_assert_eq!(pair.a.session.unacked(), 0);
        prop_assert_eq!(pair.b.session.unacked(), 0);
        let wire = |v: &[OutMessage]| v.iter().map(OutMessage::wire_len).sum::<u64>();
        let f = pair.a.session.take_freed();
        prop_assert_eq!((f.messages, f.bytes), (sent_ab.len() as u64, wire(&sent_ab)));
        let f = pair.b.session.take_freed();
        prop_assert_eq!((f.messages, f.bytes), (sent_ba.len() as u64, wire(&sent_ba)));
        prop_assert_eq!(pair.a.session.pending_messages(), 0);
        prop_assert_eq!(pair.b.session.queued_bytes(), 0);
    }
}

fn small(i: u32) -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        i,
        Bytes::from_static(b"hdr"),
        vec![slice(i as usize * 7, 20)],
    )
}

/// Decodes every frame header in the bytes `side.out` holds.
fn headers_in(buf: &sitenet_protocols::ByteBuffer) -> Vec<FrameHeader> {
    let mut v = Vec::new();
    let mut off = 0;
    let mut hb = [0u8; HEADER_LEN];
    while buf.peek(off, &mut hb) {
        let h = FrameHeader::decode(&hb, 65_536).expect("valid header");
        v.push(h);
        off += HEADER_LEN + h.payload_len as usize;
    }
    v
}

#[test]
fn delayed_ack_frees_the_senders_ledger() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    let t0 = pair.now;
    let sent: Vec<OutMessage> = (1..=5).map(small).collect();
    for m in &sent {
        pair.a.send(m.clone());
    }
    pair.a_to_b(usize::MAX).unwrap();
    assert_eq!(pair.b.delivered.len(), 5);
    assert_eq!(pair.a.session.unacked(), 5);
    // B has nothing to piggy-back on and no threshold is reached: no ack yet.
    assert_eq!(
        pair.b.session.poll_timeout(),
        Some(t0 + Duration::from_millis(20))
    );
    pair.now = t0 + Duration::from_millis(19);
    pair.b.session.handle_timeout(pair.now);
    assert_eq!(
        pair.b.session.poll_transmit(pair.now, &mut pair.b.out),
        0,
        "ack before the delay"
    );
    assert!(!pair.b.session.wants_to_send(pair.now));
    // 20 ms after the first unacknowledged message, the ack is due.
    // (Time reaches the session through handle_timeout: the ack delay is
    // a timer, consumed when it fires.)
    pair.now = t0 + Duration::from_millis(20);
    pair.b.session.handle_timeout(pair.now);
    assert!(pair.b.session.wants_to_send(pair.now));
    assert_eq!(
        pair.b.session.poll_transmit(pair.now, &mut pair.b.out),
        HEADER_LEN
    );
    let hs = headers_in(&pair.b.out);
    assert_eq!(hs.len(), 1);
    assert_eq!(hs[0].kind, FrameKind::Ack);
    assert_eq!(hs[0].ack, 5);
    assert_eq!(hs[0].payload_len, 0);
    assert_eq!(pair.b.session.stats().acks_out, 1);
    // The ack timer is gone; only the heartbeat timer (1 s after the last
    // frame written) is left.
    assert_eq!(
        pair.b.session.poll_timeout(),
        Some(pair.now + Duration::from_secs(1))
    );
    pair.b_to_a(usize::MAX).unwrap();
    let bytes: u64 = sent.iter().map(OutMessage::wire_len).sum();
    let f = pair.a.session.take_freed();
    assert_eq!((f.messages, f.bytes), (5, bytes));
    assert_eq!(
        f.by_class.iter().sum::<u64>(),
        bytes + 5 * sitenet_protocols::MESSAGE_OVERHEAD,
        "footprints by class"
    );
    assert_eq!(
        pair.a.session.take_freed(),
        Default::default(),
        "take_freed takes"
    );
    assert_eq!(pair.a.session.unacked(), 0);
    // Nothing more is due: no second ack for the same messages (after a
    // second of silence B writes only a heartbeat).
    pair.b.out.clear();
    pair.advance(Duration::from_millis(500));
    assert_eq!(pair.b.session.poll_transmit(pair.now, &mut pair.b.out), 0);
    pair.advance(Duration::from_millis(500));
    pair.b.session.handle_timeout(pair.now);
    assert_eq!(
        pair.b.session.poll_transmit(pair.now, &mut pair.b.out),
        HEADER_LEN
    );
    let hs = headers_in(&pair.b.out);
    assert_eq!(
        hs.iter().map(|h| (h.kind, h.ack)).collect::<Vec<_>>(),
        vec![(FrameKind::Heartbeat, 5)]
    );
    assert_eq!(pair.b.session.stats().acks_out, 1);
}

#[test]
fn hundred_messages_trigger_an_explicit_ack_at_once() {
    // 99 messages: below the threshold, no ack without the timer.
    let mut pair = Pair::new(65_536, SessionConfig::default());
    for i in 1..=99 {
        pair.a.send(small(i));
    }
    pair.pump().unwrap();
    assert_eq!(pair.b.delivered.len(), 99);
    assert_eq!(pair.b.session.stats().acks_out, 0);
    assert_eq!(pair.a.session.unacked(), 99);

    // 100 messages: the ack is written without waiting for the timer.
    let mut pair = Pair::new(65_536, SessionConfig::default());
    for i in 1..=100 {
        pair.a.send(small(i));
    }
    pair.pump().unwrap();
    assert_eq!(pair.b.delivered.len(), 100);
    assert_eq!(pair.b.session.stats().acks_out, 1);
    assert_eq!(pair.a.tap.count(FrameKind::Ack), 1);
    assert_eq!(pair.a.session.unacked(), 0);
    assert_eq!(pair.a.session.take_freed().messages, 100);
}

/// A held threshold ack is not written on its own; data going the other
/// way carries it; released, it is written at once; the ack delay and a
/// forced ack are never held.
#[test]
fn held_acks_ride_on_replies_and_go_out_when_released() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    pair.b.session.hold_acks(true);
    for i in 1..=100 {
        pair.a.send(small(i));
    }
    pair.pump().unwrap();
    assert_eq!(pair.b.delivered.len(), 100);
    assert!(pair.b.session.ack_waiting());
    assert_eq!(pair.b.session.stats().acks_out, 0, "held: no ACK frame");
    assert_eq!(pair.a.session.unacked(), 100);
    // A reply from B carries the ack: still no ACK frame.
    pair.b.send(small(500));
    pair.pump().unwrap();
    assert_eq!(pair.b.session.stats().acks_out, 0);
    assert_eq!(pair.a.tap.count(FrameKind::Ack), 0);
    assert_eq!(pair.a.session.unacked(), 0, "the reply carried the ack");
    assert!(!pair.b.session.ack_waiting());

    // Released, a waiting threshold ack goes out on the next transmit.
    for i in 1..=100 {
        pair.a.send(small(i));
    }
    pair.pump().unwrap();
    assert_eq!(pair.a.session.unacked(), 100);
    pair.b.session.hold_acks(false);
    pair.pump().unwrap();
    assert_eq!(pair.b.session.stats().acks_out, 1);
    assert_eq!(pair.a.session.unacked(), 0);

    // The ack delay is not held.
    pair.b.session.hold_acks(true);
    pair.a.send(small(1));
    pair.pump().unwrap();
    assert_eq!(pair.a.session.unacked(), 1);
    pair.advance(SessionConfig::default().ack_delay);
    pair.pump().unwrap();
    assert_eq!(
        pair.a.session.unacked(),
        0,
        "the delayed ack went out while held"
    );
    // Nor is a forced one.
    pair.a.send(small(2));
    pair.pump().unwrap();
    assert_eq!(pair.a.session.unacked(), 1);
    pair.b.session.ack_now();
    pair.pump().unwrap();
    assert_eq!(
        pair.a.session.unacked(),
        0,
        "the forced ack went out while held"
    );
}

#[test]
fn sixty_four_kib_trigger_an_explicit_ack_at_once() {
    let mut pair = Pair::new(16_384, SessionConfig::default());
    // One message just under 64 KiB: no immediate ack.
    let m = OutMessage::new(Priority::High, 9, Bytes::new(), vec![slice(0, 60_000)]);
    pair.a.send(m);
    pair.pump().unwrap();
    assert_eq!(pair.b.session.stats().acks_out, 0);
    assert_eq!(pair.a.session.unacked(), 1);
    // A second one brings the unacknowledged bytes past 64 KiB.
    let m = OutMessage::new(Priority::High, 9, Bytes::new(), vec![slice(1, 10_000)]);
    pair.a.send(m);
    pair.pump().unwrap();
    assert_eq!(pair.b.session.stats().acks_out, 1);
    assert_eq!(pair.a.session.unacked(), 0);
}

#[test]
fn acks_piggy_back_on_data_frames() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    for i in 1..=3 {
        pair.a.send(small(i));
    }
    pair.a_to_b(usize::MAX).unwrap();
    assert_eq!(pair.a.session.unacked(), 3);
    // B sends a message of its own: its frame carries ack = 3.
    pair.b.send(small(10));
    pair.b_to_a(usize::MAX).unwrap();
    assert_eq!(pair.a.session.unacked(), 0);
    assert_eq!(
        pair.a.tap.count(FrameKind::Ack),
        0,
        "no explicit ack was needed"
    );
    let data = pair
        .a
        .tap
        .frames
        .iter()
        .find(|f| matches!(f.header.kind, FrameKind::Data | FrameKind::Packed))
        .unwrap();
    assert_eq!(data.header.ack, 3);
    // And B owes no ack any more: after the ack delay it writes nothing.
    pair.advance(Duration::from_millis(100));
    assert_eq!(pair.b.session.poll_transmit(pair.now, &mut pair.b.out), 0);
    assert_eq!(pair.b.session.stats().acks_out, 0);
}

/// `SessionStats::data_frames_out` (the frames a communication pattern
/// costs, what `Metrics::data_frames_sent` publishes) counts exactly the
/// DATA and PACKED frames on the wire: small messages packed together, a
/// large one in several frames, explicit acks and heartbeats not at all.
#[test]
fn data_frames_out_counts_the_frames_that_carry_messages() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    for i in 1..=20 {
        pair.a.send(small(i));
    }
    let big = OutMessage::new(Priority::Low, 9, Bytes::new(), vec![slice(0, 300_000)]);
    pair.a.send(big);
    pair.pump().unwrap();
    pair.advance(Duration::from_secs(2)); // acks and heartbeats
    pair.pump().unwrap();
    // (Each side's tap sees the frames it reads: A's frames are in B's.)
    let on_wire = pair.b.tap.count(FrameKind::Data) + pair.b.tap.count(FrameKind::Packed);
    assert!(on_wire > 2, "several frames: {on_wire}");
    assert_eq!(pair.a.session.stats().data_frames_out, on_wire as u64);
    assert!(pair.a.tap.count(FrameKind::Ack) > 0, "B acknowledged");
    assert_eq!(
        pair.b.session.stats().data_frames_out,
        0,
        "acks are not data"
    );
}
