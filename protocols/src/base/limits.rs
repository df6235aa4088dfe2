//! Bounds shared by several layers: how many addresses a site lists and
//! how long one may be (the handshake, the address book and site
//! descriptors all hold them), and the descriptors a process keeps
//! outside its channel slots. One home, so the layers that share a bound
//! do not import each other for it.

/// Longest listen-address list carried (bounds the handshake size).
pub const MAX_LISTEN: usize = 16;

/// At most this many addresses are kept: a peer's whole listen list and the
/// address the user gave.
pub const MAX_ADDRESSES: usize = MAX_LISTEN + 1;

/// Longest address kept, in bytes (a peer's words: a `tcp:` host name is
/// at most 253 bytes and a Unix socket path 108; a longer one is skipped,
/// never stored, tried or handed on).
pub const MAX_ADDRESS_LEN: usize = 512;

/// File descriptors a process keeps outside its channel slots (listeners,
/// the runtime's own, stdio, files the application opens).
pub const RESERVED_FDS: u64 = 64;
