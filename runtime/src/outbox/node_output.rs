//! The node's output bound: the bytes every site's outbox holds together,
//! each site within its fair share once the node is half full
//! (`sitenet_protocols::connection::output_share::admits`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use sitenet_protocols::connection::output_share::admits;

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
    /// The most `bytes` has been since the allocator was last told to
    /// give memory back (see [`worth_trimming`]).
    peak_since_trim: AtomicU64,
    /// A trim is scheduled or running (at most one at a time).
    trimming: AtomicBool,
}

impl NodeOutput {
    pub(crate) fn new(bound: u64) -> Arc<Self> {
        Arc::new(Self {
            bytes: AtomicU64::new(0),
            bound,
            holders: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            space: Notify::new(),
            peak_since_trim: AtomicU64::new(0),
            trimming: AtomicBool::new(false),
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
    /// (`sitenet_protocols::connection::output_share`).
    pub(super) fn try_reserve(&self, n: u64, site_before: u64) -> bool {
        let holders = self.holders.load(Ordering::Acquire);
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                let after = cur + n;
                admits(self.bound, after, holders, site_before, n).then_some(after)
            })
            .map(|before| {
                self.peak_since_trim
                    .fetch_max(before + n, Ordering::Relaxed);
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

    pub(super) fn release(self: &Arc<Self>, n: u64) {
        let now = self.bytes.fetch_sub(n, Ordering::AcqRel) - n;
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.space.notify_waiters();
        }
        if worth_trimming(self.peak_since_trim.load(Ordering::Relaxed), now)
            && !self.trimming.swap(true, Ordering::AcqRel)
        {
            self.schedule_trim();
        }
    }

    /// One of the node's sites parked: its actor (its task, mailbox and
    /// session) is freed. After a wave of them, in this node or others of
    /// the process, the allocator is told to give that memory back, as
    /// after a large release of output (by this node's trim thread unless
    /// it runs one already).
    pub(crate) fn site_parked(self: &Arc<Self>) {
        let n = PARKED_SINCE_TRIM.fetch_add(1, Ordering::Relaxed) + 1;
        if worth_trimming_after_parks(n)
            && !PARK_TRIM.swap(true, Ordering::AcqRel)
            && !self.trimming.swap(true, Ordering::AcqRel)
        {
            // (A trim this node runs already covers the parks as it ends.)
            self.schedule_trim();
        }
    }

    /// Tells the allocator to give the memory freed with the output back
    /// to the system, on a thread of its own: a little later (what was
    /// accounted as released is being freed now), then not again for
    /// [`TRIM_INTERVAL`].
    fn schedule_trim(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("sitenet-trim".into())
            .spawn(move || {
                // Once soon; then once per interval for as long as the
                // output held keeps falling (sites given up one after
                // another), and once more an interval after it stopped:
                // what the releases let go of (the sites' channels and
                // actors, which stop after their output is handed back)
                // is freed by then too. A release during the run is
                // covered by a later trim of the same run; so are the
                // parks counted before the last trim (later ones count
                // towards the next).
                let held = || node.upgrade().map(|n| n.bytes());
                std::thread::sleep(TRIM_DELAY);
                let mut last = held();
                let covered = loop {
                    let started = std::time::Instant::now();
                    give_memory_back();
                    tracing::debug!(took = ?started.elapsed(), "freed memory given back to the system");
                    std::thread::sleep(TRIM_INTERVAL);
                    let now = held();
                    let falling = matches!((last, now), (Some(a), Some(b)) if b < a);
                    if !falling {
                        let covered = PARKED_SINCE_TRIM.load(Ordering::Relaxed);
                        give_memory_back();
                        break covered;
                    }
                    last = now;
                };
                std::thread::sleep(TRIM_INTERVAL);
                PARKED_SINCE_TRIM.fetch_sub(covered, Ordering::Relaxed);
                PARK_TRIM.store(false, Ordering::Release);
                if let Some(node) = node.upgrade() {
                    node.peak_since_trim
                        .store(node.bytes(), Ordering::Relaxed);
                    node.trimming.store(false, Ordering::Release);
                }
            });
        if spawned.is_err() {
            // No thread now: the next large release (or park) tries again.
            PARK_TRIM.store(false, Ordering::Release);
            self.trimming.store(false, Ordering::Release);
        }
    }
}

/// Sites parked that make giving memory back worth its cost: each frees
/// its actor's task (about 1.3 KB, on the pool thread it ran on) and its
/// mailbox (about 350 bytes, on the thread that started it), which the
/// allocator keeps (glibc: in its fast bins and the pool threads' heaps)
/// however few bytes the parked sites hold. 1,024 of them free about
/// 1.7 MB; measured with 5,000 sites parked at once, the process kept
/// about 1,050 bytes resident per site, 770 after a trim.
pub(crate) const TRIM_PARKS: u64 = 1024;

/// Sites parked in this process since the allocator was last told to give
/// memory back (see [`worth_trimming_after_parks`]): the allocator is the
/// process's, and a hundred nodes parking a thousand sites each free as
/// much as one parking a hundred thousand.
static PARKED_SINCE_TRIM: AtomicU64 = AtomicU64::new(0);

/// A trim asked for by parks is scheduled or running, in some node of the
/// process (one at a time, whichever node's parks asked).
static PARK_TRIM: AtomicBool = AtomicBool::new(false);

/// Whether `parked` sites parked since the last trim make one worth its
/// cost (at most one runs per [`TRIM_INTERVAL`] whatever asks for it).
pub(crate) fn worth_trimming_after_parks(parked: u64) -> bool {
    parked >= TRIM_PARKS
}

/// Output released at once that makes giving memory back worth its cost
/// (a `malloc_trim` walks the allocator's free lists: about a millisecond
/// per hundred megabytes).
pub(crate) const TRIM_DROP: u64 = 32 << 20;

/// How long after a large release the allocator is told to give memory
/// back: the release is accounted before its buffers are freed.
const TRIM_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// At most one trim per this long, however the output comes and goes.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the output held went down enough from `peak` (its most since
/// the last trim) to `now` for memory to be worth giving back: by at least
/// [`TRIM_DROP`], and to at most half the peak. Sites that held megabytes
/// they were owed and vanished free them inside the allocator, which keeps
/// them (glibc's arenas of the threads that freed them) unless told: a
/// node that let a wave of such sites come and go would stay as large as
/// at its peak. A steady flow (the output held going up and down by less)
/// never trims.
pub(crate) fn worth_trimming(peak: u64, now: u64) -> bool {
    peak.saturating_sub(now) >= TRIM_DROP && now <= peak / 2
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

/// Tells the allocator to return the memory it holds free to the system
/// (glibc: `malloc_trim(0)`, every arena, free pages inside the heaps
/// too). Freed memory stays in the process otherwise: glibc returns only
/// the top of each heap, and a node's threads each have arenas of their
/// own. Called after large releases ([`NodeOutput::release`]), never on a
/// pool thread. Does nothing with other allocators and C libraries.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::os::raw::c_int;
        }
        // SAFETY: malloc_trim takes no pointer, is thread-safe (it locks
        // each arena in turn) and only returns free memory to the system.
        unsafe {
            malloc_trim(0);
        }
    }
}
