//! Admission of accepted connections before their handshake, sans-IO.
//!
//! A connection a node accepts costs a file descriptor and a little memory
//! from the moment it is accepted, but it is nobody yet: until its peer
//! presents itself (NEGOTIATE) it holds **no channel slot** and is not slot
//! pressure — an idle socket can neither refuse an inbound peer, nor block
//! an outbound open, nor make the slot controller preempt a working
//! channel. The slot is taken when the presented channel is adopted.
//!
//! What a pending handshake may cost is bounded here instead:
//!
//! * **In count, per node** ([`AdmissionConfig::max_pending`]). It is
//!   derived from the process's descriptor limit ([`handshake_fds`]): the
//!   slot limits ([`SlotConfig::from_fd_limit`](crate::slots::SlotConfig::from_fd_limit))
//!   leave exactly that many descriptors for pending handshakes, beside
//!   the working channels and [`RESERVED_FDS`], so a node with every slot
//!   in use and every pending handshake open still fits its descriptors.
//! * **In count, per source address** ([`AdmissionConfig::max_per_source`]):
//!   once the node holds half its cap, a source that already holds
//!   `max_per_source` pending handshakes makes room for a new one by losing
//!   its own oldest. Below half the cap a burst from one address (a NAT, a
//!   process starting a hundred clients) is not held back; past it, one
//!   address never holds more than half the node's room, and what it holds
//!   beyond its share is its own to lose. An IPv6 source is its /64
//!   prefix (one host usually holds the whole prefix); channels with no
//!   address (Unix sockets, in-process) share one group, bounded by the
//!   node's cap only.
//! * **In time**: a socket that has sent nothing after
//!   [`AdmissionConfig::silence`] is dropped (an honest initiator answers
//!   PRESENT within a round trip), and any handshake after
//!   [`AdmissionConfig::timeout`].
//!
//! **Who is dropped when a cap is hit: the oldest, never the newcomer.**
//! The newcomer is always admitted; room is made by dropping the oldest
//! pending handshake that has sent nothing yet — of the newcomer's own
//! source if the per-source cap is what is hit, else of the source holding
//! the most — and only if none is silent, the oldest of them. Refusing the
//! newest instead would let whoever fills the cap first keep every honest
//! peer out until the silence deadline, and again after it (the attacker
//! simply reconnects); dropping the oldest leaves an honest peer, which
//! completes its handshake in a round trip, a window as long as it takes
//! the attacker to open a whole cap's worth of new connections, and
//! silent sockets go first because an honest peer is silent only for its
//! first round trip.
//!
//! Time is an argument and nothing here does I/O: the runtime's accept
//! loop drives it, and the tests drive it with a virtual clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::base::limits::RESERVED_FDS;

/// Most descriptors [`handshake_fds`] keeps for pending handshakes.
pub const MAX_DERIVED_PENDING: usize = 1024;

/// Fewest descriptors [`handshake_fds`] keeps for pending handshakes.
pub const MIN_DERIVED_PENDING: usize = 8;

/// Descriptors kept for a node's pending handshakes out of a process limit
/// of `nofile` (RLIMIT_NOFILE's soft value): an eighth of what
/// [`RESERVED_FDS`] leaves, between [`MIN_DERIVED_PENDING`] and
/// [`MAX_DERIVED_PENDING`]. The slot limits derived from the same
/// descriptor limit leave this many out of their hard limit.
///
/// ```
/// use sitenet_protocols::slots::admission::handshake_fds;
/// assert_eq!(handshake_fds(1024), 120); // (1024 - 64) / 8
/// assert_eq!(handshake_fds(10), 8);
/// assert_eq!(handshake_fds(1 << 20), 1024);
/// ```
pub fn handshake_fds(nofile: u64) -> usize {
    ((nofile.saturating_sub(RESERVED_FDS) / 8) as usize)
        .clamp(MIN_DERIVED_PENDING, MAX_DERIVED_PENDING)
}

/// The bounds on pending handshakes (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Pending handshakes a node holds at most.
    pub max_pending: usize,
    /// Pending handshakes one source address holds at most once the node
    /// holds half of `max_pending`.
    pub max_per_source: usize,
    /// A connection that has sent nothing for this long is dropped.
    pub silence: Duration,
    /// A handshake not complete after this long is dropped.
    pub timeout: Duration,
}

impl AdmissionConfig {
    /// The values made consistent: at least one pending handshake of each
    /// kind, and the silence deadline no later than the timeout.
    pub fn normalised(mut self) -> Self {
        self.max_pending = self.max_pending.max(1);
        self.max_per_source = self.max_per_source.max(1);
        // `Duration::MAX` for "never" is a deadline the clock holds.
        self.timeout = self.timeout.min(crate::base::timer::MAX_WAIT);
        self.silence = self.silence.min(self.timeout);
        self
    }
}

/// Why a pending handshake was dropped (one counter each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u8)]
pub enum Dropped {
    /// The node held `max_pending` pending handshakes: room was made for a
    /// newer one.
    #[error("dropped to make room: the node holds its most pending handshakes")]
    NodeFull = 0,
    /// Its source held `max_per_source` while the node was half full: room
    /// was made for a newer one from the same source.
    #[error("dropped to make room: its source address holds its most pending handshakes")]
    SourceFull = 1,
    /// It sent nothing within the silence deadline.
    #[error("sent nothing within the silence deadline")]
    Silent = 2,
    /// Its handshake was not complete within the timeout.
    #[error("handshake not complete within the timeout")]
    TimedOut = 3,
}

impl Dropped {
    /// Every reason, in counter order.
    pub const ALL: [Dropped; 4] = [
        Dropped::NodeFull,
        Dropped::SourceFull,
        Dropped::Silent,
        Dropped::TimedOut,
    ];
}

/// Who a pending handshake is charged to: an IPv4 address, an IPv6 /64
/// prefix, or (`None`) the channels that have no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(Option<IpAddr>);

impl Source {
    /// The source of channels that have no address (a Unix socket, an
    /// in-process channel), and of a pair whose channel's address is not
    /// known.
    pub const UNADDRESSED: Source = Source(None);

    /// The source of a connection from `ip` (`None`: a Unix socket or an
    /// in-process channel). An IPv4-mapped IPv6 address is its IPv4
    /// address; other IPv6 addresses count by their /64 prefix.
    pub fn of(ip: Option<IpAddr>) -> Self {
        Self(ip.map(|ip| match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                IpAddr::V6([s[0], s[1], s[2], s[3], 0, 0, 0, 0].into())
            }
            v4 => v4,
        }))
    }

    /// True for a channel with an address (the per-source cap applies).
    pub fn has_address(self) -> bool {
        self.0.is_some()
    }
}

/// What [`Admission::admit`] did: the newcomer's ticket and, if a cap was
/// hit, the pending handshake dropped to make room (close it now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The newcomer's ticket, for [`spoke`](Admission::spoke) and
    /// [`finish`](Admission::finish).
    pub ticket: u64,
    /// The handshake dropped for it, and why.
    pub dropped: Option<(u64, Dropped)>,
}

/// Counters of an admission table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Connections admitted.
    pub admitted: u64,
    /// Pending handshakes dropped, by [`Dropped`] (index = reason as u8).
    pub dropped: [u64; Dropped::ALL.len()],
    /// Most pending handshakes at once.
    pub peak_pending: usize,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    source: Source,
    since: Instant,
}

/// The pending handshakes of one node (see the module documentation).
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use sitenet_protocols::slots::admission::{Admission, AdmissionConfig, Dropped, Source};
///
/// let t0 = Instant::now(); // the virtual clock
/// let cfg = AdmissionConfig {
///     max_pending: 2,
///     max_per_source: 2,
///     silence: Duration::from_secs(1),
///     timeout: Duration::from_secs(5),
/// };
/// let mut adm = Admission::new(cfg);
/// let a = Source::of(Some("192.0.2.1".parse()?));
/// let b = Source::of(Some("192.0.2.2".parse()?));
/// let idle = adm.admit(t0, a).ticket;
/// let honest = adm.admit(t0, a).ticket;
/// adm.spoke(honest);
/// // At the node's cap a newcomer is admitted; the oldest silent one goes.
/// let newcomer = adm.admit(t0, b);
/// assert_eq!(newcomer.dropped, Some((idle, Dropped::NodeFull)));
/// // It sends nothing: dropped after the silence deadline; the other
/// // spoke, and has until the timeout.
/// assert_eq!(adm.poll_timeout(), Some(t0 + Duration::from_secs(1)));
/// let expired = adm.handle_timeout(t0 + Duration::from_secs(1));
/// assert_eq!(expired, vec![(newcomer.ticket, Dropped::Silent)]);
/// assert!(adm.finish(honest)); // its handshake completed
/// assert_eq!(adm.pending(), 0);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Debug)]
pub struct Admission {
    cfg: AdmissionConfig,
    /// Ticket → pending handshake. Tickets increase: admission order.
    pending: BTreeMap<u64, Pending>,
    /// Those that have sent nothing yet, oldest first.
    silent: BTreeSet<u64>,
    /// Those that have, oldest first.
    spoken: BTreeSet<u64>,
    /// Each source's pending handshakes, oldest first.
    by_source: HashMap<Source, BTreeSet<u64>>,
    next: u64,
    stats: AdmissionStats,
}

impl Admission {
    /// An empty table.
    pub fn new(cfg: AdmissionConfig) -> Self {
        Self {
            cfg: cfg.normalised(),
            pending: BTreeMap::new(),
            silent: BTreeSet::new(),
            spoken: BTreeSet::new(),
            by_source: HashMap::new(),
            next: 1,
            stats: AdmissionStats::default(),
        }
    }

    /// The bounds.
    pub fn config(&self) -> AdmissionConfig {
        self.cfg
    }

    /// Pending handshakes now.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Pending handshakes charged to `source` now.
    pub fn pending_from(&self, source: Source) -> usize {
        self.by_source.get(&source).map_or(0, BTreeSet::len)
    }

    /// Counters.
    pub fn stats(&self) -> AdmissionStats {
        self.stats
    }

    /// A connection from `source` was accepted at `now`: it is admitted,
    /// and if a cap was hit the returned victim is dropped from the table
    /// (its driver closes it).
    pub fn admit(&mut self, now: Instant, source: Source) -> Admitted {
        let dropped = self.make_room(source);
        let ticket = self.next;
        self.next += 1;
        self.pending.insert(ticket, Pending { source, since: now });
        self.silent.insert(ticket);
        self.by_source.entry(source).or_default().insert(ticket);
        self.stats.admitted += 1;
        self.stats.peak_pending = self.stats.peak_pending.max(self.pending.len());
        Admitted { ticket, dropped }
    }

    /// The victim, if admitting one more from `source` hits a cap.
    fn make_room(&mut self, source: Source) -> Option<(u64, Dropped)> {
        let under_pressure = self.pending.len() >= self.cfg.max_pending.div_ceil(2);
        if source.has_address()
            && under_pressure
            && self.pending_from(source) >= self.cfg.max_per_source
        {
            let victim = self.oldest_of(source)?;
            self.drop_one(victim, Dropped::SourceFull);
            return Some((victim, Dropped::SourceFull));
        }
        if self.pending.len() < self.cfg.max_pending {
            return None;
        }
        // The source holding the most; among equals, the one holding the
        // oldest handshake.
        let heaviest = self
            .by_source
            .iter()
            .filter_map(|(s, t)| Some((*s, t.len(), *t.first()?)))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(s, _, _)| s)?;
        let victim = self.oldest_of(heaviest)?;
        self.drop_one(victim, Dropped::NodeFull);
        Some((victim, Dropped::NodeFull))
    }

    /// `source`'s oldest silent pending handshake, else its oldest.
    fn oldest_of(&self, source: Source) -> Option<u64> {
        let mine = self.by_source.get(&source)?;
        mine.iter()
            .find(|t| self.silent.contains(t))
            .or_else(|| mine.first())
            .copied()
    }

    fn drop_one(&mut self, ticket: u64, why: Dropped) {
        if self.remove(ticket) {
            self.stats.dropped[why as usize] += 1;
        }
    }

    fn remove(&mut self, ticket: u64) -> bool {
        let Some(p) = self.pending.remove(&ticket) else {
            return false;
        };
        self.silent.remove(&ticket);
        self.spoken.remove(&ticket);
        if let Some(set) = self.by_source.get_mut(&p.source) {
            set.remove(&ticket);
            if set.is_empty() {
                self.by_source.remove(&p.source);
            }
        }
        true
    }

    /// The peer of `ticket` sent its first bytes: it is no longer silent,
    /// and has until the timeout.
    pub fn spoke(&mut self, ticket: u64) {
        if self.silent.remove(&ticket) {
            self.spoken.insert(ticket);
        }
    }

    /// The handshake of `ticket` ended (presented, failed or closed): it
    /// leaves the table. False if it had already left (dropped).
    pub fn finish(&mut self, ticket: u64) -> bool {
        self.remove(ticket)
    }

    fn deadline(&self, set: &BTreeSet<u64>, after: Duration) -> Option<Instant> {
        set.first().map(|t| self.pending[t].since + after)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let silent = self.deadline(&self.silent, self.cfg.silence);
        let spoken = self.deadline(&self.spoken, self.cfg.timeout);
        match (silent, spoken) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drops every pending handshake past its deadline at `now`: returned
    /// with why, for the driver to close.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<(u64, Dropped)> {
        let mut out = Vec::new();
        let rules = [
            (Dropped::Silent, self.cfg.silence),
            (Dropped::TimedOut, self.cfg.timeout),
        ];
        for (why, after) in rules {
            loop {
                let set = match why {
                    Dropped::Silent => &self.silent,
                    _ => &self.spoken,
                };
                match self.deadline(set, after) {
                    Some(at) if at <= now => {}
                    _ => break,
                }
                let t = *set.first().expect("a deadline has a ticket");
                self.drop_one(t, why);
                out.push((t, why));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
