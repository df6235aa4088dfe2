//! Each simulated node's batches, driven as the runtime's `Batch` drives
//! its operations (`runtime/src/batch.rs`), with the runtime's retry rule
//! ([`may_retry`]):
//!
//! * every operation is in flight at once; a send is a tracked message
//!   (its token in the ComObject's ledger, [`OutMessage::tracked`]): done
//!   when the peer's acknowledgement frees it
//!   ([`ComObject::take_delivered`]); a request waits in the node's request
//!   table, awaited by the batch ([`Awaiter::Batch`]), done with its answer;
//! * a try that ends badly (a send handed back, a request whose site
//!   failed) is tried again — on the site now at that site's address, as
//!   the runtime's `site_at` — if the rule allows, after the event that
//!   ended it (the driver may be holding that site's machine); otherwise
//!   the operation ends so;
//! * when every operation has ended, the application is told once.
//!
//! Checkers: a send the peer acknowledged was delivered (the oracle saw
//! it), a send was never delivered twice across its tries (a retry of what
//! may have been applied would be; a request may be, by the rule), and
//! every batch ends exactly once.
//!
//! [`OutMessage::tracked`]: sitenet_protocols::wire::message::OutMessage::tracked
//! [`ComObject::take_delivered`]: sitenet_protocols::connection::com_object::ComObject::take_delivered
//! [`Awaiter::Batch`]: crate::coops::Awaiter::Batch

use std::time::{Duration, Instant};

use sitenet_protocols::node::batch::{may_retry, BatchWait, Tried, WaitAll};

use crate::app::{BatchOp, OpOutcome};
use crate::ops::{Op, Outgoing};
use crate::Sim;

/// A batch of a simulated node, until every operation has ended.
#[derive(Debug)]
pub(crate) struct SimBatch {
    ops: Vec<OpState>,
    max_retry: u32,
    /// The outcomes, recorded by the runtime's machine (an operation that
    /// ends twice is refused there).
    wait: BatchWait<OpOutcome>,
    /// The application's wait for all of it, if it asked
    /// ([`AppCtx::wait_batch`](crate::AppCtx::wait_batch)), until it is
    /// told.
    waiting: Option<WaitAll>,
    /// What that wait reported, checked against the end.
    reported: Option<Vec<Option<OpOutcome>>>,
}

#[derive(Debug)]
struct OpState {
    op: BatchOp,
    /// Retries made so far.
    retries: u32,
    /// The oracle's ids of the messages its tries sent.
    sent: Vec<u64>,
}

impl Sim {
    /// Node `n`'s application submitted `batch`.
    pub(crate) fn submit_batch(&mut self, n: usize, batch: u64, ops: Vec<BatchOp>, max_retry: u32) {
        let me = self.nodes[n].id;
        self.counts.batches += 1;
        self.counts.batch_ops += ops.len() as u64;
        self.trace(n, "batch", &[batch.into(), ops.len() as u128]);
        if let Err(e) = self.oracle.batch_opened(me, batch) {
            return self.violation(e);
        }
        let pending = ops.len();
        let ops = ops
            .into_iter()
            .map(|op| OpState {
                op,
                retries: 0,
                sent: Vec::new(),
            })
            .collect();
        self.nodes[n].batches.insert(
            batch,
            SimBatch {
                ops,
                max_retry,
                wait: BatchWait::new(pending),
                waiting: None,
                reported: None,
            },
        );
        if pending == 0 {
            return self.batch_ended(n, batch);
        }
        for i in 0..pending {
            self.try_op(n, batch, i);
        }
    }

    /// Tries operation `i` of `batch` at node `n`: its first try to its
    /// site, a retry to that site's address.
    pub(crate) fn try_op(&mut self, n: usize, batch: u64, i: usize) {
        let Some(b) = self.nodes[n].batches.get(&batch) else {
            return;
        };
        let state = &b.ops[i];
        let retry = state.retries > 0;
        let op = state.op.clone();
        // A send's token in the ledger, a request's number.
        let corr = rand::Rng::gen::<u64>(&mut self.rng) | 1;
        if let BatchOp::Send { .. } = op {
            self.nodes[n].tracked.insert(corr, (batch, i));
        }
        self.send(n, Outgoing::batch_try(batch, i, &op, corr, retry));
    }

    /// A try of operation `i` of `batch` sent message `id` (the oracle's).
    pub(crate) fn batch_sent(&mut self, n: usize, batch: u64, i: usize, id: u64) {
        if let Some(b) = self.nodes[n].batches.get_mut(&batch) {
            b.ops[i].sent.push(id);
        }
    }

    /// The peer acknowledged the tracked messages `tokens` of node `n`.
    pub(crate) fn batch_acked(&mut self, n: usize, tokens: Vec<u64>) {
        for token in tokens {
            let Some((batch, i)) = self.nodes[n].tracked.remove(&token) else {
                continue;
            };
            let last = self.nodes[n]
                .batches
                .get(&batch)
                .and_then(|b| b.ops[i].sent.last().copied());
            if let Some(id) = last.filter(|id| !self.oracle.was_delivered(*id)) {
                let what = format!("message {id} of batch {batch} acknowledged, never delivered");
                return self.violation(what);
            }
            self.op_ended(n, batch, i, OpOutcome::Sent);
        }
    }

    /// A tracked message of node `n` (token `token`) was handed back.
    pub(crate) fn batch_handed_back(&mut self, n: usize, token: u64, maybe: bool) {
        let Some((batch, i)) = self.nodes[n].tracked.remove(&token) else {
            return;
        };
        let (tried, outcome) = if maybe {
            (Tried::MaybeDelivered, OpOutcome::MaybeDelivered)
        } else {
            (Tried::NotSent, OpOutcome::NotSent)
        };
        self.op_failed(n, batch, i, tried, outcome);
    }

    /// A try of operation `i` of `batch` at node `n` ended as `tried`: it
    /// is tried again if the rule allows (after this event), else it ends
    /// with `outcome`.
    pub(crate) fn op_failed(
        &mut self,
        n: usize,
        batch: u64,
        i: usize,
        tried: Tried,
        outcome: OpOutcome,
    ) {
        let Some(b) = self.nodes[n].batches.get_mut(&batch) else {
            return;
        };
        let state = &mut b.ops[i];
        let retry = may_retry(tried, state.retries, b.max_retry);
        if retry {
            state.retries += 1;
        }
        if retry {
            self.counts.batch_retries += 1;
            self.trace(n, "batch_retry", &[batch.into(), i as u128]);
            let inc = self.nodes[n].incarnation;
            self.sends.push((n, inc, Op::Retry { batch, op: i }));
        } else {
            self.op_ended(n, batch, i, outcome);
        }
    }

    /// Operation `i` of `batch` at node `n` ended with `outcome`.
    pub(crate) fn op_ended(&mut self, n: usize, batch: u64, i: usize, outcome: OpOutcome) {
        let failed = !matches!(outcome, OpOutcome::Sent | OpOutcome::Reply { .. });
        let Some(b) = self.nodes[n].batches.get_mut(&batch) else {
            return;
        };
        if let Err(e) = b.wait.completed(i, outcome) {
            return self.violation(format!("batch {batch}: {e}"));
        }
        let last = b.wait.pending() == 0;
        self.counts.batch_ops_failed += u64::from(failed);
        self.trace(
            n,
            "batch_op",
            &[batch.into(), i as u128, u128::from(failed)],
        );
        if last {
            self.batch_ended(n, batch);
        }
    }

    /// Node `n`'s application waits for every operation of `batch`, at
    /// most `timeout` (the runtime's `Submitted::wait_all`).
    pub(crate) fn wait_batch(&mut self, n: usize, batch: u64, timeout: Duration) {
        let now = self.instant();
        let node = &mut self.nodes[n];
        let Some(b) = node.batches.get_mut(&batch).filter(|b| b.waiting.is_none()) else {
            return;
        };
        let all = b.wait.wait_all(now, timeout);
        b.waiting = Some(all);
        node.batch_waits.set(batch, all.deadline());
        self.rearm_requests(n);
    }

    /// Node `n`'s waits for batches whose deadline has come: each reports
    /// what is known by then.
    pub(crate) fn expire_batch_waits(&mut self, n: usize, now: Instant) {
        let due: Vec<u64> = self.nodes[n].batch_waits.expire(now).collect();
        for batch in due {
            self.batch_waited(n, batch, now);
        }
    }

    /// The wait for `batch` at node `n` is over at `now` if nothing is
    /// pending or its deadline has come (past it, one last look at what
    /// came: `WaitAll::next_wait`); then its application is told what is
    /// known, by operation.
    fn batch_waited(&mut self, n: usize, batch: u64, now: Instant) {
        let node = &mut self.nodes[n];
        let Some(b) = node.batches.get_mut(&batch) else {
            return;
        };
        let Some(all) = b.waiting else { return };
        let left = all.next_wait(now, &b.wait);
        if left.is_some_and(|d| d > Duration::ZERO) {
            return;
        }
        b.waiting = None;
        node.batch_waits.stop(batch, all.deadline());
        let report = b.wait.results().to_vec();
        b.reported = Some(report.clone());
        let known = report.iter().filter(|r| r.is_some()).count();
        self.trace(n, "batch_waited", &[batch.into(), known as u128]);
        self.app_call(n, |app, ctx| app.batch_waited(ctx, batch, &report));
    }

    /// Every operation of `batch` at node `n` ended: checked, and its
    /// application told.
    fn batch_ended(&mut self, n: usize, batch: u64) {
        // A wait for all of it is over now: told first, as the runtime's
        // `wait_all` returns when nothing is pending.
        let now = self.instant();
        self.batch_waited(n, batch, now);
        let Some(b) = self.nodes[n].batches.remove(&batch) else {
            return;
        };
        // A send is never delivered twice across its tries (a request may
        // be: retried after its site failed, its effect may have happened
        // — the caller asked for an answer it never saw).
        let sends = b
            .ops
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op.op, BatchOp::Send { .. }));
        for (i, op) in sends {
            let delivered = op
                .sent
                .iter()
                .filter(|id| self.oracle.was_delivered(**id))
                .count();
            if delivered > 1 {
                let what = format!(
                    "operation {i} of batch {batch} was delivered {delivered} times (messages {:?})",
                    op.sent
                );
                return self.violation(what);
            }
        }
        let me = self.nodes[n].id;
        if let Err(e) = self.oracle.batch_ended(me, batch) {
            return self.violation(e);
        }
        let results = b.wait.into_results();
        // What a wait reported is what the batch ended with, where known.
        let differs = b.reported.as_ref().and_then(|r| {
            r.iter()
                .zip(&results)
                .position(|(seen, end)| seen.is_some() && seen != end)
        });
        if let Some(i) = differs {
            let what =
                format!("batch {batch}'s wait reported operation {i} otherwise than it ended");
            return self.violation(what);
        }
        let outcomes: Vec<(OpOutcome, u32)> = results
            .into_iter()
            .zip(b.ops)
            .map(|(r, op)| (r.expect("every operation ended"), op.retries))
            .collect();
        self.app_call(n, |app, ctx| app.batch_done(ctx, batch, &outcomes));
    }
}
