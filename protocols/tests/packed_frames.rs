//! PACKED frames (docs/protocol.md §2.5): several small whole messages of
//! one lane in one frame, numbered on from the frame's `msg_number`. The
//! receiver treats each as if it had come alone (duplicates dropped and
//! counted, gaps refused), never lets them overtake a partly received
//! message of their lane, and the sender packs only what fits, leaving
//! large messages to DATA frames.

mod common;

use std::time::Instant;

use bytes::Bytes;
use common::{frame_bytes, fresh, slice, working_session, Pair};
use sitenet_protocols::connection::handshake::MIN_BUFFER;
use sitenet_protocols::connection::packed::{self, PACK_MAX_ENTRY};
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, FLAG_FIRST};
use sitenet_protocols::{
    ByteBuffer, InMessage, MessageKind, OutMessage, Prelude, Priority, ProtocolError,
    ReassemblyBudget, Session, SessionConfig,
};

fn feed(s: &mut Session, data: &[u8]) -> Result<Vec<InMessage>, ProtocolError> {
    let mut input = ByteBuffer::new(64 * 1024);
    input.push(data);
    let mut got = Vec::new();
    s.handle_input(Instant::now(), &mut input, &mut |m| got.push(m))?;
    Ok(got)
}

fn small(lane: u8, tag: u32, body: usize) -> OutMessage {
    OutMessage::new(
        Priority::from_lane(lane).unwrap(),
        tag,
        Bytes::from(tag.to_le_bytes().to_vec()),
        vec![slice(tag as usize, body)],
    )
}

/// A packed frame on `lane` holding `msgs`, the first numbered `first`.
fn packed_frame(lane: u8, first: u64, msgs: &[OutMessage]) -> Vec<u8> {
    let mut ring = ByteBuffer::new(64 * 1024);
    for m in msgs {
        packed::write_entry(m, &mut ring);
    }
    let (a, b) = ring.chunks();
    let payload = [a, b].concat();
    let h = FrameHeader::whole(FrameKind::Packed, lane, first, payload.len() as u32, 0);
    frame_bytes(&h, &payload)
}

#[test]
fn each_packed_message_is_delivered_as_if_it_came_alone() {
    let mut s = fresh();
    let mut req = small(2, 3, 0);
    req.kind = MessageKind::Request;
    req.corr = 41;
    let msgs = [small(2, 1, 10), small(2, 2, 0), req];
    let got = feed(&mut s, &packed_frame(2, 1, &msgs)).unwrap();
    assert_eq!(got.len(), 3);
    for (i, (g, m)) in got.iter().zip(&msgs).enumerate() {
        assert_eq!(g.number, i as u64 + 1);
        assert_eq!(g.priority, Priority::Low);
        assert_eq!(g.prelude, m.prelude());
        assert_eq!(g.header, m.header);
        assert_eq!(g.body.len() as u64, m.body_len());
    }
    assert_eq!(got[2].prelude.corr, 41);
    assert_eq!(s.last_received(), 3);
    assert_eq!(s.stats().delivered, 3);
}

#[test]
fn a_packed_frame_partly_delivered_before_delivers_only_the_rest() {
    let mut s = fresh();
    let msgs: Vec<_> = (1..=4).map(|i| small(3, i, 5)).collect();
    feed(&mut s, &packed_frame(3, 1, &msgs[..2])).unwrap();
    // A resend after a reconnect may pack 1..=4 together.
    let got = feed(&mut s, &packed_frame(3, 1, &msgs)).unwrap();
    assert_eq!(got.iter().map(|m| m.number).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(got[0].header, msgs[2].header);
    assert_eq!(s.stats().duplicates, 2);
    assert_eq!(s.stats().delivered, 4);
}

#[test]
fn a_packed_frame_after_a_gap_is_refused() {
    let mut s = fresh();
    let msgs = [small(3, 1, 5), small(3, 2, 5)];
    assert_eq!(
        feed(&mut s, &packed_frame(3, 2, &msgs)).unwrap_err(),
        ProtocolError::NumberGap { last: 0, got: 2 }
    );
}

#[test]
fn packed_messages_cannot_overtake_a_partly_received_message_of_their_lane() {
    let mut s = fresh();
    // The first fragment of a 1,000-byte message on lane 4.
    let prelude = Prelude {
        type_id: 1,
        kind: MessageKind::OneWay,
        header_len: 0,
        body_len: 1_000,
        corr: 0,
    };
    let mut p = prelude.encode().to_vec();
    p.extend_from_slice(&slice(0, 100));
    let first = FrameHeader {
        kind: FrameKind::Data,
        lane: 4,
        flags: FLAG_FIRST,
        payload_len: p.len() as u32,
        ack: 0,
        msg_number: 0,
        frag_offset: 0,
    };
    feed(&mut s, &frame_bytes(&first, &p)).unwrap();
    // Another lane may go on.
    let got = feed(&mut s, &packed_frame(3, 1, &[small(3, 1, 5)])).unwrap();
    assert_eq!(got.len(), 1);
    // Its own lane may not.
    assert!(matches!(
        feed(&mut s, &packed_frame(4, 2, &[small(4, 2, 5)])).unwrap_err(),
        ProtocolError::FragmentSequence { lane: 4, .. }
    ));
}

#[test]
fn a_packed_message_above_the_maximum_message_is_refused() {
    let cfg = SessionConfig {
        max_message: 100,
        ..SessionConfig::default()
    };
    let mut s = working_session(cfg, ReassemblyBudget::new(1 << 30), MIN_BUFFER);
    let msgs = [small(3, 1, 10), small(3, 2, 200)];
    assert!(matches!(
        feed(&mut s, &packed_frame(3, 1, &msgs)).unwrap_err(),
        ProtocolError::MessageTooLarge { max: 100, .. }
    ));
}

/// The sender packs small queued messages of a lane into one frame, sends
/// a large one alone (DATA), and keeps each lane's order across both.
#[test]
fn the_sender_packs_small_messages_and_sends_large_ones_alone_in_order() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    let mut sent = Vec::new();
    for i in 0..10u32 {
        let body = if i == 4 { PACK_MAX_ENTRY + 1 } else { 40 };
        let m = small(3, i, body);
        sent.push(m.clone());
        pair.a.send(m);
    }
    pair.a_to_b(usize::MAX).unwrap();
    let got = &pair.b.delivered;
    assert_eq!(got.len(), 10);
    for (g, m) in got.iter().zip(&sent) {
        assert_eq!(g.header, m.header, "lane order kept");
    }
    // 0..=3 packed, 4 alone, 5..=9 packed: three frames in all.
    assert_eq!(pair.b.tap.count(FrameKind::Packed), 2);
    assert_eq!(pair.b.tap.count(FrameKind::Data), 1);
    assert_eq!(pair.b.tap.packed_messages, 9);
}

/// The example of docs/protocol.md §2.5, byte for byte.
#[test]
fn the_documented_example_is_what_is_written() {
    let msg = |header: &'static [u8], body: &'static [u8]| {
        OutMessage::new(
            Priority::Medium,
            7,
            Bytes::from_static(header),
            vec![Bytes::from_static(body)],
        )
    };
    let mut frame = packed_frame(3, 5, &[msg(b"\xaa", b"\x01\x02"), msg(b"", b"\x03")]);
    frame[8] = 2; // ack 2
    let documented = "07 0b 03 03  16 00 00 00  02 00 00 00 00 00 00 00
        05 00 00 00 00 00 00 00   00 00 00 00 00 00 00 00
        00 07 00 00 00 01 00 02 00  aa  01 02
        00 07 00 00 00 00 00 01 00  03";
    let bytes: Vec<u8> = documented
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    assert_eq!(frame, bytes);
    let mut arena = bytes::BytesMut::new();
    let mut entries = packed::Entries::new(3, (&frame[32..], &[]), 1 << 20);
    let first = entries.next_entry(&mut arena).unwrap().unwrap();
    assert_eq!(
        (&first.header[..], &first.body[..]),
        (&[0xaa][..], &[1, 2][..])
    );
    let second = entries.next_entry(&mut arena).unwrap().unwrap();
    assert_eq!((&second.header[..], &second.body[..]), (&[][..], &[3][..]));
    assert!(entries.next_entry(&mut arena).is_none());
}

/// Regression: on a channel of the smallest buffer (4 KiB), a message
/// whose packed entry is 4 KiB can never fit a packed frame (4,064
/// payload bytes at most); the sender waited for room for it for ever.
/// It now goes in DATA frames.
#[test]
fn an_entry_larger_than_any_frame_of_the_channel_goes_in_data_frames() {
    let mut pair = Pair::new(MIN_BUFFER as usize, SessionConfig::default());
    let header = 4u32.to_le_bytes().len();
    let m = small(3, 7, PACK_MAX_ENTRY - packed::ENTRY_HEAD_LEN - header);
    assert_eq!(packed::entry_len(&m), Some(PACK_MAX_ENTRY));
    pair.a.send(m);
    pair.a.send(small(3, 8, 10));
    pair.a_to_b(usize::MAX).unwrap();
    assert_eq!(pair.b.delivered.len(), 2, "nothing stalls");
    assert!(pair.b.tap.count(FrameKind::Data) >= 2);
}
