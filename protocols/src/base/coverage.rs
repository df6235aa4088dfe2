//! Coverage of the protocol machines' decisions: every branch of a rule
//! that decides something (the link rule's verdicts, a slot given or taken
//! back, a half-sent message restarted, each action a ComObject emits) is a
//! [`Point`], counted each time a machine takes it.
//!
//! The simulator reads the counts after each run ([`take`]) and reports
//! how often each point was reached over a search, and which were never
//! reached (`sitenet sim --coverage`): a rule the simulator never takes is
//! a rule its checkers cannot test, whatever else they find.
//!
//! Counts are kept per thread (a simulated run is one thread), in plain
//! cells: a hit is one thread-local add, cheap enough to stay compiled in
//! the runtime, whose threads simply never read theirs.

use std::cell::Cell;

macro_rules! points {
    ($($(#[$doc:meta])* $name:ident = $label:literal,)*) => {
        /// A decision point of a protocol machine (see the
        /// [module documentation](self)). Its [`label`](Point::label) is
        /// the name reports print, `machine.decision`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Point {
            $($(#[$doc])* $name,)*
        }

        impl Point {
            /// Every point, in declaration order (the order reports use).
            pub const ALL: &'static [Point] = &[$(Point::$name,)*];

            /// The point's name in reports: the machine, a dot, the
            /// decision.
            pub fn label(self) -> &'static str {
                match self {
                    $(Point::$name => $label,)*
                }
            }
        }
    };
}

points! {
    /// The link rule refuses a channel: this site is closing.
    LinkRefuseClosing = "link.refuse_closing",
    /// The link rule refuses a channel: no generation is left to number it.
    LinkRefuseNoGeneration = "link.refuse_no_generation",
    /// The link rule replaces the working channel: the peer lost it (its
    /// last generation is the working one's).
    LinkReplaceLostSame = "link.replace_lost_same_generation",
    /// The link rule replaces the working channel: the peer saw a later
    /// generation than the working one.
    LinkReplaceLostLater = "link.replace_lost_later_generation",
    /// The link rule replaces the working channel: the peer abandoned the
    /// attempt it came from.
    LinkReplaceAbandoned = "link.replace_abandoned",
    /// The link rule refuses a channel: the working one is newer than the
    /// peer has seen.
    LinkRefuseStale = "link.refuse_stale",
    /// Both sites opened at once and the peer's channel wins: this site's
    /// own attempt is abandoned.
    LinkWinsTie = "link.accept_wins_tie",
    /// Both sites opened at once and this site's channel wins.
    LinkRefuseLostTie = "link.refuse_lost_tie",
    /// The link rule accepts a channel with nothing to replace.
    LinkAccept = "link.accept",
    /// A channel is refused because the peer does not prove the session it
    /// claims.
    RefuseUnproven = "refuse.unproven",
    /// A handshake is refused for its cookie (or lack of one).
    RefuseUnauthenticated = "refuse.unauthenticated",

    /// An open failed and the address book has another address to try.
    OpenTryNextAddress = "open.try_next_address",
    /// An open failed for good at its last address (a version, an
    /// authentication): the site fails.
    OpenFailsForGood = "open.fails_for_good",
    /// A site named on a peer's word was tried at every address it was
    /// named at, and reached at none: it fails.
    OpenNotReached = "open.not_reached",
    /// The peer refused the channel as closing: it takes none from this
    /// site any more, which fails the site.
    OpenRefusedClosing = "open.refused_closing_fails",
    /// The peer refused the channel for another (lost tie, stale,
    /// unproven): back off and call again.
    OpenRefusedBackOff = "open.refused_backs_off",
    /// The handshake broke the protocol: reported, back off.
    OpenProtocolFault = "open.protocol_fault",
    /// The open failed otherwise (connect refused, timed out, reset): the
    /// site is temporarily failed, back off.
    OpenFailedBackOff = "open.failed_backs_off",

    /// A ComObject asks for a channel slot.
    ActRequestSlot = "action.request_slot",
    /// A ComObject no longer wants the slot it waits for.
    ActCancelSlot = "action.cancel_slot",
    /// A ComObject opens a channel.
    ActOpen = "action.open",
    /// A ComObject abandons its open in progress.
    ActAbandonOpen = "action.abandon_open",
    /// A channel closes in order (a close protocol completed).
    ActCloseOrderly = "action.close_orderly",
    /// A channel closes, lost.
    ActCloseLost = "action.close_lost",
    /// A channel closes, replaced by a newer one.
    ActCloseReplaced = "action.close_replaced",
    /// A channel closes after the last words to a failed site.
    ActCloseFinal = "action.close_final",
    /// The site is up: a channel works.
    ActUp = "action.up",
    /// The site's fault state changes (one of the `fault.` points says
    /// how).
    ActFault = "action.fault",
    /// The peer broke the protocol and is reported.
    ActReportFault = "action.report_fault",
    /// A claim on the site's identity is refused.
    ActClaimRefused = "action.claim_refused",
    /// A message is handed back to the user.
    ActHandBack = "action.hand_back",
    /// The reclaim rule fires: nothing keeps the site.
    ActReclaim = "action.reclaim",
    /// A claimed identity is proven.
    ActProven = "action.proven",
    /// The site failed for good: what it held is handed back.
    ActFailed = "action.failed",

    /// A reachable site becomes temporarily failed.
    FaultOkToTemp = "fault.ok_to_temp_failed",
    /// A temporarily failed site is reachable again.
    FaultTempToOk = "fault.temp_failed_to_ok",
    /// A temporarily failed site is given up on (or found gone for good).
    FaultTempToPerm = "fault.temp_failed_to_perm_failed",
    /// A reachable site fails for good at once (a restart, a refusal,
    /// killed).
    FaultOkToPerm = "fault.ok_to_perm_failed",

    /// A slot is granted at once.
    SlotGrantNow = "slots.grant_now",
    /// A request for a slot waits in line.
    SlotQueued = "slots.queued",
    /// A waiting request is withdrawn.
    SlotCancelled = "slots.cancelled",
    /// A holder is chosen to give its slot up (preempted).
    SlotPreempt = "slots.preempt",
    /// A slot being given up (preempted) is released.
    SlotReleasePreempted = "slots.release_preempted",
    /// A released slot goes to a site waiting to connect.
    SlotToWaiter = "slots.release_to_waiter",
    /// A released slot goes to an accepted peer waiting in line.
    SlotToLine = "slots.release_to_line",
    /// A released slot goes to nobody.
    SlotToNobody = "slots.release_to_nobody",

    /// A channel drops while a message of lane 1 (background) is
    /// half-sent: it restarts from its first fragment on the next channel.
    SendRewindLane1 = "session.rewind_half_sent_lane_1",
    /// The same on lane 2 (low).
    SendRewindLane2 = "session.rewind_half_sent_lane_2",
    /// The same on lane 3 (medium).
    SendRewindLane3 = "session.rewind_half_sent_lane_3",
    /// The same on lane 4 (high).
    SendRewindLane4 = "session.rewind_half_sent_lane_4",
    /// A message unacknowledged on a lost channel is sent again.
    SendRetransmit = "session.retransmit",
    /// A message already received arrives again and is dropped.
    ReceiveDuplicate = "session.duplicate_dropped",
}

impl Point {
    /// The point of a half-sent message restarted on `priority`'s lane.
    pub fn rewind_on(priority: crate::base::priority::Priority) -> Point {
        use crate::base::priority::Priority;
        match priority {
            Priority::Background => Point::SendRewindLane1,
            Priority::Low => Point::SendRewindLane2,
            Priority::Medium => Point::SendRewindLane3,
            Priority::High => Point::SendRewindLane4,
        }
    }
}

/// How many points there are.
const COUNT: usize = Point::ALL.len();

thread_local! {
    static COUNTS: [Cell<u64>; COUNT] = const { [const { Cell::new(0) }; COUNT] };
}

/// Counts one decision at `point` on this thread.
#[inline]
pub fn hit(point: Point) {
    COUNTS.with(|c| {
        let cell = &c[point as usize];
        cell.set(cell.get().wrapping_add(1));
    });
}

/// Takes this thread's counts, leaving them at zero: what the runs on this
/// thread reached since the last call.
pub fn take() -> Coverage {
    COUNTS.with(|c| Coverage {
        counts: std::array::from_fn(|i| c[i].take()),
    })
}

/// How often each [`Point`] was reached: one run's ([`take`]) or many's
/// ([`merge`](Coverage::merge)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    counts: [u64; COUNT],
}

impl Default for Coverage {
    fn default() -> Self {
        Self { counts: [0; COUNT] }
    }
}

impl Coverage {
    /// How often `point` was reached.
    pub fn count(&self, point: Point) -> u64 {
        self.counts[point as usize]
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Coverage) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a = a.saturating_add(b);
        }
    }

    /// Every point with its count, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (Point, u64)> + '_ {
        Point::ALL.iter().map(|&p| (p, self.count(p)))
    }

    /// The points never reached.
    pub fn unreached(&self) -> Vec<Point> {
        self.iter()
            .filter(|&(_, n)| n == 0)
            .map(|(p, _)| p)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_are_counted_per_point_and_taken_once() {
        let _ = take();
        hit(Point::LinkAccept);
        hit(Point::LinkAccept);
        hit(Point::SlotToLine);
        let c = take();
        assert_eq!(c.count(Point::LinkAccept), 2);
        assert_eq!(c.count(Point::SlotToLine), 1);
        assert_eq!(c.count(Point::LinkRefuseStale), 0);
        assert!(c.unreached().contains(&Point::LinkRefuseStale));
        assert!(!c.unreached().contains(&Point::LinkAccept));
        assert_eq!(take(), Coverage::default(), "taking resets the counts");
    }

    #[test]
    fn another_threads_hits_are_its_own() {
        let _ = take();
        std::thread::spawn(|| hit(Point::LinkAccept))
            .join()
            .unwrap();
        assert_eq!(take().count(Point::LinkAccept), 0);
    }

    #[test]
    fn merged_counts_add_up() {
        let _ = take();
        hit(Point::ActUp);
        let mut a = take();
        hit(Point::ActUp);
        hit(Point::ActReclaim);
        a.merge(&take());
        assert_eq!(a.count(Point::ActUp), 2);
        assert_eq!(a.count(Point::ActReclaim), 1);
    }

    #[test]
    fn labels_are_unique_and_name_their_machine() {
        let mut seen = std::collections::HashSet::new();
        for p in Point::ALL {
            assert!(seen.insert(p.label()), "{} twice", p.label());
            assert!(p.label().contains('.'), "{} has no machine", p.label());
        }
    }
}
