//! The senders' order at a site's outbox (one of the node's rules,
//! sans-IO). The runtime's outbox keeps the locks, the wakers and the
//! bytes; the rules about order are here, tested on their own:
//!
//! * **Who is served next** ([`Turns`]): senders that must wait for room
//!   take a ticket each and are served in the order they started waiting.
//!   A large send at the head is not overtaken by small ones that would fit
//!   first, so it cannot starve; a sender that stops waiting gives its turn
//!   up, and the line moves past it as if it had been served.
//! * **What a merge does to the line** ([`merge_line`]): when two entries
//!   turn out to be one site, the merging entry's messages — what its
//!   ComObject held (older), then what its outbox queued — go to the front
//!   of the surviving entry's queue, before anything there: the survivor's
//!   queue holds only what senders pushed after following the redirect,
//!   which is younger than anything they pushed before it. So every
//!   sender's messages stay in the order it sent them.
//!
//! ```
//! use sitenet_protocols::node::turns::{merge_line, Turns};
//!
//! let mut t = Turns::default();
//! let (a, b, c) = (t.join(), t.join(), t.join());
//! assert!(t.is_turn(a) && !t.is_turn(b));
//! t.give_up(b); // b stopped waiting before its turn
//! assert!(t.served(a));
//! assert!(t.is_turn(c), "b's turn was skipped");
//!
//! let mut theirs = vec![3, 4];
//! merge_line(vec![1], &mut vec![2], &mut theirs);
//! assert_eq!(theirs, [1, 2, 3, 4]);
//! ```

use std::collections::BTreeSet;

/// A waiting sender's place in line (see [`Turns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// The line of senders waiting for room at one outbox: tickets handed out
/// in arrival order, served in that order, abandoned ones skipped. Plain
/// data: the runtime holds it under its lock and publishes
/// [`waiting`](Self::waiting) for its lock-free fast path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Turns {
    /// The next ticket to hand out.
    next: u64,
    /// The ticket being served.
    head: u64,
    /// Tickets of waiters that stopped waiting before their turn.
    abandoned: BTreeSet<u64>,
}

impl Turns {
    /// Someone waits in line: a sender that has not waited must not take
    /// room before them (they go first).
    pub fn waiting(&self) -> bool {
        self.head != self.next
    }

    /// A sender starts waiting: its ticket, behind everyone waiting.
    pub fn join(&mut self) -> Ticket {
        self.next += 1;
        Ticket(self.next - 1)
    }

    /// Whether `ticket` is the one served now (only it may take room).
    pub fn is_turn(&self, ticket: Ticket) -> bool {
        self.head == ticket.0
    }

    /// `ticket`, whose turn it is, took its room: the line moves on.
    /// Returns false (and changes nothing) if it was not its turn.
    pub fn served(&mut self, ticket: Ticket) -> bool {
        if !self.is_turn(ticket) {
            return false;
        }
        self.advance();
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::LineSkipsNext) && self.waiting()
        {
            self.advance();
        }
        true
    }

    /// `ticket` stops waiting unserved. Returns true if it was the head, so
    /// the line moved and the next in line must be woken; otherwise its
    /// turn is skipped when the line reaches it.
    pub fn give_up(&mut self, ticket: Ticket) -> bool {
        if self.is_turn(ticket) {
            self.advance();
            true
        } else {
            #[cfg(feature = "planted-bugs")]
            if crate::base::planted::active(crate::base::planted::Bug::GiveUpForgetsTurn) {
                return false;
            }
            if (self.head..self.next).contains(&ticket.0) {
                self.abandoned.insert(ticket.0);
            }
            false
        }
    }

    /// Moves past the head and any abandoned tickets after it.
    fn advance(&mut self) {
        self.head += 1;
        while self.abandoned.remove(&self.head) {
            self.head += 1;
        }
    }
}

/// What a merge does to the line: `older` (what the merging entry's
/// ComObject held, older than anything queued), then `mine` (what its
/// outbox queued, taken), then what `theirs` (the surviving entry's queue)
/// held go, in that order, into `theirs`. Returns how many messages moved
/// (zero: `theirs` is untouched). See the module documentation for why
/// this keeps every sender's order.
pub fn merge_line<T>(older: Vec<T>, mine: &mut Vec<T>, theirs: &mut Vec<T>) -> usize {
    #[cfg(feature = "planted-bugs")]
    if crate::base::planted::active(crate::base::planted::Bug::MergeLineQueueFirst) {
        let mut older = older;
        let mut moved = std::mem::take(mine);
        moved.append(&mut older);
        let n = moved.len();
        moved.append(theirs);
        *theirs = moved;
        return n;
    }
    let mut moved = older;
    moved.append(mine);
    let n = moved.len();
    if n == 0 {
        return 0;
    }
    moved.append(theirs);
    *theirs = moved;
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_the_head_is_served_and_a_wrong_serve_changes_nothing() {
        let mut t = Turns::default();
        assert!(!t.waiting());
        let a = t.join();
        let b = t.join();
        assert!(t.waiting());
        assert!(!t.served(b));
        assert!(t.is_turn(a));
        assert!(t.served(a));
        assert!(t.give_up(b), "the head gives up: wake the next");
        assert!(!t.waiting());
        // A ticket already past the head gives up nothing.
        assert!(!t.give_up(a));
        assert!(!t.waiting());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join,
        /// Serve the head, if anyone waits.
        Serve,
        /// The n-th of those waiting (mod their number) gives up.
        GiveUp(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Join),
            2 => Just(Op::Serve),
            1 => any::<usize>().prop_map(Op::GiveUp),
        ]
    }

    proptest! {
        /// Whatever the mix of arrivals, services and give-ups, the waiters
        /// still in line are served in the order they arrived, the head is
        /// always the oldest still waiting, and `waiting` says whether
        /// anyone is.
        #[test]
        fn the_line_is_served_in_arrival_order(ops in proptest::collection::vec(op(), 0..200)) {
            let mut t = Turns::default();
            let mut line: Vec<Ticket> = Vec::new(); // the model: waiting, by arrival
            let mut served: Vec<Ticket> = Vec::new();
            for op in ops {
                match op {
                    Op::Join => line.push(t.join()),
                    Op::Serve => {
                        if let Some(&head) = line.first() {
                            prop_assert!(t.served(head));
                            served.push(line.remove(0));
                        }
                    }
                    Op::GiveUp(n) => {
                        if !line.is_empty() {
                            let k = n % line.len();
                            let woke = t.give_up(line.remove(k));
                            prop_assert_eq!(woke, k == 0);
                        }
                    }
                }
                prop_assert_eq!(t.waiting(), !line.is_empty());
                for (k, &w) in line.iter().enumerate() {
                    prop_assert_eq!(t.is_turn(w), k == 0);
                }
            }
            prop_assert!(served.windows(2).all(|w| w[0] < w[1]), "served in arrival order");
        }

        /// Senders push (sender, seq) to the first entry; at some point the
        /// first entry merges into the second (part of what was pushed still
        /// held by its ComObject, the rest queued), then senders push to the
        /// second. The merged line holds every message once and each
        /// sender's messages in the order it sent them.
        #[test]
        fn a_merge_keeps_each_senders_order(
            before in proptest::collection::vec(0u8..4, 0..40),
            held in 0usize..40,
            survivor_own in proptest::collection::vec(4u8..6, 0..10),
            after in proptest::collection::vec(0u8..6, 0..40),
        ) {
            let mut seq = [0u32; 6];
            let mut next = |s: u8| { seq[s as usize] += 1; (s, seq[s as usize]) };
            // Senders 4 and 5 only ever used the surviving entry before the merge.
            let mut theirs: Vec<(u8, u32)> = survivor_own.iter().map(|&s| next(s)).collect();
            let mut mine: Vec<(u8, u32)> = before.iter().map(|&s| next(s)).collect();
            let held = held.min(mine.len());
            let older: Vec<_> = mine.drain(..held).collect();
            let total = older.len() + mine.len() + theirs.len() + after.len();
            let moved = merge_line(older, &mut mine, &mut theirs);
            prop_assert_eq!(moved, before.len());
            prop_assert!(mine.is_empty());
            theirs.extend(after.iter().map(|&s| next(s)));
            prop_assert_eq!(theirs.len(), total);
            for s in 0..6u8 {
                let mine: Vec<u32> = theirs.iter().filter(|m| m.0 == s).map(|m| m.1).collect();
                prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "sender {} out of order: {:?}", s, mine);
            }
        }
    }
}
