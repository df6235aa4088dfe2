//! What a simulation is given ([`SimConfig`]) and what it reports
//! ([`Report`], [`Verdict`]).

use sitenet_protocols::base::coverage::Coverage;
use std::time::Duration;

use crate::Faults;

/// The most sites one simulation takes ([`SimConfig::sites`]). Every site
/// is a node in this thread's memory, some 35 to 65 KB each at its peak
/// (100,000 sites took 3.4 GB in a 4-second run, 10,000 took 617 MB in
/// a 10-second one): a million is past most machines already, and more
/// would only fail later, for want of memory.
pub const MAX_SITES: usize = 1_000_000;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of sites: 2 to [`MAX_SITES`] (every field's range:
    /// [`check`](Self::check)).
    pub sites: usize,
    /// Seeds every random choice of the run.
    pub seed: u64,
    /// The fault phase: applications tick and faults happen.
    pub duration: Duration,
    /// The must-converge phase after it: no faults, no new ticks; every
    /// pair of live sites must end with nothing queued or unacknowledged.
    pub settle: Duration,
    /// How many faults.
    pub faults: Faults,
    /// Each site's weak slot limit (connects beyond it wait in line).
    pub weak_slots: usize,
    /// Each site's hard slot limit (never exceeded).
    pub hard_slots: usize,
    /// The applications' tick.
    pub tick: Duration,
    /// An application holds its reference to a site this long after it
    /// last sent to it, then lets go (checked on its ticks).
    pub hold_references: Duration,
    /// Each site's ByteBuffer size.
    pub buffer_size: u32,
    /// A link's one-way latency is drawn between these.
    pub latency: (Duration, Duration),
    /// Each link's bandwidth, bytes per second.
    pub bandwidth: u64,
    /// The share of the default [`Workload`](crate::Workload)'s one-way
    /// messages sent to a site's address rather than its id (as a runtime
    /// reaches a site it knows only by address): such an entry binds to
    /// whichever incarnation answers there, or merges into the entry the
    /// node already has for it. 0 by default, so that a seed runs as it
    /// did before this existed.
    pub address_sends: f64,
    /// With `Some(bound)`, a forwarded request's origin the node does not
    /// know becomes an entry on the forwarder's word, a claim it holds, as
    /// in the runtime: a forwarder holds at most `bound` claims on sites not
    /// proven yet (the runtime's default is 16), and a request beyond it is
    /// refused; the origin's book is tried once at each address. `None` by
    /// default, so that a seed runs as it did before this existed: the
    /// origin's entry is then made on the user's word when the application
    /// answers.
    pub peer_claims: Option<u32>,
    /// The chance that a tick of the default [`Workload`](crate::Workload)
    /// also opens a cooperation ([`Workload::gather`](crate::Workload::gather)):
    /// requests to its neighbours whose replies, and votes, fill its
    /// descriptors, by the runtime's rules. 0 by default, so that a seed
    /// runs as it did before cooperations were simulated.
    pub cooperations: f64,
    /// The share of the default [`Workload`](crate::Workload)'s one-way
    /// messages that name another site (a `SiteRef` in them,
    /// [`AppCtx::send_site_ref`](crate::AppCtx::send_site_ref)): the node
    /// that gets one learns the site on its sender's word, a claim the
    /// sender holds (at most [`peer_claims`](Self::peer_claims), else the
    /// runtime's default of 1,024), and sends to it half the time. 0 by
    /// default, so that a seed runs as it did before.
    pub site_refs: f64,
    /// The chance that a tick of the default [`Workload`](crate::Workload)
    /// also submits a batch ([`AppCtx::batch`](crate::AppCtx::batch)): two
    /// to five sends and requests to the site's neighbours, each retried
    /// on the site then at its site's address up to twice, by the
    /// runtime's rule. 0 by default, so that a seed runs as it did before.
    pub batches: f64,
    /// The bytes one entry may hold (queued and unacknowledged, each
    /// message by its footprint), as the runtime's
    /// `NodeConfig::output_bound`: a send beyond it waits in line for
    /// acknowledgements to free room, one line per priority. `None`:
    /// the runtime's default, 512 MiB, scaled down so that the default
    /// bounds of all the sites together hold at most
    /// [`DEFAULT_OUTPUT_MEMORY`](Self::DEFAULT_OUTPUT_MEMORY)
    /// ([`default_output_bound`](Self::default_output_bound)): a
    /// simulation's nodes share one process, where each runtime node has
    /// its own. Keep it at least twice the largest message (the default
    /// workload's is 40 KiB and a little), as the runtime does.
    pub output_bound: Option<u64>,
    /// The bytes all of a node's entries may hold together, as the
    /// runtime's `NodeConfig::node_output_bound` (each entry within a fair
    /// share once the node is half full). `None`: twice
    /// [`output_bound`](Self::output_bound), the ratio of the runtime's
    /// defaults (1 GiB to 512 MiB). Never less than `output_bound`; given
    /// without it, the entry's default is at most this.
    pub node_output_bound: Option<u64>,
    /// The chance that a tick of the default [`Workload`](crate::Workload)
    /// also sends a burst: four to eight messages of up to its largest
    /// size to one neighbour, faster than a slow link takes them (what
    /// fills an output bound). 0 by default, so that a seed runs as it did
    /// before.
    pub bursts: f64,
    /// The share of cuts that reach one end only: the other end's reset is
    /// lost, and it stays open on a half-open connection (a peer's host
    /// gone quiet, a middlebox that forgot the flow) until its silence
    /// shows, or until the peer's new channel replaces it — the link
    /// rule's case of a peer that lost the working channel. 0 by default,
    /// so that a seed runs as it did before.
    pub half_open: f64,
    /// A site unreachable this long is given up on: permanently failed,
    /// what it held handed back (the runtime's `NodeConfig::give_up_after`).
    /// A partition longer than it makes live sites give up on each other,
    /// and their next contact is refused as closing. `None` by default (the
    /// machine's own default), so that a seed runs as it did before.
    pub give_up: Option<Duration>,
    /// The share of crashes that are orderly shutdowns: the node tells
    /// every peer it is leaving and writes its last words before it goes
    /// (the runtime's `Node::shutdown`), so its peers fail it for good at
    /// once. 0 by default, so that a seed runs as it did before.
    pub leaves: f64,
    /// A send with room waits in its entry's outbox queue until the
    /// ComObject's next turn (an event soon after, as the runtime's actor
    /// is woken through its mailbox), instead of entering the machine at
    /// once. An entry reached by address that merges then moves what its
    /// machine held, then what its queue held, in front of the other
    /// entry's queue (the runtime's `turns::merge_line`). Off by default,
    /// so that a seed runs as it did before.
    pub outbox_queue: bool,
    /// An accepted channel reaches its entry's ComObject through the
    /// entry's mailbox (an event up to 5 ms after it was routed there, as
    /// the runtime's `Adopt` message does) instead of at once: counted on
    /// the entry meanwhile, which the reclaim re-check then keeps, while
    /// the machine goes on (opens, parks, fails) and the peer may close.
    /// Off by default, so that a seed runs as it did before.
    pub adopt_hop: bool,
}

/// The longest time a [`SimConfig`] takes (its phases, its tick, a link's
/// latency, how long references are held): 10^9 seconds, as the clock's
/// longest wait ([`MAX_WAIT`](sitenet_protocols::base::timer::MAX_WAIT)).
pub const MAX_SIM_TIME: Duration = sitenet_protocols::base::timer::MAX_WAIT;

/// The shortest tick of the applications: a shorter one schedules more
/// ticks than the run could ever get through (zero: all at one instant,
/// for ever).
pub const MIN_TICK: Duration = Duration::from_millis(1);

/// A [`SimConfig`] no run can be made of: which field, and why. A run of
/// it would hang, overflow the clock, or report a violation that is the
/// configuration's, not the protocol's (a buffer below the handshake's
/// smallest fails every handshake; no settle phase leaves messages in
/// flight). [`field`](Self::field) and [`requirement`](Self::requirement)
/// let a front end name its own option instead (`sitenet sim` says
/// `--tick` where the library says `SimConfig::tick`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimConfigError {
    /// `sites` is below 2 or above [`MAX_SITES`].
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    Sites(usize),
    /// Fewer than one slot to connect, or two in all.
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    Slots {
        /// The weak limit given.
        weak: usize,
        /// The hard limit given.
        hard: usize,
    },
    /// A time out of its range.
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    Time {
        /// The field.
        field: &'static str,
        /// The range it takes.
        range: &'static str,
        /// What it was given.
        got: Duration,
    },
    /// A buffer below the handshake's smallest.
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    BufferSize(u32),
    /// A link that carries nothing.
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    Bandwidth,
    /// A chance or a share outside 0 to 1 (or not a number).
    #[error("SimConfig::{} {}", self.field(), self.requirement())]
    Chance {
        /// The field.
        field: &'static str,
        /// What it was given.
        got: f64,
    },
}

impl SimConfigError {
    /// The field of [`SimConfig`] that no run can be made of.
    ///
    /// ```
    /// use sitenet_sim::SimConfig;
    ///
    /// let c = SimConfig { weak_slots: 0, ..SimConfig::default() };
    /// let e = c.check().unwrap_err();
    /// assert_eq!(e.field(), "weak_slots");
    /// assert_eq!(e.requirement(), "must be at least 1, got 0");
    /// // What a command line says with its own option's name:
    /// let flag = format!("--{} {}", e.field().replace('_', "-"), e.requirement());
    /// assert_eq!(flag, "--weak-slots must be at least 1, got 0");
    /// assert_eq!(e.to_string(), "SimConfig::weak_slots must be at least 1, got 0");
    /// ```
    pub fn field(&self) -> &'static str {
        match self {
            Self::Sites(_) => "sites",
            Self::Slots { weak: 0, .. } => "weak_slots",
            Self::Slots { .. } => "hard_slots",
            Self::Time { field, .. } | Self::Chance { field, .. } => field,
            Self::BufferSize(_) => "buffer_size",
            Self::Bandwidth => "bandwidth",
        }
    }

    /// What the field must be, and what it was given: the error's message
    /// after the field's name.
    pub fn requirement(&self) -> String {
        match self {
            Self::Sites(got) => format!(
                "must be 2 to {MAX_SITES} (each site is a node in memory, some 35 to 65 KB at \
                 its peak: 100,000 took 3.4 GB), got {got}"
            ),
            Self::Slots { weak: 0, .. } => "must be at least 1, got 0".into(),
            Self::Slots { hard, .. } => format!("must be at least 2, got {hard}"),
            Self::Time { range, got, .. } => format!("must be {range}, got {got:?}"),
            Self::BufferSize(got) => format!(
                "must be at least {} bytes (the handshake's smallest buffer), got {got}",
                sitenet_protocols::connection::handshake::MIN_BUFFER
            ),
            Self::Bandwidth => "must be at least 1 byte per second, got 0".into(),
            Self::Chance { got, .. } => format!("is a chance between 0 and 1, got {got}"),
        }
    }
}

impl SimConfig {
    /// The runtime's default output bound of one site.
    pub const DEFAULT_OUTPUT_BOUND: u64 = 512 << 20;

    /// What the default output bounds of all a simulation's sites hold
    /// together at most (each node's bound is twice its entries'): 2 GiB.
    /// The runtime's defaults are for one node in a process; at the
    /// runtime's 512 MiB an overloaded workload made each of 150 simulated
    /// nodes hold up to 1 GiB, and the run aborted for want of memory.
    pub const DEFAULT_OUTPUT_MEMORY: u64 = 2 << 30;

    /// The smallest default output bound of an entry, whatever the number
    /// of sites: twice the default workload's largest message and more.
    pub const MIN_DEFAULT_OUTPUT_BOUND: u64 = 96 << 10;

    /// The default output bound of one entry with `sites` sites: the
    /// runtime's [`DEFAULT_OUTPUT_BOUND`](Self::DEFAULT_OUTPUT_BOUND), or
    /// less so that every node's default bound together is within
    /// [`DEFAULT_OUTPUT_MEMORY`](Self::DEFAULT_OUTPUT_MEMORY), and never
    /// below [`MIN_DEFAULT_OUTPUT_BOUND`](Self::MIN_DEFAULT_OUTPUT_BOUND)
    /// (past about 11,000 sites the floor decides, and the whole grows
    /// with the sites again).
    ///
    /// ```
    /// use sitenet_sim::SimConfig;
    ///
    /// assert_eq!(SimConfig::default_output_bound(2), SimConfig::DEFAULT_OUTPUT_BOUND);
    /// assert_eq!(SimConfig::default_output_bound(1_000), 1_073_741);
    /// assert_eq!(SimConfig::default_output_bound(100_000), 96 * 1024);
    /// ```
    pub fn default_output_bound(sites: usize) -> u64 {
        let per_node = Self::DEFAULT_OUTPUT_MEMORY / (sites.max(1) as u64);
        (per_node / 2).clamp(Self::MIN_DEFAULT_OUTPUT_BOUND, Self::DEFAULT_OUTPUT_BOUND)
    }

    /// Checks that a run can be made of this configuration
    /// ([`Sim::try_new`](crate::Sim::try_new) does; `Sim::new` panics with
    /// the error): sites 2 to [`MAX_SITES`]; at least 1 weak and 2 hard
    /// slots; a tick of [`MIN_TICK`] or more; a settle phase; no time past
    /// [`MAX_SIM_TIME`]; a buffer of the handshake's smallest or more; a
    /// bandwidth; chances between 0 and 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sitenet_sim::{SimConfig, SimConfigError};
    ///
    /// assert!(SimConfig::default().check().is_ok());
    /// let zero_tick = SimConfig { tick: Duration::ZERO, ..SimConfig::default() };
    /// assert!(matches!(zero_tick.check(), Err(SimConfigError::Time { field: "tick", .. })));
    /// ```
    pub fn check(&self) -> Result<(), SimConfigError> {
        if !(2..=MAX_SITES).contains(&self.sites) {
            return Err(SimConfigError::Sites(self.sites));
        }
        if self.weak_slots == 0 || self.hard_slots < 2 {
            return Err(SimConfigError::Slots {
                weak: self.weak_slots,
                hard: self.hard_slots,
            });
        }
        let up_to = "at most 10^9 s";
        let times = [
            ("duration", self.duration, Duration::ZERO, up_to),
            (
                "settle",
                self.settle,
                Duration::from_nanos(1),
                "above zero and at most 10^9 s",
            ),
            ("tick", self.tick, MIN_TICK, "1 ms to 10^9 s"),
            (
                "hold_references",
                self.hold_references,
                Duration::ZERO,
                up_to,
            ),
            ("latency.0", self.latency.0, Duration::ZERO, up_to),
            ("latency.1", self.latency.1, Duration::ZERO, up_to),
            (
                "give_up",
                self.give_up.unwrap_or(MIN_TICK),
                MIN_TICK,
                "1 ms to 10^9 s",
            ),
        ];
        for (field, got, min, range) in times {
            if got < min || got > MAX_SIM_TIME {
                return Err(SimConfigError::Time { field, range, got });
            }
        }
        if self.buffer_size < sitenet_protocols::connection::handshake::MIN_BUFFER {
            return Err(SimConfigError::BufferSize(self.buffer_size));
        }
        if self.bandwidth == 0 {
            return Err(SimConfigError::Bandwidth);
        }
        let chances = [
            ("address_sends", self.address_sends),
            ("cooperations", self.cooperations),
            ("site_refs", self.site_refs),
            ("batches", self.batches),
            ("bursts", self.bursts),
            ("half_open", self.half_open),
            ("leaves", self.leaves),
        ];
        for (field, got) in chances {
            if !(0.0..=1.0).contains(&got) {
                return Err(SimConfigError::Chance { field, got });
            }
        }
        Ok(())
    }

    /// The bytes one entry may hold: as given, or the default for the
    /// number of sites ([`default_output_bound`](Self::default_output_bound)),
    /// at most the node's bound if that is given.
    pub fn output_bound(&self) -> u64 {
        self.output_bound.unwrap_or_else(|| {
            let default = Self::default_output_bound(self.sites);
            self.node_output_bound
                .map_or(default, |node| default.min(node))
        })
    }

    /// The bytes a node's entries may hold together.
    pub fn node_output_bound(&self) -> u64 {
        let site = self.output_bound();
        self.node_output_bound
            .unwrap_or(site.saturating_mul(2))
            .max(site)
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            sites: 50,
            seed: 0,
            duration: Duration::from_secs(30),
            settle: Duration::from_secs(60),
            faults: Faults::Light,
            weak_slots: 8,
            hard_slots: 12,
            tick: Duration::from_secs(1),
            hold_references: Duration::from_secs(5),
            buffer_size: 16 * 1024,
            latency: (Duration::from_micros(100), Duration::from_millis(2)),
            bandwidth: 100_000_000,
            address_sends: 0.0,
            peer_claims: None,
            cooperations: 0.0,
            site_refs: 0.0,
            batches: 0.0,
            output_bound: None,
            node_output_bound: None,
            bursts: 0.0,
            half_open: 0.0,
            give_up: None,
            leaves: 0.0,
            outbox_queue: false,
            adopt_hop: false,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every checker held.
    Ok,
    /// A checker failed at this step of the run.
    Violation {
        /// The event's number (1 = the first event).
        step: u64,
        /// Simulated time.
        at: Duration,
        /// What broke.
        what: String,
    },
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Number of sites.
    pub sites: usize,
    /// The checkers' verdict.
    pub verdict: Verdict,
    /// SHA-256 of the event trace, hex.
    pub digest: String,
    /// Application messages sent.
    pub messages: u64,
    /// Application messages delivered.
    pub delivered: u64,
    /// Messages handed back to their senders.
    pub handed_back: u64,
    /// Connections cut.
    pub cuts: u64,
    /// Partitions.
    pub partitions: u64,
    /// Channels preempted for want of slots.
    pub preemptions: u64,
    /// Sites crashed and restarted as new incarnations.
    pub restarts: u64,
    /// Messages resent on a new channel.
    pub retransmitted: u64,
    /// Open attempts.
    pub opens: u64,
    /// Accepted channels refused at the hard slot limit (the waiting line
    /// full, or the peer of a build without it).
    pub accepts_refused: u64,
    /// Accepted peers told to wait in a site's line.
    pub line_waits: u64,
    /// Of those, let in when a slot freed.
    pub line_grants: u64,
    /// Open attempts waiting in a peer's line that gave their slot to a
    /// site waiting at their own node (`PreemptReason::LineWait`; also
    /// counted in `preemptions`).
    pub line_yields: u64,
    /// Reclaims the site table's re-check refused because an accepted
    /// channel was on its way to the entry (only with
    /// [`SimConfig::adopt_hop`]).
    pub reclaims_kept: u64,
    /// Entries reached by address that their first handshake bound to
    /// the site answering there.
    pub bound: u64,
    /// Of entries reached by address, those whose site the node knew
    /// under another entry already: everything they held moved there.
    pub merges: u64,
    /// Entries made for forwarded requests' origins on the forwarder's
    /// word ([`SimConfig::peer_claims`]).
    pub origins_claimed: u64,
    /// Forwarded requests refused because the forwarder held its bound of
    /// claims on sites not yet proven ([`SimConfig::peer_claims`]).
    pub origins_refused: u64,
    /// Sites forgotten by the reclaim rule.
    pub reclaimed: u64,
    /// Times a ComObject parked (no channel, nothing pending),
    /// and times one started again from what it kept.
    pub parks: u64,
    /// See `parks`.
    pub unparks: u64,
    /// Requests sent (each ended exactly once: answer, timeout or failure).
    pub requests: u64,
    /// Replies that came after their request had ended.
    pub late_replies: u64,
    /// Messages naming a site ([`SimConfig::site_refs`]) that their
    /// receiver handled: the site was known, or became an entry on the
    /// sender's word.
    pub site_refs: u64,
    /// Of those, the sites the receiver did not know: entries made on the
    /// sender's word, claims it held until the site was proven.
    pub site_refs_claimed: u64,
    /// Messages naming a site their receiver did not know, from a sender
    /// that held its bound of claims: not decoded, not handled (the
    /// runtime's decode error).
    pub site_refs_refused: u64,
    /// Batches submitted ([`AppCtx::batch`](crate::AppCtx::batch)), each
    /// ended exactly once, and their operations.
    pub batches: u64,
    /// See `batches`.
    pub batch_ops: u64,
    /// Operations tried again after their site failed (the runtime's
    /// rule: never sent, or a request whose answer never came).
    pub batch_retries: u64,
    /// Operations that ended without success after their retries.
    pub batch_ops_failed: u64,
    /// Cooperations opened ([`AppCtx::cooperation`](crate::AppCtx::cooperation)),
    /// each ended exactly once: completed, timed out, failed (a site it
    /// waited for failed permanently) or cancelled.
    pub cooperations: u64,
    /// See `cooperations`.
    pub coops_completed: u64,
    /// See `cooperations`.
    pub coops_timed_out: u64,
    /// See `cooperations`.
    pub coops_failed: u64,
    /// See `cooperations`.
    pub coops_cancelled: u64,
    /// Replies offered to a cooperation that took none of them (it had
    /// ended, or no unfilled descriptor matched), and cooperation replies
    /// no open cooperation took: discarded, as the runtime counts them.
    pub coop_discarded: u64,
    /// Sends that found no room under the output bounds (or others of
    /// their class waiting) and waited in line ([`SimConfig::output_bound`]).
    pub send_waits: u64,
    /// Of those, requests that ended (their deadline) while they waited:
    /// their turn given up, their message never sent, as the runtime's
    /// requester does.
    pub sends_given_up: u64,
    /// The most output bytes one node held at once (every entry's
    /// queued and unacknowledged messages, by footprint).
    pub output_peak: u64,
    /// The most sends that waited for room at one node at once: what an
    /// application that keeps sending while its sends wait piles up
    /// ([`Workload::max_waiting`](crate::Workload::max_waiting) holds the
    /// default workload's down).
    pub waiting_peak: u64,
    /// Pending handshakes admission closed (silent, too slow, or dropped
    /// for room).
    pub handshakes_dropped: u64,
    /// Simulated seconds run.
    pub sim_s: f64,
    /// Events processed.
    pub events: u64,
    /// Cuts that reached one end only ([`SimConfig::half_open`]).
    pub half_open_cuts: u64,
    /// Crashes that were orderly shutdowns ([`SimConfig::leaves`]).
    pub leaves: u64,
    /// How often the run reached each decision point of the protocol
    /// machines (`sitenet sim --coverage` adds them up over a search).
    pub coverage: Coverage,
}
