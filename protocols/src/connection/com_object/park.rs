//! Parking: a site with nothing queued, nothing unacknowledged
//! and no channel needs no driver. Its machine gives up everything but
//! what it must remember — the numbering both ways and the session's tag,
//! the pair's secret, the address book, the fault state, the open and
//! backoff state, its deadlines and its counters — in a compact
//! [`Parked`] form, and is made again from it by the next input: a
//! message to send, an accepted channel, a deadline.
//!
//! The rule ([`ComObject::parkable`]) asks for a state in which the
//! machine does nothing until an input or a deadline comes: no channel, no
//! open attempt and no slot asked for, nothing pending (no message, no
//! reply awaited), no action or event the driver has not taken. Such a
//! machine's next step depends only on what it keeps and on that input,
//! so parking and unparking in between changes nothing
//! (`tests/park.rs`: every observable, before and after, over every
//! state a parkable machine reaches, and runs that park at every
//! opportunity against runs that never do).
//!
//! Deadlines stay with the parked form ([`Parked::deadline`]: the reclaim
//! rule's, a give-up, a backoff or the wait for a callback): a driver
//! keeps them in one table for all its parked sites and unparks a site
//! when its deadline comes — no per-site timer or task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ComConfig, ComObject, ComState, ComStats, FaultState, Phase};
use crate::base::timer::{ComTimers, Timer};
use crate::connection::address_book::AddressBook;
use crate::connection::handshake::Continuity;
use crate::connection::reassembly::ReassemblyBudget;
use crate::connection::session::park::SessionFields;
use crate::connection::session::{Session, SessionStats};
use crate::wire::varint::{Packed, Packer, Unpacker};

/// A parked ComObject: what it keeps while its site is idle (see the
/// module documentation), most of it packed into a few dozen bytes.
/// [`ComObject::unpark`] makes the machine again.
#[derive(Debug)]
pub struct Parked {
    /// The machine's clock when it parked; every instant kept is packed
    /// relative to it.
    base: Instant,
    book: AddressBook,
    continuity: Option<Box<Continuity>>,
    /// Everything else ([`Fields`]), packed: inline for any site but one
    /// with unusually large counters, so parking allocates nothing that
    /// outlives it but what the site already had (its book's addresses
    /// and the secret).
    packed: Packed,
}

/// The values a parked machine keeps besides its book and secret,
/// unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fields {
    phase: Phase,
    fault: FaultState,
    up: bool,
    has_refs: bool,
    peer_cleared: bool,
    owed_reopen: bool,
    give_up_unreachable: bool,
    jitter_state: u64,
    opener: u64,
    attempt_seq: u64,
    channel_seq: u64,
    backoff: Duration,
    idle_since: Instant,
    weak_rejected_at: Option<Instant>,
    unneeded_since: Option<Instant>,
    timers: ComTimers,
    seen: (u32, u32),
    stats: Option<ComStats>,
    session: SessionFields,
}

impl ComObject {
    /// The parking rule: true if the machine does nothing until an input
    /// or one of its deadlines comes, so a driver may keep it
    /// [`park`](Self::park)ed meanwhile. It holds with no channel (none
    /// working, none closing), no open attempt, no place in the slot
    /// line, no connection of the peer's waiting in this node's line,
    /// nothing queued, partly sent or unacknowledged, no reply
    /// awaited, no action the driver has not taken, a session that holds
    /// nothing but its numbering ([`Session::parkable`]: the driver has
    /// taken what acknowledgements freed), and no deadline due at `now`
    /// (it is handled first: a site unparked for its deadline does not
    /// park again before it). The node shutting down does not park: it
    /// is stopping.
    pub fn parkable(&self, now: Instant) -> bool {
        matches!(
            self.phase,
            Phase::Closed | Phase::Backoff | Phase::WaitingForCallback | Phase::Failed
        ) && self.session_channel == 0
            && self.peer_in_line == 0
            && !self.closing
            && !self.awaiting_replies
            && self.actions.is_empty()
            && self.session.parkable()
            && self.poll_timeout().is_none_or(|at| at > now)
    }

    /// Parks the machine if [`parkable`](Self::parkable) at `now`:
    /// returns what it keeps, and leaves `self` empty (a new machine for
    /// no site, that opens nothing: drop it). `None`, and nothing changed,
    /// if it may not park.
    pub fn park(&mut self, now: Instant) -> Option<Parked> {
        if !self.parkable(now) {
            return None;
        }
        let budget = self.session.budget().clone();
        let mut shell = ComObject::new(
            self.cfg.clone(),
            budget,
            self.cfg.local,
            AddressBook::default(),
            self.opener,
            0,
            self.clock,
        );
        shell.closing = true;
        let mut m = std::mem::replace(self, shell);
        let fields = Fields {
            phase: m.phase,
            fault: m.fault,
            up: m.up,
            has_refs: m.has_refs,
            peer_cleared: m.peer_cleared,
            owed_reopen: m.owed_reopen,
            give_up_unreachable: m.give_up_unreachable,
            jitter_state: m.jitter_state,
            opener: m.opener,
            attempt_seq: m.attempt_seq,
            channel_seq: m.channel_seq,
            backoff: m.backoff,
            idle_since: m.idle_since,
            weak_rejected_at: m.weak_rejected_at,
            unneeded_since: m.unneeded_since,
            timers: m.timers,
            seen: m.seen,
            stats: m.stats.as_deref().copied(),
            session: m.session.parked(),
        };
        let mut p = Packer::default();
        fields.pack(&mut p, m.clock);
        let parked = Parked {
            base: m.clock,
            book: std::mem::take(&mut m.book),
            continuity: m.continuity.take(),
            packed: p.finish(),
        };
        debug_assert_eq!(parked.deadline(), m.poll_timeout());
        Some(parked)
    }

    /// The machine `parked` kept, with the node's configuration and
    /// reassembly budget (`cfg` must be the configuration it was made
    /// with, its `local` id included). It goes on exactly where it
    /// parked: feed it the input that unparked it, or, for a deadline,
    /// [`handle_timeout`](Self::handle_timeout).
    pub fn unpark(parked: Parked, cfg: Arc<ComConfig>, budget: ReassemblyBudget) -> ComObject {
        let Parked {
            base,
            book,
            continuity,
            packed,
        } = parked;
        let f = Fields::unpack(&packed, base);
        let cfg = ComConfig::bounded(cfg);
        let session = Session::unparked(f.session, cfg.session.clone(), budget);
        ComObject {
            session,
            backoff: f.backoff,
            cfg,
            phase: f.phase,
            timers: f.timers,
            jitter_state: f.jitter_state,
            book,
            continuity,
            opener: f.opener,
            attempt_seq: f.attempt_seq,
            channel_seq: f.channel_seq,
            session_channel: 0,
            fault: f.fault,
            up: f.up,
            has_refs: f.has_refs,
            via_line: false,
            peer_in_line: 0,
            // A parked site needs no channel: its next attempt starts
            // with the whole patience.
            line_yields: 0,
            peer_cleared: f.peer_cleared,
            awaiting_replies: false,
            owed_reopen: f.owed_reopen,
            give_up_unreachable: f.give_up_unreachable,
            idle_since: f.idle_since,
            weak_rejected_at: f.weak_rejected_at,
            clock: base,
            unneeded_since: f.unneeded_since,
            closing: false,
            actions: Default::default(),
            stats: f.stats.map(Box::new),
            seen: f.seen,
        }
    }
}

impl Parked {
    fn fields(&self) -> Fields {
        Fields::unpack(&self.packed, self.base)
    }

    /// When the parked machine must be unparked for one of its deadlines
    /// (then call [`ComObject::handle_timeout`]), if it has one: what
    /// [`ComObject::poll_timeout`] said when it parked.
    pub fn deadline(&self) -> Option<Instant> {
        let f = self.fields();
        if f.phase == Phase::Failed {
            f.timers.get(Timer::Reclaim)
        } else {
            f.timers.next_deadline()
        }
    }

    /// The state it parked in (closed, backoff, waiting for a callback or
    /// failed).
    pub fn state(&self) -> ComState {
        match unpack_phase(&mut Unpacker::new(&self.packed)) {
            Phase::Backoff => ComState::Backoff,
            Phase::WaitingForCallback => ComState::WaitingForCallback,
            Phase::Failed => ComState::Failed,
            _ => ComState::Closed,
        }
    }

    /// The site's fault state.
    pub fn fault_state(&self) -> FaultState {
        let mut u = Unpacker::new(&self.packed);
        unpack_phase(&mut u);
        unpack_fault(&mut u)
    }

    /// The session's counters.
    pub fn session_stats(&self) -> SessionStats {
        self.fields().session.stats.unwrap_or(SessionStats::ZERO)
    }

    /// The machine's counters.
    pub fn stats(&self) -> ComStats {
        self.fields().stats.unwrap_or_default()
    }

    /// Where the site can be called, best first.
    pub fn addresses(&self) -> &AddressBook {
        &self.book
    }

    /// The pair's secret, if a session started (see
    /// [`ComObject::continuity`]).
    pub fn continuity(&self) -> Option<Continuity> {
        self.continuity.as_deref().copied()
    }

    /// Bytes of the packed form (beside the book, the secret and the
    /// struct itself): what measures report.
    pub fn packed_len(&self) -> usize {
        self.packed.len()
    }

    /// True if the packed fields are kept inside this value (no
    /// allocation of their own): a driver that keeps thousands of parked
    /// sites in one table keeps them in one block.
    pub fn packed_inline(&self) -> bool {
        self.packed.is_inline()
    }
}

/// The phase, the packed form's first value: read alone by
/// [`Parked::state`], which a driver asks of every parked site (the
/// simulator's audit, every simulated second) and which need not unpack
/// the rest.
fn unpack_phase(u: &mut Unpacker<'_>) -> Phase {
    match u.u64() {
        1 => Phase::Backoff,
        2 => Phase::WaitingForCallback,
        3 => Phase::Failed,
        _ => Phase::Closed,
    }
}

/// The fault state, the packed form's second value.
fn unpack_fault(u: &mut Unpacker<'_>) -> FaultState {
    match u.u64() {
        1 => FaultState::TempFailed,
        2 => FaultState::PermFailed,
        _ => FaultState::Ok,
    }
}

impl Fields {
    fn pack(&self, p: &mut Packer, base: Instant) {
        p.u64(match self.phase {
            Phase::Closed => 0,
            Phase::Backoff => 1,
            Phase::WaitingForCallback => 2,
            Phase::Failed => 3,
            other => unreachable!("a parkable machine is never {other:?}"),
        });
        p.u64(match self.fault {
            FaultState::Ok => 0,
            FaultState::TempFailed => 1,
            FaultState::PermFailed => 2,
        });
        p.flags(&[
            self.up,
            self.has_refs,
            self.peer_cleared,
            self.owed_reopen,
            self.give_up_unreachable,
            self.weak_rejected_at.is_some(),
            self.unneeded_since.is_some(),
            self.stats.is_some(),
        ]);
        p.u64(self.jitter_state);
        p.u64(self.opener);
        p.u64(self.attempt_seq);
        p.u64(self.channel_seq);
        p.duration(self.backoff);
        p.instant(self.idle_since, base);
        for at in [self.weak_rejected_at, self.unneeded_since]
            .into_iter()
            .flatten()
        {
            p.instant(at, base);
        }
        for t in COM_TIMERS {
            p.opt_instant(self.timers.get(t), base);
        }
        p.u64(self.seen.0.into());
        p.u64(self.seen.1.into());
        if let Some(mut s) = self.stats {
            for v in com_stats_fields(&mut s) {
                p.u64(*v);
            }
        }
        self.session.pack(p);
    }

    fn unpack(bytes: &[u8], base: Instant) -> Self {
        let mut u = Unpacker::new(bytes);
        let phase = unpack_phase(&mut u);
        let fault = unpack_fault(&mut u);
        let [up, has_refs, peer_cleared, owed_reopen, give_up_unreachable, weak_rejected, unneeded, has_stats] =
            u.flags();
        let jitter_state = u.u64();
        let opener = u.u64();
        let attempt_seq = u.u64();
        let channel_seq = u.u64();
        let backoff = u.duration();
        let idle_since = u.instant(base);
        let weak_rejected_at = weak_rejected.then(|| u.instant(base));
        let unneeded_since = unneeded.then(|| u.instant(base));
        let mut timers = ComTimers::default();
        for t in COM_TIMERS {
            if let Some(at) = u.opt_instant(base) {
                timers.set(t, at);
            }
        }
        let seen = (u.u32(), u.u32());
        let stats = has_stats.then(|| {
            let mut s = ComStats::default();
            for v in com_stats_fields(&mut s) {
                *v = u.u64();
            }
            s
        });
        let session = SessionFields::unpack(&mut u);
        debug_assert!(u.is_done(), "a parked form read back whole");
        Fields {
            phase,
            fault,
            up,
            has_refs,
            peer_cleared,
            owed_reopen,
            give_up_unreachable,
            jitter_state,
            opener,
            attempt_seq,
            channel_seq,
            backoff,
            idle_since,
            weak_rejected_at,
            unneeded_since,
            timers,
            seen,
            stats,
            session,
        }
    }
}

/// The ComObject's timers, in the packed form's order.
const COM_TIMERS: [Timer; 4] = [
    Timer::ReconnectBackoff,
    Timer::Linger,
    Timer::GiveUp,
    Timer::Reclaim,
];

/// Every counter of `s`, in the packed form's order (by destructuring: a
/// counter added to [`ComStats`] is a compile error here until it is kept
/// too).
fn com_stats_fields(s: &mut ComStats) -> [&mut u64; 12] {
    let ComStats {
        weak_closes_started,
        weak_closes_rejected,
        hard_closes_started,
        orderly_closes,
        protocol_errors,
        opens,
        fallbacks,
        temp_failures,
        handed_back,
        unproven_claims_refused,
        line_waits,
        line_give_ups,
    } = s;
    [
        weak_closes_started,
        weak_closes_rejected,
        hard_closes_started,
        orderly_closes,
        protocol_errors,
        opens,
        fallbacks,
        temp_failures,
        handed_back,
        unproven_claims_refused,
        line_waits,
        line_give_ups,
    ]
}
