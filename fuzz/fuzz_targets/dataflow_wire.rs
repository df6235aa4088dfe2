//! The dataflow protocols' messages from a hostile peer. Never panics.
//!
//! The check itself lives in `fuzz/checks/dataflow_wire.rs`, shared with
//! the test that replays every committed input
//! (`dataflow/protocols/tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../checks/dataflow_wire.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
