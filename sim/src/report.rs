//! What a run counts as it goes ([`Counts`]) and the [`Report`] it ends
//! with: the checkers' verdict, the digest and every figure the command
//! prints.

use sitenet_protocols::base::coverage;

use crate::{Report, Sim, Verdict};

/// What the driver counts during a run (what the nodes and the oracle
/// know is read from them at the end).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) cuts: u64,
    pub(crate) half_open_cuts: u64,
    pub(crate) leaves: u64,
    pub(crate) partitions: u64,
    pub(crate) restarts: u64,
    pub(crate) preemptions: u64,
    pub(crate) opens: u64,
    pub(crate) accepts_refused: u64,
    pub(crate) reclaimed: u64,
    pub(crate) parks: u64,
    pub(crate) unparks: u64,
    pub(crate) claims_refused: u64,
    pub(crate) late_replies: u64,
    pub(crate) handshakes_dropped: u64,
    pub(crate) line_waits: u64,
    pub(crate) line_grants: u64,
    pub(crate) line_yields: u64,
    pub(crate) reclaims_kept: u64,
    pub(crate) bound: u64,
    pub(crate) merges: u64,
    pub(crate) origins_claimed: u64,
    pub(crate) origins_refused: u64,
    pub(crate) site_refs: u64,
    pub(crate) site_refs_claimed: u64,
    pub(crate) site_refs_refused: u64,
    pub(crate) batches: u64,
    pub(crate) batch_ops: u64,
    pub(crate) batch_retries: u64,
    pub(crate) batch_ops_failed: u64,
    pub(crate) cooperations: u64,
    pub(crate) coops_completed: u64,
    pub(crate) coops_timed_out: u64,
    pub(crate) coops_failed: u64,
    pub(crate) coops_cancelled: u64,
    pub(crate) coop_discarded: u64,
    pub(crate) send_waits: u64,
    pub(crate) sends_given_up: u64,
    /// The most output bytes a node held, over nodes that are gone.
    pub(crate) output_peak: u64,
    /// The most sends waiting at a node, over nodes that are gone.
    pub(crate) waiting_peak: u64,
}

impl Sim {
    /// Ends the run: the final checks (if it ran to its end) and the report.
    pub fn finish(mut self) -> Report {
        if self.verdict.is_none() {
            self.now = self.now.max(self.end);
            // The applications' checks are their code: a panic there is a
            // violation too (`sim/panics.rs`).
            self.guarded(Self::final_checks);
        }
        let retransmitted = self
            .nodes
            .iter()
            .map(|n| n.retransmitted + n.peers.values().map(|p| p.retransmitted()).sum::<u64>())
            .sum();
        Report {
            seed: self.cfg.seed,
            sites: self.cfg.sites,
            verdict: self.verdict.clone().unwrap_or(Verdict::Ok),
            digest: self.trace.digest(),
            messages: self.oracle.messages(),
            delivered: self.oracle.delivered,
            handed_back: self.oracle.handed_back,
            cuts: self.counts.cuts,
            partitions: self.counts.partitions,
            preemptions: self.counts.preemptions,
            restarts: self.counts.restarts,
            retransmitted,
            opens: self.counts.opens,
            accepts_refused: self.counts.accepts_refused,
            line_waits: self.counts.line_waits,
            line_grants: self.counts.line_grants,
            line_yields: self.counts.line_yields,
            reclaims_kept: self.counts.reclaims_kept,
            bound: self.counts.bound,
            merges: self.counts.merges,
            origins_claimed: self.counts.origins_claimed,
            origins_refused: self.counts.origins_refused,
            site_refs: self.counts.site_refs,
            site_refs_claimed: self.counts.site_refs_claimed,
            site_refs_refused: self.counts.site_refs_refused,
            batches: self.counts.batches,
            batch_ops: self.counts.batch_ops,
            batch_retries: self.counts.batch_retries,
            batch_ops_failed: self.counts.batch_ops_failed,
            cooperations: self.counts.cooperations,
            coops_completed: self.counts.coops_completed,
            coops_timed_out: self.counts.coops_timed_out,
            coops_failed: self.counts.coops_failed,
            coops_cancelled: self.counts.coops_cancelled,
            coop_discarded: self.counts.coop_discarded,
            send_waits: self.counts.send_waits,
            sends_given_up: self.counts.sends_given_up,
            output_peak: self
                .nodes
                .iter()
                .map(|n| n.out.peak)
                .fold(self.counts.output_peak, u64::max),
            waiting_peak: self
                .nodes
                .iter()
                .map(|n| n.out.waiting_peak as u64)
                .fold(self.counts.waiting_peak, u64::max),
            reclaimed: self.counts.reclaimed,
            parks: self.counts.parks,
            unparks: self.counts.unparks,
            requests: self.oracle.requests,
            late_replies: self.counts.late_replies,
            handshakes_dropped: self.counts.handshakes_dropped,
            sim_s: self.now.min(self.end).as_secs_f64(),
            events: self.step,
            half_open_cuts: self.counts.half_open_cuts,
            leaves: self.counts.leaves,
            coverage: coverage::take(),
        }
    }
}
