//! The node layer: the rules of a node with many sites — the site table
//! and its reclaim, the claims a peer's words make on it, requests and
//! their deadlines, delegation, cooperations, batches, the line of senders
//! at the outbox, per-peer log limits and the idle spin of the I/O
//! threads. Imports every layer below.

pub mod batch;
pub mod claims;
pub mod cooperation;
pub mod delegation;
pub mod idle_spin;
pub mod log_limit;
pub mod requests;
pub mod site_index;
pub mod turns;
