//! [`WeakNode`]: a handle to a node that does not keep it running, for an
//! extension or a handler that refers to its node without a cycle.

use std::sync::{Arc, Weak};

use sitenet_protocols::SiteId;

use super::builder::StopOnDrop;
use super::Node;

/// A handle to a node that does not keep it running
/// ([`Node::downgrade`]): [`upgrade`](Self::upgrade) gives a `Node` while
/// the node runs. Cheap to clone, `Send + Sync`.
///
/// A node runs until [`Node::shutdown`] (or
/// [`shutdown_blocking`](Node::shutdown_blocking)) begins stopping it, or
/// until the last handle from the builder (and its clones) is dropped —
/// the handles a handler gets ([`Ctx::node`](crate::Ctx::node)) do not
/// count. After either, the node is gone for a `WeakNode`: `upgrade`
/// gives `None`, even while the runtime's actors still finish their work.
///
/// ```
/// use sitenet_runtime::Node;
///
/// let node = Node::builder().start()?;
/// let weak = node.downgrade();
/// assert_eq!(weak.upgrade().map(|n| n.id()), Some(node.id()));
/// drop(node); // the last handle: the node stops
/// assert!(weak.upgrade().is_none());
/// # Ok::<(), sitenet_runtime::NodeError>(())
/// ```
#[derive(Clone)]
pub struct WeakNode {
    stopper: Weak<StopOnDrop>,
    id: SiteId,
}

impl WeakNode {
    /// The node, if it still runs: a handle like the builder's, which keeps
    /// it running while held.
    pub fn upgrade(&self) -> Option<Node> {
        let stopper = self.stopper.upgrade()?;
        if stopper.0.is_closing() || stopper.0.signals().is_shut_down() {
            return None;
        }
        Some(Node {
            inner: stopper.0.clone(),
            _stopper: Some(stopper),
        })
    }

    /// The node's site id (known even once it is gone).
    pub fn id(&self) -> SiteId {
        self.id
    }
}

impl std::fmt::Debug for WeakNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakNode")
            .field("id", &self.id)
            .field("running", &self.upgrade().is_some())
            .finish()
    }
}

impl Node {
    /// A handle to this node that does not keep it running (see
    /// [`WeakNode`]), so an extension or a handler can refer to its node
    /// without keeping it alive for ever.
    pub fn downgrade(&self) -> WeakNode {
        let stopper = match &self._stopper {
            Some(s) => Arc::downgrade(s),
            None => self.inner.stopper.get().cloned().unwrap_or_default(),
        };
        WeakNode {
            stopper,
            id: self.id(),
        }
    }
}
