//! The hostile-input suite: what a peer that breaks the rules — on purpose
//! or by bug — may cost a node, each attack with its bound, while a
//! legitimate site keeps working beside it. Every test on hostile input
//! lives here, one module per theme:
//!
//! - [`peers`]: single attacks by peers that speak the protocol badly
//!   (replies never read, forwards naming fresh origins, floods of site
//!   references, idle sockets, trickles, forged claims, log floods);
//! - [`bad_input`]: garbage, oversized lengths, wrong versions and
//!   half-finished handshakes on the wire;
//! - [`hardened`]: holes in the ComObject and the site table, over real
//!   sockets;
//! - [`cookie`]: the suite again against nodes that hold a cookie;
//! - [`dials`]: dials made on a peer's word to a third party's addresses;
//! - [`flood`]: a peer flooding cheap undecodable requests;
//! - [`identity`]: claims on a site's id and the pair memory;
//! - [`logs`]: node-wide bounds on the log lines peers can cause;
//! - [`memory`]: memory owed to vanished readers given back to the system;
//! - [`output_release`]: output held for vanished readers released to zero;
//! - [`slots`]: what one source address may hold of slots and the line;
//! - [`siege`]: every attack at once.
//!
//! Several tests need a process of their own, which nextest gives every
//! test (`cargo nextest run --test hostile`, the project's test runner):
//! they install a global `tracing` subscriber to count log lines
//! (`peers`, `logs`), lower the process's file-descriptor limit
//! (`peers::accept_errors_do_not_flood_the_log`), or bound the process's
//! resident memory (`peers`, `flood`, `memory`, `siege`, `cookie`). Under a
//! runner that shares one process between tests, run them one at a time
//! (`cargo test --test hostile -- --test-threads=1` still shares the global
//! subscriber, so prefer nextest).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/slot_hogs.rs"]
mod slot_hogs;

mod bad_input;
mod cookie;
mod dials;
mod flood;
mod hardened;
mod identity;
mod logs;
mod memory;
mod output_release;
mod peers;
mod siege;
mod slots;
