//! Zero-copy bodies, sans-IO: on an output buffer that takes shared pieces,
//! large body parts are queued by reference (never copied into the ring),
//! a 64 KiB message is marshaled whole in one transmit (one vectored
//! write), and whatever the mix of parts, buffer sizes and cuts, the peer
//! receives exactly the message that was sent.

mod common;

use std::time::Instant;

use bytes::Bytes;
use common::{body_equals, slice, take_out, working_session, Pair};
use proptest::prelude::*;
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use sitenet_protocols::wire::marshal::SHARE_MIN;
use sitenet_protocols::{ByteBuffer, OutMessage, Priority, ReassemblyBudget, SessionConfig};

/// The frames in a byte stream: their headers.
fn headers(mut bytes: &[u8]) -> Vec<FrameHeader> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let h = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap(), MAX_FRAME_LEN)
            .expect("a valid frame");
        bytes = &bytes[HEADER_LEN + h.payload_len as usize..];
        out.push(h);
    }
    out
}

#[test]
fn a_64k_body_goes_by_reference_and_is_marshaled_whole_in_one_transmit() {
    let mut s = working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        64 * 1024,
    );
    let body = slice(7, 64 * 1024);
    s.queue(OutMessage::new(
        Priority::default(),
        9,
        Bytes::from_static(b"hdr"),
        vec![body.clone()],
    ))
    .unwrap();
    let mut out = ByteBuffer::with_shared(64 * 1024, 256 * 1024);
    s.poll_transmit(Instant::now(), &mut out);
    assert!(!s.wants_to_send(Instant::now()), "the whole message is out");
    // The ring holds the two frame headers, the prelude and the typed
    // header, and the body's last 63 bytes (the second frame's payload,
    // smaller than SHARE_MIN); the rest of the body stayed where the
    // application put it.
    let first_body = MAX_FRAME_LEN - HEADER_LEN - 28 - 3;
    let tail = body.len() - first_body;
    assert!(tail < SHARE_MIN);
    assert_eq!(out.shared_len(), first_body);
    assert_eq!(out.len() - out.shared_len(), 2 * HEADER_LEN + 28 + 3 + tail);
    let wire = take_out(&mut out);
    let frames = headers(&wire);
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(frames.iter().all(|h| h.kind == FrameKind::Data));
    // The receiver gets the message byte for byte.
    let mut r = fresh_with(64 * 1024);
    let mut input = ByteBuffer::new(wire.len());
    input.push(&wire);
    let mut got = Vec::new();
    r.handle_input(Instant::now(), &mut input, &mut |m| got.push(m))
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header.as_ref(), b"hdr");
    assert_eq!(got[0].body, body);
}

fn fresh_with(buffer_size: u32) -> sitenet_protocols::Session {
    working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        buffer_size,
    )
}

#[test]
fn small_parts_are_copied_and_a_buffer_without_shared_room_copies_everything() {
    // (Larger than a packed entry, which is always copied.)
    let mut s = fresh_with(64 * 1024);
    let parts = vec![slice(1, SHARE_MIN - 1), slice(2, 5000)];
    s.queue(OutMessage::new(
        Priority::default(),
        9,
        Bytes::new(),
        parts.clone(),
    ))
    .unwrap();
    let mut out = ByteBuffer::with_shared(64 * 1024, 256 * 1024);
    s.poll_transmit(Instant::now(), &mut out);
    assert_eq!(out.shared_len(), 5000, "only the part of SHARE_MIN or more");
    let mut s = fresh_with(64 * 1024);
    s.queue(OutMessage::new(Priority::default(), 9, Bytes::new(), parts))
        .unwrap();
    let mut plain = ByteBuffer::new(64 * 1024);
    s.poll_transmit(Instant::now(), &mut plain);
    assert_eq!(plain.shared_len(), 0);
    assert!(plain.len() > 5000 + SHARE_MIN);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any mix of part sizes (around SHARE_MIN, across frames), buffer
    /// sizes and transfer cuts: each message arrives whole and in order.
    #[test]
    fn any_mix_of_parts_arrives_intact(
        buffer in prop::sample::select(vec![4096usize, 16 * 1024, 64 * 1024]),
        msgs in prop::collection::vec(prop::collection::vec(0usize..70_000, 0..5), 1..8),
        chunk in 1usize..100_000,
    ) {
        let mut pair = Pair::new(buffer, SessionConfig::default());
        pair.chunks = vec![chunk, 7, chunk / 3 + 1];
        let mut sent = Vec::new();
        for (i, sizes) in msgs.iter().enumerate() {
            let parts: Vec<Bytes> = sizes.iter().enumerate().map(|(j, &n)| slice(i * 31 + j * 977, n)).collect();
            let header = Bytes::from(vec![i as u8; i * 100]);
            pair.a.send(OutMessage::new(Priority::default(), i as u32, header.clone(), parts.clone()));
            sent.push((header, parts));
        }
        pair.pump().unwrap();
        prop_assert_eq!(pair.b.delivered.len(), sent.len());
        for (m, (header, parts)) in pair.b.delivered.iter().zip(&sent) {
            prop_assert_eq!(&m.header, header);
            prop_assert!(body_equals(&m.body, parts));
        }
    }
}

/// The wire bytes of `msg` sent alone on a fresh channel of `buffer`.
fn wire_of(msg: OutMessage, buffer: u32) -> Vec<u8> {
    let mut s = fresh_with(buffer);
    s.queue(msg).unwrap();
    let mut out = ByteBuffer::with_shared(buffer as usize, 4 * buffer as usize);
    let mut wire = Vec::new();
    while s.poll_transmit(Instant::now(), &mut out) > 0 {
        wire.extend(take_out(&mut out));
    }
    wire
}

/// Zero-copy receive: once a continuation fragment's header is in the
/// ring, the session offers the rest of its payload as a place in the
/// message; bytes read there never pass through the ring, and the message
/// is delivered whole. Read into the ring instead, they still land right.
#[test]
fn a_large_fragment_is_read_in_place_or_through_the_ring_alike() {
    let body = slice(11, 300_000);
    let wire = wire_of(
        OutMessage::new(
            Priority::default(),
            3,
            Bytes::from_static(b"h"),
            vec![body.clone()],
        ),
        64 * 1024,
    );
    let frames = headers(&wire);
    let first = HEADER_LEN + frames[0].payload_len as usize;
    for through_ring in [false, true] {
        let budget = ReassemblyBudget::new(1 << 30);
        let mut r = working_session(SessionConfig::default(), budget.clone(), 64 * 1024);
        let mut input = ByteBuffer::new(64 * 1024);
        let mut got = Vec::new();
        // The first fragment whole, then the second's header and 100 bytes.
        input.push(&wire[..first]);
        r.handle_input(Instant::now(), &mut input, &mut |m| got.push(m))
            .unwrap();
        let mut at = first + HEADER_LEN + 100;
        input.push(&wire[first..at]);
        r.handle_input(Instant::now(), &mut input, &mut |m| got.push(m))
            .unwrap();
        assert!(input.is_empty(), "the fragment was adopted");
        let rest = frames[1].payload_len as usize - 100;
        assert_eq!(r.direct_input().map(|t| t.len()), Some(rest));
        let held = budget.limit() - budget.available();
        assert!(held >= frames[1].payload_len as u64, "its budget is taken");
        // The rest, in odd pieces, in place or through the ring.
        while at < wire.len() {
            let n = 7_777.min(wire.len() - at);
            match r.direct_input().filter(|_| !through_ring) {
                Some(t) => {
                    let n = n.min(t.len());
                    t[..n].copy_from_slice(&wire[at..at + n]);
                    r.direct_commit(n);
                    at += n;
                }
                None => {
                    let n = n.min(input.free());
                    input.push(&wire[at..at + n]);
                    at += n;
                }
            }
            r.handle_input(Instant::now(), &mut input, &mut |m| got.push(m))
                .unwrap();
        }
        assert_eq!(got.len(), 1, "through the ring: {through_ring}");
        assert_eq!(got[0].body, body);
        assert_eq!(budget.available(), budget.limit(), "all budget back");
        assert_eq!(r.stats().frames_in, frames.len() as u64);
    }
}

#[test]
fn a_lost_channel_gives_an_adopted_fragments_budget_back() {
    let wire = wire_of(
        OutMessage::new(
            Priority::default(),
            3,
            Bytes::new(),
            vec![slice(1, 200_000)],
        ),
        64 * 1024,
    );
    let frames = headers(&wire);
    let budget = ReassemblyBudget::new(1 << 30);
    let mut r = working_session(SessionConfig::default(), budget.clone(), 64 * 1024);
    let mut input = ByteBuffer::new(64 * 1024);
    let first = HEADER_LEN + frames[0].payload_len as usize;
    input.push(&wire[..first]);
    r.handle_input(Instant::now(), &mut input, &mut |_| {})
        .unwrap();
    input.push(&wire[first..first + HEADER_LEN + 10]);
    r.handle_input(Instant::now(), &mut input, &mut |_| {})
        .unwrap();
    assert!(r.direct_input().is_some());
    assert!(budget.available() < budget.limit());
    r.channel_down();
    assert!(r.direct_input().is_none());
    assert_eq!(budget.available(), budget.limit());
}
