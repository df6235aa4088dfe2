//! Application logic plugged into a simulated site: what a runtime author
//! writes to simulate their own protocol on top of sitenet's network layer.
//!
//! An [`Application`] is called like the runtime's handlers: when its site
//! starts (or restarts as a new incarnation), on a periodic tick, for each
//! message received, and for each message handed back after a permanent
//! failure. It sends through [`AppCtx::send`], which goes through the same
//! ComObject machine a real node's send goes through, and every message it
//! sends is watched by the simulator's checkers (FIFO per priority,
//! exactly once, delivered or handed back).

use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use sitenet_protocols::base::priority::Priority;
use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::FaultState;
use sitenet_protocols::node::cooperation::{Cooperation, Expect};
use sitenet_protocols::node::delegation::reply_kind;
use sitenet_protocols::wire::message::MessageKind;

use crate::ops::{Op, Outgoing};
use crate::COOP_REPLY_TYPE;

pub use crate::ops::BatchOp;

impl BatchOp {
    /// The site it is for.
    pub fn to(&self) -> SiteId {
        match self {
            BatchOp::Send { to, .. } | BatchOp::Request { to, .. } => *to,
        }
    }
}

/// How an operation of a batch ended, after its retries
/// ([`Application::batch_done`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutcome {
    /// A send the site acknowledged.
    Sent,
    /// A request's answer, from the site that gave it.
    Reply {
        /// Who answered.
        from: SiteId,
        /// What it answered.
        body: Bytes,
    },
    /// A send handed back as never sent (not retried: no retries left).
    NotSent,
    /// A send handed back as maybe delivered: never retried, since it
    /// could then be applied twice.
    MaybeDelivered,
    /// A request that got no answer within its timeout.
    TimedOut,
    /// A request whose site failed before its answer (no retries left).
    SiteFailed,
}

/// A request an application received, to answer with [`AppCtx::reply`] or
/// hand on with [`AppCtx::forward`] — in the callback or any time later
/// (keep it): the requester waits until its timeout.
#[derive(Debug, Clone)]
pub struct Request {
    /// Who gets the answer: the requester, also when the request was
    /// forwarded to this site (the answer then goes to it directly, as a
    /// delegated reply).
    pub origin: SiteId,
    /// The site that delivered it (the requester, or the forwarder).
    pub from: SiteId,
    /// Its priority (the answer goes at the same).
    pub priority: Priority,
    /// What the requester sent.
    pub body: Bytes,
    corr: u64,
    kind: MessageKind,
}

impl Request {
    pub(crate) fn new(
        origin: SiteId,
        from: SiteId,
        priority: Priority,
        body: Bytes,
        corr: u64,
        kind: MessageKind,
    ) -> Self {
        Self {
            origin,
            from,
            priority,
            body,
            corr,
            kind,
        }
    }

    /// True if another site forwarded it here.
    pub fn forwarded(&self) -> bool {
        self.kind == MessageKind::Forward
    }
}

/// How a request ended, as [`Application::answered`] is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The answer, from the site that gave it (the one asked, or one it
    /// forwarded the request to).
    Reply {
        /// Who answered.
        from: SiteId,
        /// What it answered.
        body: Bytes,
    },
    /// No answer within the request's timeout.
    TimedOut,
    /// The site asked failed permanently first.
    SiteFailed,
}

/// What a simulated site's application may see and do during a callback.
pub struct AppCtx<'a> {
    /// This site (its current incarnation).
    pub me: SiteId,
    /// Simulated time since the start of the run.
    pub now: Duration,
    /// The sites that are up now (the current incarnation of each), in a
    /// fixed order; `me` among them.
    pub sites: &'a [SiteId],
    /// The run's random source: every random choice of an application
    /// must come from here, or the run stops being reproducible.
    pub rng: &'a mut ChaCha8Rng,
    /// How many of this site's sends wait for room in its output bounds
    /// now ([`SimConfig::output_bound`](crate::SimConfig::output_bound)):
    /// in the runtime, senders still blocked in `send().await`. They hold
    /// their bodies until their turn, so an application that keeps sending
    /// regardless piles them up without bound, which no runtime
    /// application with a task per sender can do; the default workload
    /// holds off ([`Workload::max_waiting`](crate::Workload::max_waiting)).
    pub waiting: usize,
    pub(crate) out: &'a mut Vec<Op>,
    /// The last number a cooperation or a batch of the site got.
    pub(crate) next_coop: &'a mut u64,
}

impl AppCtx<'_> {
    /// Sends `body` to `to` at `priority`, once the callback returns (as a
    /// handler's sends leave after it). Sending to a site that failed hands
    /// the message back through [`Application::handed_back`]. Beyond the
    /// output bound ([`SimConfig::output_bound`](crate::SimConfig::output_bound))
    /// the message waits in its priority's line and goes in its turn, as
    /// the runtime's `SiteRef::send` waits for room.
    pub fn send(&mut self, to: SiteId, priority: Priority, body: impl Into<Bytes>) {
        self.one_way(to, priority, body.into(), false);
    }

    /// A one-way message (`by_address`: to where `to` listens).
    fn one_way(&mut self, to: SiteId, priority: Priority, body: Bytes, by_address: bool) {
        self.out.push(Op::Send(Outgoing {
            by_address,
            ..Outgoing::to(to, priority, body, MessageKind::OneWay)
        }));
    }

    /// Sends `body` at `priority` to the address where `site` listens now,
    /// as a runtime sends to a site it knows only by its address: the node
    /// does not know which site answers there until it connects. Its entry
    /// is then bound to that site (whichever incarnation it is by then),
    /// or, if the node already has an entry for that site, merges into it
    /// and its messages follow, in order. A message handed back is
    /// reported for `site`.
    ///
    /// ```
    /// use sitenet_sim::{AppCtx, Application, Sim, SimConfig, Verdict};
    /// use sitenet_protocols::Priority;
    ///
    /// struct ByAddress;
    /// impl Application for ByAddress {
    ///     fn tick(&mut self, ctx: &mut AppCtx<'_>) {
    ///         if let Some(to) = ctx.random_peer() {
    ///             ctx.send_to_address_of(to, Priority::Medium, b"hi".to_vec());
    ///         }
    ///     }
    /// }
    /// let cfg = SimConfig { sites: 6, seed: 3, ..SimConfig::default() };
    /// let r = Sim::with_app(cfg, Box::new(|_| Box::new(ByAddress))).run();
    /// assert_eq!(r.verdict, Verdict::Ok);
    /// // Each site's first send to an address binds an entry, or merges
    /// // it into the one the site has already.
    /// assert!(r.bound + r.merges > 0);
    /// ```
    pub fn send_to_address_of(&mut self, site: SiteId, priority: Priority, body: impl Into<Bytes>) {
        self.one_way(site, priority, body.into(), true);
    }

    /// Sends `body` to `to` with a reference to `site` in it, as a
    /// runtime's message carrying a `SiteRef`: `to`'s node learns the site
    /// on this site's word. A site it does not know becomes an entry there,
    /// a claim this site holds (bounded per peer: the runtime's
    /// `site_ref_claims_per_peer`, [`SimConfig::peer_claims`](crate::SimConfig::peer_claims)
    /// here), released once the site is proven; beyond the bound the
    /// message cannot be decoded and is not handled (as the runtime's
    /// decode error). Handled, it comes to
    /// [`Application::received_site_ref`].
    pub fn send_site_ref(
        &mut self,
        to: SiteId,
        priority: Priority,
        body: impl Into<Bytes>,
        site: SiteId,
    ) {
        self.out.push(Op::Send(Outgoing {
            site_ref: Some(site),
            ..Outgoing::to(to, priority, body.into(), MessageKind::OneWay)
        }));
    }

    /// Sends a request to `to`; its one outcome comes to
    /// [`Application::answered`] with the number returned here: the
    /// answer, a timeout after `timeout`, or the site's failure.
    pub fn request(
        &mut self,
        to: SiteId,
        priority: Priority,
        body: impl Into<Bytes>,
        timeout: Duration,
    ) -> u64 {
        let corr = self.rng.gen::<u64>() | 1;
        self.out.push(Op::Send(Outgoing {
            corr,
            timeout: Some(timeout),
            ..Outgoing::to(to, priority, body.into(), MessageKind::Request)
        }));
        corr
    }

    /// Answers `req` (to its origin: a delegated reply if it was
    /// forwarded here).
    pub fn reply(&mut self, req: &Request, body: impl Into<Bytes>) {
        let kind = reply_kind(req.kind).expect("a request awaits an answer");
        self.out.push(Op::Send(Outgoing {
            corr: req.corr,
            ..Outgoing::to(req.origin, req.priority, body.into(), kind)
        }));
    }

    /// Hands `req` on to `to`, which answers its origin directly (three
    /// messages instead of four).
    pub fn forward(&mut self, req: &Request, to: SiteId) {
        self.out.push(Op::Send(Outgoing {
            corr: req.corr,
            origin: Some(req.origin),
            ..Outgoing::to(to, req.priority, req.body.clone(), MessageKind::Forward)
        }));
    }

    /// Opens a cooperation (Paradis-Net's, the runtime's
    /// `Node::cooperation`): replies described by `expect`, each filled by
    /// the first reply that matches it — a reply to one of its requests
    /// ([`coop_request`](Self::coop_request)), or a cooperation reply
    /// ([`send_coop_reply`](Self::send_coop_reply)) from any site. It ends
    /// once: complete when every descriptor is filled, failed when a site
    /// an unfilled descriptor waits for fails permanently, timed out after
    /// `timeout`, or cancelled ([`cancel`](Self::cancel)); then
    /// [`Application::cooperation_ended`] is told, with the number returned
    /// here. The rules are the runtime's own (`sitenet_protocols::node::cooperation`).
    /// Replies of requests go at [`SIM_TYPE`](crate::SIM_TYPE); cooperation replies at
    /// [`COOP_REPLY_TYPE`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use sitenet_protocols::node::cooperation::{Cooperation, End, Expect};
    /// use sitenet_sim::{
    ///     AppCtx, Application, Faults, Request, Sim, SimConfig, Verdict, SIM_TYPE,
    /// };
    /// use sitenet_protocols::{Priority, SiteId};
    ///
    /// /// Site 0 asks its two neighbours once; each answers.
    /// #[derive(Default)]
    /// struct Gather { ended: Vec<bool> }
    /// impl Application for Gather {
    ///     fn start(&mut self, ctx: &mut AppCtx<'_>) {
    ///         if ctx.me != ctx.sites[0] {
    ///             return;
    ///         }
    ///         let (a, b) = (ctx.sites[1], ctx.sites[2]);
    ///         let from = |s| Expect { from: Some(s), type_id: Some(SIM_TYPE), max_body: None };
    ///         let c = ctx.cooperation(vec![from(a), from(b)], Duration::from_secs(20));
    ///         ctx.coop_request(c, a, Priority::Medium, b"count".to_vec());
    ///         ctx.coop_request(c, b, Priority::Medium, b"count".to_vec());
    ///     }
    ///     fn requested(&mut self, ctx: &mut AppCtx<'_>, req: Request) {
    ///         ctx.reply(&req, b"1".to_vec());
    ///     }
    ///     fn cooperation_ended(&mut self, _: &mut AppCtx<'_>, _: u64, c: &Cooperation<SiteId>) {
    ///         self.ended.push(c.end() == Some(&End::Complete));
    ///     }
    ///     fn check(&self, ctx: &AppCtx<'_>) -> Result<(), String> {
    ///         let want: &[bool] = if ctx.me == ctx.sites[0] { &[true] } else { &[] };
    ///         (self.ended == want).then_some(()).ok_or(format!("{:?}", self.ended))
    ///     }
    /// }
    /// // No faults: with them, a restarted site 0 would start (and ask) again.
    /// let cfg = SimConfig { sites: 3, seed: 1, faults: Faults::None, ..SimConfig::default() };
    /// let r = Sim::with_app(cfg, Box::new(|_| Box::new(Gather::default()))).run();
    /// assert_eq!(r.verdict, Verdict::Ok);
    /// assert_eq!((r.cooperations, r.coops_completed), (1, 1));
    /// ```
    pub fn cooperation(&mut self, expect: Vec<Expect<SiteId>>, timeout: Duration) -> u64 {
        *self.next_coop += 1;
        let coop = *self.next_coop;
        self.out.push(Op::Open {
            coop,
            expect,
            timeout,
        });
        coop
    }

    /// Sends a request to `to` for cooperation `coop`: its reply is offered
    /// to the cooperation's descriptors (and discarded, counted, if none
    /// takes it or the cooperation has ended). Returns its correlation
    /// number. The request has no timeout of its own: the cooperation's
    /// is its wait.
    pub fn coop_request(
        &mut self,
        coop: u64,
        to: SiteId,
        priority: Priority,
        body: impl Into<Bytes>,
    ) -> u64 {
        let corr = self.rng.gen::<u64>() | 1;
        self.out.push(Op::Send(Outgoing {
            corr,
            coop: Some(coop),
            ..Outgoing::to(to, priority, body.into(), MessageKind::Request)
        }));
        corr
    }

    /// Sends `body` to `to` as a cooperation reply (the runtime's types
    /// declared by `Node::cooperation_reply`, such as a vote): there it
    /// fills the first of that site's open cooperations, oldest first,
    /// with an unfilled descriptor it matches, or is discarded and counted.
    pub fn send_coop_reply(&mut self, to: SiteId, priority: Priority, body: impl Into<Bytes>) {
        self.out.push(Op::Send(Outgoing {
            type_id: COOP_REPLY_TYPE,
            ..Outgoing::to(to, priority, body.into(), MessageKind::OneWay)
        }));
    }

    /// Submits a batch (the runtime's `Batch`, IBP's operation lists):
    /// every operation is in flight at once; a send is done when its site
    /// acknowledges it, a request with its answer. An operation whose site
    /// failed is tried again, on the site now at that site's address (a
    /// restarted process), up to `max_retry` times — only if it cannot have
    /// been applied (never sent) or is a request whose answer never came:
    /// the runtime's rule, `sitenet_protocols::node::batch::may_retry`. When
    /// every operation has ended, [`Application::batch_done`] is told, with
    /// the number returned here.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use sitenet_sim::{
    ///     AppCtx, Application, BatchOp, Faults, OpOutcome, Sim, SimConfig, Verdict,
    /// };
    /// use sitenet_protocols::Priority;
    ///
    /// /// Site 0 sends one message to each other site, as one batch.
    /// #[derive(Default)]
    /// struct Broadcast { done: Vec<OpOutcome> }
    /// impl Application for Broadcast {
    ///     fn start(&mut self, ctx: &mut AppCtx<'_>) {
    ///         if ctx.me == ctx.sites[0] {
    ///             let body = Bytes::from_static(b"hello");
    ///             let ops = ctx.sites[1..].iter().map(|&to| BatchOp::Send {
    ///                 to, priority: Priority::Medium, body: body.clone(),
    ///             });
    ///             ctx.batch(ops.collect(), 2);
    ///         }
    ///     }
    ///     fn batch_done(&mut self, _: &mut AppCtx<'_>, _: u64, outcomes: &[(OpOutcome, u32)]) {
    ///         self.done.extend(outcomes.iter().map(|(o, _)| o.clone()));
    ///     }
    ///     fn check(&self, ctx: &AppCtx<'_>) -> Result<(), String> {
    ///         let want = if ctx.me == ctx.sites[0] { ctx.sites.len() - 1 } else { 0 };
    ///         let all_sent = self.done.iter().all(|o| *o == OpOutcome::Sent);
    ///         (self.done.len() == want && all_sent).then_some(()).ok_or(format!("{:?}", self.done))
    ///     }
    /// }
    /// let cfg = SimConfig { sites: 5, seed: 2, faults: Faults::None, ..SimConfig::default() };
    /// let r = Sim::with_app(cfg, Box::new(|_| Box::new(Broadcast::default()))).run();
    /// assert_eq!(r.verdict, Verdict::Ok);
    /// assert_eq!((r.batches, r.batch_ops), (1, 4));
    /// ```
    pub fn batch(&mut self, ops: Vec<BatchOp>, max_retry: u32) -> u64 {
        *self.next_coop += 1;
        let batch = *self.next_coop;
        self.out.push(Op::Batch {
            batch,
            ops,
            max_retry,
        });
        batch
    }

    /// Waits for every operation of `batch`, at most `timeout` (the
    /// runtime's `Submitted::wait_all`, by the same rule:
    /// `sitenet_protocols::node::batch::WaitAll`): [`Application::batch_waited`]
    /// is told what is known when nothing is pending or the time is up,
    /// whichever comes first — then the batch goes on, and
    /// [`Application::batch_done`] still comes when it ends. Nothing if
    /// the batch has ended already, or is waited for already.
    pub fn wait_batch(&mut self, batch: u64, timeout: Duration) {
        self.out.push(Op::WaitBatch { batch, timeout });
    }

    /// Cancels cooperation `coop` (nothing if it has ended): its requests
    /// are forgotten, and [`Application::cooperation_ended`] is told.
    pub fn cancel(&mut self, coop: u64) {
        self.out.push(Op::Cancel(coop));
    }

    /// The `k`-th site after this one in the directory, wrapping around
    /// (`None` if alone, or if that is this site).
    pub fn neighbour(&self, k: usize) -> Option<SiteId> {
        let me = self.sites.iter().position(|s| *s == self.me)?;
        let to = self.sites[(me + k) % self.sites.len()];
        (to != self.me).then_some(to)
    }

    /// A random site that is up, other than this one (`None` if alone).
    pub fn random_peer(&mut self) -> Option<SiteId> {
        let others = self.sites.len().saturating_sub(1);
        if others == 0 {
            return None;
        }
        let i = self.rng.gen_range(0..others);
        // The i-th site that is not this one.
        match self.sites.iter().position(|s| *s == self.me) {
            Some(k) if i >= k => self.sites.get(i + 1).copied(),
            _ => self.sites.get(i).copied(),
        }
    }
}

/// A site's application logic in the simulator. Every method has a default
/// that does nothing, so an application implements only what it uses.
pub trait Application {
    /// The site started (first incarnation or a restart: the application
    /// starts from nothing, as a restarted process would).
    fn start(&mut self, _ctx: &mut AppCtx<'_>) {}
    /// The periodic tick ([`SimConfig::tick`](crate::SimConfig::tick));
    /// ticks stop when the fault phase ends, so that the run can settle.
    fn tick(&mut self, _ctx: &mut AppCtx<'_>) {}
    /// A tick of the settle phase, at the same period: the faults are over
    /// (no crash, cut or partition comes any more), and an application
    /// that must wind down does it here — let go of what it holds, finish
    /// what it started, look up the sites it depends on — so that its own
    /// [`check`](Self::check) can ask for a quiet end. The default does
    /// nothing: an application that starts nothing new lets the run settle.
    fn settle_tick(&mut self, _ctx: &mut AppCtx<'_>) {}
    /// The site's ComObject for `site` changed its fault state, as the
    /// runtime's node tells whoever watches the site: temporarily failed
    /// (the channel was lost or cannot be opened; it keeps trying), ok
    /// again, or permanently failed (a new incarnation answers at its
    /// address, it gave up, or the site left; what it held was handed back
    /// before this call). A crashed site is learnt of only by a site that
    /// talks to it (sends, or an open channel): a protocol that must know
    /// keeps sending to the sites it depends on. Only sites known by their
    /// id are told (not an entry reached by address before it is bound).
    fn site_fault(&mut self, _ctx: &mut AppCtx<'_>, _site: SiteId, _state: FaultState) {}
    /// A message from `from` arrived (delivered once, in order per priority).
    fn received(&mut self, _ctx: &mut AppCtx<'_>, _from: SiteId, _body: &[u8]) {}
    /// A message from `from` naming `site` arrived
    /// ([`AppCtx::send_site_ref`]): its node knows the site now (the
    /// application may send to it). By default, [`received`](Self::received).
    fn received_site_ref(&mut self, ctx: &mut AppCtx<'_>, from: SiteId, body: &[u8], site: SiteId) {
        let _ = site;
        self.received(ctx, from, body);
    }
    /// A message sent to `to` was handed back: `maybe_delivered` says it
    /// was sent and never acknowledged (it may have arrived), otherwise it
    /// never arrived.
    fn handed_back(
        &mut self,
        _ctx: &mut AppCtx<'_>,
        _to: SiteId,
        _body: &[u8],
        _maybe_delivered: bool,
    ) {
    }
    /// A request arrived (or was forwarded here): answer it with
    /// [`AppCtx::reply`], or hand it on with [`AppCtx::forward`]. Left
    /// unanswered, its requester times out.
    fn requested(&mut self, _ctx: &mut AppCtx<'_>, _req: Request) {}
    /// A request this site sent (the number [`AppCtx::request`] returned)
    /// ended: exactly once per request.
    fn answered(&mut self, _ctx: &mut AppCtx<'_>, _corr: u64, _answer: Answer) {}
    /// A cooperation this site opened ([`AppCtx::cooperation`], the number
    /// it returned) ended: exactly once per cooperation. `c` says how
    /// ([`Cooperation::end`]) and holds the replies that filled its
    /// descriptors ([`Cooperation::filled`]).
    fn cooperation_ended(&mut self, _ctx: &mut AppCtx<'_>, _coop: u64, _c: &Cooperation<SiteId>) {}
    /// A batch this site submitted ([`AppCtx::batch`], the number it
    /// returned) ended: every operation's outcome, in the order given, with
    /// the retries it took; exactly once per batch.
    fn batch_done(&mut self, _ctx: &mut AppCtx<'_>, _batch: u64, _outcomes: &[(OpOutcome, u32)]) {}
    /// A wait for all of `batch` ([`AppCtx::wait_batch`]) is over: every
    /// outcome known by then, by operation (`None`: not ended yet). Told
    /// before [`batch_done`](Self::batch_done) when the batch ends first.
    fn batch_waited(&mut self, _ctx: &mut AppCtx<'_>, _batch: u64, _known: &[Option<OpOutcome>]) {}
    /// The application's own invariant, checked on every live site once
    /// the run has settled (after the simulator's checkers held): an
    /// `Err` is a violation, reported with the seed like the others.
    fn check(&self, _ctx: &AppCtx<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// Makes the application of a site when it starts (again).
pub type AppFactory = Box<dyn FnMut(SiteId) -> Box<dyn Application>>;
