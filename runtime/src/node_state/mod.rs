//! The parts of a node's state, one small struct per concern, each with
//! private fields and the methods that read and change them; all but the
//! last are shared with its ComObjects:
//!
//! - [`Identity`] (`identity.rs`): who the node is and what it offers —
//!   its site id, configuration, listen addresses, versions and
//!   capabilities, and what a handshake tells a peer about it;
//! - [`Signals`] (`signals.rs`): what wakes whom — the notifications
//!   (acknowledgements, channel and fault changes, reassembly budget given
//!   back), the shutdown flags and the node's event subscribers;
//! - [`Security`] (`security.rs`): the cookies the node proves and
//!   accepts, and the pairs' secrets it remembers;
//! - [`Extensions`] (`extensions.rs`): the values a layer above sitenet
//!   keeps with the node, one per type (`Node::extension`), held by the
//!   node's state itself (`NodeInner`), since its ComObjects never read
//!   them.
//!
//! `NodeShared` (`com_object/host.rs`) holds an `Identity`, `Signals` and
//! `Security`, with the rest of the shared state (counters, slots,
//! budgets).

mod extensions;
mod identity;
mod security;
mod signals;

pub(crate) use extensions::Extensions;
pub(crate) use identity::Identity;
pub(crate) use security::Security;
pub(crate) use signals::Signals;
