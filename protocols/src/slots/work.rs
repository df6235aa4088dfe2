//! A turn measured in work
//! ([`Admission::Share`](super::Admission::Share)): the work each turn may
//! do while peers wait, published to the holders' owners; the holders
//! that have done theirs giving way between ticks, at the tick thread's
//! call or at their owner's own; and the holders as the preemption rules
//! see them (their work so far), which the tick reads too.

use std::time::{Duration, Instant};

use super::{turns, Candidate, ChannelReport, PreemptReason, SlotTable, Tick};

impl SlotTable {
    /// [`Admission::Share`](super::Admission::Share)'s work per turn while
    /// peers wait in line, to tell holders' owners ([`handle_turn_work`](Self::handle_turn_work));
    /// `None` while nobody waits or under `Fifo` (no turns).
    pub fn turn_work_due(&self) -> Option<u64> {
        self.turns_wanted().map(|_| self.turn_work_now())
    }

    /// A holder's owner reported that its turn's work is done
    /// ([`turn_work_due`](Self::turn_work_due) messages since its channel
    /// first worked): between two ticks, the holders that have done their
    /// turn's work give way at once (up to one per peer waiting), so a fast
    /// holder's turn is measured in messages, not in ticks — an in-process
    /// pair moves thousands of messages in a 20 ms tick while a peer over
    /// a slow link moves a hundred. Nothing else is decided here (no quiet
    /// holder, no time's turn, no line hold): those wait for the tick,
    /// which this does not consume (it stops, as after any change, once
    /// enough holders are giving way).
    pub fn handle_turn_work(
        &mut self,
        now: Instant,
        mut describe: impl FnMut(u64) -> Option<ChannelReport>,
    ) -> Tick {
        let mut tick = Tick {
            victims: Vec::new(),
            expired: Vec::new(),
        };
        let Some(want) = self.turns_wanted().filter(|w| *w > 0) else {
            return tick;
        };
        let candidates = self.candidates(&mut describe);
        // No time makes a turn over here, and nobody is quiet enough:
        // only the work done counts.
        let never = Duration::MAX;
        let work = self.turn_work_now();
        tick.victims = turns::share(now, &candidates, want, (never, never, work), never);
        self.preempt(&tick.victims);
        self.arm(now);
        tick
    }

    /// A holder's owner asks, between ticks, whether its own turn's work is
    /// done ([`Admission::Share`](super::Admission::Share), peers in
    /// line): the rule of [`handle_turn_work`](Self::handle_turn_work) for
    /// this holder alone, on the owner's fresh `report`. True: it is
    /// marked as giving way (counted as [`PreemptReason::TurnOver`]) and
    /// the owner closes its channel now — no tick to wait for and no
    /// preemption to deliver to it, during which an in-process pair moves
    /// thousands of messages more (a 5 s run of 2,000 mem clients: turns
    /// of up to 6,890 messages against a quantum of 655). False: nothing
    /// changes; the tick decides as before.
    pub fn give_way_for_work(&mut self, holder: u64, now: Instant, report: ChannelReport) -> bool {
        let Some(want) = self.turns_wanted().filter(|w| *w > 0) else {
            return false;
        };
        if self.preempting.contains(&holder) || !self.holders.contains_key(&holder) {
            return false;
        }
        let candidates = self.candidates(&mut |h| (h == holder).then_some(report));
        let never = Duration::MAX;
        let work = self.turn_work_now();
        let victims = turns::share(now, &candidates, want.min(1), (never, never, work), never);
        self.preempt(&victims);
        self.arm(now);
        !victims.is_empty()
    }

    /// The holders not already giving way, as `describe` reports them,
    /// with the work of each one's turn so far: from the service its
    /// owner kept when the channel first worked
    /// ([`ChannelReport::served_from`]), else from the first working
    /// report this table read (a blank report, before the owner's first,
    /// starts nothing).
    pub(super) fn candidates(
        &mut self,
        describe: &mut impl FnMut(u64) -> Option<ChannelReport>,
    ) -> Vec<Candidate> {
        let preempting = &self.preempting;
        self.holders
            .iter_mut()
            .filter(|(h, _)| !preempting.contains(h))
            .filter_map(|(&h, held)| {
                let channel = describe(h)?;
                let from = match (channel.served_from, held.served_from) {
                    (Some(f), _) | (None, Some(f)) => f,
                    (None, None) if channel.closeable => *held.served_from.insert(channel.served),
                    (None, None) => channel.served,
                };
                Some(Candidate {
                    holder: h,
                    granted_at: held.granted_at,
                    channel,
                    moved: channel.served.saturating_sub(from),
                })
            })
            .collect()
    }

    /// Marks `victims` as giving way, counted by reason.
    pub(super) fn preempt(&mut self, victims: &[(u64, PreemptReason)]) {
        for &(h, reason) in victims {
            if reason == PreemptReason::LineWait {
                self.yielding.insert(h);
            }
            if self.preempting.insert(h) {
                self.load
                    .sub(self.holders.get(&h).and_then(|held| held.lane));
            }
            self.stats.preemptions[reason as usize] += 1;
            crate::base::coverage::hit(crate::base::coverage::Point::SlotPreempt);
        }
    }
}
