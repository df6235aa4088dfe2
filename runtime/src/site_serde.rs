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

use crate::node::{Named, NodeInner};
use crate::site::SiteRef;
use crate::site_entry::SiteEntry;

thread_local! {
    /// The node decoding a typed header on this thread, if one is, and the
    /// entry of the site whose message it is: pointers to the caller's
    /// `Arc`s, valid while [`decoding_on`] runs (this runs for every
    /// message delivered: no reference count is touched, no allocation
    /// made).
    static DECODING: Cell<(*const Arc<NodeInner>, *const Arc<SiteEntry>)> =
        const { Cell::new((std::ptr::null(), std::ptr::null())) };
}

/// Runs `f` (which decodes a typed header that site `from` delivered) with
/// `node` lent to the `SiteRef`s it may decode. A reference to a site the
/// node does not know makes an entry `from` holds a claim on (bounded by
/// `NodeConfig::site_ref_claims_per_peer`; see `Named::ByPeer`).
#[inline]
pub(crate) fn decoding_on<T>(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    f: impl FnOnce() -> T,
) -> T {
    let before = DECODING.with(|d| d.replace((node, from)));
    // Restored even if `f` panics (a handler's decode is caught).
    struct Restore((*const Arc<NodeInner>, *const Arc<SiteEntry>));
    impl Drop for Restore {
        fn drop(&mut self) {
            DECODING.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// The node lent by [`decoding_on`] on this thread, and the site whose
/// message it decodes, if any.
fn with_decoding_node<T>(f: impl FnOnce(Option<(&Arc<NodeInner>, &Arc<SiteEntry>)>) -> T) -> T {
    let (node, from) = DECODING.with(Cell::get);
    // SAFETY: non-null pointers were set by `decoding_on` from references
    // that outlive its call, and are reset before that call returns
    // (`Restore`, also on unwinding); this runs inside it, on its thread.
    f(unsafe { node.as_ref().zip(from.as_ref()) })
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
    pub(crate) fn describe(&self, entry: &crate::site_entry::SiteEntry) -> Option<SiteDescriptor> {
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

impl crate::site_entry::SiteEntry {
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
        with_decoding_node(|decoding| {
            let (node, from) = decoding.ok_or_else(|| {
                D::Error::custom("a SiteRef decodes only in a message sitenet delivers")
            })?;
            // (The receiving node's own id gives its local site.)
            let by = Named::ByPeer {
                peer: from,
                forward: false,
            };
            node.site_described(&desc, by)
                .map_err(|e| D::Error::custom(format!("SiteRef {}: {e}", desc.id)))
        })
    }
}
