//! The waiting line on the wire (docs/protocol.md §4.12): an
//! acceptor at its slot limit answers NEGOTIATE with `WAIT`, and later with
//! the ordinary answer, which is the grant. Only with the `line`
//! capability agreed; a `WAIT` otherwise, or a malformed one, ends the
//! open.

use sitenet_protocols::connection::handshake::{self, write_answer, write_wait, Wait, MIN_BUFFER};
use sitenet_protocols::{
    decide, Acceptor, ByteBuffer, Capabilities, Decision, FrameKind, Initiator, LinkView,
    LocalInfo, NegotiateAns, OpenError, ProtocolError, SiteId, Speaks,
};

fn info(site: u128, speaks: Speaks) -> LocalInfo {
    LocalInfo {
        site: SiteId(site),
        listen: vec![format!("tcp:127.0.0.1:{}", 7000 + site)],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks,
    }
}

fn without_line() -> Speaks {
    Speaks {
        caps: Capabilities::ALL.without(Capabilities::LINE),
        ..Speaks::CURRENT
    }
}

/// A's initiator and B's acceptor, up to B holding A's NEGOTIATE.
fn to_negotiate(
    a: Speaks,
    b: Speaks,
) -> (
    Initiator,
    Acceptor,
    sitenet_protocols::Negotiate,
    ByteBuffer,
    ByteBuffer,
) {
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::new(&info(0xB, b), [0xB0; 32], &mut to_a);
    let mut ini = Initiator::new(info(0xA, a), Some(SiteId(0xB)), 0, 0, [0xA0; 32]);
    assert_eq!(ini.handle_input(&mut to_a, &mut to_b).unwrap(), None);
    let neg = acc
        .handle_input(&mut to_b, &mut to_a)
        .unwrap()
        .expect("NEGOTIATE");
    (ini, acc, neg, to_a, to_b)
}

fn accept_answer(neg: &sitenet_protocols::Negotiate) -> NegotiateAns {
    let view = LinkView {
        local: SiteId(0xB),
        working: None,
        working_from: None,
        last_generation: 0,
        opening: false,
        closing: false,
    };
    let Decision::Accept { generation, .. } = decide(view, neg) else {
        panic!("accepted")
    };
    NegotiateAns::Accept {
        buffer_size: 65_536,
        max_message: 1 << 20,
        last_received: 0,
        generation,
        fresh: true,
        rekey: true,
        cookie: None,
        session: 0,
    }
}

#[test]
fn a_wait_then_the_answer_opens_the_channel_and_the_driver_hears_of_the_wait_once() {
    let (mut ini, _acc, neg, mut to_a, mut to_b) = to_negotiate(Speaks::CURRENT, Speaks::CURRENT);
    assert!(neg.caps.contains(Capabilities::LINE), "both have the line");
    let wait = Wait {
        position: 4,
        hold_ms: 30_000,
    };
    assert!(write_wait(&mut to_a, &wait));
    assert_eq!(ini.handle_input(&mut to_a, &mut to_b).unwrap(), None);
    assert_eq!(ini.take_wait(), Some(wait));
    assert_eq!(ini.take_wait(), None, "once");
    // The acceptor may tell the place again; then, the turn come, answer.
    assert!(write_wait(
        &mut to_a,
        &Wait {
            position: 1,
            ..wait
        }
    ));
    assert!(write_answer(&mut to_a, &accept_answer(&neg)));
    let opened = ini
        .handle_input(&mut to_a, &mut to_b)
        .unwrap()
        .expect("the answer is the grant");
    assert_eq!(opened.present.site, SiteId(0xB));
    assert!(
        to_b.is_empty(),
        "the initiator sends nothing while it waits"
    );
}

#[test]
fn a_wait_without_the_line_agreed_or_at_place_zero_ends_the_open() {
    // One side of an older build: the pair did not agree to the line.
    for (a, b) in [
        (without_line(), Speaks::CURRENT),
        (Speaks::CURRENT, without_line()),
    ] {
        let (mut ini, _acc, neg, mut to_a, mut to_b) = to_negotiate(a, b);
        assert!(!neg.caps.contains(Capabilities::LINE));
        write_wait(
            &mut to_a,
            &Wait {
                position: 1,
                hold_ms: 1,
            },
        );
        let e = ini.handle_input(&mut to_a, &mut to_b).unwrap_err();
        assert!(
            matches!(
                e,
                OpenError::Protocol(ProtocolError::Unexpected {
                    kind: FrameKind::Wait,
                    ..
                })
            ),
            "{e:?}"
        );
        assert!(!e.is_permanent(), "the next attempt may go better");
    }
    let (mut ini, _acc, _neg, mut to_a, mut to_b) = to_negotiate(Speaks::CURRENT, Speaks::CURRENT);
    write_wait(
        &mut to_a,
        &Wait {
            position: 0,
            hold_ms: 1,
        },
    );
    let e = ini.handle_input(&mut to_a, &mut to_b).unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::Protocol(ProtocolError::Malformed { what: "WAIT", .. })
        ),
        "{e:?}"
    );
    // A payload that is not a WAIT at all.
    let (mut ini, _acc, _neg, mut to_a, mut to_b) = to_negotiate(Speaks::CURRENT, Speaks::CURRENT);
    assert!(handshake::write_payload(
        &mut to_a,
        FrameKind::Wait,
        &[0xc1]
    ));
    assert!(matches!(
        ini.handle_input(&mut to_a, &mut to_b),
        Err(OpenError::Protocol(ProtocolError::Malformed {
            what: "WAIT",
            ..
        }))
    ));
}

#[test]
fn a_wait_before_present_or_sent_to_an_acceptor_is_unexpected() {
    // Before PRESENT: the first frame must be PRESENT.
    let mut ini = Initiator::new(info(0xA, Speaks::CURRENT), None, 0, 0, [0xA0; 32]);
    let mut input = ByteBuffer::new(MIN_BUFFER as usize);
    let mut out = ByteBuffer::new(MIN_BUFFER as usize);
    write_wait(
        &mut input,
        &Wait {
            position: 1,
            hold_ms: 1,
        },
    );
    assert!(matches!(
        ini.handle_input(&mut input, &mut out),
        Err(OpenError::Protocol(ProtocolError::Unexpected {
            kind: FrameKind::Wait,
            ..
        }))
    ));
    // The acceptor expects NEGOTIATE: a WAIT from an initiator is refused.
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::new(&info(0xB, Speaks::CURRENT), [0xB0; 32], &mut to_a);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    write_wait(
        &mut to_b,
        &Wait {
            position: 1,
            hold_ms: 1,
        },
    );
    assert!(matches!(
        acc.handle_input(&mut to_b, &mut to_a),
        Err(OpenError::Protocol(ProtocolError::Unexpected {
            kind: FrameKind::Wait,
            ..
        }))
    ));
}

#[test]
fn wait_frames_are_control_frames_on_lane_five_with_the_documented_payload() {
    let mut b = ByteBuffer::new(MIN_BUFFER as usize);
    assert!(write_wait(
        &mut b,
        &Wait {
            position: 3,
            hold_ms: 30_000
        }
    ));
    let (h, payload) = handshake::read_frame(&mut b, handshake::MAX_HANDSHAKE_PAYLOAD)
        .unwrap()
        .unwrap();
    assert_eq!((h.kind, h.lane, h.flags), (FrameKind::Wait, 5, 0x03));
    assert_eq!(FrameKind::Wait as u8, 13);
    // docs/protocol.md §4.12's example, byte for byte.
    let mut want = vec![0x82, 0xa8];
    want.extend_from_slice(b"position");
    want.push(0x03);
    want.push(0xa7);
    want.extend_from_slice(b"hold_ms");
    want.extend_from_slice(&[0xcd, 0x75, 0x30]);
    assert_eq!(payload, want);
}

proptest::proptest! {
    /// Whatever the acceptor sends after NEGOTIATE — WAIT frames with any
    /// payload, garbage, in any chunks — the initiator never panics, takes
    /// only WAITs at a place from 1, and either opens, fails, or waits for
    /// more.
    #[test]
    fn an_initiator_in_line_takes_any_bytes_without_panicking(
        waits in proptest::collection::vec((0u32..4, proptest::num::u32::ANY), 0..4),
        garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        raw_payload in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
        answer in proptest::bool::ANY,
        chunk in 1usize..64,
    ) {
        let (mut ini, _acc, neg, mut to_a, mut to_b) = to_negotiate(Speaks::CURRENT, Speaks::CURRENT);
        for (position, hold_ms) in waits {
            write_wait(&mut to_a, &Wait { position, hold_ms });
        }
        handshake::write_payload(&mut to_a, FrameKind::Wait, &raw_payload);
        if answer {
            write_answer(&mut to_a, &accept_answer(&neg));
        }
        let (x, y) = to_a.chunks();
        let mut bytes = [x, y].concat();
        bytes.extend_from_slice(&garbage);
        let mut input = ByteBuffer::new(MIN_BUFFER as usize);
        for piece in bytes.chunks(chunk) {
            if input.free() < piece.len() {
                break;
            }
            input.push(piece);
            let r = ini.handle_input(&mut input, &mut to_b);
            if let Some(w) = ini.take_wait() {
                proptest::prop_assert!(w.position >= 1);
            }
            match r {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => {}
            }
        }
    }
}
