//! The fuzz targets' checks, one module each, shared by the cargo-fuzz
//! targets (`fuzz/fuzz_targets/`) and by the workspace test that replays
//! every committed input (`protocols/tests/fuzz_corpus.rs`), so a crash the
//! fuzzer found stays a regression test of the README's test command.

pub mod frame_header;
pub mod handshake;
pub mod origin;
pub mod packed;
pub mod prelude;
pub mod session_input;
