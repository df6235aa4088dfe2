//! Starting a node: the one step that needs layers above the node's own
//! (docs/architecture.md, "The runtime's layers"). The builder binds and
//! makes the node's state (`node/builder.rs`) with the ComObjects' inbox
//! (`streams`: delivery to the handlers and stream sinks) and the local
//! site's drain (`local`: the same for this node's own site); here the
//! built-in services are registered before anything listens.

use crate::error::NodeError;
use crate::node::{Node, NodeBuilder};

impl NodeBuilder {
    /// Binds the listeners and starts the node. Works inside an actix system,
    /// inside any tokio runtime, and from a plain `main`; it never blocks on
    /// the runtime, so it is safe on the runtime's own thread.
    pub fn start(self) -> Result<Node, NodeError> {
        let bound = self.bind(crate::streams::inbox, crate::local::drain)?;
        if bound.inner.identity().cfg().builtin_services {
            crate::services::register(&bound.inner)?;
        }
        Ok(bound.run())
    }
}
