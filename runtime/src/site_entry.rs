//! The entry of one remote site, shared by the site table, the site's
//! ComObject and every `SiteRef` to it: its outbox, identity, failure,
//! reference counts and fault state. Kept small: thousands of idle sites
//! each cost one (`tests/idle_site_memory.rs`).

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use sitenet_protocols::{FaultState, OutMessage, SiteFailure, SiteId};

use crate::outbox::Outbox;

/// Messages handed back while a site lives, with why each can never be
/// sent to it.
pub(crate) type Refused = Vec<(sitenet_protocols::Refusal, OutMessage)>;

/// A site id set once, stored as four 32-bit words: a `u128` would make
/// every entry 16-aligned and pad it, and two `u64`s pad the cell's
/// 4-byte state to 8 (thousands of entries pay for that).
#[derive(Debug, Default)]
pub(crate) struct IdCell(OnceLock<[u32; 4]>);

impl IdCell {
    pub(crate) fn get(&self) -> Option<SiteId> {
        self.0
            .get()
            .map(|w| SiteId(w.iter().fold(0u128, |id, &x| (id << 32) | u128::from(x))))
    }

    /// Sets the id unless one is set already (then it stays).
    pub(crate) fn set(&self, id: SiteId) -> Result<(), SiteId> {
        let w = |i: u32| (id.0 >> (96 - 32 * i)) as u32;
        self.0.set([w(0), w(1), w(2), w(3)]).map_err(|_| id)
    }
}

/// What runs an entry's site, its type erased: the ComObject actor's
/// address (`Addr<ComObject>`) while it runs, the node's table of parked
/// forms (which holds what its machine keeps, at
/// [`ActorSlot::parked_at`]) while it is parked. Both are a layer above
/// the entry (docs/architecture.md, "The runtime's layers"), and only
/// that layer puts them in and reads them back (`com_object/slot.rs`);
/// which one is held is the slot's [`ActorState`], so reading one back
/// never fails. Shared (`Arc`), so that parking puts the node's table
/// here without allocating.
pub(crate) type Erased = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// Where an entry's ComObject stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActorState {
    /// Never started: the entry costs only itself (its first need starts
    /// the actor).
    Never,
    /// The actor runs; the slot holds its address.
    Running,
    /// Parked: no actor, the slot holds what its machine keeps; the next
    /// message to it (a send's wake, an accepted channel, its deadline)
    /// starts the actor again from it.
    Parked,
    /// The entry was reclaimed: nothing runs it any more.
    Reclaimed,
}

/// The entry's ComObject, as the slot that every message to it goes
/// through: started, unparked, or sent to, under this lock
/// (`com_object/slot.rs`).
#[derive(Debug)]
pub(crate) struct ActorSlot {
    pub(crate) state: ActorState,
    /// The address (running) or the node's table of parked forms
    /// (parked).
    pub(crate) held: Option<Erased>,
    /// Running: the messages sent to the actor through the slot and not
    /// yet handled (it parks only when none waits in its mailbox: a
    /// stopped actor's mailbox is dropped). Parked: where its machine's
    /// parked form is in the node's table (no message waits for a parked
    /// actor: a send starts it first). One word for both, read through
    /// the methods below.
    word: u32,
}

impl ActorSlot {
    const NEVER: ActorSlot = ActorSlot {
        state: ActorState::Never,
        held: None,
        word: 0,
    };

    /// Messages sent to the running actor and not yet handled (0 unless
    /// it runs).
    pub(crate) fn queued(&self) -> u32 {
        if self.state == ActorState::Running {
            self.word
        } else {
            0
        }
    }

    /// One more message sent to the running actor.
    pub(crate) fn queue_one(&mut self) {
        debug_assert_eq!(self.state, ActorState::Running);
        self.word += 1;
    }

    /// The running actor took one of the messages sent to it.
    pub(crate) fn handled_one(&mut self) {
        debug_assert_eq!(self.state, ActorState::Running);
        self.word -= 1;
    }

    /// The actor runs, nothing sent to it yet; `held` is its address.
    pub(crate) fn run(&mut self, held: Erased) {
        self.state = ActorState::Running;
        self.held = Some(held);
        self.word = 0;
    }

    /// The site parked: `forms` is the node's table of parked forms, its
    /// own at `at`.
    pub(crate) fn park(&mut self, forms: Erased, at: u32) {
        debug_assert_eq!(self.queued(), 0);
        self.state = ActorState::Parked;
        self.held = Some(forms);
        self.word = at;
    }

    /// Where a parked site's form is in the node's table.
    pub(crate) fn parked_at(&self) -> u32 {
        debug_assert_eq!(self.state, ActorState::Parked);
        self.word
    }
}

/// A site's fault state, the monitors watching it and why it is
/// temporarily failed, under one lock.
#[derive(Debug)]
pub(crate) struct Fault {
    state: FaultState,
    /// Monitors and the reason of a temporary failure (boxed: most sites
    /// have neither, and every idle site would carry the room).
    more: Option<Box<FaultMore>>,
}

#[derive(Debug, Default)]
struct FaultMore {
    monitors: Vec<futures::channel::mpsc::UnboundedSender<FaultEvent>>,
    /// Why the site is temporarily failed, while it is (for a request
    /// that times out meanwhile: `RequestError::Unreachable`).
    unreachable: Option<String>,
}

impl Fault {
    /// Drops the box once it holds nothing.
    fn tidy(&mut self) {
        if self
            .more
            .as_ref()
            .is_some_and(|m| m.monitors.is_empty() && m.unreachable.is_none())
        {
            self.more = None;
        }
    }
}

/// One remote site as the node's site table knows it. Shared by the site's
/// ComObject and every `SiteRef`.
#[derive(Debug)]
pub(crate) struct SiteEntry {
    /// Small integer id inside this node (Paradis-Net's peer names).
    pub(crate) key: usize,
    pub(crate) outbox: Outbox,
    /// Its ComObject: never started, running, parked or gone (see
    /// [`ActorSlot`]).
    pub(crate) actor: Mutex<ActorSlot>,
    /// The address the user asked for (`Node::site`), in its canonical
    /// text: one copy shared with the site table's key and the ComObject's
    /// address book. Sites that only connected to us, or known by a
    /// descriptor, have none.
    pub(crate) address: Option<Arc<str>>,
    pub(crate) id: IdCell,
    /// What few sites need, allocated when first needed (see [`Rare`]):
    /// every idle site would carry the room.
    rare: OnceLock<Box<Rare>>,
    /// True once the failure is on record: checked on every send without a
    /// lock.
    pub(crate) has_failed: std::sync::atomic::AtomicBool,
    /// Largest message the peer accepts (0 until a handshake told it).
    pub(crate) peer_max: std::sync::atomic::AtomicU64,
    /// Live `SiteRef`s (a weak close is considered only when none is left,
    /// and the entry is reclaimed only then). Changed only with `SeqCst`
    /// when it may reach 0 (see `poke_on_unref`).
    pub(crate) refs: std::sync::atomic::AtomicU32,
    /// Accepted channels routed to this entry and not yet taken by its
    /// ComObject (incremented under the site table's lock): the entry is
    /// not reclaimed while one is on its way.
    pub(crate) adopting: std::sync::atomic::AtomicU32,
    /// Set by the ComObject while only references keep the site (no
    /// channel, nothing pending): the last `SiteRef` to go then wakes it, so
    /// the reclaim rule starts at once instead of at the next timer.
    pub(crate) poke_on_unref: std::sync::atomic::AtomicBool,
    /// Requests sent to this site whose replies are awaited (the slot
    /// policy avoids preempting a channel that replies will come back on).
    pub(crate) pending_requests: std::sync::atomic::AtomicU32,
    /// A channel works for this site (for `Node::stats`).
    pub(crate) connected: std::sync::atomic::AtomicBool,
    /// A channel has worked for this site once (a monitor's first event
    /// says when it has not).
    pub(crate) contacted: std::sync::atomic::AtomicBool,
    /// The entry was reclaimed (its actor stopped for good): a send
    /// through a handle that kept it fails instead of waiting for ever.
    pub(crate) reclaimed: std::sync::atomic::AtomicBool,
    /// The pool thread its ComObject runs on, if chosen when the entry was
    /// made (the thread of the peer's end of an in-process channel);
    /// [`NO_HOME`]: the key decides (`Runtime::arbiter_for`). Set before
    /// the actor first starts, never changed after.
    pub(crate) home: std::sync::atomic::AtomicU16,
    /// The counters its ComObject last published (for `Node::stats`);
    /// allocated at the first publication, so a site never used costs a
    /// pointer.
    /// (None while parked: the parked machine answers.)
    pub(crate) stats: Mutex<Option<Box<crate::stats::SiteStats>>>,
    /// Current fault state, the monitors watching it, and why.
    pub(crate) fault: Mutex<Fault>,
}

/// What few entries need: kept out of line, made on first need.
#[derive(Debug, Default)]
pub(crate) struct Rare {
    /// Set when this entry turned out to be another entry's site
    /// (contacted under an address the peer did not list): sends follow
    /// it.
    pub(crate) redirect: OnceLock<Arc<SiteEntry>>,
    /// What the site handed back: its permanent failure, and messages it
    /// refused while it lives.
    pub(crate) handed: Mutex<Option<Box<Handed>>>,
}

/// [`SiteEntry::home`] when the site's key decides its thread.
pub(crate) const NO_HOME: u16 = u16::MAX;

/// The reason of a monitor's first event on a site no channel has
/// reached yet: `Ok` only means nothing failed so far.
pub const NOT_CONTACTED: &str = "not contacted yet";

/// One transition of a site's fault state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The new state.
    pub state: FaultState,
    /// Why: for the initial report, empty, or [`NOT_CONTACTED`] on a site
    /// no channel has reached yet.
    pub reason: String,
}

/// What a site handed back, as its entry keeps it.
#[derive(Debug, Default)]
pub(crate) struct Handed {
    /// Set when the site failed permanently: why, and what it handed back.
    pub(crate) failed: Option<(SiteFailure, Returned)>,
    /// Messages handed back while the site lives: they can never be sent
    /// to it (larger than the peer's maximum, learned after they were
    /// queued).
    pub(crate) refused: Refused,
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
    /// This node itself (see `Node::local_site`).
    pub(crate) fn is_local(&self) -> bool {
        self.key == LOCAL_KEY
    }

    /// Where its ComObject stands (see [`ActorSlot`]).
    pub(crate) fn actor_state(&self) -> ActorState {
        self.actor.lock().state
    }

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
            has_failed: std::sync::atomic::AtomicBool::new(false),
            peer_max: std::sync::atomic::AtomicU64::new(0),
            refs: std::sync::atomic::AtomicU32::new(0),
            adopting: std::sync::atomic::AtomicU32::new(0),
            poke_on_unref: std::sync::atomic::AtomicBool::new(false),
            pending_requests: std::sync::atomic::AtomicU32::new(0),
            connected: std::sync::atomic::AtomicBool::new(false),
            contacted: std::sync::atomic::AtomicBool::new(false),
            reclaimed: std::sync::atomic::AtomicBool::new(false),
            home: std::sync::atomic::AtomicU16::new(NO_HOME),
            stats: Mutex::new(None),
            fault: Mutex::new(Fault {
                state: FaultState::Ok,
                more: None,
            }),
        }
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
        if !self.has_failed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let handed = self.handed_if_any()?.lock();
        handed.as_deref()?.failed.as_ref().map(|(r, _)| r.clone())
    }

    /// Moves to `state`, telling every monitor. Returns false if unchanged.
    pub(crate) fn set_fault(&self, state: FaultState, reason: &str) -> bool {
        let mut f = self.fault.lock();
        if f.state == state || f.state == FaultState::PermFailed {
            return false;
        }
        f.state = state;
        let unreachable = (state == FaultState::TempFailed).then(|| reason.to_string());
        if unreachable.is_some() || f.more.is_some() {
            let more = f.more.get_or_insert_with(Box::default);
            more.unreachable = unreachable;
            let ev = FaultEvent {
                state,
                reason: reason.to_string(),
            };
            more.monitors
                .retain(|tx| tx.unbounded_send(ev.clone()).is_ok());
        }
        f.tidy();
        true
    }

    /// Why the site is unreachable, if it is temporarily failed now.
    pub(crate) fn unreachable_cause(&self) -> Option<String> {
        let f = self.fault.lock();
        if self.state_given(f.state) != FaultState::TempFailed {
            return None;
        }
        f.more.as_ref()?.unreachable.clone()
    }

    /// The state monitors were last told — except that a site whose
    /// failure is on record (`SiteRef::failure`) is PermFailed already:
    /// the handed-back messages are published before monitors hear of the
    /// failure, and whoever sees them must not read an older state.
    pub(crate) fn fault_state(&self) -> FaultState {
        self.state_given(self.fault.lock().state)
    }

    /// A monitor of this site's fault state: its first event is the state
    /// now (with the reason "not contacted yet" if no channel to the site
    /// has worked), and no transition after it is missed (both under the
    /// lock the transitions take).
    pub(crate) fn monitor(&self) -> futures::channel::mpsc::UnboundedReceiver<FaultEvent> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut f = self.fault.lock();
        let state = self.state_given(f.state);
        let contacted = self.contacted.load(std::sync::atomic::Ordering::Acquire);
        let reason = if state == FaultState::Ok && !contacted && !self.is_local() {
            NOT_CONTACTED.to_string()
        } else {
            String::new()
        };
        let _ = tx.unbounded_send(FaultEvent { state, reason });
        let more = f.more.get_or_insert_with(Box::default);
        // Monitors whose streams were dropped go as a new one comes.
        more.monitors.retain(|m| !m.is_closed());
        more.monitors.push(tx);
        rx
    }

    /// The state, given the one monitors were last told.
    fn state_given(&self, told: FaultState) -> FaultState {
        if self.has_failed.load(std::sync::atomic::Ordering::Acquire) {
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
        }));
        e.has_failed
            .store(true, std::sync::atomic::Ordering::Release);
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
