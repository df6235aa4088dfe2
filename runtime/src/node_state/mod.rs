//! The parts of a node's state that its ComObjects share with it, one
//! small struct per concern, each with private fields and the methods
//! that read and change them:
//!
//! - [`Identity`] (`identity.rs`): who the node is and what it offers —
//!   its site id, configuration, listen addresses, versions and
//!   capabilities, and what a handshake tells a peer about it;
//! - [`Signals`] (`signals.rs`): what wakes whom — the notifications
//!   (acknowledgements, channel and fault changes, reassembly budget given
//!   back), the shutdown flags and the node's event subscribers;
//! - [`Security`] (`security.rs`): the cookies the node proves and
//!   accepts, and the pairs' secrets it remembers.
//!
//! `NodeShared` (`com_object/host.rs`) holds one of each, with the rest
//! of the shared state (counters, slots, budgets).

mod identity;
mod security;
mod signals;

pub(crate) use identity::Identity;
pub(crate) use security::Security;
pub(crate) use signals::Signals;
