//! Bad input never crashes: arbitrary bytes into a working session and into
//! both handshake machines, in arbitrary chunks, end in `Ok` or a typed
//! error, never a panic, and never make an input buffer grow or stall. Then
//! one test per rule: each malformed input gives its own error.

mod common;

use std::time::Instant;

use bytes::Bytes;
use common::{frame_bytes, fresh, params, slice, take_out, working_session};
use proptest::prelude::*;
use sitenet_protocols::connection::handshake::{
    self, LocalInfo, MAX_HANDSHAKE_PAYLOAD, MIN_BUFFER,
};
use sitenet_protocols::wire::frame::{
    FrameHeader, FrameKind, FLAG_FIRST, FLAG_LAST, HEADER_LEN, MAX_FRAME_PAYLOAD,
};
use sitenet_protocols::PROTOCOL_VERSION;
use sitenet_protocols::{
    Acceptor, ByteBuffer, FrameError, InMessage, Initiator, MessageKind, Negotiate, NegotiateAns,
    OpenError, OutMessage, Prelude, Priority, ProtocolError, ReassemblyBudget, RefuseReason,
    Session, SessionConfig, SiteId, PRELUDE_LEN,
};

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// A message prelude, possibly invalid (kind 3, reserved bytes), followed by
/// some bytes.
fn prelude_payload() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u32>(),
        prop_oneof![8 => 0u8..3, 1 => any::<u8>()],
        prop_oneof![8 => Just([0u8; 3]), 1 => any::<[u8; 3]>()],
        0u32..64,
        prop_oneof![6 => 0u64..400, 1 => any::<u64>()],
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(
            |(type_id, kind, reserved, header_len, body_len, corr, tail)| {
                let mut v = Vec::with_capacity(PRELUDE_LEN + tail.len());
                v.extend_from_slice(&type_id.to_le_bytes());
                v.push(kind);
                v.extend_from_slice(&reserved);
                v.extend_from_slice(&header_len.to_le_bytes());
                v.extend_from_slice(&body_len.to_le_bytes());
                v.extend_from_slice(&corr.to_le_bytes());
                v.extend_from_slice(&tail);
                v
            },
        )
}

/// A frame whose header is either consistent (fields as a correct sender
/// would set them for its kind, so the frame reaches the session's deeper
/// checks) or loose (any field may be invalid).
fn loose_frame(kinds: std::ops::RangeInclusive<u8>) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop_oneof![20 => Just(PROTOCOL_VERSION), 1 => any::<u8>()],
        prop_oneof![6 => kinds, 1 => any::<u8>()],
        prop_oneof![10 => 1u8..=5, 1 => any::<u8>()],
        prop_oneof![10 => 0u8..=3, 1 => any::<u8>()],
        prop_oneof![10 => Just(None), 1 => any::<u32>().prop_map(Some)],
        prop_oneof![10 => Just(0u64), 3 => 0u64..=4, 1 => any::<u64>()],
        prop_oneof![5 => 1u64..=4, 1 => any::<u64>()],
        prop_oneof![5 => Just(0u64), 3 => 0u64..=600, 1 => any::<u64>()],
        prop_oneof![
            3 => prelude_payload(),
            2 => packed_payload(),
            2 => prop::collection::vec(any::<u8>(), 0..300),
        ],
    )
        .prop_map(
            |(consistent, version, kind, lane, flags, len, ack, number, offset, payload)| {
                let (mut lane, mut flags, mut number, mut offset) = (lane, flags, number, offset);
                if consistent {
                    if kind == FrameKind::Packed as u8 {
                        lane = 1 + lane % 4;
                        (flags, number, offset) = (3, number.max(1), 0);
                    } else if kind == 0 {
                        lane = 1 + lane % 4;
                        flags &= 3;
                        if flags & 2 == 0 {
                            number = 0;
                        }
                        if flags & 1 != 0 {
                            offset = 0;
                        }
                    } else {
                        (lane, flags, number, offset) = (5, 3, 0, 0);
                    }
                }
                let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
                v.push(version);
                v.push(kind);
                v.push(lane);
                v.push(flags);
                v.extend_from_slice(&len.unwrap_or(payload.len() as u32).to_le_bytes());
                v.extend_from_slice(&ack.to_le_bytes());
                v.extend_from_slice(&number.to_le_bytes());
                v.extend_from_slice(&offset.to_le_bytes());
                v.extend_from_slice(&payload);
                v
            },
        )
}

/// A packed frame's payload: entries that are mostly well formed (so the
/// delivery and numbering rules are reached), now and then with a wrong
/// kind, lengths past the payload's end, or trailing bytes.
fn packed_payload() -> impl Strategy<Value = Vec<u8>> {
    let entry = (
        prop_oneof![10 => 0u8..=2, 1 => any::<u8>()],
        0u16..40,
        prop_oneof![10 => 0u16..300, 1 => any::<u16>()],
    )
        .prop_map(|(kind, header_len, body_len)| {
            let mut v = vec![kind];
            v.extend_from_slice(&77u32.to_le_bytes());
            v.extend_from_slice(&header_len.to_le_bytes());
            v.extend_from_slice(&body_len.to_le_bytes());
            if kind != 0 {
                v.extend_from_slice(&9u64.to_le_bytes());
            }
            let content = (header_len as usize + body_len as usize).min(400);
            v.extend_from_slice(&slice(body_len as usize, content));
            v
        });
    (
        prop::collection::vec(entry, 0..6),
        prop::collection::vec(any::<u8>(), 0..3),
    )
        .prop_map(|(entries, tail)| [entries.concat(), tail].concat())
}

/// Pieces of a garbage stream: raw bytes or loose frames.
fn garbage(
    kinds: std::ops::RangeInclusive<u8>,
    valid: BoxedStrategy<Vec<u8>>,
) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            2 => prop::collection::vec(any::<u8>(), 0..200),
            5 => loose_frame(kinds),
            2 => valid,
        ],
        0..12,
    )
    .prop_map(|pieces| pieces.concat())
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1usize..=3, 1usize..=100, 100usize..=5000], 1..6)
}

/// Valid data frames of small complete messages (so the session's deeper
/// states are reached): numbers 1..=4 in order.
fn valid_data() -> BoxedStrategy<Vec<u8>> {
    (1u64..=4, 1u8..=4, 0usize..300)
        .prop_map(|(n, lane, len)| {
            let m = OutMessage::new(
                Priority::from_lane(lane).unwrap(),
                5,
                Bytes::new(),
                vec![slice(n as usize, len)],
            );
            let mut p = m.prelude().encode().to_vec();
            p.extend_from_slice(&m.body[0]);
            let h = FrameHeader::whole(FrameKind::Data, lane, n, p.len() as u32, 0);
            frame_bytes(&h, &p)
        })
        .boxed()
}

fn control(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    frame_bytes(
        &FrameHeader::control(kind, payload.len() as u32, 0),
        payload,
    )
}

fn ser<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // As the handshake encodes them: named fields.
    rmp_serde::to_vec_named(v).unwrap()
}

fn site() -> impl Strategy<Value = SiteId> {
    prop_oneof![
        Just(SiteId(1)),
        Just(SiteId(2)),
        Just(SiteId(3)),
        any::<u128>().prop_map(SiteId)
    ]
}

/// Valid-looking handshake frames with arbitrary field values.
fn valid_handshake() -> BoxedStrategy<Vec<u8>> {
    let listen = prop::collection::vec("[a-z:0-9.]{0,20}", 0..20);
    prop_oneof![
        (
            any::<u8>(),
            any::<u8>(),
            any::<u64>(),
            site(),
            listen.clone()
        )
            .prop_map(|(min, max, caps, site, listen)| {
                control(
                    FrameKind::Present,
                    &ser(&handshake::Present {
                        versions: sitenet_protocols::VersionRange::new(min, max),
                        caps: sitenet_protocols::Capabilities::from_bits(caps),
                        site,
                        listen,
                        nonce: [0xAC; 32],
                    }),
                )
            },),
        (
            any::<u8>(),
            site(),
            listen,
            any::<u32>(),
            any::<u64>(),
            0u64..5,
            0u64..5,
            (0u64..3, any::<u64>())
        )
            .prop_map(
                |(
                    version,
                    site,
                    listen,
                    buffer_size,
                    max_message,
                    last_received,
                    last_generation,
                    (opener, seq),
                )| {
                    let version = if version < 200 { 6 } else { version };
                    let n = Negotiate {
                        version,
                        site,
                        listen,
                        buffer_size,
                        max_message,
                        last_received,
                        last_generation,
                        attempt: sitenet_protocols::Attempt { opener, seq },
                        nonce: [0x1A; 32],
                        proof: None,
                        cookie: None,
                        session: 0,
                        caps: sitenet_protocols::Capabilities::ALL,
                    };
                    control(FrameKind::Negotiate, &ser(&n))
                }
            ),
        (
            prop_oneof![any::<u32>(), MIN_BUFFER..=65_536],
            any::<u64>(),
            any::<u64>(),
            0u64..5
        )
            .prop_map(|(buffer_size, max_message, last_received, generation)| {
                let a = NegotiateAns::Accept {
                    buffer_size,
                    max_message,
                    last_received,
                    generation,
                    fresh: false,
                    rekey: false,
                    cookie: None,
                    session: 0,
                };
                control(FrameKind::NegotiateAns, &ser(&a))
            }),
        (0usize..4).prop_map(|r| {
            let r = [
                RefuseReason::LostTie,
                RefuseReason::Stale,
                RefuseReason::Closing,
                RefuseReason::Unproven,
            ][r];
            control(FrameKind::NegotiateAns, &ser(&NegotiateAns::Refuse(r)))
        }),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// Feeding
// ---------------------------------------------------------------------------

/// A working session that has sent three messages (so acks 1..=3 are valid).
fn session_with_sent(cfg: SessionConfig, budget: ReassemblyBudget, buffer_size: u32) -> Session {
    let mut s = working_session(cfg, budget, buffer_size);
    for i in 0..3 {
        s.queue(OutMessage::new(
            Priority::Medium,
            i,
            Bytes::new(),
            vec![slice(0, 10)],
        ))
        .unwrap();
    }
    let mut sink = ByteBuffer::new(buffer_size as usize);
    s.poll_transmit(Instant::now(), &mut sink);
    assert_eq!(s.last_sent(), 3);
    s
}

/// Feeds `data` into the session through an input buffer of `cap` bytes in
/// chunks, until the data ends or the session reports an error.
fn feed_session(
    s: &mut Session,
    cap: usize,
    data: &[u8],
    chunks: &[usize],
) -> (Result<(), ProtocolError>, Vec<InMessage>) {
    let mut input = ByteBuffer::new(cap);
    let mut delivered = Vec::new();
    let now = Instant::now();
    let mut off = 0;
    let mut i = 0;
    while off < data.len() {
        let free = input.free();
        if free == 0 && s.input_blocked() {
            // Backpressure, not a stall: the budget is short, and the
            // session waits for it without failing the peer.
            return (Ok(()), delivered);
        }
        assert!(free > 0, "input buffer full after Ok: the session stalled");
        let n = chunks[i % chunks.len()].min(free).min(data.len() - off);
        i += 1;
        input.push(&data[off..off + n]);
        off += n;
        let r = s.handle_input(now, &mut input, &mut |m| delivered.push(m));
        assert!(input.len() <= input.capacity());
        if r.is_err() {
            return (r, delivered);
        }
    }
    (Ok(()), delivered)
}

/// Feeds a whole byte string in one go (test helper for the specific cases).
fn feed(s: &mut Session, cap: usize, data: &[u8]) -> Result<Vec<InMessage>, ProtocolError> {
    let (r, d) = feed_session(s, cap, data, &[usize::MAX]);
    r.map(|()| d)
}

fn local(site: u128) -> LocalInfo {
    LocalInfo {
        site: SiteId(site),
        listen: vec!["tcp:127.0.0.1:7000".into()],
        buffer_size: 65_536,
        max_message: 1 << 28,
        speaks: sitenet_protocols::Speaks::CURRENT,
    }
}

/// Pushes `data` into a handshake input buffer `chunks[i]` bytes at a time
/// (cycling), calling `step` after each chunk until it yields an outcome.
fn feed_chunks<T>(
    data: &[u8],
    chunks: &[usize],
    who: &str,
    mut step: impl FnMut(&mut ByteBuffer) -> Result<Option<T>, OpenError>,
) -> Result<Option<T>, OpenError> {
    let mut input = ByteBuffer::new(MIN_BUFFER as usize);
    let mut off = 0;
    let mut i = 0;
    while off < data.len() {
        let free = input.free();
        assert!(free > 0, "handshake input buffer full: the {who} stalled");
        let n = chunks[i % chunks.len()].min(free).min(data.len() - off);
        i += 1;
        input.push(&data[off..off + n]);
        off += n;
        if let Some(o) = step(&mut input)? {
            return Ok(Some(o));
        }
    }
    Ok(None)
}

/// Feeds `data` into a fresh Initiator in chunks; returns its outcome.
fn feed_initiator(
    data: &[u8],
    chunks: &[usize],
    expected: Option<SiteId>,
) -> Result<Option<handshake::Opened>, OpenError> {
    let mut ini = Initiator::new(local(2), expected, 0, 0, [0x1A; 32]);
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    feed_chunks(data, chunks, "initiator", |input| {
        ini.handle_input(input, &mut output)
    })
}

/// Feeds `data` into a fresh Acceptor in chunks; returns its outcome.
fn feed_acceptor(data: &[u8], chunks: &[usize]) -> Result<Option<Negotiate>, OpenError> {
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::new(&local(1), [0xAC; 32], &mut output);
    feed_chunks(data, chunks, "acceptor", |input| {
        acc.handle_input(input, &mut output)
    })
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Raw bytes into a working session: Ok or a typed error, no panic, no stall.
    #[test]
    fn session_survives_raw_bytes(data in prop::collection::vec(any::<u8>(), 0..3000), chunks in chunk_sizes()) {
        let mut s = session_with_sent(SessionConfig::default(), ReassemblyBudget::new(1 << 20), MIN_BUFFER);
        let _ = feed_session(&mut s, MIN_BUFFER as usize, &data, &chunks);
    }

    /// Structured garbage (loose frames, invalid preludes, valid frames mixed
    /// in) reaches the session's deeper states; still no panic or stall, and
    /// the reassembly budget is whole again once the session is gone.
    #[test]
    fn session_survives_structured_garbage(
        data in garbage(0..=11, valid_data()),
        chunks in chunk_sizes(),
        buffer_size in MIN_BUFFER..=70_000,
        max_message in prop_oneof![Just(1u64 << 28), 0u64..500],
    ) {
        let budget = ReassemblyBudget::new(100_000);
        let cfg = SessionConfig { max_message, ..SessionConfig::default() };
        let mut s = session_with_sent(cfg, budget.clone(), buffer_size);
        let (r, delivered) = feed_session(&mut s, buffer_size as usize, &data, &chunks);
        // Whatever was delivered was numbered 1, 2, 3, … .
        for (i, m) in delivered.iter().enumerate() {
            prop_assert_eq!(m.number, i as u64 + 1);
        }
        if let Err(e) = r {
            // A typed error with a human-readable reason.
            prop_assert!(!e.to_string().is_empty());
        }
        drop(s);
        prop_assert_eq!(budget.available(), 100_000);
    }

    /// Mutations of a valid byte stream: no panic, no stall.
    #[test]
    fn session_survives_mutated_valid_stream(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        chunks in chunk_sizes(),
    ) {
        let mut pair = common::Pair::new(8192, SessionConfig::default());
        for i in 0..6u32 {
            pair.a.send(OutMessage::new(Priority::from_lane(1 + (i % 4) as u8).unwrap(), i, Bytes::from_static(b"h"), vec![slice(i as usize, 3000 * i as usize)]));
        }
        let mut stream = Vec::new();
        let now = pair.now;
        while pair.a.session.poll_transmit(now, &mut pair.a.out) > 0 {
            stream.extend(take_out(&mut pair.a.out));
        }
        for (i, b) in flips {
            let i = i.index(stream.len());
            stream[i] ^= b.max(1);
        }
        stream.truncate(cut.index(stream.len() + 1));
        let mut s = session_with_sent(SessionConfig::default(), ReassemblyBudget::new(1 << 20), 8192);
        let _ = feed_session(&mut s, 8192, &stream, &chunks);
    }

    /// Garbage into an initiator: Ok or a typed error, never a panic or stall.
    #[test]
    fn initiator_survives_garbage(
        data in garbage(0..=10, valid_handshake()),
        chunks in chunk_sizes(),
        expected in prop::option::of(site()),
    ) {
        let _ = feed_initiator(&data, &chunks, expected);
    }

    /// Garbage into an acceptor: Ok or a typed error, never a panic or stall.
    #[test]
    fn acceptor_survives_garbage(data in garbage(0..=10, valid_handshake()), chunks in chunk_sizes()) {
        if let Ok(Some(n)) = feed_acceptor(&data, &chunks) {
            // Only a NEGOTIATE that passed every check comes out.
            prop_assert_eq!(n.version, 1);
            prop_assert!(n.buffer_size >= MIN_BUFFER);
            prop_assert!(n.site != SiteId(1));
        }
    }
}

// ---------------------------------------------------------------------------
// Specific cases
// ---------------------------------------------------------------------------

fn data_header(lane: u8, flags: u8, payload_len: u32, number: u64, offset: u64) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Data,
        lane,
        flags,
        payload_len,
        ack: 0,
        msg_number: number,
        frag_offset: offset,
    }
}

fn prelude_bytes(header_len: u32, body_len: u64) -> [u8; PRELUDE_LEN] {
    Prelude {
        type_id: 77,
        kind: MessageKind::OneWay,
        header_len,
        body_len,
        corr: 0,
    }
    .encode()
}

/// A complete one-frame message with a body of `body` bytes.
fn whole(lane: u8, number: u64, body: usize) -> Vec<u8> {
    let mut p = prelude_bytes(0, body as u64).to_vec();
    p.extend_from_slice(&slice(number as usize, body));
    frame_bytes(
        &data_header(lane, FLAG_FIRST | FLAG_LAST, p.len() as u32, number, 0),
        &p,
    )
}

#[test]
fn oversized_payload_len_is_refused_from_the_header_alone() {
    let max = MIN_BUFFER as usize - HEADER_LEN;
    for len in [u32::MAX, 1 << 30, max as u32 + 1] {
        let mut s = fresh();
        // Only the 32 header bytes are there: the error comes before any
        // payload byte arrives, so nothing was allocated for it.
        let hb = frame_bytes(&data_header(3, FLAG_FIRST | FLAG_LAST, len, 1, 0), &[]);
        assert_eq!(
            feed(&mut s, MIN_BUFFER as usize, &hb).unwrap_err(),
            ProtocolError::Frame(FrameError::TooLarge {
                len: len as usize,
                max
            })
        );
    }
    // The largest allowed payload is accepted (the frame is just incomplete).
    let mut s = fresh();
    let hb = frame_bytes(
        &data_header(3, FLAG_FIRST | FLAG_LAST, max as u32, 1, 0),
        &[],
    );
    assert!(feed(&mut s, MIN_BUFFER as usize, &hb).unwrap().is_empty());
    // A 128 KiB buffer still caps frames at 64 KiB.
    let mut s = working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        131_072,
    );
    let hb = frame_bytes(
        &data_header(
            3,
            FLAG_FIRST | FLAG_LAST,
            MAX_FRAME_PAYLOAD as u32 + 1,
            1,
            0,
        ),
        &[],
    );
    assert_eq!(
        feed(&mut s, 131_072, &hb).unwrap_err(),
        ProtocolError::Frame(FrameError::TooLarge {
            len: MAX_FRAME_PAYLOAD + 1,
            max: MAX_FRAME_PAYLOAD
        })
    );
    // Handshake frames are bounded by MAX_HANDSHAKE_PAYLOAD.
    let hb = frame_bytes(
        &FrameHeader::control(FrameKind::Present, MAX_HANDSHAKE_PAYLOAD as u32 + 1, 0),
        &[],
    );
    assert_eq!(
        feed_initiator(&hb, &[usize::MAX], None).unwrap_err(),
        OpenError::Protocol(ProtocolError::Frame(FrameError::TooLarge {
            len: MAX_HANDSHAKE_PAYLOAD + 1,
            max: MAX_HANDSHAKE_PAYLOAD
        }))
    );
    let hb = frame_bytes(
        &FrameHeader::control(FrameKind::Negotiate, u32::MAX, 0),
        &[],
    );
    assert!(matches!(
        feed_acceptor(&hb, &[usize::MAX]),
        Err(OpenError::Protocol(ProtocolError::Frame(
            FrameError::TooLarge { .. }
        )))
    ));
}

#[test]
fn unknown_kind_and_bad_header_fields() {
    let good = whole(3, 1, 10);
    let cases: Vec<(usize, u8, FrameError)> = vec![
        (1, 14, FrameError::UnknownKind(14)),
        (1, 255, FrameError::UnknownKind(255)),
        (0, 0, FrameError::Version(0)),
        (0, 1, FrameError::Version(1)),
        (0, 2, FrameError::Version(2)),
        (0, 3, FrameError::Version(3)),
        (0, 4, FrameError::Version(4)),
        (0, 5, FrameError::Version(5)),
        (0, 6, FrameError::Version(6)),
        (0, 8, FrameError::Version(8)),
        (3, 0x83, FrameError::Flags(0x83)),
        (2, 0, FrameError::Lane(0)),
        (2, 5, FrameError::Lane(5)),
    ];
    for (at, byte, err) in cases {
        let mut b = good.clone();
        b[at] = byte;
        assert_eq!(
            feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
            ProtocolError::Frame(err)
        );
    }
    // A number on a non-last fragment; none on a last one.
    let b = frame_bytes(&data_header(3, FLAG_FIRST, 40, 1, 0), &[0; 40]);
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Frame(FrameError::Numbering {
            last: false,
            number: 1
        })
    );
    let b = frame_bytes(&data_header(3, FLAG_FIRST | FLAG_LAST, 40, 0, 0), &[0; 40]);
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Frame(FrameError::Numbering {
            last: true,
            number: 0
        })
    );
    // A first fragment with an offset.
    let b = frame_bytes(&data_header(3, FLAG_FIRST | FLAG_LAST, 40, 1, 8), &[0; 40]);
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Frame(FrameError::Offset(8))
    );
    // A control frame with data-frame fields.
    let mut h = FrameHeader::control(FrameKind::Heartbeat, 0, 0);
    h.lane = 3;
    let b = frame_bytes(&h, &[]);
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Frame(FrameError::ControlFields(FrameKind::Heartbeat))
    );
    // A handshake frame on a working channel.
    let b = control(FrameKind::Present, &[]);
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Unexpected {
            kind: FrameKind::Present,
            state: "working"
        }
    );
}

#[test]
fn wrong_version_in_the_first_handshake_frame_is_a_version_mismatch() {
    // Initiator: PRESENT with format byte 6 in its frame header (a
    // version-6 peer, whose byte 0 was its version).
    let mut out = ByteBuffer::new(MIN_BUFFER as usize);
    Acceptor::new(&local(1), [0xAC; 32], &mut out);
    let (x, y) = out.chunks();
    let mut present = [x, y].concat();
    present[0] = 6;
    let e = feed_initiator(&present, &[usize::MAX], None).unwrap_err();
    assert_eq!(
        e,
        OpenError::VersionMismatch {
            local: sitenet_protocols::Speaks::CURRENT.versions,
            peer: sitenet_protocols::VersionRange::exactly(6)
        }
    );
    assert!(e.is_permanent());
    // Acceptor: NEGOTIATE with format byte 8.
    let n = Negotiate {
        version: PROTOCOL_VERSION,
        site: SiteId(9),
        listen: vec![],
        buffer_size: 65_536,
        max_message: 1 << 20,
        last_received: 0,
        last_generation: 0,
        attempt: sitenet_protocols::Attempt::UNKNOWN,
        nonce: [0x1A; 32],
        proof: None,
        cookie: None,
        session: 0,
        caps: sitenet_protocols::Capabilities::ALL,
    };
    let mut b = control(FrameKind::Negotiate, &ser(&n));
    b[0] = 8;
    let e = feed_acceptor(&b, &[1]).unwrap_err();
    assert_eq!(
        e,
        OpenError::VersionMismatch {
            local: sitenet_protocols::Speaks::CURRENT.versions,
            peer: sitenet_protocols::VersionRange::exactly(8)
        }
    );
    assert!(e.is_permanent());
}

#[test]
fn continuation_without_first_fragment() {
    let b = frame_bytes(&data_header(2, 0, 10, 0, PRELUDE_LEN as u64), &[0; 10]);
    assert!(matches!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::FragmentSequence { lane: 2, reason } if reason.contains("continuation")
    ));
    let b = frame_bytes(
        &data_header(2, FLAG_LAST, 10, 1, PRELUDE_LEN as u64),
        &[0; 10],
    );
    assert!(matches!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::FragmentSequence { lane: 2, .. }
    ));
}

#[test]
fn fragment_sequence_offset_and_length_errors() {
    let mut first = prelude_bytes(0, 100).to_vec();
    first.extend_from_slice(&[1; 20]);
    let first = frame_bytes(
        &data_header(4, FLAG_FIRST, first.len() as u32, 0, 0),
        &first,
    );
    // A new message on a lane where one is incomplete.
    let b = [first.clone(), whole(4, 1, 5)].concat();
    assert!(matches!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::FragmentSequence { lane: 4, reason } if reason.contains("incomplete")
    ));
    // Other lanes are independent.
    let b = [first.clone(), whole(3, 1, 5)].concat();
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap().len(),
        1
    );
    // A continuation at the wrong offset (48 bytes received so far).
    let b = [
        first.clone(),
        frame_bytes(&data_header(4, 0, 10, 0, 47), &[0; 10]),
    ]
    .concat();
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::FragmentOffset {
            lane: 4,
            got: 47,
            expected: 48
        }
    );
    // More bytes than announced.
    let b = [
        first.clone(),
        frame_bytes(&data_header(4, FLAG_LAST, 81, 1, 48), &[0; 81]),
    ]
    .concat();
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::MessageLength {
            lane: 4,
            got: 48 + 81,
            announced: 128
        }
    );
    // A last fragment that leaves the message short.
    let b = [
        first.clone(),
        frame_bytes(&data_header(4, FLAG_LAST, 79, 1, 48), &[0; 79]),
    ]
    .concat();
    assert_eq!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::MessageLength {
            lane: 4,
            got: 127,
            announced: 128
        }
    );
    // Exactly right: delivered.
    let b = [
        first,
        frame_bytes(&data_header(4, FLAG_LAST, 80, 1, 48), &[2; 80]),
    ]
    .concat();
    let d = feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].body.len(), 100);
    assert_eq!(&d[0].body[..20], &[1; 20]);
    assert_eq!(&d[0].body[20..], &[2; 80]);
    // A first fragment shorter than the prelude.
    let b = frame_bytes(&data_header(1, FLAG_FIRST | FLAG_LAST, 27, 1, 0), &[0; 27]);
    assert!(matches!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::FragmentSequence { lane: 1, .. }
    ));
    // An invalid prelude (unknown message kind).
    let mut p = prelude_bytes(0, 0);
    p[4] = 9;
    let b = frame_bytes(&data_header(1, FLAG_FIRST | FLAG_LAST, 28, 1, 0), &p);
    assert!(matches!(
        feed(&mut fresh(), MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::Malformed {
            what: "message prelude",
            ..
        }
    ));
}

#[test]
fn message_number_gap_and_duplicates() {
    let mut s = fresh();
    assert_eq!(
        feed(&mut s, MIN_BUFFER as usize, &whole(3, 2, 5)).unwrap_err(),
        ProtocolError::NumberGap { last: 0, got: 2 }
    );
    let mut s = fresh();
    let d = feed(
        &mut s,
        MIN_BUFFER as usize,
        &[whole(3, 1, 5), whole(2, 2, 5)].concat(),
    )
    .unwrap();
    assert_eq!(d.iter().map(|m| m.number).collect::<Vec<_>>(), vec![1, 2]);
    // A repeated number is discarded and counted, not delivered again.
    let d = feed(
        &mut s,
        MIN_BUFFER as usize,
        &[whole(3, 1, 5), whole(3, 2, 5)].concat(),
    )
    .unwrap();
    assert!(d.is_empty());
    assert_eq!(s.stats().duplicates, 2);
    assert_eq!(s.stats().delivered, 2);
    assert_eq!(s.last_received(), 2);
    assert_eq!(
        feed(&mut s, MIN_BUFFER as usize, &whole(3, 4, 5)).unwrap_err(),
        ProtocolError::NumberGap { last: 2, got: 4 }
    );
}

#[test]
fn ack_beyond_sent() {
    let mut s = fresh();
    let b = frame_bytes(&FrameHeader::control(FrameKind::Heartbeat, 0, 1), &[]);
    assert_eq!(
        feed(&mut s, MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::AckBeyondSent { ack: 1, sent: 0 }
    );
    let mut s = session_with_sent(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 20),
        MIN_BUFFER,
    );
    let b = frame_bytes(&FrameHeader::control(FrameKind::Ack, 0, 3), &[]);
    assert!(feed(&mut s, MIN_BUFFER as usize, &b).is_ok());
    assert_eq!(s.unacked(), 0);
    // On a data frame too, and before its payload has arrived.
    let mut h = data_header(2, FLAG_FIRST | FLAG_LAST, 100, 1, 0);
    h.ack = 4;
    let b = frame_bytes(&h, &[]);
    assert_eq!(
        feed(&mut s, MIN_BUFFER as usize, &b).unwrap_err(),
        ProtocolError::AckBeyondSent { ack: 4, sent: 3 }
    );
    // And in the handshake's last-received.
    let mut s = fresh();
    let mut p = params(MIN_BUFFER);
    p.peer_last_received = 1;
    assert_eq!(
        s.channel_up(p, std::time::Instant::now()).unwrap_err(),
        ProtocolError::AckBeyondSent { ack: 1, sent: 0 }
    );
}

#[test]
fn prelude_beyond_max_message() {
    let cfg = SessionConfig {
        max_message: 1 << 20,
        ..SessionConfig::default()
    };
    let budget = ReassemblyBudget::new(1 << 30);
    let first = |body_len: u64| {
        let p = prelude_bytes(4, body_len);
        frame_bytes(&data_header(2, FLAG_FIRST, PRELUDE_LEN as u32, 0, 0), &p)
    };
    let mut s = working_session(cfg.clone(), budget.clone(), MIN_BUFFER);
    assert_eq!(
        feed(&mut s, MIN_BUFFER as usize, &first((1 << 20) - 31)).unwrap_err(),
        ProtocolError::MessageTooLarge {
            size: (1 << 20) + 1,
            max: 1 << 20
        }
    );
    assert_eq!(
        budget.available(),
        1 << 30,
        "nothing reserved for a refused message"
    );
    // A huge announced size does not overflow or allocate.
    let mut s = working_session(cfg.clone(), budget.clone(), MIN_BUFFER);
    assert!(matches!(
        feed(&mut s, MIN_BUFFER as usize, &first(u64::MAX - 100)).unwrap_err(),
        ProtocolError::MessageTooLarge { .. }
    ));
    // Exactly the maximum is accepted; it holds budget only for the bytes
    // sent so far (none beyond the prelude).
    let mut s = working_session(cfg, budget.clone(), MIN_BUFFER);
    assert!(feed(&mut s, MIN_BUFFER as usize, &first((1 << 20) - 32)).is_ok());
    assert_eq!(budget.available(), 1 << 30);
    drop(s);
    assert_eq!(budget.available(), 1 << 30);
}

#[test]
fn reassembly_budget_is_taken_as_bytes_arrive_and_returned() {
    let budget = ReassemblyBudget::new(10_000);
    let first = |body_len: u64, payload: &[u8]| {
        let mut p = prelude_bytes(0, body_len).to_vec();
        p.extend_from_slice(payload);
        frame_bytes(&data_header(3, FLAG_FIRST, p.len() as u32, 0, 0), &p)
    };
    // Announcing more than the whole budget costs nothing until bytes come.
    let mut s1 = working_session(SessionConfig::default(), budget.clone(), MIN_BUFFER);
    feed(&mut s1, MIN_BUFFER as usize, &first(20_000, &[])).unwrap();
    assert_eq!(budget.available(), 10_000);
    drop(s1);
    // A partly received message holds what it received.
    let mut s1 = working_session(SessionConfig::default(), budget.clone(), MIN_BUFFER);
    feed(&mut s1, MIN_BUFFER as usize, &first(8_000, &[7; 100])).unwrap();
    assert_eq!(budget.available(), 9_900);
    assert_eq!(s1.budget_held(), 100);
    // A one-frame message takes nothing from the budget.
    let mut s3 = working_session(SessionConfig::default(), budget.clone(), MIN_BUFFER);
    let d = feed(&mut s3, MIN_BUFFER as usize, &whole(1, 1, 1_500)).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(budget.available(), 9_900);
    // Dropping the session returns what its partial message held.
    drop(s1);
    assert_eq!(budget.available(), 10_000);
    // So does losing the channel.
    let mut s4 = working_session(SessionConfig::default(), budget.clone(), MIN_BUFFER);
    feed(&mut s4, MIN_BUFFER as usize, &first(9_000, &[1; 1_000])).unwrap();
    assert_eq!(budget.available(), 9_000);
    s4.channel_down();
    assert_eq!(budget.available(), 10_000);
    assert_eq!(budget.holders(), 0);
    // And a message that fails mid-way (bad continuation) returns it too.
    let mut s5 = working_session(SessionConfig::default(), budget.clone(), MIN_BUFFER);
    let b = [
        first(9_000, &[2; 500]),
        frame_bytes(&data_header(3, 0, 4, 0, 99), &[0; 4]),
    ]
    .concat();
    assert!(feed(&mut s5, MIN_BUFFER as usize, &b).is_err());
    drop(s5);
    assert_eq!(budget.available(), 10_000);
}

#[test]
fn handshake_frames_in_the_wrong_state() {
    // The initiator expects PRESENT first.
    let n = control(
        FrameKind::NegotiateAns,
        &ser(&NegotiateAns::Refuse(RefuseReason::Stale)),
    );
    assert_eq!(
        feed_initiator(&n, &[5], None).unwrap_err(),
        OpenError::Protocol(ProtocolError::Unexpected {
            kind: FrameKind::NegotiateAns,
            state: "expecting PRESENT"
        })
    );
    // The acceptor expects NEGOTIATE.
    let p = control(FrameKind::Heartbeat, &[]);
    assert!(matches!(
        feed_acceptor(&p, &[5]).unwrap_err(),
        OpenError::Protocol(ProtocolError::Unexpected {
            kind: FrameKind::Heartbeat,
            ..
        })
    ));
    // A PRESENT that does not decode.
    let p = control(FrameKind::Present, &[0xc1, 0xff, 0x00]);
    assert!(matches!(
        feed_initiator(&p, &[1], None).unwrap_err(),
        OpenError::Protocol(ProtocolError::Malformed {
            what: "PRESENT",
            ..
        })
    ));
    assert!(!feed_initiator(&p, &[1], None).unwrap_err().is_permanent());
}

/// A first fragment whose prelude announces a size that overflows u64 when
/// the prelude, header and body lengths are added.
fn overflowing_first(header_len: u32, wrapped_total: u64) -> Vec<u8> {
    // 28 + header_len + body_len == wrapped_total (mod 2^64).
    let body_len = wrapped_total.wrapping_sub(PRELUDE_LEN as u64 + header_len as u64);
    let p = Prelude {
        type_id: 1,
        kind: MessageKind::OneWay,
        header_len,
        body_len,
        corr: 0,
    }
    .encode();
    let mut payload = p.to_vec();
    payload.resize(wrapped_total as usize, 9);
    frame_bytes(
        &data_header(2, FLAG_FIRST | FLAG_LAST, payload.len() as u32, 1, 0),
        &payload,
    )
}

/// `Prelude::total_len` (message.rs) adds 28 + header_len + body_len in
/// plain u64 arithmetic. A hostile body_len makes it overflow: with overflow
/// checks (debug/test builds) the receiving session panics in
/// `Reassembly::start`; in release builds the sum wraps to a small number,
/// passes the max_message check, and `Reassembly::finish` then panics in
/// `BytesMut::split_to` (header_len > the bytes allocated). Expected:
/// MessageTooLarge (fixed: the sum saturates).
#[test]
fn prelude_size_overflow_is_message_too_large() {
    // Both header lengths make 28 + header_len + body_len wrap to 100.
    for header_len in [1000, 73] {
        let b = overflowing_first(header_len, 100);
        let r = std::panic::catch_unwind(|| feed(&mut fresh(), MIN_BUFFER as usize, &b));
        match r {
            Ok(Err(ProtocolError::MessageTooLarge { .. })) => {}
            Ok(other) => panic!("header_len {header_len}: expected MessageTooLarge, got {other:?}"),
            Err(_) => panic!("header_len {header_len}: the session panicked on a hostile prelude"),
        }
    }
}
