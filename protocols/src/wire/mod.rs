//! The wire layer: bytes and their encoding — the frame header, the
//! variable-length integers, the ring buffer a channel direction reads and
//! writes, the message envelope, marshaling a message into frames, and the
//! version ranges and capabilities a node announces. Imports only `base`.

pub mod byte_buffer;
pub mod frame;
pub mod marshal;
pub mod message;
pub(crate) mod varint;
pub mod version;
