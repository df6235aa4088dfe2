//! The entry's slot (`SiteEntry::actor`) and everything that goes through
//! it: starting a site's ComObject on first need, sending it a message,
//! parking it when its machine may park, and starting it again from what
//! it kept.
//!
//! **Parking.** A ComObject whose machine may park
//! (`sitenet_protocols::ComObject::parkable`: no channel, nothing pending,
//! no deadline due) and whose actor holds nothing the machine does not
//! know of (no open attempt, no slot, no open stream, not a merged
//! forwarder, nothing in its mailbox or outbox) leaves its machine's
//! [`Parked`] form in the slot and stops: an idle site costs its entry
//! and a few hundred bytes instead of an actor, its task and its session.
//! Its deadline, if it has one, goes into the node's one table of parked
//! deadlines (`node/parked.rs`), whose task unparks it then.
//!
//! **Nothing is lost.** Every message to an actor is sent through the
//! slot, under its lock, and counted there until the actor handles it
//! ([`Counted`]); the actor parks under the same lock, only with none
//! counted and its outbox empty, so a message is either handled by the
//! actor that parks or finds the slot parked and starts the next actor
//! from it. A sender's wake races with nothing: it pushes before it wakes,
//! so an actor that parks after the push saw the message (and does not
//! park), and one that parked before it is started again by the wake.
//! Messages sent to an actor's own address instead (the slot controller's
//! grant and preemption calls) may be dropped with an actor that parks:
//! a grant then gives its slot back as its lease drops, and a parked site
//! has no channel to preempt.
//!
//! **Where parked forms live.** Not in an allocation of their own: in
//! one table per node ([`ParkedForms`]), the slot holding the table and
//! the form's place in it. A parked form is made on the thread the actor
//! ran on, just before the actor's task (about 1.3 KB) is freed there;
//! as a small block of its own it was carved out of the memory other
//! sites' tasks had just freed, and one such block every task's width
//! kept every page of that thread's heap resident (1.3 KB of resident
//! memory per idle site against 150 bytes held). In one table, the
//! tasks' memory is free whole again once the sites park.
//!
//! **Lock order**: the site table's lock, then a slot's, then the node's
//! table of parked deadlines or its table of parked forms. A never-started entry's book may wait in the
//! site table, so it is started under the table's lock
//! (`NodeInner::start_unstarted`).

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;

use sitenet_protocols::{AddressBook, Parked};

use super::report::Reported;
use super::{ComHost, ComObject, NodeShared};
use crate::metrics::Counters;
use crate::site_entry::{ActorSlot, ActorState, SiteEntry};
use crate::stats::SiteStats;

/// A message sent through the entry's slot, counted there until the
/// actor handles it (see the module documentation).
pub(crate) struct Counted<M>(pub(crate) M);

impl<M: Message<Result = ()>> Message for Counted<M> {
    type Result = ();
}

/// The messages sent through the slot: each is handled as itself, once
/// the slot counts it out.
macro_rules! counted {
    ($($(#[$attr:meta])* $m:ty),* $(,)?) => {$(
        $(#[$attr])*
        impl Handler<Counted<$m>> for ComObject {
            type Result = ();

            fn handle(&mut self, Counted(m): Counted<$m>, ctx: &mut Context<Self>) {
                self.entry.actor().lock().handled_one();
                <Self as Handler<$m>>::handle(self, m, ctx);
            }
        }
    )*};
}

counted!(
    super::Wake,
    super::Poke,
    super::Adopt,
    super::Learn,
    super::Kill,
    super::PeerInLine,
    #[cfg(feature = "test-hooks")]
    super::HoldBusy,
);

/// What a parked ComObject keeps: its machine's parked form and the
/// actor's own counters (for `Node::stats`).
pub(crate) struct ParkedActor {
    com: Parked,
    channels_opened: u32,
    preempted: u32,
}

/// The parked forms of a node's sites, in one table (see the module
/// documentation): a parked site's slot holds the table and its form's
/// place in it. Taken only under the slot's lock, and last.
#[derive(Default)]
pub(crate) struct ParkedForms(parking_lot::Mutex<slab::Slab<ParkedActor>>);

impl ParkedForms {
    /// Keeps `p`; returns its place.
    fn insert(&self, p: ParkedActor) -> u32 {
        let key = self.0.lock().insert(p);
        u32::try_from(key).expect("fewer than 4 billion parked sites in one node")
    }

    /// Takes back the form at `key`. The table gives its memory back once
    /// no site is parked.
    fn remove(&self, key: u32) -> ParkedActor {
        let mut t = self.0.lock();
        let p = t.remove(key as usize);
        if t.is_empty() {
            t.shrink_to_fit();
        }
        p
    }
}

impl ComObject {
    /// The running actor's address in a slot.
    fn addr_in(slot: &ActorSlot) -> &Addr<ComObject> {
        debug_assert_eq!(slot.state, ActorState::Running);
        slot.held
            .as_ref()
            .and_then(|h| h.downcast_ref())
            .expect("a running slot holds its actor's address")
    }

    /// The node's table of parked forms, in a parked slot.
    fn forms_in(slot: &ActorSlot) -> Arc<ParkedForms> {
        debug_assert_eq!(slot.state, ActorState::Parked);
        slot.held
            .clone()
            .and_then(|h| h.downcast().ok())
            .expect("a parked slot holds the node's table of parked forms")
    }

    /// Sends `msg` to `entry`'s ComObject: started if it never was,
    /// unparked if it is parked. Returns false (and drops `msg`) once the
    /// node has shut down and no actor runs, or once the entry was
    /// reclaimed.
    ///
    /// Never called with the site table's lock held for an entry that may
    /// never have started (starting one takes that lock first).
    pub(crate) fn send<M, H: ComHost>(node: &Arc<H>, entry: &Arc<SiteEntry>, msg: M) -> bool
    where
        M: Message<Result = ()> + Send + 'static,
        ComObject: Handler<Counted<M>>,
    {
        loop {
            let mut slot = entry.actor().lock();
            match slot.state {
                ActorState::Running => {}
                ActorState::Reclaimed => return false,
                _ if node.signals().is_shut_down() => return false,
                ActorState::Parked => Self::unpark_in(node, entry, &mut slot),
                ActorState::Never => {
                    drop(slot);
                    node.clone().start_unstarted(entry);
                    continue;
                }
            }
            slot.queue_one();
            Self::addr_in(&slot).do_send(Counted(msg));
            return true;
        }
    }

    /// Sends `msg` to `entry`'s ComObject as [`send`](Self::send) does,
    /// but only if it ever started: an entry that never did is not
    /// started for it (its machine, made later, starts from what the
    /// entry holds then). False if nothing was sent.
    pub(crate) fn send_if_started<M, H: ComHost>(
        node: &Arc<H>,
        entry: &Arc<SiteEntry>,
        msg: M,
    ) -> bool
    where
        M: Message<Result = ()> + Send + 'static,
        ComObject: Handler<Counted<M>>,
    {
        if entry.actor().lock().state == ActorState::Never {
            return false;
        }
        Self::send(node, entry, msg)
    }

    /// Runs `f` with the actor's address if it runs (test hooks, the
    /// node's stop). Nothing is counted: what `f` sends may be lost if
    /// the actor parks meanwhile.
    pub(crate) fn if_running<R>(
        entry: &SiteEntry,
        f: impl FnOnce(&Addr<ComObject>) -> R,
    ) -> Option<R> {
        let slot = entry.actor().lock();
        (slot.state == ActorState::Running).then(|| f(Self::addr_in(&slot)))
    }

    /// The arbiter the site's ComObject runs on, for the whole life of the
    /// entry: the one chosen when it was made ([`SiteEntry::home`]), else
    /// the one its key gives.
    fn thread_of<'a>(node: &'a NodeShared, entry: &SiteEntry) -> &'a actix_rt::ArbiterHandle {
        node.rt().arbiter_at(Self::worker_of(node, entry))
    }

    /// The index in the pool of [`thread_of`](Self::thread_of)'s thread.
    pub(crate) fn worker_of(node: &NodeShared, entry: &SiteEntry) -> usize {
        match entry.home() {
            crate::site_entry::NO_HOME => node.rt().index_for(entry.key()),
            h => usize::from(h),
        }
    }

    /// Starts the ComObject of an entry that never had one, with `book`,
    /// in `slot` (its lock held, and the site table's: see the module
    /// documentation).
    pub(crate) fn start_in<H: ComHost>(
        node: &Arc<H>,
        entry: &Arc<SiteEntry>,
        slot: &mut ActorSlot,
        book: AddressBook,
    ) {
        debug_assert_eq!(slot.state, ActorState::Never);
        let (n, e): (Arc<dyn ComHost>, _) = (node.clone(), entry.clone());
        let addr = ComObject::start_in_arbiter(Self::thread_of(node, entry), move |_| {
            ComObject::new(n, e, book)
        });
        slot.run(Arc::new(addr));
    }

    /// Starts the actor of a parked entry again from what it kept, its
    /// lock held.
    fn unpark_in<H: ComHost>(node: &Arc<H>, entry: &Arc<SiteEntry>, slot: &mut ActorSlot) {
        let parked = Self::forms_in(slot).remove(slot.parked_at());
        if let Some(at) = parked.com.deadline() {
            node.unpark_deadline(entry.key(), at);
        }
        // `Node::stats` reads the published counters again from now on.
        let mut st = SiteStats::default();
        fill_stats(&mut st, entry, &parked);
        *entry.stats().lock() = Some(Box::new(st));
        let (n, e): (Arc<dyn ComHost>, _) = (node.clone(), entry.clone());
        let addr = ComObject::start_in_arbiter(Self::thread_of(node, entry), move |_| {
            ComObject::resume(n, e, parked)
        });
        slot.run(Arc::new(addr));
        Counters::add(&node.counters().unparks, 1);
        node.signals().changed();
    }

    /// The actor of a site that parked: its machine from what it kept,
    /// its counters where they were.
    fn resume(node: Arc<dyn ComHost>, entry: Arc<SiteEntry>, p: ParkedActor) -> Self {
        let com = sitenet_protocols::ComObject::unpark(
            p.com,
            node.com_cfg().clone(),
            node.budget().clone(),
        );
        let mut me = Self::with_machine(node, entry, com);
        me.channels_opened = p.channels_opened;
        me.preempted = p.preempted;
        // What the node's metrics already count.
        let reported = Reported::of(&me.com);
        if reported != Reported::default() {
            me.reported = Some(Box::new(reported));
        }
        me
    }

    /// Parks this site if it may (see the module documentation), and
    /// stops the actor. Called at the end of every turn.
    pub(super) fn park_if_idle(&mut self, ctx: &mut Context<Self>, now: Instant) {
        if self.live.is_some()
            || self.opening.is_some()
            || !matches!(self.slot, super::Slot::None)
            || self.merged.is_some()
            || self.ack_deferred
            || self.write_deferred
            || !self.inbox.is_idle()
            || self.node.signals().is_shut_down()
            || !self.com.parkable(now)
        {
            return;
        }
        let deadline = {
            let mut slot = self.entry.actor().lock();
            if slot.state != ActorState::Running
                || slot.queued() > 0
                || !self.entry.outbox().is_empty()
            {
                return;
            }
            let Some(com) = self.com.park(now) else {
                return;
            };
            let deadline = com.deadline();
            let forms = self.node.parked_forms();
            let at = forms.insert(ParkedActor {
                com,
                channels_opened: self.channels_opened,
                preempted: self.preempted,
            });
            slot.park(forms.clone(), at);
            // The parked form answers `Node::stats` now.
            *self.entry.stats().lock() = None;
            if let Some(at) = deadline {
                self.node.park_deadline(self.entry.key(), at);
            }
            deadline
        };
        tracing::trace!(site = ?self.entry.id(), ?deadline, "site parked");
        Counters::add(&self.node.counters().parks, 1);
        // A wave of parks gives the actors' memory back to the system.
        self.entry.outbox().site_parked();
        self.node.signals().changed();
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        ctx.stop();
    }

    /// The site's counters for `Node::stats`: published by its actor, or
    /// made from what it keeps while parked. `None` for a site never used.
    pub(crate) fn site_stats(entry: &SiteEntry) -> Option<SiteStats> {
        let slot = entry.actor().lock();
        let mut st = if slot.state == ActorState::Parked {
            let forms = Self::forms_in(&slot);
            let t = forms.0.lock();
            let mut st = SiteStats::default();
            fill_stats(&mut st, entry, t.get(slot.parked_at() as usize)?);
            st
        } else {
            entry.stats().lock().as_deref().cloned()?
        };
        st.pending_bytes_by_class = entry.outbox().held_by_class();
        Some(st)
    }
}

/// A parked site's counters, as its actor would publish them.
fn fill_stats(st: &mut SiteStats, entry: &SiteEntry, p: &ParkedActor) {
    let s = p.com.session_stats();
    super::report::fill_identity(st, entry, p.com.addresses());
    st.channel = None;
    st.capabilities = None;
    st.capabilities_bits = None;
    st.connected = false;
    super::report::fill_counters(st, &s, p.channels_opened, p.preempted);
    st.queue_depth = 0;
}
