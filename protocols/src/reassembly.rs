//! The unmarshaler: reassembles a message from its frames within the size
//! limits and the node's reassembly budget.
//!
//! The first fragment carries the prelude, so the receiver knows the whole
//! message's size before it allocates anything: it checks the maximum message
//! size and reserves the size from the budget, then allocates the header and
//! the body once each, exactly. Nothing beyond the one message is held.
//!
//! Header and body are separate allocations, each handed over as a `Bytes`
//! built from an exactly sized `Vec` (no shared control block, no reference
//! counting until a handler clones it). A message that fits in one frame
//! never needs this type: the session copies it out of the ring at once
//! (see [`split_whole`]), and it is never "partly received", so it takes
//! nothing from the budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

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
    /// Header and body, each allocated once at its exact size and filled in
    /// that order.
    header: Vec<u8>,
    body: Vec<u8>,
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
    /// Starts a message from its first fragment's payload, split in the
    /// ring's two slices `a` and `b`.
    pub fn start(
        lane: u8,
        a: &[u8],
        b: &[u8],
        max_message: u64,
        budget: &ReassemblyBudget,
    ) -> Result<Self, ProtocolError> {
        let prelude = first_prelude(lane, a, b, max_message)?;
        let total = prelude.total_len();
        let content = total - PRELUDE_LEN as u64;
        budget.try_reserve(content)?;
        let mut r = Self {
            prelude,
            header: Vec::with_capacity(prelude.header_len as usize),
            body: Vec::with_capacity(prelude.body_len as usize),
            received: PRELUDE_LEN as u64,
            reserved: content,
            budget: budget.clone(),
        };
        let k = a.len().min(PRELUDE_LEN);
        r.extend(lane, &a[k..])?;
        r.extend(lane, &b[PRELUDE_LEN - k..])?;
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
        let to_header = (self.prelude.header_len as usize - self.header.len()).min(payload.len());
        self.header.extend_from_slice(&payload[..to_header]);
        self.body.extend_from_slice(&payload[to_header..]);
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
        let header = std::mem::take(&mut self.header);
        let body = std::mem::take(&mut self.body);
        (self.prelude, header.into(), body.into())
    }
}

/// Checks a message that arrived whole in one frame (its payload split in
/// the ring's two slices `a` and `b`) and copies its header and body out.
/// Fails as the fragment path would: a payload shorter than the prelude, a
/// malformed prelude, a message above `max_message`, or a length other than
/// the announced one.
pub fn split_whole(
    lane: u8,
    a: &[u8],
    b: &[u8],
    max_message: u64,
) -> Result<(Prelude, Bytes, Bytes), ProtocolError> {
    let len = a.len() + b.len();
    let prelude = first_prelude(lane, a, b, max_message)?;
    let total = prelude.total_len();
    if total != len as u64 {
        return Err(ProtocolError::MessageLength {
            lane,
            got: len as u64,
            announced: total,
        });
    }
    let header_len = prelude.header_len as usize;
    let header = extract(a, b, PRELUDE_LEN, header_len);
    let body = extract(a, b, PRELUDE_LEN + header_len, prelude.body_len as usize);
    Ok((prelude, header.into(), body.into()))
}

/// Decodes the prelude at the start of a first fragment's payload (split in
/// `a` and `b`) and checks the announced size against `max_message`, before
/// anything is allocated for the message.
fn first_prelude(lane: u8, a: &[u8], b: &[u8], max_message: u64) -> Result<Prelude, ProtocolError> {
    if a.len() + b.len() < PRELUDE_LEN {
        return Err(ProtocolError::FragmentSequence {
            lane,
            reason: "first fragment shorter than the message prelude",
        });
    }
    let mut pb = [0u8; PRELUDE_LEN];
    let k = a.len().min(PRELUDE_LEN);
    pb[..k].copy_from_slice(&a[..k]);
    pb[k..].copy_from_slice(&b[..PRELUDE_LEN - k]);
    let prelude = Prelude::decode(&pb).ok_or(ProtocolError::Malformed {
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
    Ok(prelude)
}

/// Copies `len` bytes starting at `at` of the concatenation of `a` and `b`
/// into an exactly sized `Vec`.
fn extract(a: &[u8], b: &[u8], at: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    if at < a.len() {
        let n = (a.len() - at).min(len);
        v.extend_from_slice(&a[at..at + n]);
        v.extend_from_slice(&b[..len - n]);
    } else {
        let at = at - a.len();
        v.extend_from_slice(&b[at..at + len]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageKind;

    fn wire(header: &[u8], body: &[u8]) -> Vec<u8> {
        let p = Prelude {
            type_id: 7,
            kind: MessageKind::Request,
            header_len: header.len() as u32,
            body_len: body.len() as u64,
            corr: 9,
        };
        [&p.encode()[..], header, body].concat()
    }

    #[test]
    fn a_whole_message_splits_identically_at_every_ring_wrap() {
        let (header, body) = (
            b"hdr-bytes".as_slice(),
            b"the body, a little longer".as_slice(),
        );
        let w = wire(header, body);
        for cut in 0..=w.len() {
            let (a, b) = w.split_at(cut);
            let (p, h, bd) = split_whole(3, a, b, 1 << 20).unwrap();
            assert_eq!((p.type_id, p.corr), (7, 9), "cut {cut}");
            assert_eq!((&h[..], &bd[..]), (header, body), "cut {cut}");
        }
        // An empty header and body allocate nothing and still split.
        let w = wire(b"", b"");
        let (_, h, bd) = split_whole(3, &w[..5], &w[5..], 1 << 20).unwrap();
        assert!(h.is_empty() && bd.is_empty());
    }

    #[test]
    fn a_whole_message_is_checked_like_fragments() {
        let w = wire(b"h", b"body");
        let err = |a: &[u8], b: &[u8], max| split_whole(2, a, b, max).unwrap_err();
        assert!(matches!(
            err(&w[..10], &[], 1 << 20),
            ProtocolError::FragmentSequence { lane: 2, .. }
        ));
        assert!(matches!(
            err(&w[..w.len() - 1], &[], 1 << 20),
            ProtocolError::MessageLength { got, announced, .. } if got + 1 == announced
        ));
        assert!(matches!(
            err(&w, &[0], 1 << 20),
            ProtocolError::MessageLength { got, announced, .. } if got == announced + 1
        ));
        assert!(matches!(
            err(&w, &[], 10),
            ProtocolError::MessageTooLarge { max: 10, .. }
        ));
        let mut bad = w.clone();
        bad[4] = 0xEE;
        assert!(matches!(
            err(&bad, &[], 1 << 20),
            ProtocolError::Malformed { .. }
        ));
    }
}
