//! The default application of a simulated site ([`Workload`]): random
//! messages, requests, forwards, and, when asked, sends by address, sites
//! named in messages, cooperations and batches, each checked against what
//! it asked for.

use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use sitenet_protocols::base::priority::Priority;
use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::node::cooperation::{Cooperation, End, Expect};

use crate::app::{Answer, AppCtx, AppFactory, Application, BatchOp, OpOutcome, Request};
use crate::config::SimConfig;
use crate::{COOP_REPLY_TYPE, SIM_TYPE};

/// The default workload: on each tick, with probability `rate`, one to
/// three messages at random priorities, each to one of the site's
/// `neighbours` (the next sites in the directory, as a runtime's traffic
/// mostly goes to the few sites it works with) or, with probability
/// `stray`, to any site; most small, some several frames long (fragmented
/// and reassembled). A fraction `requests` are requests (5 s timeout): the
/// site asked answers with the body reversed, or first forwards it to its
/// next neighbour (one in five), which answers the requester directly; the
/// requester checks every answer ([`Application::check`] reports a wrong
/// one). To change it, set its public fields on a `Workload::default()`:
///
/// ```
/// use sitenet_sim::{Sim, SimConfig, Workload};
///
/// let mut busy = Workload::default();
/// busy.rate = 1.0;
/// busy.requests = 0.5;
/// let sim = Sim::with_app(SimConfig { sites: 4, ..SimConfig::default() }, busy.factory());
/// # let _ = sim;
/// ```
#[derive(Debug, Clone)]
pub struct Workload {
    /// Chance that a message is a request.
    pub requests: f64,
    /// Requests awaiting their answer: what it must be.
    pending: std::collections::BTreeMap<u64, Bytes>,
    /// The first wrong answer, if any.
    wrong: Option<String>,
    /// Chance of sending on a tick.
    pub rate: f64,
    /// How many sites a site mostly talks to.
    pub neighbours: usize,
    /// Chance that a message goes to a random site instead.
    pub stray: f64,
    /// Largest body of a "large" message (at least 16 bytes, at most
    /// [`Workload::MAX_LARGE`]).
    pub large: usize,
    /// Chance that a one-way message goes to its site's address rather
    /// than its id ([`AppCtx::send_to_address_of`]).
    pub by_address: f64,
    /// Chance that a tick also opens a cooperation (0 by default, so that
    /// a seed runs as it did before cooperations were simulated): see
    /// [`Workload::gather`].
    pub cooperations: f64,
    /// Chance that a one-way message to a site also names another (a
    /// `SiteRef` in it: [`AppCtx::send_site_ref`]); the site that gets it
    /// sends to the site named, half the time. 0 by default, so that a
    /// seed runs as it did before.
    pub site_refs: f64,
    /// Chance that a tick also submits a batch (0 by default, so that a
    /// seed runs as it did before): see [`Workload::submit`].
    pub batches: f64,
    /// Chance that a tick also sends a burst (0 by default, so that a
    /// seed runs as it did before): see [`Workload::burst`].
    pub bursts: f64,
    /// A tick sends nothing (no message, request, burst, batch or
    /// cooperation) while this many of the site's sends or more (and at
    /// least one) still wait for room in its output bounds
    /// ([`AppCtx::waiting`]), as a runtime's senders blocked in
    /// `send().await` send nothing more. Without it a
    /// workload that sends faster than the bounds let through piles its
    /// waiting bodies up until the simulator's memory runs out (10 ms
    /// ticks and bursts into a 96 KiB bound: 1.8 GB at 50 sites after five
    /// simulated seconds). 16 by default; `usize::MAX` never holds off.
    pub max_waiting: usize,
    /// Open cooperations: each descriptor's site (if it names one), and
    /// the answers its requests must get.
    gathers: std::collections::BTreeMap<u64, Gather>,
    /// Batches not ended: per operation, the answer a request must get
    /// (`None` for a send).
    submitted: std::collections::BTreeMap<u64, Vec<Option<Bytes>>>,
    /// Batches waited for whose wait has not reported yet.
    waited: std::collections::BTreeSet<u64>,
}

/// What the workload remembers of a cooperation it opened.
#[derive(Debug, Clone)]
struct Gather {
    /// Each descriptor's site, if it names one (`None`: any site).
    from: Vec<Option<SiteId>>,
    /// The answers its requests must get, one each.
    answers: Vec<Bytes>,
}

/// `p` as a chance: within 0 and 1, and 0 for a NaN (which the random
/// source refuses: a workload with a NaN rate panicked on its first tick).
fn chance(p: f64) -> f64 {
    if p > 0.0 {
        p.min(1.0)
    } else {
        0.0
    }
}

/// The first byte after a body's length in the workload's cooperation
/// requests: a site that answers one may also send a vote.
const GATHER_MARK: u8 = 0xC0;

impl Default for Workload {
    fn default() -> Self {
        Self {
            requests: 0.25,
            pending: Default::default(),
            wrong: None,
            rate: 0.5,
            neighbours: 3,
            stray: 0.2,
            large: 40 * 1024,
            by_address: 0.0,
            cooperations: 0.0,
            site_refs: 0.0,
            batches: 0.0,
            bursts: 0.0,
            max_waiting: 16,
            gathers: Default::default(),
            submitted: Default::default(),
            waited: Default::default(),
        }
    }
}

impl Workload {
    /// The workload `cfg`'s options ask for, the one [`Sim::new`](crate::Sim::new)
    /// gives every site: the default, with `cfg`'s chances of sends by
    /// address, cooperations, sites named in messages, batches and bursts.
    /// Change a field and pass [`factory`](Self::factory) to
    /// [`Sim::with_app`](crate::Sim::with_app) to run the same options with
    /// it.
    pub fn for_config(cfg: &SimConfig) -> Self {
        Self {
            by_address: cfg.address_sends,
            cooperations: cfg.cooperations,
            site_refs: cfg.site_refs,
            batches: cfg.batches,
            bursts: cfg.bursts,
            ..Self::default()
        }
    }

    /// A factory that gives every site a copy of this workload, for
    /// [`Sim::with_app`](crate::Sim::with_app).
    pub fn factory(self) -> AppFactory {
        Box::new(move |_| Box::new(self.clone()) as Box<dyn Application>)
    }

    /// The largest body the workload makes, whatever [`large`](Self::large)
    /// says: 128 MiB, half the node's largest message, so that a body and
    /// its envelope always fit one. A larger `large` made bodies past
    /// memory (`1 << 40`: the process aborted on the allocation).
    pub const MAX_LARGE: usize = 128 << 20;

    /// [`large`](Self::large), within [`MAX_LARGE`](Self::MAX_LARGE).
    fn largest_body(&self) -> usize {
        self.large.min(Self::MAX_LARGE)
    }

    /// Four to eight one-way messages of half to all of the largest size,
    /// at one priority, to one neighbour: more than a small output bound
    /// holds until the first are acknowledged, so the later ones wait in
    /// line ([`SimConfig::output_bound`](crate::SimConfig::output_bound))
    /// and must still arrive in order.
    pub fn burst(&mut self, ctx: &mut AppCtx<'_>) {
        let k = ctx.rng.gen_range(1..=self.neighbours.max(1));
        let Some(to) = ctx.neighbour(k) else { return };
        let p = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
        let large = self.largest_body().max(32);
        for _ in 0..ctx.rng.gen_range(4..=8) {
            let len = ctx.rng.gen_range(large / 2..=large);
            let body = Self::filled(ctx.rng, len);
            ctx.send(to, p, body);
        }
    }

    fn body(rng: &mut ChaCha8Rng, large: usize) -> Bytes {
        let len = if rng.gen_ratio(1, 20) {
            rng.gen_range(16..large.max(17))
        } else {
            rng.gen_range(16..256)
        };
        Self::filled(rng, len)
    }

    /// A body of `len` bytes (at least 8): its length, then one random
    /// byte repeated.
    fn filled(rng: &mut ChaCha8Rng, len: usize) -> Bytes {
        let fill: u8 = rng.gen();
        let mut v = vec![fill; len];
        v[..8].copy_from_slice(&(len as u64).to_le_bytes());
        Bytes::from(v)
    }
}

impl Application for Workload {
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        if ctx.waiting > 0 && ctx.waiting >= self.max_waiting {
            return;
        }
        if self.cooperations > 0.0 && ctx.rng.gen_bool(self.cooperations.min(1.0)) {
            self.gather(ctx);
        }
        if self.batches > 0.0 && ctx.rng.gen_bool(self.batches.min(1.0)) {
            self.submit(ctx);
        }
        if self.bursts > 0.0 && ctx.rng.gen_bool(self.bursts.min(1.0)) {
            self.burst(ctx);
        }
        if !ctx.rng.gen_bool(chance(self.rate)) {
            return;
        }
        for _ in 0..ctx.rng.gen_range(1..=3) {
            let to = if ctx.rng.gen_bool(chance(self.stray)) {
                ctx.random_peer()
            } else {
                let k = ctx.rng.gen_range(1..=self.neighbours.max(1));
                ctx.neighbour(k)
            };
            let Some(to) = to else { return };
            let p = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
            let body = Self::body(ctx.rng, self.largest_body());
            if ctx.rng.gen_bool(chance(self.requests)) {
                let expect = Self::answer_to(&body);
                let corr = ctx.request(to, p, body, Duration::from_secs(5));
                self.pending.insert(corr, expect);
            } else if self.by_address > 0.0 && ctx.rng.gen_bool(self.by_address.min(1.0)) {
                ctx.send_to_address_of(to, p, body);
            } else if self.site_refs > 0.0 && ctx.rng.gen_bool(self.site_refs.min(1.0)) {
                match ctx.random_peer().filter(|s| *s != to) {
                    Some(site) => ctx.send_site_ref(to, p, body, site),
                    None => ctx.send(to, p, body),
                }
            } else {
                ctx.send(to, p, body);
            }
        }
    }

    fn received_site_ref(&mut self, ctx: &mut AppCtx<'_>, _from: SiteId, _: &[u8], site: SiteId) {
        // Half the time, a word to the site named (its node learned it on
        // the sender's word: a claim until the site is proven).
        if site != ctx.me && ctx.rng.gen_bool(0.5) {
            let p = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
            let body = Self::body(ctx.rng, 256);
            ctx.send(site, p, body);
        }
    }

    fn requested(&mut self, ctx: &mut AppCtx<'_>, req: Request) {
        // A cooperation's request: half the time a vote goes back too.
        if self.cooperations > 0.0 && req.body.get(8) == Some(&GATHER_MARK) && ctx.rng.gen_bool(0.5)
        {
            ctx.send_coop_reply(req.origin, req.priority, ctx.me.0.to_le_bytes().to_vec());
        }
        if !req.forwarded() && ctx.rng.gen_ratio(1, 5) {
            if let Some(next) = ctx.neighbour(1).filter(|s| *s != req.origin) {
                return ctx.forward(&req, next);
            }
        }
        ctx.reply(&req, Self::answer_to(&req.body));
    }

    fn answered(&mut self, _ctx: &mut AppCtx<'_>, corr: u64, answer: Answer) {
        let Some(expect) = self.pending.remove(&corr) else {
            self.wrong
                .get_or_insert_with(|| format!("an answer to request {corr:#x}, never sent"));
            return;
        };
        if let Answer::Reply { from, body } = answer {
            if body != expect {
                self.wrong.get_or_insert_with(|| {
                    format!("request {corr:#x} answered by {from} with a body not its own")
                });
            }
        }
    }

    fn cooperation_ended(&mut self, _ctx: &mut AppCtx<'_>, coop: u64, c: &Cooperation<SiteId>) {
        let Some(g) = self.gathers.remove(&coop) else {
            self.wrong
                .get_or_insert_with(|| format!("cooperation {coop} ended twice, or never opened"));
            return;
        };
        if let Err(e) = Self::check_gather(&g, c) {
            self.wrong
                .get_or_insert_with(|| format!("cooperation {coop}: {e}"));
        }
    }

    fn batch_done(&mut self, _ctx: &mut AppCtx<'_>, batch: u64, outcomes: &[(OpOutcome, u32)]) {
        let Some(answers) = self.submitted.remove(&batch) else {
            self.wrong
                .get_or_insert_with(|| format!("batch {batch} ended twice, or never submitted"));
            return;
        };
        if let Err(e) = Self::check_batch(&answers, outcomes) {
            self.wrong
                .get_or_insert_with(|| format!("batch {batch}: {e}"));
        }
        if self.waited.remove(&batch) {
            self.wrong
                .get_or_insert_with(|| format!("batch {batch} ended before its wait reported"));
        }
    }

    fn batch_waited(&mut self, _ctx: &mut AppCtx<'_>, batch: u64, known: &[Option<OpOutcome>]) {
        let fits = self
            .submitted
            .get(&batch)
            .is_some_and(|a| a.len() == known.len());
        if !self.waited.remove(&batch) || !fits {
            self.wrong
                .get_or_insert_with(|| format!("a wait for batch {batch} it did not ask for"));
        }
    }

    fn check(&self, _ctx: &AppCtx<'_>) -> Result<(), String> {
        match (&self.wrong, self.pending.len(), self.gathers.len()) {
            (Some(w), _, _) => Err(w.clone()),
            (None, 0, 0) if self.submitted.is_empty() => Ok(()),
            (None, 0, 0) => Err(format!("{} batches never ended", self.submitted.len())),
            (None, n, 0) => Err(format!(
                "{n} requests never ended (no answer, timeout or failure)"
            )),
            (None, _, n) => Err(format!("{n} cooperations never ended")),
        }
    }
}

impl Workload {
    /// A cooperation, as a runtime's scatter/gather: requests to one to
    /// three of the site's neighbours, each descriptor either from that
    /// neighbour or from any site (a neighbour that forwards the request
    /// has another site answer: only an "any" descriptor takes that
    /// answer), and half the time one more descriptor for a vote (a
    /// cooperation reply its requests' sites may send); a wait of 2 to 8
    /// s; one in twenty cancelled at once. Its end is checked: every
    /// answer is one its requests asked for (each once), a descriptor
    /// from a site was filled by that site, and it completed exactly when
    /// every descriptor was filled.
    pub fn gather(&mut self, ctx: &mut AppCtx<'_>) {
        let k = ctx.rng.gen_range(1..=3usize);
        let sites: Vec<SiteId> = (1..=k).filter_map(|i| ctx.neighbour(i)).collect();
        if sites.is_empty() {
            return;
        }
        let mut expect = Vec::new();
        let mut from = Vec::new();
        for s in &sites {
            let site = ctx.rng.gen_bool(0.5).then_some(*s);
            from.push(site);
            expect.push(Expect {
                from: site,
                type_id: Some(SIM_TYPE),
                max_body: None,
            });
        }
        if ctx.rng.gen_bool(0.5) {
            from.push(None);
            expect.push(Expect {
                type_id: Some(COOP_REPLY_TYPE),
                ..Expect::any()
            });
        }
        let timeout = Duration::from_secs(ctx.rng.gen_range(2..=8));
        let coop = ctx.cooperation(expect, timeout);
        let mut answers = Vec::new();
        for s in sites {
            let p = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
            let mut body = Self::body(ctx.rng, self.largest_body()).to_vec();
            body[8] = GATHER_MARK;
            answers.push(Self::answer_to(&body));
            ctx.coop_request(coop, s, p, body);
        }
        if ctx.rng.gen_ratio(1, 20) {
            ctx.cancel(coop);
        }
        self.gathers.insert(coop, Gather { from, answers });
    }

    /// A batch, as a runtime's: two to five operations to the site's
    /// neighbours (a third of them requests, 5 s each), at most two
    /// retries each; half the time waited for, 0.1 to 6 s
    /// ([`AppCtx::wait_batch`]). Its end is checked: an outcome per
    /// operation, of its kind (a send is sent, never sent or maybe
    /// delivered; a request answered, timed out or its site failed), every
    /// answer the one its request asked for, no retry after a send that
    /// may have been delivered, and a wait's report told before the end.
    pub fn submit(&mut self, ctx: &mut AppCtx<'_>) {
        let mut ops = Vec::new();
        let mut answers = Vec::new();
        for _ in 0..ctx.rng.gen_range(2..=5) {
            let k = ctx.rng.gen_range(1..=self.neighbours.max(1));
            let Some(to) = ctx.neighbour(k) else { break };
            let priority = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
            let body = Self::body(ctx.rng, self.largest_body());
            if ctx.rng.gen_ratio(1, 3) {
                answers.push(Some(Self::answer_to(&body)));
                let timeout = Duration::from_secs(5);
                ops.push(BatchOp::Request {
                    to,
                    priority,
                    body,
                    timeout,
                });
            } else {
                answers.push(None);
                ops.push(BatchOp::Send { to, priority, body });
            }
        }
        let waits = !ops.is_empty() && ctx.rng.gen_bool(0.5);
        let batch = ctx.batch(ops, 2);
        self.submitted.insert(batch, answers);
        if waits {
            let timeout = Duration::from_millis(ctx.rng.gen_range(100..6_000));
            ctx.wait_batch(batch, timeout);
            self.waited.insert(batch);
        }
    }

    /// A batch's outcomes agree with what it asked (see [`submit`](Self::submit)).
    fn check_batch(answers: &[Option<Bytes>], outcomes: &[(OpOutcome, u32)]) -> Result<(), String> {
        if answers.len() != outcomes.len() {
            return Err(format!(
                "{} outcomes for {} operations",
                outcomes.len(),
                answers.len()
            ));
        }
        for (i, (want, (outcome, retries))) in answers.iter().zip(outcomes).enumerate() {
            let fits = match (want, outcome) {
                (None, OpOutcome::Sent | OpOutcome::NotSent) => true,
                // Never retried: it could have been applied.
                (None, OpOutcome::MaybeDelivered) => true,
                (Some(w), OpOutcome::Reply { body, .. }) => body == w,
                (Some(_), OpOutcome::TimedOut | OpOutcome::SiteFailed) => true,
                _ => false,
            };
            if !fits || *retries > 2 {
                return Err(format!(
                    "operation {i} ended {outcome:?} after {retries} retries"
                ));
            }
        }
        Ok(())
    }

    /// A cooperation's end agrees with what it asked (see [`gather`](Self::gather)).
    fn check_gather(g: &Gather, c: &Cooperation<SiteId>) -> Result<(), String> {
        let mut answers = g.answers.clone();
        let mut filled = 0;
        for (i, f) in c.filled().enumerate() {
            let Some(f) = f else { continue };
            filled += 1;
            if let Some(Some(s)) = g.from.get(i) {
                if f.from != *s {
                    return Err(format!(
                        "descriptor {i} waits for {s}, filled by {}",
                        f.from
                    ));
                }
            }
            if f.type_id == SIM_TYPE {
                let Some(a) = answers.iter().position(|a| *a == f.body) else {
                    return Err(format!(
                        "descriptor {i} filled by an answer never asked for"
                    ));
                };
                answers.swap_remove(a);
            }
        }
        let complete = filled == g.from.len();
        if (c.end() == Some(&End::Complete)) != complete {
            return Err(format!(
                "{filled} of {} descriptors filled, and it ended {:?}",
                g.from.len(),
                c.end()
            ));
        }
        Ok(())
    }

    /// The answer a request's body gets: the body reversed.
    fn answer_to(body: &[u8]) -> Bytes {
        body.iter().rev().copied().collect::<Vec<u8>>().into()
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Regression: `large: 1 << 40` made bodies past memory (the process
    /// aborted on the allocation); every body and burst takes `large`
    /// through `Workload::largest_body`, at most [`Workload::MAX_LARGE`].
    #[test]
    fn bodies_are_never_larger_than_max_large() {
        let mut w = Workload::default();
        for large in [1 << 40, usize::MAX] {
            w.large = large;
            assert_eq!(w.largest_body(), Workload::MAX_LARGE);
        }
        w.large = 1_000;
        assert_eq!(w.largest_body(), 1_000, "a smaller one is taken as it is");
        // Most bodies are small (16 to 255 bytes), one in twenty up to
        // `large`.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let longest = (0..1_000)
            .map(|_| Workload::body(&mut rng, w.largest_body()).len())
            .max();
        assert!(
            longest.is_some_and(|l| (256..1_000).contains(&l)),
            "{longest:?}"
        );
    }
}
