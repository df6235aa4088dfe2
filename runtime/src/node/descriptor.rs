//! Site descriptors on the [`Node`]: handing out this node's id with every
//! address it listens on, and reaching a site from its descriptor by the
//! best transport the two share (see `sitenet_protocols::AddressBook`).

use sitenet_protocols::SiteDescriptor;

use super::Node;
use super::SiteRef;
use crate::error::NodeError;

impl Node {
    /// This node's descriptor: its id and every address it listens on (real
    /// ports). Hand it to other sites — on the command line, in a message —
    /// and they reach this node in-process over `mem:`, on this host over
    /// `unix:`, and elsewhere over `tcp:`, whichever of these it listens on.
    pub fn descriptor(&self) -> SiteDescriptor {
        SiteDescriptor {
            id: self.id(),
            addresses: self.listen_addresses(),
        }
    }

    /// A reference to the site `d` describes. Opens try its addresses in
    /// the order mem, unix, tcp and fall back to the next at once when one
    /// fails; an address where another site answers is forgotten, and the
    /// site fails for good only when none is left. A site this node already
    /// knows by id gives the same `SiteRef` (its ordered queues), and learns
    /// the addresses it did not know. A descriptor of this node itself gives
    /// [`Node::local_site`].
    ///
    /// Errors: an address that does not parse ([`NodeError::Address`]), a
    /// node shut down.
    ///
    /// ```
    /// # use sitenet_runtime::{Node, SendOptions, services::{Echo, EchoReply}};
    /// // `b` listens on mem: and tcp:; `a` runs in the same process.
    /// let b = Node::builder()
    ///     .listen("tcp:127.0.0.1:0")
    ///     .listen("mem:descriptor-doc")
    ///     .configure(|c| c.builtin_services = true)
    ///     .start()?;
    /// let d = b.descriptor(); // "ID@tcp:127.0.0.1:PORT,mem:descriptor-doc"
    /// let a = Node::builder().start()?;
    /// let site_b = a.site_from_descriptor(&d)?; // talks over mem:
    /// let r = site_b.request::<Echo, EchoReply>(&Echo { seq: 1 }).timeout(std::time::Duration::from_secs(30)).blocking()?;
    /// assert_eq!(r.msg.seq, 1);
    /// assert_eq!(site_b.id(), Some(b.id()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn site_from_descriptor(&self, d: &SiteDescriptor) -> Result<SiteRef, NodeError> {
        if self.inner.signals().is_shut_down() {
            return Err(NodeError::Shutdown);
        }
        for a in &d.addresses {
            self.inner.identity().cfg().transports.parse(a)?;
        }
        Ok(self
            .inner
            .site_described(d, super::Named::ByUser)
            .expect("the user's own descriptors are not claims"))
    }
}
