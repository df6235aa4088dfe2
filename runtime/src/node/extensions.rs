//! `Node`'s extensions: the values a layer above sitenet (a language
//! runtime's distribution layer) keeps with the node, one per type, found
//! from any handle of it — the one a handler gets, or the one
//! [`context::decoding`](crate::context::decoding) gives a user type in a
//! message. Kept in `node_state/extensions.rs`.

use std::sync::Arc;

use super::Node;

impl Node {
    /// The node's extension of type `T`, if one was made
    /// ([`extension_or_init`](Self::extension_or_init)) and the node has
    /// not stopped.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.inner.extensions.get()
    }

    /// The node's extension of type `T`, made by `init` the first time: at
    /// most once per node, even when several threads ask at once (the
    /// others wait for the first one's `init`, then share its value).
    ///
    /// `init` gets a handle of the node like a handler's
    /// ([`Ctx::node`](crate::Ctx::node)): kept in the extension, it
    /// neither keeps the node running nor stops it. It runs outside any
    /// lock of the node, so it may use the node and read or make
    /// extensions of other types; asking for `T` itself from its own
    /// `init` panics (it would wait for itself), and an `init` must not
    /// wait for another thread that asks for `T`. If `init` panics, no
    /// value is kept: the next caller makes one.
    ///
    /// Extensions are dropped when the node stops (after
    /// [`shutdown`](Self::shutdown) completes, or when its last handle
    /// from the builder is dropped); after that `extension` gives `None`
    /// and this returns `init`'s value without keeping it. To refer to its
    /// node without keeping it running, an extension holds the `Node`
    /// given to `init` or a [`WeakNode`](crate::WeakNode), never a handle
    /// from the builder (which would keep the node running until
    /// `shutdown`).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use sitenet_runtime::Node;
    ///
    /// /// A layer's state on one node: its entities, named by number.
    /// struct Entities { node: Node, next: AtomicU64 }
    ///
    /// let node = Node::builder().start()?;
    /// let make = |n: &Node| Entities { node: n.clone(), next: AtomicU64::new(1) };
    /// let a = node.extension_or_init(make);
    /// assert_eq!(a.next.fetch_add(1, Ordering::Relaxed), 1);
    /// // Found again from any handle (made once: `init` does not run again).
    /// let b = node.clone().extension_or_init(|_: &Node| -> Entities { unreachable!() });
    /// assert_eq!(b.next.load(Ordering::Relaxed), 2);
    /// assert_eq!(b.node.id(), node.id());
    /// assert!(node.extension::<String>().is_none());
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn extension_or_init<T: Send + Sync + 'static>(
        &self,
        init: impl FnOnce(&Node) -> T,
    ) -> Arc<T> {
        self.inner
            .extensions
            .get_or_init(|| init(&Node::from_inner(self.inner.clone())))
    }
}
