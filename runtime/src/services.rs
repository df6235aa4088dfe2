//! sitenet's own services, on reserved type ids: echo (for `sitenet ping`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::NodeError;
use crate::handlers::erase;
use crate::message::{Message, RESERVED_IDS};
use crate::node::NodeInner;

/// Echo request: the reply carries the same sequence number and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Echo {
    /// Caller's sequence number, returned unchanged.
    pub seq: u64,
}

impl Message for Echo {
    const ID: u32 = RESERVED_IDS + 1;
}

/// The echo reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoReply {
    /// The request's sequence number.
    pub seq: u64,
}

impl Message for EchoReply {
    const ID: u32 = RESERVED_IDS + 2;
}

pub(crate) fn register(node: &Arc<NodeInner>) -> Result<(), NodeError> {
    node.handlers.insert(
        Echo::ID,
        erase(|ctx, m: Echo| {
            let body = vec![ctx.body().clone()];
            if let Err(e) = ctx.reply_with(&EchoReply { seq: m.seq }, body) {
                tracing::debug!(error = %e, "echo reply not sent");
            }
        }),
    )
}
