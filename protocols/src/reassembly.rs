//! The unmarshaler: reassembles a message from its frames within the size
//! limits and the node's reassembly budget.
//!
//! The first fragment carries the prelude, so the receiver knows the whole
//! message's size before it allocates anything: it checks the maximum message
//! size and reserves the size from the budget, then allocates the header and
//! body once, exactly. Nothing beyond the one message is held.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::error::ProtocolError;
use crate::message::{Prelude, PRELUDE_LEN};

/// The per-node budget of bytes held by partly received messages, shared by
/// every session of a node so that many peers together cannot make it
/// allocate without limit.
#[derive(Debug, Clone)]
pub struct ReassemblyBudget {
    available: Arc<AtomicU64>,
    limit: u64,
}

impl ReassemblyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            available: Arc::new(AtomicU64::new(limit)),
            limit,
        }
    }

    /// Takes `n` bytes from the budget, or fails leaving it unchanged.
    pub fn try_reserve(&self, n: u64) -> Result<(), ProtocolError> {
        self.available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(n))
            .map(|_| ())
            .map_err(|a| ProtocolError::ReassemblyBudget {
                needed: n,
                available: a,
            })
    }

    /// Returns `n` bytes to the budget.
    pub fn release(&self, n: u64) {
        self.available.fetch_add(n, Ordering::AcqRel);
    }

    /// Bytes currently available.
    pub fn available(&self) -> u64 {
        self.available.load(Ordering::Acquire)
    }

    /// The configured limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// A message partly received on one lane.
#[derive(Debug)]
pub struct Reassembly {
    prelude: Prelude,
    /// Header and body, allocated once at their exact size.
    buf: BytesMut,
    /// Wire bytes received so far (prelude included).
    received: u64,
    reserved: u64,
    budget: ReassemblyBudget,
}

impl Drop for Reassembly {
    fn drop(&mut self) {
        self.budget.release(self.reserved);
    }
}

impl Reassembly {
    /// Starts a message from its first fragment's payload.
    pub fn start(
        lane: u8,
        payload: &[u8],
        max_message: u64,
        budget: &ReassemblyBudget,
    ) -> Result<Self, ProtocolError> {
        let pb: &[u8; PRELUDE_LEN] = payload
            .get(..PRELUDE_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(ProtocolError::FragmentSequence {
                lane,
                reason: "first fragment shorter than the message prelude",
            })?;
        let prelude = Prelude::decode(pb).ok_or(ProtocolError::Malformed {
            what: "message prelude",
            reason: "unknown message kind or non-zero reserved bytes".into(),
        })?;
        let total = prelude.total_len();
        if total > max_message {
            return Err(ProtocolError::MessageTooLarge {
                size: total,
                max: max_message,
            });
        }
        let content = total - PRELUDE_LEN as u64;
        budget.try_reserve(content)?;
        let mut r = Self {
            prelude,
            buf: BytesMut::with_capacity(content as usize),
            received: PRELUDE_LEN as u64,
            reserved: content,
            budget: budget.clone(),
        };
        r.extend(lane, &payload[PRELUDE_LEN..])?;
        Ok(r)
    }

    /// The message's prelude.
    pub fn prelude(&self) -> &Prelude {
        &self.prelude
    }

    /// Wire bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Appends a fragment's payload.
    pub fn extend(&mut self, lane: u8, payload: &[u8]) -> Result<(), ProtocolError> {
        let total = self.prelude.total_len();
        if self.received + payload.len() as u64 > total {
            return Err(ProtocolError::MessageLength {
                lane,
                got: self.received + payload.len() as u64,
                announced: total,
            });
        }
        self.buf.extend_from_slice(payload);
        self.received += payload.len() as u64;
        Ok(())
    }

    /// True once every announced byte has arrived.
    pub fn is_complete(&self) -> bool {
        self.received == self.prelude.total_len()
    }

    /// Splits the finished message into its header and body. The budget is
    /// returned: the bytes now belong to the handler.
    pub fn finish(mut self) -> (Prelude, Bytes, Bytes) {
        let mut buf = std::mem::take(&mut self.buf);
        let header = buf.split_to(self.prelude.header_len as usize).freeze();
        (self.prelude, header, buf.freeze())
    }
}
