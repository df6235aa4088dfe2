//! The connection layer: one remote site's channel and session — the
//! open protocol (handshake, version agreement, refusals), the session
//! (reassembly, packing, the ledger of unacknowledged messages, the
//! scheduler, delivery, the output each class holds), the link decision,
//! the address book, and the ComObject machine around them all. Imports
//! `base`, `wire` and `slots` (a ComObject reports its channel to the slot
//! table and is charged to a source).

pub mod address_book;
pub mod com_object;
pub mod deliver;
pub mod error;
pub mod handshake;
pub mod input_budget;
pub mod lane_slots;
pub mod ledger;
pub mod link;
pub mod negotiate;
pub mod output_share;
pub mod packed;
pub mod reassembly;
pub mod refusal;
pub mod scheduler;
pub mod session;
