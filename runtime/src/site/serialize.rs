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
//! inside `node::decoding_on` (`node/decoding.rs`), which lends the node to this thread for the
//! call. A `SiteRef` decoded anywhere else is an error, never a panic.

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use sitenet_protocols::SiteDescriptor;

use super::SiteRef;
use crate::node::{with_decoding_node, Named};

impl SiteRef {
    /// The site's descriptor as this node knows it: its id (known once a
    /// channel opened, or from a descriptor) and the addresses it listens
    /// on (learned in the handshake, or given). The local site's is the
    /// node's own ([`Node::descriptor`](crate::Node::descriptor)).
    pub fn descriptor(&self) -> Option<SiteDescriptor> {
        self.node.describe(self.entry.resolved())
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
