//! The controller's side of the waiting line: an accepted peer
//! that presented itself past the hard limit is given a place
//! ([`TransController::accept_or_wait`]) and called back — with the slot
//! when its turn comes, or with why its place ended. The rule (bounds,
//! order, turns) is `sitenet_protocols::slots`; this keeps the callbacks
//! and calls them outside the lock.

use std::time::{Duration, Instant};

use sitenet_protocols::slots::{Accepted, Admission, Source};
use sitenet_protocols::SiteId;

use super::{Holder, Lane, SlotLease, TransController};

/// Why a place in line ended without a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LineEnd {
    /// It waited the line's whole hold time: close the connection (the
    /// peer retries after its backoff).
    #[error("waited the line's whole hold time")]
    Expired,
    /// A newer connection of the same site took its place (the site gave
    /// this one up): close it.
    #[error("replaced by a newer connection of the same site")]
    Replaced,
    /// The line was full and its source held more than its share of it:
    /// its place went to a newcomer from another source (close it; the
    /// peer retries after its backoff).
    #[error("its source held more than its share of the line: the place went to another source")]
    Evicted,
}

/// Called once when a place in line ends: with the slot (the peer's turn)
/// or with why not. Runs on whichever thread freed the slot or ran the
/// tick, outside the controller's lock.
pub type LineFn = Box<dyn FnOnce(Result<SlotLease, LineEnd>) + Send>;

/// A place in the line, to leave with [`TransController::leave_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineTicket(u64);

/// What [`TransController::accept_or_wait`] did.
#[derive(Debug)]
pub enum AcceptOrWait {
    /// A slot now (the callback is dropped unused).
    Slot(SlotLease),
    /// In line: tell the peer to wait; the callback runs when the place
    /// ends.
    Wait {
        /// The place, to leave the line with.
        ticket: LineTicket,
        /// Its position when it joined (1: next).
        position: usize,
        /// How long it may wait at most (the line's hold time).
        hold: Duration,
    },
    /// No slot and no room in line, or the peer cannot wait: close the
    /// connection at once.
    Refused,
}

impl TransController {
    /// An accepted channel's peer presented itself as `site` (`None`: it
    /// cannot wait in line — it lacks the `line` capability): its slot now
    /// if one is free below the hard limit; else a place in the line, and
    /// `on_turn` runs with the slot when a slot frees for it (or with
    /// [`LineEnd`] if its place ends first); else refused. `served` is
    /// how much the node has served that site so far (messages exchanged,
    /// [`SessionStats::served`](sitenet_protocols::connection::session::SessionStats::served)):
    /// under `Admission::Share` the least served in line goes first.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use sitenet_protocols::{slots::{DefaultPolicy, SlotConfig}, SiteId};
    /// use sitenet_transport::controller::{AcceptOrWait, TransController};
    ///
    /// let ctrl = TransController::new(SlotConfig::new(1, 2)?, Box::new(DefaultPolicy::default()));
    /// let a = ctrl.accept().expect("below the hard limit");
    /// let _b = ctrl.accept().expect("below the hard limit");
    /// // At the hard limit a peer that can wait is given a place in line …
    /// let (tx, rx) = mpsc::channel();
    /// let AcceptOrWait::Wait { position, .. } =
    ///     ctrl.accept_or_wait(Some(SiteId(7)), 0, move |turn| tx.send(turn).unwrap())
    /// else {
    ///     panic!("a place in line")
    /// };
    /// assert_eq!(position, 1);
    /// // … and gets the next slot freed.
    /// drop(a);
    /// let lease = rx.recv()?.expect("its turn");
    /// let s = ctrl.stats();
    /// assert_eq!((s.in_use, s.in_line, s.grants, s.accepts_refused), (2, 0, 1, 0));
    /// // A peer that cannot wait is refused at the hard limit, as before.
    /// assert!(matches!(ctrl.accept_or_wait(None, 0, |_| {}), AcceptOrWait::Refused));
    /// drop(lease);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn accept_or_wait(
        &self,
        site: Option<SiteId>,
        served: u64,
        on_turn: impl FnOnce(Result<SlotLease, LineEnd>) + Send + 'static,
    ) -> AcceptOrWait {
        self.accept_or_wait_on(site, served, None, on_turn)
    }

    /// [`accept_or_wait`](Self::accept_or_wait) for a channel whose work
    /// will run on `lane` (`None`: not known yet). Under `Admission::Share`
    /// a freed slot goes first to a peer of a lane with fewer working
    /// holders than the least served peer's, within the line's
    /// `max_wait`: the holders stay spread over the threads.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use sitenet_protocols::{slots::{Admission, DefaultPolicy, SlotConfig}, SiteId};
    /// use sitenet_transport::controller::{AcceptOrWait, Lane, TransController};
    ///
    /// let mut cfg = SlotConfig::new(1, 2)?;
    /// cfg.admission = Admission::Share;
    /// let ctrl = TransController::new(cfg, Box::new(DefaultPolicy::default()));
    /// let (a, b) = (Some(Lane(1)), Some(Lane(2)));
    /// let AcceptOrWait::Slot(first) = ctrl.accept_or_wait_on(None, 0, a, |_| {}) else { panic!() };
    /// let AcceptOrWait::Slot(_second) = ctrl.accept_or_wait_on(None, 0, a, |_| {}) else { panic!() };
    /// // Lane 1 runs both holders. Site 7 (lane 1) has been served least …
    /// let (tx, rx) = mpsc::channel();
    /// let t7 = tx.clone();
    /// ctrl.accept_or_wait_on(Some(SiteId(7)), 0, a, move |t| t7.send((7, t)).unwrap());
    /// ctrl.accept_or_wait_on(Some(SiteId(8)), 900, b, move |t| tx.send((8, t)).unwrap());
    /// // … but the freed slot goes to site 8, whose lane runs none.
    /// drop(first);
    /// let (site, lease) = rx.recv()?;
    /// assert_eq!(site, 8);
    /// assert!(lease.is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn accept_or_wait_on(
        &self,
        site: Option<SiteId>,
        served: u64,
        lane: Option<Lane>,
        on_turn: impl FnOnce(Result<SlotLease, LineEnd>) + Send + 'static,
    ) -> AcceptOrWait {
        self.accept_or_wait_from(site, served, lane, Source::of(None), on_turn)
    }

    /// [`accept_or_wait_on`](Self::accept_or_wait_on) for a channel
    /// accepted from `source` (its peer's address: an IPv4 address or an
    /// IPv6 /64), which its slot or place is charged to: while another
    /// source wants slots, one past its fair share is served after the
    /// others, gives its slots back first, and loses its newest place in a
    /// full line to a newcomer from elsewhere ([`LineEnd::Evicted`]); see
    /// `sitenet_protocols::slots`' `sources.rs`. A channel our own node
    /// opened is charged to no remote source.
    ///
    /// ```
    /// use sitenet_protocols::{slots::{DefaultPolicy, SlotConfig, Source}, SiteId};
    /// use sitenet_transport::controller::{AcceptOrWait, LineEnd, TransController};
    ///
    /// let mut cfg = SlotConfig::new(1, 2)?;
    /// cfg.line = 2;
    /// let ctrl = TransController::new(cfg, Box::new(DefaultPolicy::default()));
    /// let hog = Source::of(Some("192.0.2.1".parse()?));
    /// let other = Source::of(Some("192.0.2.2".parse()?));
    /// // One source takes both slots and both places: nobody else wants them.
    /// let _a = ctrl.accept_or_wait_from(None, 0, None, hog, |_| {});
    /// let _b = ctrl.accept_or_wait_from(None, 0, None, hog, |_| {});
    /// ctrl.accept_or_wait_from(Some(SiteId(1)), 0, None, hog, |_| {});
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// ctrl.accept_or_wait_from(Some(SiteId(2)), 0, None, hog, move |t| {
    ///     tx.send(t.err()).unwrap()
    /// });
    /// // Another source finds the line full: the hog's newest place is its.
    /// let w = ctrl.accept_or_wait_from(Some(SiteId(3)), 0, None, other, |_| {});
    /// assert!(matches!(w, AcceptOrWait::Wait { position: 2, .. }));
    /// assert_eq!(rx.recv()?, Some(LineEnd::Evicted));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn accept_or_wait_from(
        &self,
        site: Option<SiteId>,
        served: u64,
        lane: Option<Lane>,
        source: Source,
        on_turn: impl FnOnce(Result<SlotLease, LineEnd>) + Send + 'static,
    ) -> AcceptOrWait {
        let mut st = self.inner.state.lock();
        let hold = st.table.config().line_hold;
        let lane = lane.map(|l| l.0);
        let (r, ended) =
            match st
                .table
                .accept_or_wait_from(Instant::now(), site, served, lane, source)
            {
                Accepted::Slot(h) => {
                    st.holders.insert(
                        h,
                        Holder {
                            info: None,
                            preempt: None,
                        },
                    );
                    (AcceptOrWait::Slot(self.lease(h)), Vec::new())
                }
                Accepted::Wait {
                    ticket,
                    position,
                    replaced,
                    evicted,
                } => {
                    st.line.insert(ticket, Box::new(on_turn));
                    let ended = [(replaced, LineEnd::Replaced), (evicted, LineEnd::Evicted)]
                        .into_iter()
                        .filter_map(|(t, why)| Some((st.line.remove(&t?)?, why)))
                        .collect();
                    let w = AcceptOrWait::Wait {
                        ticket: LineTicket(ticket),
                        position,
                        hold,
                    };
                    (w, ended)
                }
                Accepted::Refused => (AcceptOrWait::Refused, Vec::new()),
            };
        drop(st);
        self.inner.tick.notify_one();
        for (f, why) in ended {
            f(Err(why));
        }
        r
    }

    /// Leaves the line (the peer closed its connection, or the node
    /// stops): the callback is dropped unused. A turn that raced with this
    /// arrives anyway; dropping that lease gives the slot back.
    pub fn leave_line(&self, ticket: LineTicket) {
        let mut st = self.inner.state.lock();
        st.table.leave_line(ticket.0, Instant::now());
        let f = st.line.remove(&ticket.0);
        drop(st);
        self.inner.tick.notify_one();
        drop(f);
    }

    /// Changes who gives a slot up while peers wait (a node configured
    /// with `NodeConfig::admission` sets it on the controller it uses; every
    /// node sharing the controller shares it).
    pub fn set_admission(&self, admission: Admission) {
        let mut st = self.inner.state.lock();
        st.table.set_admission(admission, Instant::now());
        drop(st);
        self.inner.tick.notify_one();
    }
}
