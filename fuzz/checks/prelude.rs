//! Message prelude decoding: never panics; an accepted prelude re-encodes to
//! the same 28 bytes, and its `total_len` is the sum of the prelude, header
//! and body lengths, saturating at `u64::MAX` rather than wrapping — the
//! receiver checks it against the maximum message size before allocating,
//! so a hostile size must come out too large, never small.

use sitenet_protocols::{Prelude, PRELUDE_LEN};

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.len() < PRELUDE_LEN {
        return;
    }
    let b: &[u8; PRELUDE_LEN] = data[..PRELUDE_LEN].try_into().unwrap();
    if let Some(p) = Prelude::decode(b) {
        assert_eq!(
            &p.encode(),
            b,
            "decode/encode round trip changed the prelude"
        );
        let exact = (PRELUDE_LEN as u64 + p.header_len as u64).checked_add(p.body_len);
        // The fixed behaviour (protocols/tests/decoder_garbage.rs,
        // prelude_size_overflow_is_message_too_large): exact when it fits,
        // u64::MAX (too large for any node) when it would overflow.
        assert_eq!(
            p.total_len(),
            exact.unwrap_or(u64::MAX),
            "Prelude::total_len wrapped: {p:?}"
        );
        assert!(p.total_len() >= p.body_len && p.total_len() >= PRELUDE_LEN as u64);
    }
}
