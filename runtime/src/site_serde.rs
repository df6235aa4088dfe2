//! `SiteRef`s inside messages: a reference serialises as its site's
//! descriptor (`ID@ADDR,…`: its id and the addresses it listens on), and
//! decodes, on the receiving node, into a usable `SiteRef` from that node's
//! site table — the same entry (and ordered queues) as any other reference
//! to that site, found by id, or a new one that calls the site at its
//! addresses. Like any `SiteRef`, one decoded and dropped takes part in the
//! reference counting that lets an idle channel close.
//!
//! Decoding needs the receiving node, which serde cannot pass: sitenet
//! decodes every typed header (handlers, replies, cooperations, batches)
//! inside [`decoding_on`], which lends the node to this thread for the
//! call. A `SiteRef` decoded anywhere else is an error, never a panic.

use std::cell::Cell;
use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use sitenet_protocols::SiteDescriptor;

use crate::node::NodeInner;
use crate::site::SiteRef;

thread_local! {
    /// The node decoding a typed header on this thread, if one is: a
    /// pointer to the caller's `Arc`, valid while [`decoding_on`] runs
    /// (this runs for every message delivered: no reference count is
    /// touched, no allocation made).
    static DECODING: Cell<*const Arc<NodeInner>> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` (which decodes a typed header) with `node` lent to the
/// `SiteRef`s it may decode.
#[inline]
pub(crate) fn decoding_on<T>(node: &Arc<NodeInner>, f: impl FnOnce() -> T) -> T {
    let before = DECODING.with(|d| d.replace(node));
    // Restored even if `f` panics (a handler's decode is caught).
    struct Restore(*const Arc<NodeInner>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DECODING.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// The node lent by [`decoding_on`] on this thread, if any.
fn with_decoding_node<T>(f: impl FnOnce(Option<&Arc<NodeInner>>) -> T) -> T {
    let p = DECODING.with(Cell::get);
    // SAFETY: a non-null pointer was set by `decoding_on` from a reference
    // that outlives its call, and is reset before that call returns
    // (`Restore`, also on unwinding); this runs inside it, on its thread.
    f(unsafe { p.as_ref() })
}

impl SiteRef {
    /// The site's descriptor as this node knows it: its id (known once a
    /// channel opened, or from a descriptor) and the addresses it listens
    /// on (learned in the handshake, or given). The local site's is the
    /// node's own ([`Node::descriptor`](crate::Node::descriptor)).
    pub fn descriptor(&self) -> Option<SiteDescriptor> {
        self.node.describe(self.entry.resolved())
    }
}

impl NodeInner {
    /// What [`SiteRef::descriptor`] says of `entry`: what a reference to it
    /// in a message, or the origin of a request forwarded from it, carries.
    pub(crate) fn describe(&self, entry: &crate::site::SiteEntry) -> Option<SiteDescriptor> {
        if entry.is_local() {
            return Some(SiteDescriptor {
                id: self.id,
                addresses: self.listen_addresses(),
            });
        }
        let mut d = entry.learned_descriptor()?;
        if d.addresses.is_empty() {
            d.addresses
                .extend(entry.address.as_deref().map(str::to_owned));
        }
        Some(d)
    }
}

impl crate::site::SiteEntry {
    /// Its id and the addresses its handshake taught (published when its
    /// channel came up); `None` before its id is known.
    fn learned_descriptor(&self) -> Option<SiteDescriptor> {
        let id = self.id.get()?;
        let addresses = self
            .stats
            .lock()
            .as_ref()
            .map(|s| s.addresses.clone())
            .unwrap_or_default();
        Some(SiteDescriptor { id, addresses })
    }
}

impl Serialize for SiteRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.descriptor().ok_or_else(|| {
            S::Error::custom(
                "a SiteRef whose id is not known yet cannot be sent: talk to the site first",
            )
        })?;
        s.serialize_str(&d.to_string())
    }
}

impl<'de> Deserialize<'de> for SiteRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let desc: SiteDescriptor = text
            .parse()
            .map_err(|e| D::Error::custom(format!("bad site descriptor {text:?}: {e}")))?;
        with_decoding_node(|node| {
            let node = node.ok_or_else(|| {
                D::Error::custom("a SiteRef decodes only in a message sitenet delivers")
            })?;
            // (The receiving node's own id gives its local site.)
            Ok(node.site_described(&desc, false))
        })
    }
}
