//! What an application asks of its site during a callback ([`Op`]), and
//! the sends among it ([`Outgoing`]): recorded by
//! [`AppCtx`](crate::AppCtx), carried out by the driver after the callback
//! returns, in the order asked (`traffic.rs`, `coops.rs`, `batches.rs`).

use std::time::Duration;

use bytes::Bytes;

use sitenet_protocols::base::priority::Priority;
use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::node::cooperation::Expect;
use sitenet_protocols::wire::message::MessageKind;

use crate::SIM_TYPE;

/// What an application asked for during a callback, carried out after it,
/// in the order asked.
#[derive(Debug)]
pub(crate) enum Op {
    /// A message.
    Send(Outgoing),
    /// A new cooperation: its descriptors, and how long it waits.
    Open {
        coop: u64,
        expect: Vec<Expect<SiteId>>,
        timeout: Duration,
    },
    /// A cooperation cancelled.
    Cancel(u64),
    /// A batch submitted: its operations, and how often one may be retried.
    Batch {
        batch: u64,
        ops: Vec<BatchOp>,
        max_retry: u32,
    },
    /// Operation `op` of batch `batch` is tried again (on the site now at
    /// its site's address), after the event that ended its last try.
    Retry { batch: u64, op: usize },
    /// The application waits for all of batch `batch`, at most `timeout`.
    WaitBatch { batch: u64, timeout: Duration },
}

/// What an application asked to send, carried out after its callback.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) to: SiteId,
    pub(crate) priority: Priority,
    pub(crate) body: Bytes,
    pub(crate) kind: MessageKind,
    pub(crate) corr: u64,
    /// A forwarded request's origin (who gets its answer).
    pub(crate) origin: Option<SiteId>,
    /// A request's timeout.
    pub(crate) timeout: Option<Duration>,
    /// Sent to the address where `to` listens, not to `to` itself
    /// ([`AppCtx::send_to_address_of`]).
    pub(crate) by_address: bool,
    /// Its message type: [`SIM_TYPE`], or [`COOP_REPLY_TYPE`] for a
    /// cooperation reply ([`AppCtx::send_coop_reply`]).
    pub(crate) type_id: u32,
    /// The cooperation a request belongs to ([`AppCtx::coop_request`]).
    pub(crate) coop: Option<u64>,
    /// A site a one-way message names ([`AppCtx::send_site_ref`]).
    pub(crate) site_ref: Option<SiteId>,
    /// The batch operation it is a try of (a send then is tracked: its
    /// acknowledgement completes the operation).
    pub(crate) batch: Option<(u64, usize)>,
}

impl Outgoing {
    /// A message of the simulator's type, no request, sent to `to`'s id.
    pub(crate) fn to(to: SiteId, priority: Priority, body: Bytes, kind: MessageKind) -> Self {
        Self {
            to,
            priority,
            body,
            kind,
            corr: 0,
            origin: None,
            timeout: None,
            by_address: false,
            type_id: SIM_TYPE,
            coop: None,
            site_ref: None,
            batch: None,
        }
    }

    /// A try of operation `index` of batch `batch`, to `to` (its site's
    /// address, for a retry).
    pub(crate) fn batch_try(
        batch: u64,
        index: usize,
        op: &BatchOp,
        corr: u64,
        by_address: bool,
    ) -> Self {
        let (to, priority, body, kind, timeout) = match op {
            BatchOp::Send { to, priority, body } => {
                (*to, *priority, body.clone(), MessageKind::OneWay, None)
            }
            BatchOp::Request {
                to,
                priority,
                body,
                timeout,
            } => (
                *to,
                *priority,
                body.clone(),
                MessageKind::Request,
                Some(*timeout),
            ),
        };
        Self {
            corr,
            timeout,
            by_address,
            batch: Some((batch, index)),
            ..Self::to(to, priority, body, kind)
        }
    }
}

/// One operation of a batch ([`AppCtx::batch`](crate::AppCtx::batch)), as the runtime's
/// `Batch::send` and `Batch::request`.
#[derive(Debug, Clone)]
pub enum BatchOp {
    /// A one-way message: done when `to` acknowledges it.
    Send {
        /// The site.
        to: SiteId,
        /// Its priority.
        priority: Priority,
        /// What it says.
        body: Bytes,
    },
    /// A request: done with its answer.
    Request {
        /// The site asked.
        to: SiteId,
        /// Its priority.
        priority: Priority,
        /// What it asks.
        body: Bytes,
        /// How long each try waits for the answer.
        timeout: Duration,
    },
}
