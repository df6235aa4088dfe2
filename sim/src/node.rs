//! A simulated node: its ComObjects (one per remote site), its slot table
//! (the TransController's state), the pairs it remembers, and its
//! application — and the driver that runs them exactly by the ComObject's
//! call-order contract, as the runtime's actors do: feed an input, carry
//! out every action, flush the output ring, carry out the actions that
//! made, re-arm the one timer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::turn::{self, TurnSteps};
use sitenet_protocols::connection::com_object::{
    Action, ChannelEnd, ComConfig, ComObject, OpenFailure, OpenRequest,
};
use sitenet_protocols::connection::error::HandedBack;
use sitenet_protocols::connection::handshake::{
    Continuity, Initiator, LocalInfo, PairMemory, HANDSHAKE_TIMEOUT, MIN_BUFFER,
};
use sitenet_protocols::connection::reassembly::ReassemblyBudget;
use sitenet_protocols::slots::{Grant, SlotTable};
use sitenet_protocols::wire::message::OutMessage;

use crate::peer::{Peer, Peers, Slot};

use crate::app::Application;
use crate::net::{Conn, End, Role, Seg};
use crate::{Ev, Sim};

/// A hasher with fixed keys: a table's layout (and any walk over it)
/// depends on what was put in, never on a random seed of the process.
pub(crate) type FixedHash =
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// A simulated site (one process of a real deployment).
pub(crate) struct Node {
    pub(crate) id: SiteId,
    /// What this incarnation's build speaks ([`mixed_build`]).
    pub(crate) speaks: sitenet_protocols::wire::version::Speaks,
    pub(crate) incarnation: u32,
    pub(crate) up: bool,
    pub(crate) address: String,
    pub(crate) cfg: Arc<ComConfig>,
    pub(crate) budget: ReassemblyBudget,
    /// Boxed: a ComObject moves out of the table while it is driven.
    pub(crate) peers: Peers,
    pub(crate) slots: SlotTable,
    /// Slot holder → (connection, end) holding it.
    pub(crate) holders: BTreeMap<u64, (u64, usize)>,
    /// Slot ticket → the site waiting with it.
    pub(crate) waiters: BTreeMap<u64, SiteId>,
    /// Line ticket → the accepted connection (connection, end) waiting in
    /// the slot table's line with it.
    pub(crate) line: BTreeMap<u64, (u64, usize)>,
    /// Line tickets given their turn by the slot table whose turn event
    /// has not run yet: their connections still wait in `line`, but the
    /// table holds their slot, not their place (the runtime's moment
    /// between the controller's callback and the adoption).
    pub(crate) turning: std::collections::BTreeSet<u64>,
    /// Accepted channels on their way to their entries' ComObjects
    /// (`adopt.rs`).
    pub(crate) adopting: crate::adopt::Adopting,
    pub(crate) slot_armed: Option<Duration>,
    pub(crate) pairs: PairMemory,
    pub(crate) next_opener: u64,
    /// Reads nothing until then (a slow reader).
    pub(crate) paused_until: Duration,
    pub(crate) app: Box<dyn Application>,
    /// Retransmissions of ComObjects this incarnation dropped.
    pub(crate) retransmitted: u64,
    /// The site table's rules ([`sites`](crate::sites)): which entry an
    /// address, an id or an accepted channel names, binding, merging and
    /// the reclaim re-check.
    pub(crate) index: sitenet_protocols::node::site_index::SiteIndex,
    /// The index's keys → each entry's key in `peers` (its site id, or
    /// while it is unbound an even stand-in: [`unbound`](crate::peer::unbound)).
    pub(crate) keys: slab::Slab<SiteId>,
    /// Stand-ins given so far (the next is twice this plus two).
    pub(crate) next_unbound: u128,
    /// No reference is due to be let go before this (at or before the
    /// earliest `Peer::last_send` plus the hold).
    pub(crate) release_at: Duration,
    /// An entry was made, bound, merged or forgotten since the last audit
    /// (which then checks the table: [`Sim::check_site_table`]).
    pub(crate) table_changed: bool,
    /// The output bytes its entries hold, its bounds, and which entries
    /// have senders waiting ([`outbox`](crate::outbox)).
    pub(crate) out: crate::outbox::NodeOut,
    /// The requests it awaits answers to (the runtime's table): by
    /// correlation number, the site asked, who awaits it (the application
    /// under the number again, or one of its cooperations).
    pub(crate) requests:
        sitenet_protocols::node::requests::RequestTable<SiteId, crate::coops::Awaiter, FixedHash>,
    /// The application's open cooperations, oldest first (by number):
    /// see [`coops`](crate::coops).
    pub(crate) coops: BTreeMap<u64, crate::coops::OpenCoop>,
    /// When each open cooperation's wait ends.
    pub(crate) coop_deadlines: sitenet_protocols::base::timer::TimerQueue<u64>,
    /// The number its application's last cooperation or batch got.
    pub(crate) next_coop: u64,
    /// The application's batches not ended yet: see
    /// [`batches`](crate::batches).
    pub(crate) batches: BTreeMap<u64, crate::batches::SimBatch>,
    /// When each batch's wait for all of it ends
    /// ([`AppCtx::wait_batch`](crate::AppCtx::wait_batch)).
    pub(crate) batch_waits: sitenet_protocols::base::timer::TimerQueue<u64>,
    /// Tracked messages (a batch's sends) not acknowledged or handed back
    /// yet: token → batch, operation.
    pub(crate) tracked: BTreeMap<u64, (u64, usize)>,
    /// What each stand-in of an entry reached by address became: the site
    /// it was bound to, or the entry it merged into (the runtime's entries
    /// resolve so; a request sent through one is answered by that site).
    pub(crate) aliases: BTreeMap<SiteId, SiteId>,
    /// When the request timer event in the queue fires.
    pub(crate) req_armed: Option<Duration>,
    /// Pending handshakes of accepted connections (the runtime's accept
    /// loop's table): ticket → (connection, end).
    pub(crate) admission: sitenet_protocols::slots::admission::Admission,
    pub(crate) admitted: BTreeMap<u64, (u64, usize)>,
    /// When the admission timer event in the queue fires.
    pub(crate) adm_armed: Option<Duration>,
}

impl Node {
    pub(crate) fn local_info(&self) -> LocalInfo {
        LocalInfo {
            site: self.id,
            listen: vec![self.address.clone()],
            buffer_size: self.cfg.buffer_size,
            max_message: self.cfg.max_message,
            speaks: self.speaks,
        }
    }
}

impl Sim {
    /// Takes `peer`'s ComObject at node `n` out of its table to feed it
    /// an input: started again from what it kept if it was parked. Every
    /// input goes through here.
    pub(crate) fn take_peer(&mut self, n: usize, peer: SiteId) -> Option<Box<Peer>> {
        let mut p = self.nodes[n].peers.remove(&peer)?;
        if let Some(kept) = p.parked.take() {
            let node = &self.nodes[n];
            p.com = ComObject::unpark(kept, node.cfg.clone(), node.budget.clone());
            self.counts.unparks += 1;
            self.trace(n, "unpark", &[peer.0]);
        }
        Some(p)
    }

    /// `peer`'s timer event at node `n` (a live incarnation's).
    pub(crate) fn on_com_timer(&mut self, n: usize, peer: SiteId) {
        // A timer replaced by an earlier one is no event of the machine's
        // (a tenth of a large run's events): nothing to take out and put
        // back.
        let (t0, now) = (self.t0, self.instant());
        let Some(p) = self.nodes[n].peers.get_mut(&peer) else {
            return;
        };
        if p.armed != Some(self.now) {
            return;
        }
        // One that fires early (its deadline moved later: a fifth of a
        // large run's timers) only re-arms; the machine is not taken out
        // (nothing it does changes with time alone).
        let due = p.parked.is_none().then(|| p.com.poll_timeout());
        if let Some(deadline) = due.filter(|d| d.is_none_or(|t| t > now)) {
            p.armed = timer_at(t0, self.now, deadline);
            if let Some(t) = p.armed {
                let inc = self.nodes[n].incarnation;
                self.at(t, Ev::ComTimer { node: n, inc, peer });
            }
            self.rearm_slots(n);
            return;
        }
        let Some(mut p) = self.take_peer(n, peer) else {
            return;
        };
        p.armed = None;
        if p.com.poll_timeout().is_some_and(|t| t <= now) {
            p.com.handle_timeout(now);
            self.drive_peer(n, peer, &mut p);
        }
        self.put_back(n, peer, p);
    }

    /// Drives `peer`'s ComObject at node `n` after an input: actions,
    /// flush, actions, timer.
    pub(crate) fn drive(&mut self, n: usize, peer: SiteId) {
        let Some(mut p) = self.take_peer(n, peer) else {
            return;
        };
        self.drive_peer(n, peer, &mut p);
        self.put_back(n, peer, p);
    }

    /// Drives a ComObject taken out of its node's table: the working half
    /// of a turn (`turn::work`: actions, flush, actions, what
    /// acknowledgements freed or delivered taken as the runtime's actor
    /// accounts them, actions).
    pub(crate) fn drive_peer(&mut self, n: usize, peer: SiteId, p: &mut Peer) {
        turn::work(&mut SimTurn {
            sim: self,
            n,
            peer,
            p,
            forgotten: false,
        });
    }

    /// Puts a ComObject back after driving it: the settling half of a turn
    /// (`turn::settle`: its timer armed, parked if it may park, as the
    /// runtime's actor does after every turn), unless it was reclaimed.
    pub(crate) fn put_back(&mut self, n: usize, peer: SiteId, mut p: Box<Peer>) {
        let mut steps = SimTurn {
            sim: self,
            n,
            peer,
            p: &mut p,
            forgotten: false,
        };
        turn::settle(&mut steps);
        if steps.forgotten {
            return;
        }
        self.nodes[n].peers.insert(peer, p);
        self.rearm_slots(n);
    }

    /// Accounts for what acknowledgements freed and delivered, as the
    /// runtime's actor does: room in the outbox, the batches' sends done.
    fn account(&mut self, n: usize, p: &mut Peer) {
        let now = self.instant();
        let freed = p.com.take_freed(now);
        if freed.messages > 0 {
            if let Err(e) = self.nodes[n].out.release_freed(&mut p.out, &freed) {
                self.violation(e);
            }
            self.room_freed(n);
        }
        let acked = p.com.take_delivered();
        if !acked.is_empty() {
            self.batch_acked(n, acked);
        }
    }

    /// Parks `p` if it may (as the runtime's actor does after every turn),
    /// or carries out the reclaim its actions decided; true if the node
    /// forgot it.
    fn park_or_reclaim(&mut self, n: usize, peer: SiteId, p: &mut Peer) -> bool {
        // Nothing may wait in its outbox queue either (the runtime's rule).
        if !p.reclaim
            && p.live.is_none()
            && p.opening.is_none()
            && p.slot == Slot::None
            && p.queued.is_empty()
        {
            if let Some(kept) = p.com.park(self.instant()) {
                p.parked = Some(kept);
                self.counts.parks += 1;
                self.trace(n, "park", &[peer.0]);
            }
        }
        if std::mem::take(&mut p.reclaim) {
            self.trace(n, "reclaim", &[peer.0]);
            if self.forget(n, peer, p) {
                let node = &mut self.nodes[n];
                if let Some(c) = p.com.continuity().filter(|_| !crate::peer::unbound(peer)) {
                    // Charged to the peer's own address, as each simulated site has one.
                    let source = crate::io::pair_source(peer);
                    node.pairs.keep(peer, Continuity { source, ..c });
                }
                node.retransmitted += p.retransmitted();
                self.counts.reclaimed += 1;
                return true;
            }
            // The table's re-check kept it: a channel is on its way to it
            // (the runtime's `adopting`). The machine's rule asks again
            // after another linger time.
            self.counts.reclaims_kept += 1;
            self.trace(n, "reclaim_kept", &[peer.0]);
            let deadline = p.deadline();
            self.arm(n, peer, p, deadline);
        }
        false
    }

    /// Arms `peer`'s timer event for its machine's `deadline`, as the
    /// runtime's actor does: the one timer is replaced only when a
    /// deadline moves earlier (the heartbeat's moves later with every
    /// frame sent); one that fires early finds nothing due and re-arms.
    pub(crate) fn arm(&mut self, n: usize, peer: SiteId, p: &mut Peer, deadline: Option<Instant>) {
        let at = timer_at(self.t0, self.now, deadline);
        if let Some(t) = at.filter(|t| p.armed.is_none_or(|armed| *t < armed)) {
            let inc = self.nodes[n].incarnation;
            self.at(t, Ev::ComTimer { node: n, inc, peer });
            p.armed = Some(t);
        }
    }

    /// Carries out every action of the machine, in order.
    fn act(&mut self, n: usize, peer: SiteId, p: &mut Peer) {
        let now = self.instant();
        while let Some(a) = p.com.poll_action() {
            match a {
                Action::RequestSlot => {
                    let node = &mut self.nodes[n];
                    match node.slots.request(now) {
                        Grant::Now(h) => {
                            p.slot = Slot::Granted(h);
                            p.com.slot_granted();
                        }
                        Grant::Queued(t) => {
                            p.slot = Slot::Waiting(t);
                            node.waiters.insert(t, peer);
                        }
                    }
                }
                Action::CancelSlot => {
                    if let Slot::Waiting(t) = p.slot {
                        p.slot = Slot::None;
                        let node = &mut self.nodes[n];
                        node.slots.cancel(t);
                        node.waiters.remove(&t);
                    }
                }
                Action::Open(req) => self.start_open(n, peer, p, req),
                Action::AbandonOpen => {
                    if let Some((_, c)) = p.opening.take() {
                        self.close_end(c, 0, Seg::Rst);
                    }
                }
                Action::CloseChannel { id, end } => {
                    match p.live {
                        Some((live, c, e)) if live == id => {
                            if matches!(end, ChannelEnd::Orderly(_) | ChannelEnd::Final) {
                                // What the session has left for the peer, if
                                // the socket takes it now.
                                if let Some(conn) = self.conns.get_mut(&c) {
                                    p.com.poll_transmit(now, &mut conn.ends[e].outb);
                                }
                                self.send_out(c, e);
                            }
                            p.live = None;
                            self.close_end(c, e, Seg::Fin);
                        }
                        _ => {}
                    }
                    p.com.channel_closed(id, now);
                }
                Action::Fault { state, .. } => {
                    self.trace(n, "fault", &[peer.0, state as u128]);
                    // Told by its id: an entry reached by address is not
                    // the site's until it is bound.
                    if !crate::peer::unbound(peer) {
                        self.app_call(n, |app, ctx| app.site_fault(ctx, peer, state));
                    }
                }
                Action::ReportFault { reason } => {
                    self.violation(format!(
                        "{} reports that {peer} broke the protocol: {reason}",
                        self.nodes[n].id
                    ));
                }
                Action::ClaimRefused { .. } => self.counts.claims_refused += 1,
                Action::HandBack { error, message } => {
                    let maybe = error.handed_back() == HandedBack::MaybeDelivered;
                    self.release_handed_back(n, p, &message);
                    self.handed_back(n, peer, &message, maybe);
                }
                Action::Reclaim => {
                    // A waiting sender holds a reference, as in the runtime.
                    if p.live.is_none()
                        && p.opening.is_none()
                        && p.slot == Slot::None
                        && !p.out.waiting()
                        && p.queued.is_empty()
                    {
                        p.reclaim = true;
                    }
                }
                // A claim a peer held on the site ends once it is proven.
                Action::Proven => self.nodes[n].index.proven(p.key),
                // No one watches a simulated node's events (the machine's rule
                // for them has its own tests).
                Action::Up => {}
                Action::Failed {
                    failure,
                    not_sent,
                    maybe_delivered,
                } => {
                    self.trace(n, "failed", &[peer.0]);
                    tracing::trace!(site = %self.nodes[n].id, %peer, %failure, "site failed");
                    for m in &not_sent {
                        self.release_handed_back(n, p, m);
                        self.handed_back(n, peer, m, false);
                    }
                    for m in &maybe_delivered {
                        self.release_handed_back(n, p, m);
                        self.handed_back(n, peer, m, true);
                    }
                    // What its outbox queue held never went either.
                    for w in std::mem::take(&mut p.queued) {
                        self.release_handed_back(n, p, &w.msg);
                        self.handed_back(n, peer, &w.msg, false);
                    }
                    // Its outbox closes: every sender waiting there fails
                    // at once, its message never sent.
                    for (_, w) in self.nodes[n].out.leave(peer, &mut p.out) {
                        self.handed_back(n, peer, &w.msg, false);
                    }
                    self.requests_failed(n, peer);
                }
            }
        }
        // A grant the machine did not use goes back.
        if let Slot::Granted(h) = p.slot {
            p.slot = Slot::None;
            self.release_slot(n, h);
        }
    }

    /// Writes what the session has for its working channel, as far as the
    /// ring and the socket take it.
    fn flush(&mut self, p: &mut Peer) {
        let Some((_, c, e)) = p.live else { return };
        let now = self.instant();
        loop {
            let Some(conn) = self.conns.get_mut(&c) else {
                return;
            };
            let wrote = p.com.poll_transmit(now, &mut conn.ends[e].outb);
            let moved = self.send_out(c, e);
            let Some(conn) = self.conns.get(&c) else {
                return;
            };
            if (wrote == 0 && !moved) || !conn.ends[e].outb.is_empty() {
                return;
            }
        }
    }

    /// Moves end `e`'s output ring onto its wire; true if anything moved.
    pub(crate) fn send_out(&mut self, c: u64, e: usize) -> bool {
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&c) else {
            return false;
        };
        match conn.send_out(e, now) {
            Some(at) => {
                self.at(at, Ev::Arrive { conn: c, dir: e });
                true
            }
            None => false,
        }
    }

    /// Starts the open attempt the machine asked for, with the slot it was
    /// granted: a connection to the address, the initiator's handshake on it.
    fn start_open(&mut self, n: usize, peer: SiteId, p: &mut Peer, req: OpenRequest) {
        let holder = match p.slot {
            Slot::Granted(h) => {
                p.slot = Slot::None;
                Some(h)
            }
            _ => None,
        };
        let now = self.instant();
        let Some(&m) = self.by_address.get(&req.address) else {
            if let Some(h) = holder {
                self.release_slot(n, h);
            }
            let why = OpenFailure::Transport(format!("no site listens at {}", req.address));
            p.com.open_failed(req.attempt.seq, why, now);
            return;
        };
        let nonce = self.rand_nonce();
        let node = &self.nodes[n];
        // An entry reached by address does not know which site answers
        // there until this handshake says so.
        let expect = (!crate::peer::unbound(peer)).then_some(peer);
        let hs = Initiator::new(
            node.local_info(),
            expect,
            req.last_received,
            req.last_generation,
            nonce,
        )
        .with_attempt(req.attempt)
        .with_secret(req.secret)
        .with_session(req.session);
        let ring = MIN_BUFFER as usize;
        let mut dialer = End::new(
            n,
            node.incarnation,
            ring,
            Role::Initiator {
                peer,
                attempt: req.attempt.seq,
                hs: Box::new(hs),
                waiting: false,
            },
        );
        dialer.holder = holder;
        let listener = End::new(m, 0, ring, Role::NotYet);
        let (latency, bandwidth) = self.link(n, m);
        let c = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(
            c,
            Conn {
                ends: [dialer, listener],
                wire: Default::default(),
                used: [0; 2],
                link_free: [self.now; 2],
                latency,
                bandwidth,
                blocked: [false; 2],
                mute: [false; 2],
                attempt: None,
            },
        );
        if let Some(h) = holder {
            self.nodes[n].holders.insert(h, (c, 0));
        }
        p.opening = Some((req.attempt.seq, c));
        self.counts.opens += 1;
        self.last_open = Some(self.now);
        self.trace(n, "open", &[peer.0, c as u128]);
        self.at(self.now + latency, Ev::Syn { conn: c });
        self.at(
            self.now + HANDSHAKE_TIMEOUT,
            Ev::HsTimeout { conn: c, end: 0 },
        );
    }

    /// Closes end `e` of connection `c` from its side: `how` follows what it
    /// wrote, and its slot goes back.
    pub(crate) fn close_end(&mut self, c: u64, e: usize, how: Seg) {
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&c) else {
            return;
        };
        let end = &mut conn.ends[e];
        if !end.is_open() {
            return;
        }
        let node = &mut self.nodes[end.node];
        let live = end.incarnation == node.incarnation && node.up;
        match end.role {
            // The handshake ended: it leaves the admission table.
            Role::Acceptor { ticket, .. } if live => {
                node.admission.finish(ticket);
                node.admitted.remove(&ticket);
            }
            // Closed while waiting: it leaves the line.
            Role::InLine { ticket, .. } if live => {
                node.slots.leave_line(ticket, self.t0 + now);
                node.line.remove(&ticket);
            }
            _ => {}
        }
        end.role = Role::Closed;
        end.rx.clear();
        let (node, holder) = (end.node, end.holder.take());
        let at = conn.put(e, now, 0, how);
        let both_closed = !conn.ends[1 - e].is_open();
        self.at(at, Ev::Arrive { conn: c, dir: e });
        if both_closed {
            self.conns.remove(&c);
        }
        if let Some(h) = holder {
            self.release_slot(node, h);
        }
    }

    /// Gives back the bytes of `m`, which entry `p` handed back.
    fn release_handed_back(&mut self, n: usize, p: &mut Peer, m: &OutMessage) {
        if let Err(e) = self.nodes[n].out.release_msg(&mut p.out, m) {
            self.violation(e);
        }
        self.room_freed(n);
    }

    /// A message handed back to node `n`'s application.
    pub(crate) fn handed_back(&mut self, n: usize, peer: SiteId, m: &OutMessage, maybe: bool) {
        let body: Vec<u8> = m.body.iter().flat_map(|b| b.iter().copied()).collect();
        let Some(id) = crate::envelope::message_id(m.kind, &m.header) else {
            return self.violation(format!("a handed-back message has no envelope: {m:?}"));
        };
        self.trace(n, "handed_back", &[id as u128, maybe as u128]);
        self.last_message = Some(self.now);
        if let Err(e) = self.oracle.hand_back(id, maybe) {
            return self.violation(e);
        }
        if m.tracked {
            // A batch's send: the batch retries it or ends it.
            return self.batch_handed_back(n, m.corr, maybe);
        }
        // The site the application named (an entry reached by address may
        // not know it).
        let to = self.oracle.named(id).unwrap_or(peer);
        self.app_call(n, |app, ctx| app.handed_back(ctx, to, &body, maybe));
    }
}

/// The simulated time of a machine's `deadline` (its clock starts at
/// `t0`), never before `now`: when its timer event fires.
pub(crate) fn timer_at(t0: Instant, now: Duration, deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|i| i.saturating_duration_since(t0).max(now))
}

/// One turn of a simulated ComObject: the steps `turn` orders, as the
/// runtime's actor takes them, on the simulator's state.
struct SimTurn<'a> {
    sim: &'a mut Sim,
    n: usize,
    peer: SiteId,
    p: &'a mut Peer,
    /// The reclaim rule ran and the node forgot the site: it is not put
    /// back.
    forgotten: bool,
}

impl TurnSteps for SimTurn<'_> {
    /// Nothing to take: a simulated send reaches the machine at once, or
    /// through the outbox queue's own event (`drain.rs`) that then runs a
    /// turn; references are read by the reclaim rule's conditions.
    fn take_inputs(&mut self) {}

    fn act(&mut self) {
        self.sim.act(self.n, self.peer, self.p);
    }

    /// Nothing to do: the simulated slot table preempts a channel through
    /// its own event (`slots.rs`).
    fn give_way(&mut self) {}

    fn flush(&mut self) {
        self.sim.flush(self.p);
    }

    fn account(&mut self) {
        self.sim.account(self.n, self.p);
    }

    /// Arms the timer, unless a reclaim is pending (the node may forget the
    /// site; if it keeps it, the timer is armed then). Read before parking:
    /// a parked form's deadline is the one its machine had
    /// (`ComObject::park` asserts it), and reading it back would unpack the
    /// form.
    fn rearm(&mut self) {
        if !self.p.reclaim {
            let deadline = self.p.deadline();
            self.sim.arm(self.n, self.peer, self.p, deadline);
        }
    }

    /// Nothing to watch: a simulated application lets its references go on
    /// its ticks, and each tick drives the site.
    fn watch_references(&mut self) {}

    fn park_if_idle(&mut self) {
        self.forgotten = self.sim.park_or_reclaim(self.n, self.peer, self.p);
    }
}
