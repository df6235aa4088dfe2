//! What happens at the ends of a simulated connection: the connection
//! request reaching the listener, bytes arriving, the two handshake
//! machines and the working channel reading them, FIN and reset, and the
//! handshake deadline. The same machines the runtime's TransObject and
//! accept loop drive, in the same order.

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::{AcceptOutcome, Loss, OpenFailure};
use sitenet_protocols::connection::error::OpenError;
use sitenet_protocols::connection::handshake::{
    write_answer, Acceptor, NegotiateAns, RefuseReason,
};
use sitenet_protocols::wire::message::InMessage;

use crate::net::{Role, Seg};
use crate::{Ev, Sim};

impl Sim {
    /// The connection request of `c` reaches its listener.
    pub(crate) fn on_syn(&mut self, c: u64) {
        let Some(conn) = self.conns.get(&c) else {
            return;
        };
        let (n, m) = (conn.ends[0].node, conn.ends[1].node);
        if !conn.ends[0].is_open() {
            // The dialer gave up before its request arrived.
            self.conns.remove(&c);
            return;
        }
        if let Some(heal) = self.blocked(n, m) {
            return self.at(heal, Ev::Syn { conn: c });
        }
        if !self.nodes[m].up {
            // Connection refused: nobody listens there now.
            let now = self.now;
            let conn = self.conns.get_mut(&c).expect("checked");
            conn.ends[1].role = Role::Closed;
            let at = conn.put(1, now, 0, Seg::Rst);
            return self.at(at, Ev::Arrive { conn: c, dir: 1 });
        }
        let nonce = self.rand_nonce();
        let info = self.nodes[m].local_info();
        let inc = self.nodes[m].incarnation;
        // Admission, as the runtime's accept loop: the newcomer is always
        // admitted; a cap hit drops the oldest pending handshake instead.
        let now = self.instant();
        let admitted = self.nodes[m].admission.admit(now, source_of(n));
        self.nodes[m].admitted.insert(admitted.ticket, (c, 1));
        let conn = self.conns.get_mut(&c).expect("checked");
        let end = &mut conn.ends[1];
        end.incarnation = inc;
        let hs = Acceptor::new(&info, nonce, &mut end.outb);
        end.role = Role::Acceptor {
            hs: Box::new(hs),
            nonce,
            ticket: admitted.ticket,
            spoke: false,
        };
        self.trace(m, "accept", &[c as u128, admitted.ticket as u128]);
        self.send_out(c, 1);
        if let Some((victim, why)) = admitted.dropped {
            self.drop_handshake(m, victim, why);
        }
        self.rearm_admission(m);
    }

    /// Closes the pending handshake `ticket` of node `m`, which admission
    /// dropped.
    fn drop_handshake(
        &mut self,
        m: usize,
        ticket: u64,
        why: sitenet_protocols::slots::admission::Dropped,
    ) {
        self.counts.handshakes_dropped += 1;
        self.trace(m, "handshake_dropped", &[ticket as u128, why as u128]);
        if let Some((c, e)) = self.nodes[m].admitted.remove(&ticket) {
            self.close_end(c, e, Seg::Rst);
        }
    }

    /// Keeps one timer event at node `m`'s earliest handshake deadline.
    pub(crate) fn rearm_admission(&mut self, m: usize) {
        let next = self.nodes[m].admission.poll_timeout();
        let inc = self.nodes[m].incarnation;
        let armed = self.nodes[m].adm_armed;
        self.nodes[m].adm_armed = self.rearm(next, armed, Ev::Admission { node: m, inc });
    }

    /// Node `m`'s handshake deadlines: silent and slow handshakes close.
    pub(crate) fn on_admission_timer(&mut self, m: usize) {
        if self.nodes[m].adm_armed != Some(self.now) {
            return;
        }
        self.nodes[m].adm_armed = None;
        let now = self.instant();
        for (ticket, why) in self.nodes[m].admission.handle_timeout(now) {
            self.drop_handshake(m, ticket, why);
        }
        self.rearm_admission(m);
    }

    /// Segments of wire `d` of connection `c` arrive.
    pub(crate) fn on_arrive(&mut self, c: u64, d: usize) {
        let Some(conn) = self.conns.get_mut(&c) else {
            return;
        };
        let (from, to) = (conn.ends[d].node, conn.ends[1 - d].node);
        if let Some(heal) = self.blocked(from, to) {
            return self.at(heal, Ev::Arrive { conn: c, dir: d });
        }
        let conn = self.conns.get_mut(&c).expect("checked");
        if conn.arrive(d, self.now) {
            self.read(c, 1 - d);
        }
    }

    /// End `e` of `c` reads what its socket holds, as far as its rings and
    /// its machine take it.
    pub(crate) fn read(&mut self, c: u64, e: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(&c) else {
                return;
            };
            let n = conn.ends[e].node;
            if self.nodes[n].paused_until > self.now || !conn.ends[e].is_open() {
                return;
            }
            let (got, last) = conn.read_in(e);
            // Nothing read and nothing left in the ring: a working
            // channel's machine has nothing to take, and a turn would
            // change nothing (the loop's last pass after every arrival
            // had been one: take out, drive, put back).
            let end = &conn.ends[e];
            if got == 0 && last.is_none() && end.inb.is_empty() {
                if let Role::Working { peer, .. } = end.role {
                    if self.nodes[n].peers.contains_key(&peer) {
                        return;
                    }
                }
            }
            if got > 0 && conn.blocked[1 - e] && conn.ends[1 - e].is_open() {
                // Room in the socket buffer for a sender that waits for it.
                conn.blocked[1 - e] = false;
                self.at(
                    self.now,
                    Ev::Writable {
                        conn: c,
                        end: 1 - e,
                    },
                );
            }
            let progressed = self.process(c, e);
            if let Some(seg) = last {
                return self.end_of_stream(c, e, seg);
            }
            if got == 0 {
                if !progressed {
                    self.retry_blocked(c, e);
                }
                return;
            }
        }
    }

    /// A working channel that cannot consume its ring (its reassembly
    /// budget is exhausted) tries again a little later, as the runtime's
    /// wait for budget does.
    fn retry_blocked(&mut self, c: u64, e: usize) {
        let Some(conn) = self.conns.get(&c) else {
            return;
        };
        let end = &conn.ends[e];
        if let Role::Working { peer, .. } = end.role {
            let blocked = self.nodes[end.node]
                .peers
                .get(&peer)
                .is_some_and(|p| p.parked.is_none() && p.com.input_blocked());
            if blocked && !end.inb.is_empty() {
                self.at(
                    self.now + std::time::Duration::from_millis(10),
                    Ev::Read { conn: c, end: e },
                );
            }
        }
    }

    /// Feeds end `e`'s input ring to its machine; true if it consumed
    /// anything or changed state.
    fn process(&mut self, c: u64, e: usize) -> bool {
        let Some(conn) = self.conns.get(&c) else {
            return false;
        };
        match &conn.ends[e].role {
            Role::Initiator { .. } => self.initiator_input(c, e),
            Role::Acceptor { .. } => self.acceptor_input(c, e),
            Role::Working { peer, id } => {
                let (peer, id) = (*peer, *id);
                self.working_input(c, e, peer, id)
            }
            // Parked in line: an honest initiator sends nothing until
            // answered.
            Role::InLine { .. } | Role::Adopting | Role::NotYet | Role::Closed => false,
        }
    }

    fn initiator_input(&mut self, c: u64, e: usize) -> bool {
        let conn = self.conns.get_mut(&c).expect("checked by process");
        let end = &mut conn.ends[e];
        let n = end.node;
        let Role::Initiator {
            peer,
            attempt,
            hs,
            waiting,
        } = &mut end.role
        else {
            return false;
        };
        let (peer, attempt) = (*peer, *attempt);
        let before = end.inb.len();
        let r = hs.handle_input(&mut end.inb, &mut end.outb);
        let presented = hs.presented();
        let wait = hs.take_wait();
        if wait.is_some() {
            *waiting = true;
        }
        let consumed = end.inb.len() != before;
        self.send_out(c, e);
        if let Some(w) = wait {
            self.told_to_wait(n, peer, (attempt, c), w);
        }
        let opened = match r {
            Ok(None) => return consumed || wait.is_some(),
            Ok(Some(opened)) => Ok(opened),
            Err(err) => Err(err),
        };
        let now = self.instant();
        let Some(mut p) = self.take_peer(n, peer) else {
            self.close_end(c, e, Seg::Fin);
            return true;
        };
        if p.opening != Some((attempt, c)) {
            self.close_end(c, e, Seg::Fin);
            self.put_back(n, peer, p);
            return true;
        }
        p.opening = None;
        // An entry reached by address learns here which site answers
        // there: bound to it, or merged into the entry the node has for
        // it (`sites.rs`). As the runtime, a failure that says the site is
        // gone for good binds nothing.
        let found = match &opened {
            Ok(o) => Some(o.present.site),
            Err(err) if !err.is_permanent() => presented,
            Err(_) => None,
        };
        let (peer, mut p) = match found.filter(|_| crate::peer::unbound(peer)) {
            Some(id) => match self.found(n, peer, p, id, (c, e)) {
                Some((id, mut p)) => {
                    if opened.is_err() {
                        // Known now: the next attempt proves a pair this
                        // node kept (a refusal as `Unproven` said it must),
                        // as the runtime's `recall_pair`.
                        if let Some(kept) = self.nodes[n].pairs.take(id) {
                            p.com.recall(kept);
                        }
                    }
                    (id, p)
                }
                None => return true,
            },
            None => (peer, p),
        };
        match opened {
            Ok(opened) => {
                if let Some(id) = p.com.open_succeeded(attempt, &opened, now) {
                    let conn = self.conns.get_mut(&c).expect("still open");
                    let end = &mut conn.ends[e];
                    end.inb.resize(opened.buffer_size as usize);
                    end.outb.resize(opened.buffer_size as usize);
                    end.role = Role::Working { peer, id };
                    let settled = (opened.generation as u128) << 64
                        | (opened.peer_last_received as u128) << 1
                        | opened.peer_fresh as u128;
                    self.trace(n, "opened", &[peer.0, c as u128, settled]);
                    self.drive_peer_then_attach(n, peer, &mut p, (id, c, e));
                } else {
                    self.close_end(c, e, Seg::Fin);
                    self.drive_peer(n, peer, &mut p);
                }
            }
            Err(err) => {
                self.trace(n, "open_failed", &[peer.0, c as u128]);
                self.close_end(c, e, Seg::Fin);
                p.com.open_failed(attempt, OpenFailure::Open(err), now);
                self.drive_peer(n, peer, &mut p);
            }
        }
        self.put_back(n, peer, p);
        true
    }

    /// As the runtime: the machine's actions first (they may close the
    /// channel this one replaces), then the new channel is attached and
    /// flushed.
    fn drive_peer_then_attach(
        &mut self,
        n: usize,
        peer: SiteId,
        p: &mut crate::peer::Peer,
        live: (
            sitenet_protocols::connection::com_object::ChannelId,
            u64,
            usize,
        ),
    ) {
        self.drive_peer(n, peer, p);
        if p.com.working_channel() == Some(live.0) {
            p.live = Some(live);
            self.drive_peer(n, peer, p);
        } else {
            self.close_end(live.1, live.2, Seg::Fin);
            p.com.channel_closed(live.0, self.instant());
            self.drive_peer(n, peer, p);
        }
    }

    fn acceptor_input(&mut self, c: u64, e: usize) -> bool {
        let conn = self.conns.get_mut(&c).expect("checked by process");
        let end = &mut conn.ends[e];
        let m = end.node;
        let Role::Acceptor {
            hs,
            nonce,
            ticket,
            spoke,
        } = &mut end.role
        else {
            return false;
        };
        let nonce = *nonce;
        if !*spoke && !end.inb.is_empty() {
            // Its first bytes: no longer silent.
            *spoke = true;
            let ticket = *ticket;
            self.nodes[m].admission.spoke(ticket);
        }
        let before = end.inb.len();
        let r = hs.handle_input(&mut end.inb, &mut end.outb);
        let consumed = end.inb.len() != before;
        let neg = match r {
            Ok(None) => return consumed,
            Ok(Some(neg)) => neg,
            Err(err) => {
                self.send_out(c, e);
                self.close_end(c, e, Seg::Fin);
                self.violation(format!("a handshake between honest sites failed: {err}"));
                return true;
            }
        };
        if let Role::Acceptor { ticket, .. } = self.conns[&c].ends[e].role {
            self.nodes[m].admission.finish(ticket);
            self.nodes[m].admitted.remove(&ticket);
            self.rearm_admission(m);
        }
        // An adopted channel takes a slot; past the hard limit a peer that
        // can wait waits in line (`line.rs`), else it is refused.
        self.adopt_or_wait(m, c, e, neg, nonce);
        true
    }

    /// Hands the accepted channel `c` (end `e`, holding slot `holder`) of
    /// node `m` to its site's ComObject, which decides and answers: at
    /// once, or (with [`SimConfig::adopt_hop`](crate::SimConfig::adopt_hop))
    /// through the entry's mailbox (`adopt.rs`).
    pub(crate) fn adopt(
        &mut self,
        m: usize,
        (c, e): (u64, usize),
        neg: &sitenet_protocols::connection::handshake::Negotiate,
        nonce: sitenet_protocols::connection::handshake::Nonce,
        holder: u64,
    ) {
        if self.cfg.adopt_hop {
            self.send_adopt(m, (c, e), neg, nonce, holder);
        } else {
            self.adopt_now(m, (c, e), neg, nonce, holder);
        }
    }

    /// The entry of node `m` for the site an accepted channel's NEGOTIATE
    /// names: the one its site table routes the channel to, or a new one
    /// (nothing of the application refers to it).
    pub(crate) fn accepted_entry(
        &mut self,
        m: usize,
        neg: &sitenet_protocols::connection::handshake::Negotiate,
    ) -> Box<crate::peer::Peer> {
        let (mut p, existed) = self.entry_for_accept(m, neg.site, &neg.listen);
        if !existed {
            p.com.set_has_refs(false, self.instant());
        }
        p
    }

    /// The site's ComObject takes the accepted channel `c`: see
    /// [`adopt`](Self::adopt).
    pub(crate) fn adopt_now(
        &mut self,
        m: usize,
        (c, e): (u64, usize),
        neg: &sitenet_protocols::connection::handshake::Negotiate,
        nonce: sitenet_protocols::connection::handshake::Nonce,
        holder: u64,
    ) {
        let now = self.instant();
        let peer = neg.site;
        let mut p = self.accepted_entry(m, neg);
        // The generation of the channel this node holds as working, if
        // any: a NEGOTIATE that saw it (its last generation at least this)
        // comes from a peer that lost it, and replaces it — if it speaks
        // of this node's session and of no generation beyond what this node
        // saw (a claim beyond them is judged as having seen no channel
        // unless the peer proves the pair: a stranger claiming the id must
        // not end a working channel).
        let session = p.com.session();
        let credible =
            neg.session == session.tag() && neg.last_generation <= session.last_generation();
        let working = p
            .com
            .working_channel()
            .and(session.channel().map(|ch| ch.generation))
            .filter(|_| credible);
        // The attempt the working channel came from, if the peer opened it
        // (this node holds the listening end, 1: an opener's number is
        // unique only within its own node).
        let working_from = p
            .live
            .filter(|&(_, _, end)| end == 1)
            .and_then(|(_, wc, _)| self.conns.get(&wc))
            .and_then(|wc| wc.attempt);
        let conn = self.conns.get_mut(&c).expect("still open");
        conn.attempt = Some(neg.attempt);
        let end = &mut conn.ends[e];
        match p.com.accepted(neg, nonce, now) {
            AcceptOutcome::Refuse(reason) => {
                let kept_lost = reason == RefuseReason::Stale
                    && working.is_some_and(|g| neg.last_generation >= g);
                let kept_abandoned = reason == RefuseReason::Stale
                    && working_from.is_some_and(|from| neg.attempt.supersedes(&from));
                let conn = self.conns.get_mut(&c).expect("still open");
                let end = &mut conn.ends[e];
                write_answer(&mut end.outb, &NegotiateAns::Refuse(reason));
                end.holder = Some(holder);
                self.nodes[m].holders.insert(holder, (c, e));
                self.send_out(c, e);
                self.close_end(c, e, Seg::Fin);
                self.trace(m, "refused", &[peer.0, c as u128]);
                if kept_abandoned {
                    self.violation(format!(
                        "{} refused {peer}'s new channel as stale, though it comes from a later \
                         attempt of the opener whose attempt the working channel came from: \
                         the peer gave that channel up",
                        self.nodes[m].id
                    ));
                } else if kept_lost {
                    self.violation(format!(
                        "{} refused {peer}'s new channel as stale, though {peer} saw the \
                         working channel (generation {}) and lost it: the node keeps a \
                         channel dead at its peer until its silence shows",
                        self.nodes[m].id,
                        working.unwrap_or_default()
                    ));
                }
                self.drive_peer(m, peer, &mut p);
            }
            AcceptOutcome::Restarted => {
                // Only a verified certificate names a restarted site, and
                // simulated channels carry none.
                self.nodes[m].holders.insert(holder, (c, e));
                end.holder = Some(holder);
                self.close_end(c, e, Seg::Fin);
                self.violation(format!(
                    "{peer}'s claim, without a certificate, was taken for a restart"
                ));
            }
            AcceptOutcome::Protocol(err) => {
                self.nodes[m].holders.insert(holder, (c, e));
                end.holder = Some(holder);
                self.close_end(c, e, Seg::Fin);
                self.violation(format!("{peer}'s NEGOTIATE contradicts the session: {err}"));
            }
            AcceptOutcome::Accept { id, answer } => {
                let size = self.nodes[m].cfg.buffer_size as usize;
                end.inb.resize(size);
                end.outb.resize(size);
                write_answer(&mut end.outb, &answer);
                end.role = Role::Working { peer, id };
                end.holder = Some(holder);
                self.nodes[m].holders.insert(holder, (c, e));
                // What the handshake settled: the claim, and the answer.
                let (fresh, last_received, generation) = match answer {
                    sitenet_protocols::connection::handshake::NegotiateAns::Accept {
                        fresh,
                        last_received,
                        generation,
                        ..
                    } => (fresh, last_received, generation),
                    _ => (false, 0, 0),
                };
                let settled =
                    (generation as u128) << 64 | (last_received as u128) << 1 | fresh as u128;
                let claim = (neg.last_generation as u128) << 64 | neg.last_received as u128;
                self.trace(m, "adopted", &[peer.0, c as u128, claim, settled]);
                self.drive_peer_then_attach(m, peer, &mut p, (id, c, e));
            }
        }
        self.put_back(m, peer, p);
    }

    fn working_input(
        &mut self,
        c: u64,
        e: usize,
        peer: SiteId,
        id: sitenet_protocols::ChannelId,
    ) -> bool {
        let n = self.conns[&c].ends[e].node;
        let Some(mut p) = self.take_peer(n, peer) else {
            self.close_end(c, e, Seg::Rst);
            return true;
        };
        let now = self.instant();
        let conn = self.conns.get_mut(&c).expect("checked by process");
        let inb = &mut conn.ends[e].inb;
        let before = inb.len();
        let mut got: Vec<InMessage> = Vec::new();
        p.com.begin_turn(now);
        loop {
            let alive = p.com.handle_input(id, now, inb, &mut |m| got.push(m));
            if !alive || !p.com.input_paused() {
                break;
            }
        }
        let consumed = inb.len() != before || !got.is_empty();
        for m in got {
            self.delivered(n, peer, m);
        }
        self.drive_peer(n, peer, &mut p);
        self.put_back(n, peer, p);
        consumed
    }

    /// End `e` reached its peer's FIN or a reset.
    fn end_of_stream(&mut self, c: u64, e: usize, seg: Seg) {
        let Some(conn) = self.conns.get(&c) else {
            return;
        };
        let end = &conn.ends[e];
        let n = end.node;
        let reset = matches!(seg, Seg::Rst);
        match end.role {
            Role::Working { peer, id } => {
                self.close_end(c, e, Seg::Fin);
                let Some(mut p) = self.take_peer(n, peer) else {
                    return;
                };
                if p.live.is_some_and(|l| l.0 == id) {
                    p.live = None;
                    let loss = if reset {
                        Loss::Io("connection reset by peer".into())
                    } else {
                        Loss::Eof
                    };
                    p.com.channel_lost(id, loss, self.instant());
                }
                self.drive_peer(n, peer, &mut p);
                self.put_back(n, peer, p);
            }
            Role::Initiator { peer, attempt, .. } => {
                self.close_end(c, e, Seg::Fin);
                let why = if reset {
                    "connection refused or reset during the handshake"
                } else {
                    "closed by the peer during the handshake"
                };
                self.open_failed(n, peer, attempt, c, OpenFailure::Transport(why.into()));
            }
            Role::InLine { ref neg, .. } => {
                // Gone while waiting: out of the line (`close_end`), and its
                // site no longer calling.
                let site = neg.site;
                self.close_end(c, e, Seg::Fin);
                self.peer_in_line(n, site, false);
            }
            Role::Acceptor { .. } | Role::Adopting | Role::NotYet | Role::Closed => {
                self.close_end(c, e, Seg::Fin);
            }
        }
    }

    fn open_failed(&mut self, n: usize, peer: SiteId, attempt: u64, c: u64, why: OpenFailure) {
        let Some(mut p) = self.take_peer(n, peer) else {
            return;
        };
        if p.opening == Some((attempt, c)) {
            p.opening = None;
            p.com.open_failed(attempt, why, self.instant());
            self.drive_peer(n, peer, &mut p);
        }
        self.put_back(n, peer, p);
    }

    /// The handshake deadline of end `e` of `c`.
    pub(crate) fn on_handshake_timeout(&mut self, c: u64, e: usize) {
        let Some(conn) = self.conns.get(&c) else {
            return;
        };
        let end = &conn.ends[e];
        if let Role::Initiator {
            peer,
            attempt,
            waiting: false,
            ..
        } = end.role
        {
            let n = end.node;
            self.close_end(c, e, Seg::Rst);
            let why = OpenFailure::Open(OpenError::Timeout);
            self.open_failed(n, peer, attempt, c, why);
        }
    }

    /// There is room on end `e`'s wire again.
    pub(crate) fn on_writable(&mut self, c: u64, e: usize) {
        let Some(conn) = self.conns.get(&c) else {
            return;
        };
        let end = &conn.ends[e];
        match end.role {
            Role::Working { peer, .. } => {
                let n = end.node;
                self.drive(n, peer);
            }
            Role::Initiator { .. }
            | Role::Acceptor { .. }
            | Role::InLine { .. }
            | Role::Adopting => {
                self.send_out(c, e);
            }
            Role::NotYet | Role::Closed => {}
        }
    }
}

/// The source a node's pair memory charges the pair with `peer` to: one
/// per site, as each simulated site has an address of its own.
pub(crate) fn pair_source(
    peer: sitenet_protocols::base::site::SiteId,
) -> sitenet_protocols::slots::admission::Source {
    let ip = std::net::Ipv4Addr::from(peer.0 as u32);
    sitenet_protocols::slots::admission::Source::of(Some(ip.into()))
}

/// The address a simulated site's connections come from (admission's
/// per-source cap counts by it): one IPv4 address per site.
fn source_of(n: usize) -> sitenet_protocols::slots::admission::Source {
    let n = n as u32;
    let ip = std::net::Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8);
    sitenet_protocols::slots::admission::Source::of(Some(ip.into()))
}
