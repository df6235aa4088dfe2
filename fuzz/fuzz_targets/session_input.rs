//! Arbitrary bytes into a working session's input ByteBuffer, in chunks
//! chosen by the input: never panics, never stalls (a full input buffer after
//! `Ok` would mean a frame that can never complete), and the reassembly
//! budget is whole again once the session is dropped.
//!
//! The check itself lives in `fuzz/checks/session_input.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::session_input::check(data));
