//! Arbitrary bytes into both open-protocol machines (Initiator and
//! Acceptor), in chunks: never panics, never stalls, and what they accept
//! passed every check.
//!
//! The check itself lives in `fuzz/checks/handshake.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::handshake::check(data));
