//! Message prelude decoding: never panics; an accepted prelude re-encodes to
//! the same 28 bytes, and its `total_len` is the exact (non-overflowing) sum
//! of the prelude, header and body lengths — the receiver checks it against
//! the maximum message size before allocating, so it must not wrap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sitenet_protocols::{Prelude, PRELUDE_LEN};

fuzz_target!(|data: &[u8]| {
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
        // Known bug (see protocols/tests/decoder_garbage.rs,
        // prelude_size_overflow_is_message_too_large): total_len overflows
        // for body_len near u64::MAX. This assertion finds it.
        assert_eq!(
            exact,
            Some(p.total_len()),
            "Prelude::total_len overflowed: {p:?}"
        );
    }
});
