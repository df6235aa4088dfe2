//! The order of a driver's turn: what a ComObject's driver does, and in
//! which order, each time something happens to the site (the call-order
//! contract of the [module documentation](super)).
//!
//! The runtime's actor and the simulator both drive [`ComObject`]s. The
//! order of their steps is a protocol rule — an action the machine emits
//! while a flush frees acknowledged messages must be carried out before the
//! timer is re-armed, or a parked site would miss it — so it is written
//! here once, and each driver supplies only the steps. A step a driver has
//! no use for (the simulator gives no thread up) is an empty method.
//!
//! [`ComObject`]: super::ComObject

/// The steps of one turn, supplied by a driver of a
/// [`ComObject`](super::ComObject). [`turn`] calls them in the order the
/// machine needs: [`work`] (inputs, actions, flush, accounting) then
/// [`settle`] (timer, references, parking).
pub trait TurnSteps {
    /// Hands the machine what waits outside it: the messages the site's
    /// outbox holds, and whether references and awaited replies keep it.
    fn take_inputs(&mut self);

    /// Carries out every [`Action`](super::Action) the machine emits
    /// ([`poll_action`](super::ComObject::poll_action)), in order, until
    /// none is left.
    fn act(&mut self);

    /// Gives the channel's slot up if the slot table asks it to (a
    /// preemption), once the turn's work is done.
    fn give_way(&mut self);

    /// Writes what the machine has to send
    /// ([`poll_transmit`](super::ComObject::poll_transmit)) into the
    /// channel.
    fn flush(&mut self);

    /// Takes what acknowledgements freed and delivered
    /// ([`take_freed`](super::ComObject::take_freed),
    /// [`take_delivered`](super::ComObject::take_delivered)) and gives it to
    /// whoever waits for it: room in the outbox, tracked deliveries,
    /// counters.
    fn account(&mut self);

    /// Keeps one timer armed at or before the machine's next deadline
    /// ([`poll_timeout`](super::ComObject::poll_timeout)).
    fn rearm(&mut self);

    /// While only references keep the site (the reclaim rule waits for the
    /// last one to go), asks to be woken when the last goes.
    fn watch_references(&mut self);

    /// Parks the machine if it may ([`park`](super::ComObject::park)), or
    /// carries out a reclaim its actions decided.
    fn park_if_idle(&mut self);
}

/// One whole turn: [`work`], then [`settle`].
pub fn turn(steps: &mut impl TurnSteps) {
    work(steps);
    settle(steps);
}

/// The working half of a turn: inputs in, actions out, the channel
/// flushed, acknowledgements accounted for.
///
/// Actions run three times: what the inputs caused (an open, a handed-back
/// message) before the flush; what the flush caused (a channel found
/// closed) after it; and what accounting caused (a reclaim once the last
/// message is acknowledged) before the turn settles.
pub fn work(steps: &mut impl TurnSteps) {
    steps.take_inputs();
    steps.act();
    steps.give_way();
    steps.flush();
    steps.act();
    steps.account();
    steps.act();
}

/// The settling half of a turn, once no action is left: the timer armed
/// for the next deadline, the references watched, the machine parked if
/// idle. A driver that runs [`work`] more than once before the site rests
/// (the simulator does, between two events of the same instant) settles
/// once at the end.
pub fn settle(steps: &mut impl TurnSteps) {
    steps.rearm();
    steps.watch_references();
    steps.park_if_idle();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the steps in the order they are called.
    #[derive(Default)]
    struct Log(Vec<&'static str>);

    impl TurnSteps for Log {
        fn take_inputs(&mut self) {
            self.0.push("take_inputs");
        }
        fn act(&mut self) {
            self.0.push("act");
        }
        fn give_way(&mut self) {
            self.0.push("give_way");
        }
        fn flush(&mut self) {
            self.0.push("flush");
        }
        fn account(&mut self) {
            self.0.push("account");
        }
        fn rearm(&mut self) {
            self.0.push("rearm");
        }
        fn watch_references(&mut self) {
            self.0.push("watch_references");
        }
        fn park_if_idle(&mut self) {
            self.0.push("park_if_idle");
        }
    }

    #[test]
    fn a_turn_acts_around_the_flush_and_after_accounting_then_settles() {
        let mut log = Log::default();
        turn(&mut log);
        assert_eq!(
            log.0,
            [
                "take_inputs",
                "act",
                "give_way",
                "flush",
                "act",
                "account",
                "act",
                "rearm",
                "watch_references",
                "park_if_idle",
            ]
        );
    }

    #[test]
    fn work_and_settle_split_a_turn_in_two() {
        let (mut a, mut b) = (Log::default(), Log::default());
        turn(&mut a);
        work(&mut b);
        assert_eq!(b.0.last(), Some(&"act"), "work ends with the last actions");
        settle(&mut b);
        assert_eq!(a.0, b.0);
    }
}
