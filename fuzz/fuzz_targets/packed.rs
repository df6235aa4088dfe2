//! Packed frame payloads: decoding never panics, stops at the first
//! error, refuses messages above the maximum size, and a payload that
//! decodes whole re-encodes to the same bytes.
//!
//! The check itself lives in `fuzz/checks/packed.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::packed::check(data));
