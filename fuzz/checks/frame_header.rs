//! Frame header decoding: never panics; every accepted header re-encodes to
//! exactly the 32 bytes it was decoded from, and satisfies the header rules.

use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_PAYLOAD};

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.len() < HEADER_LEN + 2 {
        return;
    }
    let (limit, rest) = data.split_at(2);
    // The payload limit a side would pass: from 0 to beyond the frame bound.
    let max_payload =
        (u16::from_le_bytes([limit[0], limit[1]]) as usize).min(MAX_FRAME_PAYLOAD + 1);
    let b: &[u8; HEADER_LEN] = rest[..HEADER_LEN].try_into().unwrap();
    if let Ok(h) = FrameHeader::decode(b, max_payload) {
        let mut again = [0u8; HEADER_LEN];
        h.encode(&mut again);
        assert_eq!(&again, b, "decode/encode round trip changed the header");
        assert!(h.payload_len as usize <= max_payload);
        if h.kind == FrameKind::Data {
            assert!((1..=4).contains(&h.lane));
            assert_eq!(h.is_last(), h.msg_number != 0);
            assert!(!h.is_first() || h.frag_offset == 0);
        } else if h.kind == FrameKind::Packed {
            // Whole messages of an application lane, numbered from
            // msg_number (fuzz/regressions/frame_header/packed_is_not_control:
            // this check once took every other kind for a control frame).
            assert!((1..=4).contains(&h.lane));
            assert!(h.is_first() && h.is_last());
            assert!(h.msg_number != 0 && h.frag_offset == 0);
        } else {
            assert_eq!((h.lane, h.msg_number, h.frag_offset), (5, 0, 0));
            assert!(h.is_first() && h.is_last());
        }
    }
}
