//! The books every simulated site of one dataflow run shares: what the
//! checkers compare across sites, and what a failed check reports to
//! explain itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use sitenet_dataflow_protocols::EntityId;
use sitenet_protocols::base::site::SiteId;

use super::DataflowStats;

/// The books every site of one run shares: what the checkers compare
/// across sites. One run is one thread's, so a `RefCell` does.
#[derive(Debug, Default)]
pub(super) struct Books {
    /// Each variable's value as first seen: by a bind that succeeded or
    /// a wait's answer.
    pub(super) vars: BTreeMap<EntityId, Bytes>,
    /// Each cell's contents written (the initial one too) and answered.
    pub(super) cells: BTreeMap<EntityId, CellBook>,
    /// The last item read per port and sender.
    pub(super) streams: BTreeMap<(EntityId, SiteId), u64>,
    /// Items handed back to their sender as maybe delivered by a port's
    /// home that is up (it forgot the session): they may be missing from
    /// the stream, and their sender was told.
    pub(super) maybe_lost: BTreeSet<(EntityId, SiteId, u64)>,
    /// Every entity the workload made, in the order made.
    pub(super) ranks: BTreeMap<EntityId, u64>,
    /// Messages carrying copies of references (or accounting for them:
    /// Dirty, Clean, Release), sent and not arrived yet: by sender, receiver and
    /// body, how many, and what they name.
    pub(super) in_flight: BTreeMap<InFlight, (u32, Vec<EntityId>, &'static str)>,
    /// Messages handed back, for the checks' reports: sender, receiver,
    /// maybe delivered, what it was about and named, what it was.
    pub(super) handed_back: Vec<HandedBack>,
    /// Sites told another failed for good while it was up (given up on
    /// after a partition longer than the give-up time): when, who, whom.
    pub(super) given_up: Vec<(Duration, SiteId, SiteId)>,
    /// What each live site's check found wrong, in the order checked.
    pub(super) failed_checks: Vec<String>,
    pub(super) stats: DataflowStats,
}

/// A message in flight: its sender, its receiver and its body.
pub(super) type InFlight = (SiteId, SiteId, Vec<u8>);

/// A message sitenet handed back, as the books keep it.
#[derive(Debug)]
pub(super) struct HandedBack {
    pub(super) at: Duration,
    pub(super) from: SiteId,
    pub(super) to: SiteId,
    pub(super) maybe: bool,
    /// The entities it was about or carried copies of.
    pub(super) names: Vec<EntityId>,
    pub(super) what: String,
}

#[derive(Debug, Default)]
pub(super) struct CellBook {
    pub(super) written: BTreeSet<Bytes>,
    pub(super) answered: BTreeSet<Bytes>,
}

impl Books {
    /// A message (`what`) carrying or counting copies of `refs` left
    /// `from` for `to`.
    pub(super) fn carried(
        &mut self,
        from: SiteId,
        to: SiteId,
        body: &[u8],
        refs: &[EntityId],
        what: &'static str,
    ) {
        if refs.is_empty() {
            return;
        }
        let e = self
            .in_flight
            .entry((from, to, body.to_vec()))
            .or_insert((0, refs.to_vec(), what));
        e.0 += 1;
    }

    /// The message `body` from `from` reached `to`, or came back to
    /// `from`: its copies are no longer in flight.
    pub(super) fn landed(&mut self, from: SiteId, to: SiteId, body: &[u8]) {
        let key = (from, to, body.to_vec());
        if let Some(e) = self.in_flight.get_mut(&key) {
            e.0 -= 1;
            if e.0 == 0 {
                self.in_flight.remove(&key);
            }
        }
    }

    /// Why `e` may be kept (or an operation on it never ended), as far as
    /// the books can tell: copies of it that never arrived (with whom),
    /// and messages about it or carrying it that were handed back.
    pub(super) fn explain(&self, e: EntityId, up: &[SiteId]) -> String {
        let state = |s: &SiteId| if up.contains(s) { "up" } else { "crashed" };
        let mut why: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, (_, refs, _))| refs.contains(&e))
            .take(4)
            .map(|((from, to, _), (_, _, what))| {
                format!(
                    "a {what} carrying or counting a copy, sent by {from} ({}) to {to} ({}), \
                     never arrived",
                    state(from),
                    state(to)
                )
            })
            .collect();
        why.extend(
            self.handed_back
                .iter()
                .filter(|h| h.names.contains(&e))
                .take(4)
                .map(|h| {
                    format!(
                        "at {:.3}s {} handed back {} to {} ({}): {}",
                        h.at.as_secs_f64(),
                        h.from,
                        if h.maybe {
                            "as maybe delivered"
                        } else {
                            "as never sent"
                        },
                        h.to,
                        state(&h.to),
                        h.what
                    )
                }),
        );
        why.extend(
            self.given_up
                .iter()
                .filter(|(_, _, whom)| *whom == e.home)
                .take(4)
                .map(|(at, who, whom)| {
                    format!(
                        "at {:.3}s {who} was told its home {whom} failed for good while it was up",
                        at.as_secs_f64()
                    )
                }),
        );
        if why.is_empty() {
            return String::new();
        }
        format!(" [{}]", why.join("; "))
    }

    /// When `e` was made among the run's entities (a stream's variables,
    /// which the workload never holds, rank last).
    pub(super) fn rank(&self, e: EntityId) -> u64 {
        self.ranks.get(&e).copied().unwrap_or(u64::MAX)
    }

    /// `site` saw `var` bound to `bytes` (`how`: by what).
    pub(super) fn saw_bound(&mut self, site: SiteId, var: EntityId, bytes: &Bytes, how: &str) {
        match self.vars.get(&var) {
            Some(first) if first != bytes => panic!(
                "single assignment broken: {site} {how} {var:?} bound to {:?}, but it was \
                 seen bound to {:?}",
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(first)
            ),
            Some(_) => {}
            None => {
                self.vars.insert(var, bytes.clone());
            }
        }
    }

    /// An exchange on `cell` at `site` answered `old`.
    pub(super) fn answered(&mut self, site: SiteId, cell: EntityId, old: &Bytes) {
        let book = self.cells.entry(cell).or_default();
        let old_s = String::from_utf8_lossy(old);
        if !book.written.contains(old) {
            panic!(
                "exchanges not linearizable: {site}'s exchange on {cell:?} answered {old_s:?}, \
                 which no exchange wrote and is not the initial content"
            );
        }
        if !book.answered.insert(old.clone()) {
            panic!(
                "exchanges not linearizable: {site}'s exchange on {cell:?} answered {old_s:?}, \
                 an old content already answered to another exchange"
            );
        }
    }

    /// `port`'s home read item `seq` of `sender` (`sites`: those up).
    pub(super) fn read(&mut self, port: EntityId, sender: SiteId, seq: u64, sites: &[SiteId]) {
        let up = sites.contains(&sender);
        let last = self.streams.entry((port, sender)).or_insert(0);
        if seq <= *last {
            panic!(
                "per-sender FIFO broken: {port:?}'s stream holds {sender}'s item {seq} after \
                 its item {last}"
            );
        }
        let excused = (*last + 1..seq).all(|k| self.maybe_lost.contains(&(port, sender, k)));
        if seq != *last + 1 && up && !excused {
            let last = *last;
            panic!(
                "per-sender FIFO broken: {port:?}'s stream holds {sender}'s item {seq} right \
                 after its item {last}, and {sender} never crashed{}",
                self.explain(port, sites)
            );
        }
        *last = seq;
    }
}
