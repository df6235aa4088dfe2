//! Message prelude decoding: never panics; an accepted prelude re-encodes to
//! the same 28 bytes, and its `total_len` is the sum of the prelude, header
//! and body lengths, saturating at `u64::MAX` rather than wrapping — the
//! receiver checks it against the maximum message size before allocating,
//! so a hostile size must come out too large, never small.
//!
//! The check itself lives in `fuzz/checks/prelude.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::prelude::check(data));
