//! A forwarded request's origin block and the site descriptor in it: text
//! a peer controls. Never panics; round trips hold.
//!
//! The check itself lives in `fuzz/checks/origin.rs`, shared with the
//! workspace test that replays every committed input
//! (`protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/mod.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::origin::check(data));
