//! The checkers' record of every application message: who sent it to
//! whom, at which priority and place in its stream, and what became of it.
//! Each delivery and hand-back is checked as it happens; [`Oracle::finish`]
//! checks that nothing is left unaccounted for once the run has settled.

use std::collections::{BTreeMap, BTreeSet};

use crate::com_object::ComState;
use crate::site::SiteId;

use super::node::Slot;
use super::Sim;

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Delivered,
    /// Handed back as never delivered.
    NotSent,
    /// Handed back as maybe delivered (and not seen delivered).
    Maybe,
    /// Delivered, then handed back as maybe delivered (its ack was lost).
    DeliveredMaybe,
}

#[derive(Debug)]
struct Record {
    from: SiteId,
    /// The site the application named.
    to: SiteId,
    /// Sent to the address of node `place` (where `to` listened): any
    /// incarnation there may receive it.
    place: Option<usize>,
    priority: u8,
    seq: u64,
    /// The body's hash, checked on delivery.
    hash: u64,
    fate: Fate,
}

/// A multiply-rotate hash over 8-byte words (FNV-like, a word at a time):
/// enough to tell a corrupted, truncated or reordered body from the one
/// sent, at a fraction of a byte-wise hash's cost.
fn hash(body: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ body.len() as u64;
    let mut words = body.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    for b in words.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A stream's destination as a violation names it: a site, or the
/// address of a node (an even key).
struct Dest(SiteId);

impl Dest {
    /// The destination of a stream of messages to site `to`, or (`place`)
    /// to the address of that node: a key of its own per address, even
    /// where site ids are odd.
    fn key(to: SiteId, place: Option<usize>) -> SiteId {
        place.map_or(to, |m| SiteId((m as u128) << 1))
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 .0 {
            d if d & 1 == 0 => write!(f, "the address of node {:x}", d >> 1),
            _ => write!(f, "{}", self.0),
        }
    }
}

/// One sender's messages to one site at one priority, in sending order.
#[derive(Debug, Default)]
struct Stream {
    ids: Vec<u64>,
    last_delivered: u64,
}

/// The record of every application message.
#[derive(Debug)]
pub(super) struct Oracle {
    msgs: Vec<Record>,
    streams: BTreeMap<(SiteId, SiteId, u8), Stream>,
    /// Incarnations that crashed: their unacknowledged messages are lost
    /// with them (at most once), and messages to them must be handed back.
    crashed: BTreeSet<SiteId>,
    pub(super) delivered: u64,
    pub(super) handed_back: u64,
    /// Requests sent, and those not ended yet (by requester, number).
    pub(super) requests: u64,
    open_requests: Ongoing,
    /// Cooperations not ended yet.
    open_coops: Ongoing,
    /// Batches not ended yet.
    open_batches: Ongoing,
}

/// Things of one kind (requests, cooperations, batches) that each site
/// started and that must each end exactly once, by site and number.
#[derive(Debug)]
struct Ongoing {
    /// What they are, for the messages.
    what: &'static str,
    open: BTreeSet<(SiteId, u64)>,
}

impl Ongoing {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            open: BTreeSet::new(),
        }
    }

    /// Site `at` started number `n`.
    fn start(&mut self, at: SiteId, n: u64) -> Result<(), String> {
        match self.open.insert((at, n)) {
            true => Ok(()),
            false => Err(format!(
                "{at} started {} {n:#x} while it was open",
                self.what
            )),
        }
    }

    /// Number `n` of site `at` ended.
    fn end(&mut self, at: SiteId, n: u64) -> Result<(), String> {
        match self.open.remove(&(at, n)) {
            true => Ok(()),
            false => Err(format!(
                "{} {n:#x} of {at} ended twice, or never started",
                self.what
            )),
        }
    }

    /// After the run settled: none of a site that did not crash is open.
    fn finish(&self, crashed: &BTreeSet<SiteId>) -> Result<(), String> {
        match self.open.iter().find(|(at, _)| !crashed.contains(at)) {
            None => Ok(()),
            Some((at, n)) => Err(format!("{} {n:#x} of {at} never ended", self.what)),
        }
    }
}

impl Default for Oracle {
    fn default() -> Self {
        Self {
            msgs: Vec::new(),
            streams: BTreeMap::new(),
            crashed: BTreeSet::new(),
            delivered: 0,
            handed_back: 0,
            requests: 0,
            open_requests: Ongoing::new("request"),
            open_coops: Ongoing::new("cooperation"),
            open_batches: Ongoing::new("batch"),
        }
    }
}

impl Oracle {
    /// A message about to be queued; returns its id.
    /// `place`: sent to the address of that node, not to site `to`; such
    /// messages are a stream of their own per address ([`Dest::key`]).
    pub(super) fn sent(
        &mut self,
        from: SiteId,
        to: SiteId,
        place: Option<usize>,
        priority: u8,
        body: &[u8],
    ) -> u64 {
        let id = self.msgs.len() as u64;
        let s = self
            .streams
            .entry((from, Dest::key(to, place), priority))
            .or_default();
        s.ids.push(id);
        self.msgs.push(Record {
            from,
            to,
            place,
            priority,
            seq: s.ids.len() as u64,
            hash: hash(body),
            fate: Fate::Pending,
        });
        id
    }

    pub(super) fn messages(&self) -> u64 {
        self.msgs.len() as u64
    }

    pub(super) fn crashed(&mut self, site: SiteId) {
        self.crashed.insert(site);
    }

    /// The site the application named when it sent message `id`.
    pub(super) fn named(&self, id: u64) -> Option<SiteId> {
        self.msgs.get(id as usize).map(|r| r.to)
    }

    /// Message `id` was delivered at `at` (node `node`), on the channel
    /// from `from`.
    pub(super) fn deliver(
        &mut self,
        id: u64,
        at: SiteId,
        node: usize,
        from: SiteId,
        body: &[u8],
    ) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("{at} received message {id}, which was never sent"));
        };
        if r.hash != hash(body) {
            return Err(format!(
                "message {id} from {} arrived with a body it was not sent with",
                r.from
            ));
        }
        let right_place = match r.place {
            Some(m) => m == node,
            None => r.to == at,
        };
        if !right_place || r.from != from {
            return Err(format!(
                "message {id} from {} to {} was delivered at {at} as coming from {from}",
                r.from, r.to
            ));
        }
        match r.fate {
            Fate::Pending => r.fate = Fate::Delivered,
            Fate::Maybe => r.fate = Fate::DeliveredMaybe,
            Fate::Delivered | Fate::DeliveredMaybe => {
                return Err(format!(
                    "message {id} ({} → {}, priority {}, #{}) delivered twice",
                    r.from, r.to, r.priority, r.seq
                ))
            }
            Fate::NotSent => {
                return Err(format!(
                    "message {id} ({} → {}) delivered after it was handed back as never delivered",
                    r.from, r.to
                ))
            }
        }
        let (key, seq) = ((r.from, Dest::key(r.to, r.place), r.priority), r.seq);
        self.delivered += 1;
        let s = self
            .streams
            .get_mut(&key)
            .expect("every message has a stream");
        if seq <= s.last_delivered {
            return Err(format!(
                "FIFO broken from {} to {} at priority {}: #{seq} delivered after #{}",
                key.0,
                Dest(key.1),
                key.2,
                s.last_delivered
            ));
        }
        // A gap is allowed only over messages already handed back.
        for skipped in s.last_delivered + 1..seq {
            let sid = s.ids[skipped as usize - 1];
            if !matches!(self.msgs[sid as usize].fate, Fate::NotSent | Fate::Maybe) {
                return Err(format!(
                    "FIFO broken from {} to {} at priority {}: #{seq} delivered before #{skipped}, \
                     which was neither delivered nor handed back",
                    key.0, Dest(key.1), key.2
                ));
            }
        }
        s.last_delivered = seq;
        Ok(())
    }

    /// Message `id` was handed back to its sender.
    pub(super) fn hand_back(&mut self, id: u64, maybe_delivered: bool) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("message {id} handed back but never sent"));
        };
        self.handed_back += 1;
        r.fate = match (r.fate, maybe_delivered) {
            (Fate::Pending, false) => Fate::NotSent,
            (Fate::Pending, true) => Fate::Maybe,
            (Fate::Delivered, true) => Fate::DeliveredMaybe,
            (Fate::Delivered, false) => {
                return Err(format!(
                    "message {id} ({} → {}) handed back as never delivered, but it was delivered",
                    r.from, r.to
                ))
            }
            (_, _) => {
                return Err(format!(
                    "message {id} ({} → {}) handed back twice",
                    r.from, r.to
                ))
            }
        };
        Ok(())
    }

    /// Message `id` was given up before it was ever queued (a request
    /// that ended while it waited for room): it never goes, and nobody is
    /// told of it but its requester.
    pub(super) fn given_up(&mut self, id: u64) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("message {id} given up but never sent"));
        };
        match r.fate {
            Fate::Pending => {
                r.fate = Fate::NotSent;
                Ok(())
            }
            _ => Err(format!(
                "message {id} ({} → {}) given up after it went",
                r.from, r.to
            )),
        }
    }

    /// Site `at` sent request `corr`.
    pub(super) fn request(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.requests += 1;
        self.open_requests.start(at, corr)
    }

    /// Request `corr` of site `at` ended (answer, timeout or failure).
    pub(super) fn answered(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.open_requests.end(at, corr)
    }

    /// Message `id` was delivered (whatever happened to it since).
    pub(super) fn was_delivered(&self, id: u64) -> bool {
        self.msgs
            .get(id as usize)
            .is_some_and(|r| matches!(r.fate, Fate::Delivered | Fate::DeliveredMaybe))
    }

    /// Site `at` submitted batch `batch`.
    pub(super) fn batch_opened(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.start(at, batch)
    }

    /// Batch `batch` of site `at` ended.
    pub(super) fn batch_ended(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.end(at, batch)
    }

    /// Site `at` opened cooperation `coop`.
    pub(super) fn coop_opened(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.start(at, coop)
    }

    /// Cooperation `coop` of site `at` ended.
    pub(super) fn coop_ended(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.end(at, coop)
    }

    /// After the run settled: every message of a sender still up was
    /// delivered or handed back.
    pub(super) fn finish(&self) -> Result<(), String> {
        for (id, r) in self.msgs.iter().enumerate() {
            if r.fate == Fate::Pending && !self.crashed.contains(&r.from) {
                return Err(format!(
                    "message {id} ({} → {}, priority {}, #{}) neither delivered nor handed back \
                     after the run settled",
                    r.from, r.to, r.priority, r.seq
                ));
            }
        }
        self.open_requests.finish(&self.crashed)?;
        self.open_coops.finish(&self.crashed)?;
        self.open_batches.finish(&self.crashed)?;
        Ok(())
    }
}

impl Sim {
    /// The checks made once a simulated second: slots, rings, stuck
    /// ComObjects.
    pub(super) fn audit(&mut self) {
        let hard = self.cfg.hard_slots.max(2);
        let ring_max =
            2 * (self.cfg.buffer_size as usize).max(crate::handshake::MIN_BUFFER as usize);
        let mut held = vec![0usize; self.nodes.len()];
        let mut pending = vec![0usize; self.nodes.len()];
        let mut in_line = vec![0usize; self.nodes.len()];
        let mut rings = vec![0usize; self.nodes.len()];
        let mut too_big = None;
        'conns: for (c, conn) in self.conns.iter() {
            for end in &conn.ends {
                let live = self.nodes[end.node].incarnation == end.incarnation;
                if end.holder.is_some() {
                    held[end.node] += 1;
                }
                if live && matches!(end.role, super::net::Role::Acceptor { .. }) {
                    pending[end.node] += 1;
                }
                // A connection whose turn came (its event not run yet) no
                // longer has a place in the table's line.
                if let super::net::Role::InLine { ticket, .. } = end.role {
                    if live && !self.nodes[end.node].turning.contains(&ticket) {
                        in_line[end.node] += 1;
                    }
                }
                if live {
                    rings[end.node] += end.ring_bytes();
                }
                if end.ring_bytes() > ring_max {
                    too_big = Some(format!(
                        "connection {c} holds {} ring bytes",
                        end.ring_bytes()
                    ));
                    break 'conns;
                }
            }
        }
        if let Some(what) = too_big {
            return self.violation(what);
        }
        for (n, node) in self.nodes.iter().enumerate() {
            if !node.up {
                continue;
            }
            if held[n] > hard || node.slots.in_use() > hard {
                let what = format!(
                    "{} holds {} slots, above its hard limit {hard}",
                    node.id, held[n]
                );
                return self.violation(what);
            }
            // The waiting line (issue 21): within its bound, one entry per
            // connection parked in it, and nobody waiting while a slot is
            // free.
            let line_max = node.slots.config().line;
            if in_line[n] != node.slots.in_line()
                || in_line[n] > line_max
                || (in_line[n] > 0 && node.slots.in_use() < hard)
            {
                let what = format!(
                    "{} has {} connections in line, its table {} (bound {line_max}), {} slots in use",
                    node.id,
                    in_line[n],
                    node.slots.in_line(),
                    node.slots.in_use()
                );
                return self.violation(what);
            }
            // Transport memory: the rings of its slots, and of the pending
            // handshakes admission lets it hold and the connections in its
            // line (small rings).
            let max_pending = node.admission.config().max_pending;
            let small = 2 * crate::handshake::MIN_BUFFER as usize;
            let bound = hard * ring_max + (max_pending + in_line[n]) * small;
            if pending[n] > max_pending || rings[n] > bound {
                let what = format!(
                    "{} holds {} pending handshakes (cap {max_pending}) and {} ring bytes \
                     (bound {bound})",
                    node.id, pending[n], rings[n]
                );
                return self.violation(what);
            }
            // The site table, if it changed since the last audit (a check
            // of every node's was most of a 1,000-site run's audit).
            if node.table_changed {
                if let Err(what) = self.check_site_table(n) {
                    return self.violation(what);
                }
            }
            if let Err(what) = self.check_awaited_requests(n) {
                return self.violation(what);
            }
            // A queued send is on its way into the machine: its drain is
            // scheduled (a push that woke nobody would strand it).
            if let Some((key, _)) = node
                .peers
                .iter()
                .find(|(_, p)| !p.queued.is_empty() && !p.drain_armed)
            {
                let what = format!(
                    "{}'s outbox queue for {key} holds sends and no drain is coming",
                    node.id
                );
                return self.violation(what);
            }
            // The output bounds: the node's count is its entries', within
            // its bound, and nobody waits for room that is there.
            let entries = node.peers.iter().map(|(key, p)| (*key, &p.out));
            if let Err(what) = node.out.check(entries) {
                return self.violation(format!("{}: {what}", node.id));
            }
            // Visited in the table's order (no sort: the audit runs every
            // simulated second); the first stuck site by id is reported.
            let stuck = node.peers.iter().filter(|(_, p)| {
                match p.state() {
                    ComState::Opening => p.opening.is_none(),
                    ComState::WaitingForSlot => !matches!(p.slot, Slot::Waiting(_)),
                    // In a peer's line: its attempt in flight, and a
                    // give-up deadline.
                    ComState::WaitingForCallback if p.com.in_line() => {
                        p.opening.is_none() || p.com.poll_timeout().is_none()
                    }
                    ComState::ClosingWeak
                    | ComState::ClosingHard
                    | ComState::WaitingForDisconnect => p.deadline().is_none(),
                    _ => false,
                }
            });
            if let Some((peer, p)) = stuck.min_by_key(|(peer, _)| **peer) {
                let what = format!(
                    "{}'s ComObject for {peer} is stuck in {:?}",
                    node.id,
                    p.state()
                );
                return self.violation(what);
            }
        }
        for node in &mut self.nodes {
            node.table_changed = false;
        }
    }

    /// After the settle phase: every message accounted for, every pair of
    /// live sites converged.
    pub(super) fn final_checks(&mut self) {
        self.audit();
        if self.verdict.is_some() {
            return;
        }
        if let Err(e) = self.oracle.finish() {
            return self.violation(e);
        }
        // The applications' own invariants.
        for n in 0..self.nodes.len() {
            if !self.nodes[n].up {
                continue;
            }
            let mut out = Vec::new();
            let mut next_coop = 0;
            let node = &self.nodes[n];
            let ctx = super::app::AppCtx {
                me: node.id,
                now: self.now,
                sites: &self.directory,
                rng: &mut self.rng,
                out: &mut out,
                next_coop: &mut next_coop,
            };
            if let Err(e) = node.app.check(&ctx) {
                let what = format!("the application at {} says: {e}", node.id);
                return self.violation(what);
            }
        }
        // Quiet at the end: the last third of the settle phase opens no
        // channel (everything owed was delivered long before; an open then
        // is churn, as when sites reopened preempted channels without need).
        let quiet_from = self.cfg.duration + self.cfg.settle * 2 / 3;
        if let Some(at) = self.last_open.filter(|at| *at > quiet_from) {
            let what = format!(
                "channels still opening {:.1}s after the faults stopped, with nothing to send",
                (at - self.cfg.duration).as_secs_f64()
            );
            return self.violation(what);
        }
        for node in &self.nodes {
            for (peer, p) in super::node::sorted_peers(&node.peers) {
                let (queued, unacked) = p.pending();
                if p.state() != ComState::Failed && (queued > 0 || unacked > 0) {
                    let what = format!(
                        "{} and {peer} did not converge: {:?}, {queued} queued, \
                         {unacked} unacknowledged",
                        node.id,
                        p.state(),
                    );
                    return self.violation(what);
                }
            }
        }
        for node in self.nodes.iter().filter(|n| n.up) {
            // Everything acknowledged or handed back gave its bytes back.
            if node.out.bytes() > 0 {
                let what = format!(
                    "{} still counts {} output bytes after the run settled",
                    node.id,
                    node.out.bytes()
                );
                return self.violation(what);
            }
        }
    }
}
