//! The node's output bound: the bytes every site's outbox holds together,
//! each site within its fair share once the node is half full
//! (`sitenet_protocols::output_share::admits`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use sitenet_protocols::output_share::admits;

/// The output bytes of a whole node, every site's outbox together.
#[derive(Debug)]
pub(crate) struct NodeOutput {
    pub(super) bytes: AtomicU64,
    bound: u64,
    /// Outboxes holding bytes now (the fair share's divisor).
    pub(super) holders: AtomicUsize,
    /// Senders waiting because the node (not their site) was full: only
    /// then does a release notify `space`, so the common path costs one
    /// atomic add.
    waiting: AtomicUsize,
    pub(super) space: Notify,
}

impl NodeOutput {
    pub(crate) fn new(bound: u64) -> Arc<Self> {
        Arc::new(Self {
            bytes: AtomicU64::new(0),
            bound,
            holders: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            space: Notify::new(),
        })
    }

    /// Bytes held for all sites.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// What `bytes` never exceeds.
    pub(crate) fn bound(&self) -> u64 {
        self.bound
    }

    /// Reserves `n` bytes for a site that held `site_before` (and is
    /// already counted among the holders): within the bound, and within
    /// the site's fair share once the node is half full
    /// (`sitenet_protocols::output_share`).
    pub(super) fn try_reserve(&self, n: u64, site_before: u64) -> bool {
        let holders = self.holders.load(Ordering::Acquire);
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                let after = cur + n;
                admits(self.bound, after, holders, site_before, n).then_some(after)
            })
            .is_ok()
    }

    /// A site's bytes went from `before` to `after`: counts the sites
    /// holding any.
    pub(super) fn held(&self, before: u64, after: u64) {
        match (before == 0, after == 0) {
            (true, false) => {
                self.holders.fetch_add(1, Ordering::AcqRel);
            }
            (false, true) => {
                self.holders.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
    }

    pub(super) fn release(&self, n: u64) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.space.notify_waiters();
        }
    }
}

/// The two bounds an outbox counts against: its site's and its node's.
#[derive(Debug, Clone)]
pub(crate) struct OutputBound {
    /// Bytes one site may hold.
    pub(crate) site: u64,
    pub(crate) node: Arc<NodeOutput>,
}

impl OutputBound {
    /// A site bound with a node of its own (tests).
    #[cfg(test)]
    pub(crate) fn alone(site: u64) -> Self {
        Self {
            site,
            node: NodeOutput::new(u64::MAX / 2),
        }
    }
}

/// A sender's place among those waiting for room on the node (see
/// [`NodeOutput::waiting`]), given up when it stops waiting.
pub(super) struct NodeWait<'a>(&'a NodeOutput);

impl<'a> NodeWait<'a> {
    pub(super) fn new(node: &'a NodeOutput) -> Self {
        node.waiting.fetch_add(1, Ordering::AcqRel);
        Self(node)
    }
}

impl Drop for NodeWait<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}
