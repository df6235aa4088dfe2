//! The checks the simulator makes of its sites beside the message record
//! ([`Oracle`](crate::check::Oracle)): the audit once a simulated second
//! (slots, rings, pending handshakes, the waiting line, the site table,
//! awaited requests, the output bounds, stuck ComObjects) and the final
//! checks once the run has settled (every message accounted for, the
//! applications' own checks, quiet, every pair converged, nothing held).

use std::time::Duration;

use sitenet_protocols::connection::com_object::ComState;

use crate::peer::Slot;
use crate::Sim;

/// How long after the last message was delivered or handed back a
/// channel may still open (an unacknowledged message reopening a channel
/// preempted before its ack came, through a peer's line): twice the
/// linger time.
const QUIET_AFTER_LAST_MESSAGE: Duration = Duration::from_secs(20);

impl Sim {
    /// The checks made once a simulated second: slots, rings, stuck
    /// ComObjects.
    pub(crate) fn audit(&mut self) {
        let hard = self.cfg.hard_slots.max(2);
        let ring_max = 2
            * (self.cfg.buffer_size as usize)
                .max(sitenet_protocols::connection::handshake::MIN_BUFFER as usize);
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
                if live && matches!(end.role, crate::net::Role::Acceptor { .. }) {
                    pending[end.node] += 1;
                }
                // A connection whose turn came (its event not run yet) no
                // longer has a place in the table's line.
                if let crate::net::Role::InLine { ticket, .. } = end.role {
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
            if let Err(e) = node.slots.check_books() {
                return self.violation(format!("{}'s slot table: {e}", node.id));
            }
            // One channel per pair: a working channel ends any attempt of
            // the site's own (the link rule abandons it in the same turn).
            if let Some((peer, _)) = node
                .peers
                .iter()
                .find(|(_, p)| p.live.is_some() && p.opening.is_some())
            {
                let what = format!(
                    "{} works with {peer} on a channel and still opens another",
                    node.id
                );
                return self.violation(what);
            }
            if held[n] > hard || node.slots.in_use() > hard {
                let what = format!(
                    "{} holds {} slots, above its hard limit {hard}",
                    node.id, held[n]
                );
                return self.violation(what);
            }
            // The waiting line: within its bound, one entry per
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
            let small = 2 * sitenet_protocols::connection::handshake::MIN_BUFFER as usize;
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
            // Each entry counts the accepted channels on their way to it,
            // and no channel is on its way to an entry that is gone.
            if self.cfg.adopt_hop {
                if let Err(what) = node.adopting.check(&node.peers) {
                    return self.violation(format!("{}: {what}", node.id));
                }
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

    /// Where message `id` still waits at its sender, if it does: to enter
    /// its machine (for room in the output bound), or in the machine with
    /// others for the same site. A run whose workload sends more than the
    /// slots and the bounds let through in the settle phase is told apart
    /// from a message the protocol lost (which no sender holds).
    fn still_waiting(&self, id: u64) -> Option<String> {
        let (from, to) = self.oracle.route(id)?;
        let node = self.nodes.iter().find(|n| n.up && n.id == from)?;
        let waiting: usize = node.peers.values().map(|p| p.out.waiting_count()).sum();
        // Waiting to enter its machine, at whichever entry it was sent
        // through (one reached by address is keyed by a stand-in).
        for (_, p) in crate::peer::sorted_peers(&node.peers) {
            if p.out.holds_waiting(id) {
                return Some(format!(
                    "it still waits for room in its sender's output bound, as do {waiting} \
                     sends at that site: the workload sends more than the output bounds let \
                     through within the settle phase (a longer --settle shows whether it drains)"
                ));
            }
            if p.queued.iter().any(|w| w.id == id) {
                return Some("it still waits in its entry's outbox queue".into());
            }
        }
        // In its sender's machine, queued or sent and not acknowledged, if
        // the sender still holds messages for the site.
        let entry = node.peers.get(&to)?;
        let (queued, unacked) = entry.pending();
        let all: usize = node.peers.values().map(|p| p.pending().0).sum();
        (queued + unacked > 0).then(|| {
            format!(
                "its sender still holds {queued} messages queued and {unacked} unacknowledged \
                 for that site ({:?}), {all} queued for all sites and {waiting} sends waiting \
                 for room: the backlog had not drained within the settle phase (a longer \
                 --settle shows whether it drains)",
                entry.state()
            )
        })
    }

    /// After the settle phase: every message accounted for, every pair of
    /// live sites converged.
    pub(crate) fn final_checks(&mut self) {
        self.audit();
        if self.verdict.is_some() {
            return;
        }
        if let Err(e) = self.oracle.finish() {
            let where_ = self
                .oracle
                .first_pending()
                .and_then(|id| self.still_waiting(id));
            return self.violation(match where_ {
                Some(w) => format!("{e}: {w}"),
                None => e,
            });
        }
        // The applications' own invariants.
        for n in 0..self.nodes.len() {
            if !self.nodes[n].up {
                continue;
            }
            let mut out = Vec::new();
            let mut next_coop = 0;
            let node = &self.nodes[n];
            let ctx = crate::app::AppCtx {
                me: node.id,
                now: self.now,
                sites: &self.directory,
                rng: &mut self.rng,
                waiting: node.out.sends_waiting(),
                out: &mut out,
                next_coop: &mut next_coop,
            };
            if let Err(e) = node.app.check(&ctx) {
                let what = format!("the application at {} says: {e}", node.id);
                return self.violation(what);
            }
        }
        // Quiet at the end: the last third of the settle phase opens no
        // channel, nor does the time after the last message was delivered
        // or handed back, once a grace has passed (everything owed was
        // delivered by then; an open is churn, as when sites reopened
        // preempted channels without need). A backlog still draining
        // late in the settle phase (a workload beyond what the slots and
        // the output bounds carry) opens channels for what it sends: that
        // is no churn, and the message checks say whether it drained.
        let settled = self.cfg.duration + self.cfg.settle * 2 / 3;
        let drained = self
            .last_message
            .map_or(Duration::ZERO, |t| t + QUIET_AFTER_LAST_MESSAGE);
        let quiet_from = settled.max(drained);
        if let Some(at) = self.last_open.filter(|at| *at > quiet_from) {
            let what = format!(
                "channels still opening {:.1}s after the faults stopped, with nothing to send \
                 (the last message was delivered or handed back at {:.1}s)",
                (at - self.cfg.duration).as_secs_f64(),
                self.last_message.unwrap_or_default().as_secs_f64()
            );
            return self.violation(what);
        }
        for node in &self.nodes {
            for (peer, p) in crate::peer::sorted_peers(&node.peers) {
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
