//! A cooperation as the node sees it: the waiter of some of its requests
//! and, while open, a taker of the declared reply types. The cooperation
//! layer is above the node (docs/architecture.md, "The runtime's layers"):
//! it implements [`Coop`] for its state, and the node holds that.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;
use sitenet_protocols::InMessage;

use super::NodeInner;
use crate::site_entry::SiteEntry;

/// What the node's request table and its open list call on a cooperation.
pub(crate) trait Coop: Send + Sync {
    /// A reply to one of its requests, from `from`.
    fn offer(&self, node: &Arc<NodeInner>, from: &Arc<SiteEntry>, m: InMessage);

    /// Offers a message to its descriptors; true if it filled one.
    fn take(
        &self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        type_id: u32,
        header: Bytes,
        body: Bytes,
    ) -> bool;

    /// `site` failed, or answered one of its requests with an error.
    fn site_failed(&self, node: &NodeInner, site: &Arc<SiteEntry>, reason: &str);

    /// The node stopped: it ends at once.
    fn shut_down(&self);

    /// It has not ended.
    fn is_open(&self) -> bool;
}

/// The node's open cooperations, oldest first: a message of a type
/// declared a cooperation reply (`Node::cooperation_reply`) fills the first
/// one with a matching unfilled descriptor.
#[derive(Default)]
pub(crate) struct OpenCooperations(Mutex<Vec<Weak<dyn Coop>>>);

impl OpenCooperations {
    /// A new cooperation (the ended ones are dropped from the list).
    pub(crate) fn add(&self, c: Weak<dyn Coop>) {
        let mut v = self.0.lock();
        v.retain(|w| w.upgrade().is_some_and(|c| c.is_open()));
        v.push(c);
    }

    /// Offers a one-way message of a declared reply type; true if a
    /// cooperation took it.
    pub(crate) fn offer(
        &self,
        node: &Arc<NodeInner>,
        from: &Arc<SiteEntry>,
        type_id: u32,
        header: &Bytes,
        body: &Bytes,
    ) -> bool {
        let open: Vec<Arc<dyn Coop>> = self.0.lock().iter().filter_map(|w| w.upgrade()).collect();
        open.iter()
            .any(|c| c.take(node, from, type_id, header.clone(), body.clone()))
    }
}
