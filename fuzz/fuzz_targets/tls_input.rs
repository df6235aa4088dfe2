//! Bytes a peer sends to a `tls:` listener, through the TLS session and
//! into the acceptor's machine (raw records, or frames inside a member's
//! records). The check is in `fuzz/checks/tls_input.rs`, shared with the
//! replay test `transport/tests/fuzz_corpus_tls.rs`.
#![no_main]

#[path = "../checks/tls_input.rs"]
#[allow(dead_code)]
mod tls_input;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tls_input::check(data));
