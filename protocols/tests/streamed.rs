//! Madeleine's deferred receive, sans-IO (`deliver.rs`): a streamed
//! message shows its typed header first and then its body in order, as
//! its frames arrive; it takes no reassembly budget for its body; a lost
//! channel interrupts it and it comes again from offset 0; it is delivered
//! exactly once; and a message that fits one frame is always whole.

mod common;

use bytes::{Bytes, BytesMut};
use common::{body_equals, slice, Pair, StreamEvent};
use sitenet_protocols::{
    ChannelParams, OutMessage, Priority, ReassemblyBudget, SessionConfig, StreamAbort,
};

const MIB: usize = 1 << 20;

fn message(type_id: u32, header: &'static [u8], parts: Vec<Bytes>) -> OutMessage {
    OutMessage::new(
        Priority::default(),
        type_id,
        Bytes::from_static(header),
        parts,
    )
}

/// The body parts of a `len`-byte body made of pattern slices.
fn body(len: usize) -> Vec<Bytes> {
    (0..len.div_ceil(MIB))
        .map(|i| slice(i * 7919, MIB.min(len - i * MIB)))
        .collect()
}

/// The streams in `events`, each as (start header, body, end number or the
/// abort), checking on the way that chunks come after their start, in
/// order, with contiguous offsets from 0.
fn streams(events: &[StreamEvent]) -> Vec<(Bytes, BytesMut, Result<u64, StreamAbort>)> {
    let mut out = Vec::new();
    let mut open: Option<(Bytes, BytesMut)> = None;
    for e in events {
        match e {
            StreamEvent::Start { header, .. } => {
                assert!(open.is_none(), "a start inside a stream: {events:?}");
                open = Some((header.clone(), BytesMut::new()));
            }
            StreamEvent::Chunk { offset, data, .. } => {
                let (_, body) = open.as_mut().expect("a chunk before its start");
                assert_eq!(*offset, body.len() as u64, "chunks are contiguous");
                assert!(!data.is_empty(), "no empty chunk");
                body.extend_from_slice(data);
            }
            StreamEvent::End { number, .. } => {
                let (h, b) = open.take().expect("an end without a start");
                out.push((h, b, Ok(*number)));
            }
            StreamEvent::Abort { why, .. } => {
                let (h, b) = open.take().expect("an abort without a start");
                out.push((h, b, Err(*why)));
            }
        }
    }
    assert!(open.is_none(), "a stream left open");
    out
}

#[test]
fn a_streamed_message_shows_its_header_first_then_its_body_as_it_arrives() {
    let mut pair = Pair::new(16 * 1024, SessionConfig::default());
    pair.b.streaming = true;
    let parts = body(3 * MIB + 12_345);
    pair.a.send(message(5, b"typed header", parts.clone()));
    // A third of the bytes: the header and the first chunks are there
    // already, long before the message is complete.
    pair.a_to_b(MIB).unwrap();
    let StreamEvent::Start {
        type_id, header, ..
    } = &pair.b.events[0]
    else {
        panic!("the header comes first: {:?}", pair.b.events.first());
    };
    assert_eq!((*type_id, header.as_ref()), (5, &b"typed header"[..]));
    let chunks = pair.b.events.len() - 1;
    assert!(chunks > 10, "{chunks} chunks after 1 MiB");
    assert!(pair
        .b
        .events
        .iter()
        .all(|e| !matches!(e, StreamEvent::End { .. })));
    pair.pump().unwrap();
    let s = streams(&pair.b.events);
    assert_eq!(s.len(), 1);
    assert!(body_equals(&s[0].1, &parts));
    assert_eq!(s[0].2, Ok(1));
    assert!(pair.b.delivered.is_empty());
    assert_eq!(pair.b.session.last_received(), 1, "it counts as delivered");
}

#[test]
fn a_message_whole_in_one_frame_is_never_streamed() {
    let mut pair = Pair::new(16 * 1024, SessionConfig::default());
    pair.b.streaming = true;
    pair.a.send(message(5, b"h", vec![slice(1, 10_000)]));
    pair.a.send(message(5, b"h", vec![slice(2, 20)]));
    pair.pump().unwrap();
    assert!(pair.b.events.is_empty(), "{:?}", pair.b.events);
    assert_eq!(pair.b.delivered.len(), 2);
}

#[test]
fn a_streamed_body_takes_no_reassembly_budget() {
    // A budget of one maximum frame: a reassembled 8 MiB message would be
    // blocked for ever; a streamed one flows.
    let budget = ReassemblyBudget::new(64 * 1024);
    let mut pair = Pair::with_budgets(
        64 * 1024,
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        budget.clone(),
    );
    pair.b.streaming = true;
    let parts = body(8 * MIB);
    pair.a.send(message(5, b"header", parts.clone()));
    while pair.a_to_b(256 * 1024).unwrap() > 0 {
        assert!(!pair.b.session.input_blocked());
        assert_eq!(
            budget.available(),
            budget.limit(),
            "the body holds no budget"
        );
        pair.b_to_a(usize::MAX).unwrap();
    }
    let s = streams(&pair.b.events);
    assert_eq!(s.len(), 1);
    assert!(body_equals(&s[0].1, &parts));
}

#[test]
fn a_header_spanning_frames_is_reassembled_and_held_in_the_budget_until_it_starts() {
    let budget = ReassemblyBudget::new(1 << 30);
    let mut pair = Pair::with_budgets(
        4096,
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        budget.clone(),
    );
    pair.b.streaming = true;
    let header = slice(3, 10_000);
    let parts = body(50_000);
    pair.a.send(OutMessage::new(
        Priority::default(),
        5,
        header.clone(),
        parts.clone(),
    ));
    pair.a_to_b(6000).unwrap();
    assert!(pair.b.events.is_empty(), "no start before the whole header");
    assert!(
        budget.available() < budget.limit(),
        "the header holds budget"
    );
    pair.pump().unwrap();
    assert_eq!(budget.available(), budget.limit());
    let s = streams(&pair.b.events);
    assert_eq!(s[0].0, header);
    assert!(body_equals(&s[0].1, &parts));
}

#[test]
fn a_lost_channel_aborts_the_stream_and_the_message_comes_again_from_offset_0() {
    let mut pair = Pair::new(16 * 1024, SessionConfig::default());
    pair.b.streaming = true;
    pair.a.send(message(4, b"before", vec![slice(9, 100)]));
    let parts = body(2 * MIB);
    pair.a.send(message(5, b"big", parts.clone()));
    pair.a_to_b(MIB).unwrap();
    // The channel is lost mid-message.
    for side in [&mut pair.a, &mut pair.b] {
        side.session.channel_down();
        side.out.clear();
        side.input.clear();
    }
    // (The tap follows one channel's frames.)
    pair.tapping = false;
    let mut recorder = common::Recorder {
        stream: true,
        delivered: &mut pair.b.delivered,
        events: &mut pair.b.events,
    };
    pair.b.session.report_interrupted(&mut recorder);
    let StreamEvent::Abort { why, .. } = pair.b.events.last().unwrap() else {
        panic!("the stream is told: {:?}", pair.b.events.last());
    };
    let StreamAbort::ChannelLost { received } = *why else {
        panic!("{why:?}");
    };
    assert!(received > 0 && received < 2 * MIB as u64, "{received}");
    // A new channel: the message restarts from its first fragment.
    let pa = ChannelParams {
        buffer_size: 16 * 1024,
        peer_max_message: common::MAX_MESSAGE,
        peer_last_received: pair.b.session.last_received(),
        generation: 2,
        caps: sitenet_protocols::Capabilities::ALL,
    };
    let pb = ChannelParams {
        peer_last_received: pair.a.session.last_received(),
        ..pa
    };
    pair.a.session.channel_up(pa, pair.now).unwrap();
    pair.b.session.channel_up(pb, pair.now).unwrap();
    pair.pump().unwrap();
    let s = streams(&pair.b.events);
    assert_eq!(s.len(), 2, "the interrupted stream, then the whole one");
    assert_eq!(s[0].2, Err(StreamAbort::ChannelLost { received }));
    assert_eq!(s[0].1.len() as u64, received);
    assert_eq!(s[1].0.as_ref(), b"big");
    assert!(body_equals(&s[1].1, &parts));
    assert_eq!(s[1].2, Ok(2), "delivered once, under its number");
    assert_eq!(pair.b.delivered.len(), 1, "the small one, whole");
}

#[test]
fn a_streamed_duplicate_is_aborted_not_delivered_twice() {
    use sitenet_protocols::ByteBuffer;
    let mut a = common::working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        16 * 1024,
    );
    let mut b = common::working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        16 * 1024,
    );
    let parts = body(100_000);
    a.queue(message(5, b"once", parts.clone())).unwrap();
    let mut wire = Vec::new();
    let mut out = ByteBuffer::with_shared(16 * 1024, 64 * 1024);
    while a.poll_transmit(std::time::Instant::now(), &mut out) > 0 {
        wire.extend(common::take_out(&mut out));
    }
    let (mut delivered, mut events) = (Vec::new(), Vec::new());
    // The same frames twice: a peer replaying them.
    for _ in 0..2 {
        let mut input = ByteBuffer::new(16 * 1024);
        let mut rest = &wire[..];
        while !rest.is_empty() {
            let n = rest.len().min(input.free()).min(5000);
            input.push(&rest[..n]);
            rest = &rest[n..];
            let mut r = common::Recorder {
                stream: true,
                delivered: &mut delivered,
                events: &mut events,
            };
            b.handle_input_with(std::time::Instant::now(), &mut input, &mut r)
                .unwrap();
        }
    }
    let s = streams(&events);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].2, Ok(1));
    assert!(body_equals(&s[0].1, &parts));
    assert_eq!(s[1].2, Err(StreamAbort::Duplicate));
    assert_eq!(b.stats().duplicates, 1);
    assert_eq!(b.last_received(), 1);
}
