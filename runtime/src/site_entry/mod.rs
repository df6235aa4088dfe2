//! The entry of one remote site, shared by the site table, the site's
//! ComObject and every `SiteRef` to it: its outbox, identity, failure,
//! reference counts and fault state. Kept small: thousands of idle sites
//! each cost one (`tests/idle_site_memory.rs`).
//!
//! [`SiteEntry`] and its methods are here, with the small types it is
//! made of; the parts with methods of their own have a file each:
//! - `actor_slot.rs`: [`ActorSlot`] and [`ActorState`], its ComObject as
//!   the slot every message to it goes through;
//! - `fault.rs`: [`Fault`], the fault state and its monitors, and
//!   [`FaultEvent`], what a monitor hears;
//! - `liveness.rs`: [`Liveness`], how the site stands (failed, connected,
//!   contacted, reclaimed), flags read without a lock;
//! - `holds.rs`: [`Holds`], what keeps the entry (references, channels
//!   on their way, requests awaiting replies).

mod actor_slot;
mod fault;
mod holds;
mod liveness;

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use sitenet_protocols::{FaultState, OutMessage, SiteFailure, SiteId};

use crate::outbox::Outbox;
pub(crate) use actor_slot::{ActorSlot, ActorState};
use fault::Fault;
pub use fault::{FaultEvent, NOT_CONTACTED};
pub(crate) use holds::Holds;
pub(crate) use liveness::Liveness;

/// Messages handed back while a site lives, with why each can never be
/// sent to it.
pub(crate) type Refused = Vec<(sitenet_protocols::Refusal, OutMessage)>;

/// A site id set once, stored as four 32-bit words: a `u128` would make
/// every entry 16-aligned and pad it, and two `u64`s pad the cell's
/// 4-byte state to 8 (thousands of entries pay for that).
#[derive(Debug, Default)]
struct IdCell(OnceLock<[u32; 4]>);

impl IdCell {
    fn get(&self) -> Option<SiteId> {
        self.0
            .get()
            .map(|w| SiteId(w.iter().fold(0u128, |id, &x| (id << 32) | u128::from(x))))
    }

    /// Sets the id unless one is set already (then it stays).
    fn set(&self, id: SiteId) -> Result<(), SiteId> {
        let w = |i: u32| (id.0 >> (96 - 32 * i)) as u32;
        self.0.set([w(0), w(1), w(2), w(3)]).map_err(|_| id)
    }
}

/// One remote site as the node's site table knows it. Shared by the site's
/// ComObject and every `SiteRef`.
#[derive(Debug)]
pub(crate) struct SiteEntry {
    /// Small integer id inside this node (Paradis-Net's peer names).
    key: usize,
    outbox: Outbox,
    /// Its ComObject: never started, running, parked or gone (see
    /// [`ActorSlot`]).
    actor: Mutex<ActorSlot>,
    /// The address the user asked for (`Node::site`), in its canonical
    /// text: one copy shared with the site table's key and the ComObject's
    /// address book. Sites that only connected to us, or known by a
    /// descriptor, have none.
    address: Option<Arc<str>>,
    id: IdCell,
    /// What few sites need, allocated when first needed (see [`Rare`]):
    /// every idle site would carry the room.
    rare: OnceLock<Box<Rare>>,
    /// How the site stands: failed, connected, contacted, reclaimed.
    liveness: Liveness,
    /// What keeps the entry: references, adoptions, awaited replies.
    holds: Holds,
    /// Largest message the peer accepts (0 until a handshake told it).
    peer_max: AtomicU64,
    /// The pool thread its ComObject runs on, if chosen when the entry was
    /// made (the thread of the peer's end of an in-process channel);
    /// [`NO_HOME`]: the key decides (`Runtime::arbiter_for`). Set before
    /// the actor first starts, never changed after.
    home: AtomicU16,
    /// The counters its ComObject last published (for `Node::stats`);
    /// allocated at the first publication, so a site never used costs a
    /// pointer.
    /// (None while parked: the parked machine answers.)
    stats: Mutex<Option<Box<crate::stats::SiteStats>>>,
    /// Current fault state, the monitors watching it, and why.
    fault: Mutex<Fault>,
}

/// What few entries need: kept out of line, made on first need.
#[derive(Debug, Default)]
struct Rare {
    /// Set when this entry turned out to be another entry's site
    /// (contacted under an address the peer did not list): sends follow
    /// it.
    redirect: OnceLock<Arc<SiteEntry>>,
    /// What the site handed back: its permanent failure, and messages it
    /// refused while it lives.
    handed: Mutex<Option<Box<Handed>>>,
}

/// [`SiteEntry::home`] when the site's key decides its thread.
pub(crate) const NO_HOME: u16 = u16::MAX;

/// What a site handed back, as its entry keeps it.
#[derive(Debug, Default)]
pub(crate) struct Handed {
    /// Set when the site failed permanently: why, and what it handed back.
    pub(crate) failed: Option<(SiteFailure, Returned)>,
    /// Messages handed back while the site lives: they can never be sent
    /// to it (larger than the peer's maximum, learned after they were
    /// queued), or the peer forgot the session before acknowledging them.
    pub(crate) refused: Refused,
    /// `NodeEvent::HandedBack` was told since the last take: later
    /// hand-backs are not told again until someone takes.
    pub(crate) told: bool,
}

/// What a permanently failed site handed back, as the entry keeps it
/// (`SiteRef::failure` gives it to the user as a `HandedBack`, a layer
/// above, whose messages decode).
#[derive(Debug, Clone, Default)]
pub(crate) struct Returned {
    /// Never completely sent, so never delivered.
    pub(crate) not_sent: Vec<OutMessage>,
    /// Completely sent, never acknowledged.
    pub(crate) maybe_delivered: Vec<OutMessage>,
}

/// The key of the local entry: it is not in the site table's slab (the
/// table's lookups and reclaims never find it). Here, not in `local.rs`:
/// the entry needs it, and `local.rs` is a layer above (it drives the
/// node's handlers).
pub(crate) const LOCAL_KEY: usize = usize::MAX;

impl SiteEntry {
    pub(crate) fn new(
        key: usize,
        address: Option<Arc<str>>,
        bound: crate::outbox::OutputBound,
    ) -> Self {
        Self {
            key,
            outbox: Outbox::new(bound),
            actor: Mutex::new(ActorSlot::NEVER),
            address,
            id: IdCell::default(),
            rare: OnceLock::new(),
            liveness: Liveness::default(),
            holds: Holds::default(),
            peer_max: AtomicU64::new(0),
            home: AtomicU16::new(NO_HOME),
            stats: Mutex::new(None),
            fault: Mutex::new(Fault::ok()),
        }
    }

    /// Small integer id inside this node (Paradis-Net's peer names).
    pub(crate) fn key(&self) -> usize {
        self.key
    }

    /// This node itself (see `Node::local_site`).
    pub(crate) fn is_local(&self) -> bool {
        self.key == LOCAL_KEY
    }

    /// The address the user asked for (`Node::site`), in its canonical
    /// text; `None` for a site that only connected to us, or known by a
    /// descriptor.
    pub(crate) fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The same address, as the one copy the site table and the address
    /// book share.
    pub(crate) fn shared_address(&self) -> Option<&Arc<str>> {
        self.address.as_ref()
    }

    /// The site's id, once known (a handshake, a descriptor, a claim).
    pub(crate) fn id(&self) -> Option<SiteId> {
        self.id.get()
    }

    /// Sets the site's id unless one is set already (then it stays, and
    /// `id` comes back).
    pub(crate) fn set_id(&self, id: SiteId) -> Result<(), SiteId> {
        self.id.set(id)
    }

    /// The messages queued to the site, bounded.
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Its ComObject's slot, every message to it goes through under this
    /// lock (see [`ActorSlot`]).
    pub(crate) fn actor(&self) -> &Mutex<ActorSlot> {
        &self.actor
    }

    /// Where its ComObject stands (see [`ActorSlot`]).
    pub(crate) fn actor_state(&self) -> ActorState {
        self.actor.lock().state
    }

    /// How the site stands: failed, connected, contacted, reclaimed.
    pub(crate) fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// What keeps the entry: references, adoptions, awaited replies.
    pub(crate) fn holds(&self) -> &Holds {
        &self.holds
    }

    /// Largest message the peer accepts (0 until a handshake told it).
    pub(crate) fn peer_max(&self) -> u64 {
        self.peer_max.load(Ordering::Acquire)
    }

    /// A handshake told the largest message the peer accepts.
    pub(crate) fn set_peer_max(&self, max: u64) {
        self.peer_max.store(max, Ordering::Release);
    }

    /// The pool thread its ComObject runs on, or [`NO_HOME`] (the key
    /// decides).
    pub(crate) fn home(&self) -> u16 {
        self.home.load(Ordering::Relaxed)
    }

    /// Chooses the pool thread its ComObject runs on (before it first
    /// starts).
    pub(crate) fn set_home(&self, thread: u16) {
        self.home.store(thread, Ordering::Relaxed);
    }

    /// The counters its ComObject last published (for `Node::stats`).
    pub(crate) fn stats(&self) -> &Mutex<Option<Box<crate::stats::SiteStats>>> {
        &self.stats
    }

    /// Its id and the addresses its handshake taught (published when its
    /// channel came up); `None` before its id is known.
    pub(crate) fn learned_descriptor(&self) -> Option<sitenet_protocols::SiteDescriptor> {
        let id = self.id()?;
        let addresses = self
            .stats
            .lock()
            .as_ref()
            .map(|s| s.addresses.clone())
            .unwrap_or_default();
        Some(sitenet_protocols::SiteDescriptor { id, addresses })
    }

    pub(crate) fn resolved(self: &Arc<Self>) -> &Arc<Self> {
        let mut e = self;
        while let Some(next) = e.rare.get().and_then(|r| r.redirect.get()) {
            e = next;
        }
        e
    }

    /// Sends to this entry follow `other` from now on (unless they follow
    /// another already).
    pub(crate) fn redirect_to(&self, other: Arc<SiteEntry>) {
        let _ = self.rare().redirect.set(other);
    }

    /// What the site handed back, made on first need (to record
    /// something).
    pub(crate) fn handed(&self) -> &Mutex<Option<Box<Handed>>> {
        &self.rare().handed
    }

    /// What the site handed back, if anything ever was (to read it).
    pub(crate) fn handed_if_any(&self) -> Option<&Mutex<Option<Box<Handed>>>> {
        self.rare.get().map(|r| &r.handed)
    }

    fn rare(&self) -> &Rare {
        self.rare.get_or_init(Box::default)
    }

    /// True if `self` and `other` are one site: the same entry once
    /// merges are followed (what `SiteRef`s and cooperations compare).
    pub(crate) fn same_site(self: &Arc<Self>, other: &Arc<Self>) -> bool {
        Arc::ptr_eq(self.resolved(), other.resolved())
    }

    pub(crate) fn failure(&self) -> Option<SiteFailure> {
        if !self.liveness.failed() {
            return None;
        }
        let handed = self.handed_if_any()?.lock();
        handed.as_deref()?.failed.as_ref().map(|(r, _)| r.clone())
    }

    /// Moves to `state`, telling every monitor. Returns false if unchanged.
    pub(crate) fn set_fault(&self, state: FaultState, reason: &str) -> bool {
        self.fault.lock().set(state, reason)
    }

    /// Why the site is unreachable, if it is temporarily failed now.
    pub(crate) fn unreachable_cause(&self) -> Option<String> {
        let f = self.fault.lock();
        if self.state_given(f.told()) != FaultState::TempFailed {
            return None;
        }
        f.unreachable()
    }

    /// The state monitors were last told — except that a site whose
    /// failure is on record (`SiteRef::failure`) is PermFailed already:
    /// the handed-back messages are published before monitors hear of the
    /// failure, and whoever sees them must not read an older state.
    pub(crate) fn fault_state(&self) -> FaultState {
        self.state_given(self.fault.lock().told())
    }

    /// A monitor of this site's fault state: its first event is the state
    /// now (with the reason "not contacted yet" if no channel to the site
    /// has worked), and no transition after it is missed (both under the
    /// lock the transitions take).
    pub(crate) fn monitor(&self) -> futures::channel::mpsc::UnboundedReceiver<FaultEvent> {
        let mut f = self.fault.lock();
        let state = self.state_given(f.told());
        let contacted = self.liveness.contacted();
        let reason = if state == FaultState::Ok && !contacted && !self.is_local() {
            NOT_CONTACTED.to_string()
        } else {
            String::new()
        };
        f.watch(FaultEvent { state, reason })
    }

    /// The state, given the one monitors were last told.
    fn state_given(&self, told: FaultState) -> FaultState {
        if self.liveness.failed() {
            FaultState::PermFailed
        } else {
            told
        }
    }
}

/// A site's log lines are keyed by its entry's address in memory (see
/// `peer_logs`): a user-space pointer never has the top bit set.
impl crate::peer_logs::LogKey for Arc<SiteEntry> {
    fn log_key(&self) -> u64 {
        Arc::as_ptr(self) as usize as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found writing the `Node::kill` doc example (which failed 2 runs in
    /// 3): a ComObject publishes the handed-back messages and wakes
    /// waiters before monitors hear of the failure (so a monitor always
    /// finds them), and a waiter woken by the failure read `fault_state()`
    /// Ok. A site whose failure is on record reads PermFailed.
    #[test]
    fn a_site_whose_failure_is_on_record_reads_perm_failed() {
        let e = SiteEntry::new(0, None, crate::outbox::OutputBound::alone(1 << 20));
        assert_eq!(e.fault_state(), FaultState::Ok);
        *e.handed().lock() = Some(Box::new(Handed {
            failed: Some((SiteFailure::Killed, Returned::default())),
            refused: Vec::new(),
            told: false,
        }));
        e.liveness().set_failed();
        assert_eq!(e.fault_state(), FaultState::PermFailed);
    }

    /// Every site the node knows costs an entry, used or not: 328 bytes
    /// keep it in a 352-byte block of the allocator with its `Arc`
    /// (anything rare goes in [`Rare`], or boxed on first need).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn an_entry_fits_in_328_bytes() {
        assert!(
            std::mem::size_of::<SiteEntry>() <= 328,
            "{} bytes",
            std::mem::size_of::<SiteEntry>()
        );
        assert!(std::mem::size_of::<Mutex<ActorSlot>>() <= 32);
    }

    /// The id reads back as set, and a second set leaves it.
    #[test]
    fn an_id_is_set_once_and_reads_back_whole() {
        let c = IdCell::default();
        assert_eq!(c.get(), None);
        let id = SiteId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(c.set(id), Ok(()));
        assert_eq!(c.set(SiteId(1)), Err(SiteId(1)));
        assert_eq!(c.get(), Some(id));
    }
}
