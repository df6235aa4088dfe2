//! Each simulated node's cooperations, driven as the runtime drives them
//! (`runtime/src/cooperation.rs`, `node/cooperations.rs`): the rules are
//! [`Cooperation`]'s, the same machine the runtime's `Cooperation` holds.
//!
//! * A cooperation's requests wait in the node's request table with the
//!   cooperation as their awaiter ([`Awaiter::Coop`]) and no deadline of
//!   their own: a reply the table lets through is offered to its
//!   descriptors; one it takes none of is discarded and counted.
//! * A cooperation reply (a one-way message of [`COOP_REPLY_TYPE`]) is
//!   offered to the node's open cooperations, oldest first, until one
//!   takes it; none did: discarded and counted.
//! * A site that fails permanently fails the cooperations whose requests
//!   awaited it, if an unfilled descriptor waits for that site.
//! * Its wait is a deadline in the node's request timer (one event for
//!   both: [`Sim::rearm_requests`]).
//! * When it ends, however it ends, the requests it hands over
//!   ([`Cooperation::take_requests`]) are forgotten in the request table
//!   (a later reply is late there), and its application is told once. The
//!   audit checks that no request in a table awaits a cooperation that is
//!   not open ([`Sim::check_awaited_requests`]).
//!
//! [`COOP_REPLY_TYPE`]: crate::COOP_REPLY_TYPE

use std::time::{Duration, Instant};

use bytes::Bytes;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::node::cooperation::{Cooperation, End, Expect, Offered};

use crate::Sim;

/// Who awaits a request in a simulated node's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Awaiter {
    /// The application, under the request's own number
    /// ([`AppCtx::request`](crate::AppCtx::request)).
    App(u64),
    /// Cooperation `coop` of the application.
    Coop(u64),
    /// Operation `op` of batch `batch` of the application
    /// ([`batches`](crate::batches)).
    Batch(u64, usize),
}

/// An open cooperation of a simulated node.
#[derive(Debug)]
pub(crate) struct OpenCoop {
    machine: Cooperation<SiteId>,
    /// When its wait ends.
    deadline: Instant,
}

impl Sim {
    /// Node `n`'s application opened cooperation `coop`.
    pub(crate) fn open_coop(
        &mut self,
        n: usize,
        coop: u64,
        expect: Vec<Expect<SiteId>>,
        timeout: Duration,
    ) {
        let me = self.nodes[n].id;
        self.counts.cooperations += 1;
        self.trace(n, "coop_open", &[coop.into(), expect.len() as u128]);
        if let Err(e) = self.oracle.coop_opened(me, coop) {
            return self.violation(e);
        }
        let mut machine = Cooperation::new();
        for e in expect {
            machine.expect(e);
        }
        // At most `timer::MAX_WAIT` away (`Duration::MAX` overflowed the
        // clock), as the runtime's cooperation's wait.
        let deadline = sitenet_protocols::base::timer::later(self.instant(), timeout);
        if machine.wait_starts() {
            return self.coop_ended(n, coop, machine);
        }
        let node = &mut self.nodes[n];
        node.coop_deadlines.set(coop, deadline);
        node.coops.insert(coop, OpenCoop { machine, deadline });
        self.rearm_requests(n);
    }

    /// Request `corr` of cooperation `coop` was registered at node `n`:
    /// the cooperation records it, or, if it is not open, the request is
    /// forgotten at once (its reply will be late).
    pub(crate) fn coop_sent(&mut self, n: usize, coop: u64, corr: u64) {
        let node = &mut self.nodes[n];
        let open = node
            .coops
            .get_mut(&coop)
            .is_some_and(|c| c.machine.sent(corr));
        if !open {
            node.requests.forget(&[corr]);
        }
    }

    /// A reply of `from` to a request of cooperation `coop` at node `n`
    /// (the request table let it through).
    pub(crate) fn coop_replied(&mut self, n: usize, coop: u64, from: SiteId, body: Bytes) {
        let offered = self.nodes[n]
            .coops
            .get_mut(&coop)
            .map(|c| c.machine.offer(from, crate::SIM_TYPE, Bytes::new(), body));
        self.offered(n, coop, offered);
    }

    /// A cooperation reply from `from` at node `n`: offered to the open
    /// cooperations, oldest first, until one takes it.
    pub(crate) fn coop_reply(&mut self, n: usize, from: SiteId, body: Bytes) {
        let taken = self.nodes[n].coops.iter_mut().find_map(|(&coop, c)| {
            match c
                .machine
                .offer(from, crate::COOP_REPLY_TYPE, Bytes::new(), body.clone())
            {
                o @ Offered::Filled { .. } => Some((coop, o)),
                Offered::Unexpected | Offered::Ended => None,
            }
        });
        match taken {
            Some((coop, o)) => self.offered(n, coop, Some(o)),
            None => self.offered(n, 0, None),
        }
    }

    /// What an offer to cooperation `coop` at node `n` did (`None`: there
    /// was no such open cooperation).
    fn offered(&mut self, n: usize, coop: u64, offered: Option<Offered>) {
        match offered {
            Some(Offered::Filled { index, complete }) => {
                self.trace(n, "coop_filled", &[coop.into(), index as u128]);
                if complete {
                    self.end_coop(n, coop);
                }
            }
            Some(Offered::Unexpected | Offered::Ended) | None => {
                self.counts.coop_discarded += 1;
                self.trace(n, "coop_discarded", &[coop.into()]);
            }
        }
    }

    /// Site `peer` failed permanently at node `n`, and the requests of
    /// cooperations `coops` awaited it.
    pub(crate) fn coops_site_failed(&mut self, n: usize, peer: SiteId, coops: &[u64]) {
        for &coop in coops {
            let ended = self.nodes[n]
                .coops
                .get_mut(&coop)
                .is_some_and(|c| c.machine.site_failed(&peer, "failed permanently"));
            if ended {
                self.end_coop(n, coop);
            }
        }
    }

    /// Node `n`'s cooperations whose wait is over time out.
    pub(crate) fn expire_coops(&mut self, n: usize, now: Instant) {
        let due: Vec<u64> = self.nodes[n].coop_deadlines.expire(now).collect();
        for coop in due {
            if let Some(c) = self.nodes[n].coops.get_mut(&coop) {
                c.machine.time_out();
                self.end_coop(n, coop);
            }
        }
    }

    /// Node `n`'s application cancelled cooperation `coop` (nothing if it
    /// is not open).
    pub(crate) fn cancel_coop(&mut self, n: usize, coop: u64) {
        if let Some(c) = self.nodes[n].coops.get_mut(&coop) {
            c.machine.cancel();
            self.end_coop(n, coop);
        }
    }

    /// Cooperation `coop` of node `n`, which has just ended, leaves the
    /// open ones.
    fn end_coop(&mut self, n: usize, coop: u64) {
        let node = &mut self.nodes[n];
        let Some(c) = node.coops.remove(&coop) else {
            return;
        };
        node.coop_deadlines.stop(coop, c.deadline);
        self.coop_ended(n, coop, c.machine);
        self.rearm_requests(n);
    }

    /// Cooperation `coop` of node `n` ended: its requests are forgotten,
    /// and its application is told, once.
    fn coop_ended(&mut self, n: usize, coop: u64, mut machine: Cooperation<SiteId>) {
        let corrs = machine.take_requests();
        self.nodes[n].requests.forget(&corrs);
        let code = match machine.end() {
            Some(End::Complete) => {
                self.counts.coops_completed += 1;
                0
            }
            Some(End::TimedOut) => {
                self.counts.coops_timed_out += 1;
                1
            }
            Some(End::Failed { .. }) => {
                self.counts.coops_failed += 1;
                2
            }
            Some(End::Cancelled) => {
                self.counts.coops_cancelled += 1;
                3
            }
            Some(End::NothingExpected) => 4,
            None => {
                return self.violation(format!("cooperation {coop} left open unended"));
            }
        };
        self.trace(n, "coop_ended", &[coop.into(), code]);
        let me = self.nodes[n].id;
        if let Err(e) = self.oracle.coop_ended(me, coop) {
            return self.violation(e);
        }
        self.app_call(n, |app, ctx| app.cooperation_ended(ctx, coop, &machine));
    }

    /// No request in node `n`'s table awaits a cooperation that is not
    /// open, or a batch that has ended: either hands its requests over
    /// (or ends by them) when it ends.
    pub(crate) fn check_awaited_requests(&self, n: usize) -> Result<(), String> {
        let node = &self.nodes[n];
        for (corr, awaiter) in node.requests.awaiters() {
            if let Awaiter::Batch(batch, _) = awaiter {
                if !node.batches.contains_key(batch) {
                    return Err(format!(
                        "{}'s request {corr:#x} awaits batch {batch}, which has ended",
                        node.id
                    ));
                }
            }
            if let Awaiter::Coop(coop) = awaiter {
                if !node.coops.contains_key(coop) {
                    return Err(format!(
                        "{}'s request {corr:#x} awaits cooperation {coop}, which is not open",
                        node.id
                    ));
                }
            }
        }
        Ok(())
    }
}
