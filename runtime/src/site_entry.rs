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

/// A site id set once, stored as two words: a `u128` would make every
/// entry 16-aligned and pad it (thousands of entries pay for that).
#[derive(Debug, Default)]
pub(crate) struct IdCell(OnceLock<[u64; 2]>);

impl IdCell {
    pub(crate) fn get(&self) -> Option<SiteId> {
        self.0
            .get()
            .map(|w| SiteId((u128::from(w[0]) << 64) | u128::from(w[1])))
    }

    /// Sets the id unless one is set already (then it stays).
    pub(crate) fn set(&self, id: SiteId) -> Result<(), SiteId> {
        self.0
            .set([(id.0 >> 64) as u64, id.0 as u64])
            .map_err(|_| id)
    }
}

/// The address of an entry's actor, its type erased: the actor
/// (`Addr<ComObject>`) is a layer above the entry (docs/architecture.md,
/// "The runtime's layers"), and only that layer puts it in and reads it
/// back (`ComObject::of`, `ComObject::of_or_start`). One type is ever
/// stored, so reading it back never fails.
pub(crate) type ActorAddr = Box<dyn std::any::Any + Send + Sync>;

/// One remote site as the node's site table knows it. Shared by the site's
/// ComObject and every `SiteRef`.
#[derive(Debug)]
pub(crate) struct SiteEntry {
    /// Small integer id inside this node (Paradis-Net's peer names).
    pub(crate) key: usize,
    pub(crate) outbox: Outbox,
    /// Its ComObject's address, set when the actor starts (see
    /// [`ActorAddr`]).
    pub(crate) addr: OnceLock<ActorAddr>,
    /// The address the user asked for (`Node::site`), in its canonical
    /// text: one copy shared with the site table's key and the ComObject's
    /// address book. Sites that only connected to us, or known by a
    /// descriptor, have none.
    pub(crate) address: Option<Arc<str>>,
    pub(crate) id: IdCell,
    /// Set when the site failed permanently (boxed: rare, and every idle
    /// site would carry its room).
    pub(crate) failed: Mutex<Option<Box<(SiteFailure, Returned)>>>,
    /// Messages handed back while the site lives: they can never be sent to
    /// it (larger than the peer's maximum, learned after they were queued).
    /// (Boxed when the first one comes: rare, and every idle site would
    /// carry the room.)
    pub(crate) refused: Mutex<Option<Box<Refused>>>,
    /// True once `failed` is set: checked on every send without a lock.
    pub(crate) has_failed: std::sync::atomic::AtomicBool,
    /// Set when this entry turned out to be another entry's site (contacted
    /// under an address the peer did not list): sends follow it.
    pub(crate) redirect: OnceLock<Arc<SiteEntry>>,
    /// Largest message the peer accepts (0 until a handshake told it).
    pub(crate) peer_max: std::sync::atomic::AtomicU64,
    /// Live `SiteRef`s (a weak close is considered only when none is left,
    /// and the entry is reclaimed only then). Changed only with `SeqCst`
    /// when it may reach 0 (see `poke_on_unref`).
    pub(crate) refs: std::sync::atomic::AtomicUsize,
    /// Accepted channels routed to this entry and not yet taken by its
    /// ComObject (incremented under the site table's lock): the entry is
    /// not reclaimed while one is on its way.
    pub(crate) adopting: std::sync::atomic::AtomicUsize,
    /// Set by the ComObject while only references keep the site (no
    /// channel, nothing pending): the last `SiteRef` to go then wakes it, so
    /// the reclaim rule starts at once instead of at the next timer.
    pub(crate) poke_on_unref: std::sync::atomic::AtomicBool,
    /// Requests sent to this site whose replies are awaited (the slot
    /// policy avoids preempting a channel that replies will come back on).
    pub(crate) pending_requests: std::sync::atomic::AtomicUsize,
    /// A channel works for this site (for `Node::stats`).
    pub(crate) connected: std::sync::atomic::AtomicBool,
    /// A channel has worked for this site once (a monitor's first event
    /// says when it has not).
    pub(crate) contacted: std::sync::atomic::AtomicBool,
    /// The counters its ComObject last published (for `Node::stats`);
    /// allocated at the first publication, so a site never used costs a
    /// pointer.
    pub(crate) stats: Mutex<Option<Box<crate::stats::SiteStats>>>,
    /// Why the site is temporarily failed, while it is (for a request
    /// that times out meanwhile: `RequestError::Unreachable`).
    pub(crate) unreachable: Mutex<Option<String>>,
    /// Current fault state and the monitors watching it.
    pub(crate) fault: Mutex<(
        FaultState,
        Vec<futures::channel::mpsc::UnboundedSender<FaultEvent>>,
    )>,
}

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

    pub(crate) fn new(
        key: usize,
        address: Option<Arc<str>>,
        bound: crate::outbox::OutputBound,
    ) -> Self {
        Self {
            key,
            outbox: Outbox::new(bound),
            addr: OnceLock::new(),
            address,
            id: IdCell::default(),
            failed: Mutex::new(None),
            refused: Mutex::new(None),
            has_failed: std::sync::atomic::AtomicBool::new(false),
            redirect: OnceLock::new(),
            peer_max: std::sync::atomic::AtomicU64::new(0),
            refs: std::sync::atomic::AtomicUsize::new(0),
            adopting: std::sync::atomic::AtomicUsize::new(0),
            poke_on_unref: std::sync::atomic::AtomicBool::new(false),
            pending_requests: std::sync::atomic::AtomicUsize::new(0),
            connected: std::sync::atomic::AtomicBool::new(false),
            contacted: std::sync::atomic::AtomicBool::new(false),
            stats: Mutex::new(None),
            unreachable: Mutex::new(None),
            fault: Mutex::new((FaultState::Ok, Vec::new())),
        }
    }

    pub(crate) fn resolved(self: &Arc<Self>) -> &Arc<Self> {
        let mut e = self;
        while let Some(next) = e.redirect.get() {
            e = next;
        }
        e
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
        self.failed.lock().as_deref().map(|(r, _)| r.clone())
    }

    /// Moves to `state`, telling every monitor. Returns false if unchanged.
    pub(crate) fn set_fault(&self, state: FaultState, reason: &str) -> bool {
        let mut f = self.fault.lock();
        if f.0 == state || f.0 == FaultState::PermFailed {
            return false;
        }
        f.0 = state;
        *self.unreachable.lock() = (state == FaultState::TempFailed).then(|| reason.to_string());
        let ev = FaultEvent {
            state,
            reason: reason.to_string(),
        };
        f.1.retain(|tx| tx.unbounded_send(ev.clone()).is_ok());
        true
    }

    /// Why the site is unreachable, if it is temporarily failed now.
    pub(crate) fn unreachable_cause(&self) -> Option<String> {
        if self.state_given(self.fault.lock().0) != FaultState::TempFailed {
            return None;
        }
        self.unreachable.lock().clone()
    }

    /// The state monitors were last told — except that a site whose
    /// failure is on record (`SiteRef::failure`) is PermFailed already:
    /// the handed-back messages are published before monitors hear of the
    /// failure, and whoever sees them must not read an older state.
    pub(crate) fn fault_state(&self) -> FaultState {
        self.state_given(self.fault.lock().0)
    }

    /// A monitor of this site's fault state: its first event is the state
    /// now (with the reason "not contacted yet" if no channel to the site
    /// has worked), and no transition after it is missed (both under the
    /// lock the transitions take).
    pub(crate) fn monitor(&self) -> futures::channel::mpsc::UnboundedReceiver<FaultEvent> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut f = self.fault.lock();
        let state = self.state_given(f.0);
        let contacted = self.contacted.load(std::sync::atomic::Ordering::Acquire);
        let reason = if state == FaultState::Ok && !contacted && !self.is_local() {
            NOT_CONTACTED.to_string()
        } else {
            String::new()
        };
        let _ = tx.unbounded_send(FaultEvent { state, reason });
        f.1.push(tx);
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
        *e.failed.lock() = Some(Box::new((SiteFailure::Killed, Returned::default())));
        e.has_failed
            .store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(e.fault_state(), FaultState::PermFailed);
    }
}
