//! Which channel gives its slot up when the controller must preempt one.
//!
//! A policy sees every channel holding a slot as a [`Candidate`] — what its
//! ComObject last reported about it — and names one victim and the reason
//! it was chosen (counted in metrics, so a run shows which rule decided).
//! Two ship: [`Naive`], the Mozart paper's, and [`DefaultPolicy`], which
//! fixes what the paper lists as its faults.

use std::time::{Duration, Instant};

/// What the owner of a slot reports about its channel (the runtime's
/// ComObject, every few milliseconds): everything a policy needs beyond the
/// slot itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelReport {
    /// A working channel whose close protocol has not started: only such a
    /// channel can be closed with CLOSE_HARD.
    pub closeable: bool,
    /// Last time an application message was sent or received on it.
    pub last_active: Instant,
    /// A message is partly sent or partly received on it.
    pub mid_message: bool,
    /// Requests sent to the peer still await their replies.
    pub replies_expected: bool,
    /// Its input and output buffers are empty.
    pub buffers_empty: bool,
    /// Nothing is queued for it.
    pub queues_empty: bool,
    /// The peer listens, so it can be called back (an accept-only client
    /// cannot: preempting it leaves the reconnect to the client).
    pub callable: bool,
    /// Messages exchanged with the site so far
    /// ([`SessionStats::served`](crate::connection::session::SessionStats::served)):
    /// the table measures a turn's work from it.
    pub served: u64,
    /// `served` when the channel first reported itself working, if the
    /// owner kept it (the transport's `SlotInfo` does): where the turn's
    /// work starts. `None`: the table counts from the first report it
    /// reads at a tick, which misses what a fast holder moved before it
    /// (a tick is 20 ms; an in-process pair moves thousands of messages
    /// in that time).
    pub served_from: Option<u64>,
    /// Not a working channel but our open attempt, waiting in the peer's
    /// line since then: it holds the slot (its connection is
    /// open) and moves nothing until the peer lets it in. Never
    /// `closeable` and never a policy's choice: the table itself takes it
    /// back for a site waiting here
    /// ([`SlotConfig::line_yield`](super::SlotConfig::line_yield),
    /// [`PreemptReason::LineWait`]), and the owner leaves the line instead
    /// of closing a channel.
    pub in_peer_line_since: Option<Instant>,
    /// With `in_peer_line_since`: how many attempts to the same site in a
    /// row gave their slot back before this one
    /// ([`ComObject::line_yields`](crate::connection::com_object::ComObject::line_yields)).
    /// Each doubles the wait before this one's slot may be taken (at most
    /// 32 × `line_yield`): an attempt sent to the back of a long line
    /// again and again would otherwise never reach its front (the peer's
    /// line counts its wait from when it joined).
    pub line_yields: u8,
}

impl ChannelReport {
    /// Nothing to send, nothing half sent or received, no reply awaited:
    /// closing it interrupts no work, so it gives way before an attempt
    /// waiting in a peer's line does (which moves nothing either, but
    /// gives up its place in that line).
    pub fn is_idle(&self) -> bool {
        self.closeable
            && self.buffers_empty
            && self.queues_empty
            && !self.mid_message
            && !self.replies_expected
    }
}

/// What a slot holder looks like to a policy: its slot, and what its owner
/// last reported about the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The slot (lease) it holds.
    pub holder: u64,
    /// When the slot was granted, in grant order.
    pub granted_at: Instant,
    /// The channel, as its owner reported it.
    pub channel: ChannelReport,
    /// Messages exchanged with the site since the table first saw this
    /// holder's report (about its grant): the work of its turn so far.
    pub moved: u64,
}

/// Why a policy chose its victim (one counter each in metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PreemptReason {
    /// `naive`: the first closeable channel with empty buffers and queues.
    NaiveIdle = 0,
    /// `naive`: the first closeable channel with empty buffers (but queued
    /// messages).
    NaiveBuffersEmpty = 1,
    /// `naive`: the first closeable channel.
    NaiveFirst = 2,
    /// `default`: the least recently active quiet channel to a peer that can
    /// be called back.
    LeastRecentlyActive = 3,
    /// `default`: the least recently active quiet channel; no quiet one
    /// leads to a callable peer.
    NotCallable = 4,
    /// `default`, as a last resort: every channel held long enough is in
    /// the middle of a message or awaits replies.
    Busy = 5,
    /// [`Admission::Share`](super::Admission::Share): a holder gone quiet
    /// while peers wait in line gives way.
    TurnIdle = 6,
    /// [`Admission::Share`](super::Admission::Share): a holder that has had
    /// its turn while peers wait in line gives way.
    TurnOver = 7,
    /// Our open attempt waiting in a full peer's line gives its slot to a
    /// site (or peer) waiting here: it moves nothing, and a node whose
    /// slots all wait in others' lines would otherwise serve nobody until
    /// a give-up deadline.
    LineWait = 8,
}

impl PreemptReason {
    /// Every reason, in counter order.
    pub const ALL: [PreemptReason; 9] = [
        PreemptReason::NaiveIdle,
        PreemptReason::NaiveBuffersEmpty,
        PreemptReason::NaiveFirst,
        PreemptReason::LeastRecentlyActive,
        PreemptReason::NotCallable,
        PreemptReason::Busy,
        PreemptReason::TurnIdle,
        PreemptReason::TurnOver,
        PreemptReason::LineWait,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            PreemptReason::NaiveIdle => "naive_idle",
            PreemptReason::NaiveBuffersEmpty => "naive_buffers_empty",
            PreemptReason::NaiveFirst => "naive_first",
            PreemptReason::LeastRecentlyActive => "least_recently_active",
            PreemptReason::NotCallable => "not_callable",
            PreemptReason::Busy => "busy",
            PreemptReason::TurnIdle => "turn_idle",
            PreemptReason::TurnOver => "turn_over",
            PreemptReason::LineWait => "line_wait",
        }
    }
}

/// Chooses the channel to preempt. Implement it to try another rule; the
/// controller calls it once per preemption tick.
pub trait PreemptionPolicy: Send + std::fmt::Debug {
    /// The policy's name (`naive`, `default`, …).
    fn name(&self) -> &'static str;

    /// The victim among `candidates` (in grant order, oldest first) and
    /// why, or `None` if none may be preempted now.
    fn choose(&self, now: Instant, candidates: &[Candidate]) -> Option<(u64, PreemptReason)>;
}

/// The Mozart paper's policy: scan the channels in the order they got their
/// slot and take the first closeable one with empty buffers and queues, else
/// the first with empty buffers, else the first closeable one. It ignores
/// how recently a channel was used, replies in flight and messages half
/// sent, and may preempt a channel that has just opened — the faults
/// [`DefaultPolicy`] fixes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Naive;

impl PreemptionPolicy for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn choose(&self, _now: Instant, candidates: &[Candidate]) -> Option<(u64, PreemptReason)> {
        let closeable = || candidates.iter().filter(|c| c.channel.closeable);
        closeable()
            .find(|c| c.channel.buffers_empty && c.channel.queues_empty)
            .map(|c| (c.holder, PreemptReason::NaiveIdle))
            .or_else(|| {
                closeable()
                    .find(|c| c.channel.buffers_empty)
                    .map(|c| (c.holder, PreemptReason::NaiveBuffersEmpty))
            })
            .or_else(|| {
                closeable()
                    .next()
                    .map(|c| (c.holder, PreemptReason::NaiveFirst))
            })
    }
}

/// sitenet's policy:
///
/// * never a channel held for less than `min_hold` (it just opened: taking
///   it back at once wastes the handshake and can ping-pong);
/// * among the rest, a quiet channel — no message half sent or received, no
///   reply awaited — before a busy one; a busy one only if nothing else can
///   be freed;
/// * among quiet ones, a peer that can be called back before an accept-only
///   client (the peer that preempted can reopen the channel itself);
/// * within a group, the least recently active.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use sitenet_protocols::slots::{
///     Candidate, ChannelReport, DefaultPolicy, Naive, PreemptReason, PreemptionPolicy,
/// };
///
/// let t0 = Instant::now();
/// let now = t0 + Duration::from_secs(10);
/// let channel = |last_active, mid_message| ChannelReport {
///     closeable: true,
///     last_active,
///     mid_message,
///     replies_expected: false,
///     buffers_empty: true,
///     queues_empty: true,
///     callable: true,
///     served: 0,
///     served_from: None,
///     in_peer_line_since: None,
///     line_yields: 0,
/// };
/// let a_second_ago = now - Duration::from_secs(1);
/// let candidates = [
///     // The least recently active, but a message is half received on it.
///     Candidate { holder: 1, granted_at: t0, channel: channel(t0, true), moved: 0 },
///     // Quiet, active a second ago.
///     Candidate { holder: 2, granted_at: t0, channel: channel(a_second_ago, false), moved: 0 },
///     // Quiet and idle, but it got its slot just now.
///     Candidate { holder: 3, granted_at: now, channel: channel(t0, false), moved: 0 },
/// ];
/// let policy = DefaultPolicy::default(); // min_hold: 100 ms
/// assert_eq!(policy.choose(now, &candidates), Some((2, PreemptReason::LeastRecentlyActive)));
/// // The paper's policy takes the first channel with empty buffers and queues.
/// assert_eq!(Naive.choose(now, &candidates), Some((1, PreemptReason::NaiveIdle)));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DefaultPolicy {
    /// A channel is not preempted until it has held its slot this long.
    pub min_hold: Duration,
}

impl Default for DefaultPolicy {
    fn default() -> Self {
        Self {
            min_hold: Duration::from_millis(100),
        }
    }
}

impl PreemptionPolicy for DefaultPolicy {
    fn name(&self) -> &'static str {
        "default"
    }

    fn choose(&self, now: Instant, candidates: &[Candidate]) -> Option<(u64, PreemptReason)> {
        let eligible = || {
            candidates.iter().filter(|c| {
                c.channel.closeable && now.saturating_duration_since(c.granted_at) >= self.min_hold
            })
        };
        let quiet = |c: &&Candidate| !c.channel.mid_message && !c.channel.replies_expected;
        let lra = |it: &mut dyn Iterator<Item = &Candidate>| {
            it.min_by_key(|c| (c.channel.last_active, c.granted_at))
                .map(|c| c.holder)
        };
        if let Some(h) = lra(&mut eligible().filter(quiet).filter(|c| c.channel.callable)) {
            return Some((h, PreemptReason::LeastRecentlyActive));
        }
        if let Some(h) = lra(&mut eligible().filter(quiet)) {
            return Some((h, PreemptReason::NotCallable));
        }
        lra(&mut eligible()).map(|h| (h, PreemptReason::Busy))
    }
}

/// A policy by name, for configuration and the CLI: `naive` or `default`.
pub fn by_name(name: &str, min_hold: Duration) -> Option<Box<dyn PreemptionPolicy>> {
    match name {
        "naive" => Some(Box::new(Naive)),
        "default" => Some(Box::new(DefaultPolicy { min_hold })),
        _ => None,
    }
}
