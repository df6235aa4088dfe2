//! Frame header decoding: never panics; every accepted header re-encodes to
//! exactly the 32 bytes it was decoded from, and satisfies the header rules.
//!
//! The check itself lives in `fuzz/checks/frame_header.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::frame_header::check(data));
