//! The output bound in the simulator: what `runtime/src/outbox/` does with
//! its locks and atomics, over plain counters. Every entry holds the bytes
//! of its messages from the send until they are acknowledged or handed
//! back (`OutMessage::footprint`), per class; a send is admitted only
//! within the site's bound and each class's reserve
//! ([`admits_class`]) and within the node's bound and the site's fair
//! share of it ([`admits`]); a sender that finds no room, or finds others
//! of its class waiting, waits in that class's line ([`Turns`]) and is
//! served in its turn when acknowledgements free room.
//!
//! What the simulator checks with it: that the bytes a node counts are the
//! sum of its entries' and never above its bound, that no entry holds
//! bytes once it is forgotten or the run has settled (every release
//! accounted for), that nobody waits while its turn has room (a missed
//! wake-up), and — through the FIFO checker — that the lines keep each
//! sender's order, a merge's too.
//!
//! A request whose deadline passes while it waits gives its turn up
//! ([`Turns::give_up`]) and its message never goes, as the runtime's
//! requester does; a one-way send waits until its turn or its site's
//! failure. One departure from the runtime, deliberate: the senders
//! waiting at an entry that merges into another join the other's lines,
//! in their order (the runtime's follow the redirect when room frees,
//! racing the other's waiters). Both keep every sender's order, which is
//! what the checkers judge.
//!
//! With [`SimConfig::outbox_queue`](crate::SimConfig::outbox_queue) a send
//! that has room waits in its entry's outbox queue until the ComObject's
//! next turn (a drain event, the runtime's wake through the actor's
//! mailbox), and a merge puts what the merging machine held, then what its
//! queue held, in front of the other entry's queue
//! ([`merge_line`](sitenet_protocols::node::turns::merge_line)), as the runtime's
//! `Outbox::seal_into` does.

use std::collections::{BTreeMap, BTreeSet};

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::output_share::{admits, admits_class, Freed, CLASSES};
use sitenet_protocols::node::turns::{Ticket, Turns};
use sitenet_protocols::wire::message::{MessageKind, OutMessage};

/// The longest a wake takes through an actor's mailbox, in the simulator
/// (with [`SimConfig::outbox_queue`](crate::SimConfig::outbox_queue)): a
/// drain comes up to 5 ms after the push that scheduled it — an actor
/// whose thread is busy — so that other events (a handshake, a merge) come
/// in between often enough to be seen. A shorter hop (50 us) made a merge
/// find a queued send about once in a hundred runs.
pub(crate) const MAILBOX_HOP_NS: u64 = 5_000_000;

/// A send waiting for room: the message, and what the driver needs to
/// hand it back.
pub(crate) struct Waiting {
    pub(crate) msg: OutMessage,
    /// The oracle's id of the message.
    pub(crate) id: u64,
    /// The site the application named.
    pub(crate) to: SiteId,
}

/// The lines of one entry, one per class (made for the first wait).
#[derive(Default)]
pub(crate) struct Lines {
    turns: [Turns; CLASSES],
    waiting: [BTreeMap<Ticket, Waiting>; CLASSES],
}

impl Lines {
    /// The send whose turn it is in `class`'s line, if any (the line
    /// decides: [`Turns::is_turn`]).
    fn head(&self, class: usize) -> Option<(Ticket, &Waiting)> {
        self.waiting[class]
            .iter()
            .find(|(t, _)| self.turns[class].is_turn(**t))
            .map(|(t, w)| (*t, w))
    }
}

/// What one entry holds against the bounds, and its waiting senders.
#[derive(Default)]
pub(crate) struct SiteOut {
    held: [u64; CLASSES],
    lines: Option<Box<Lines>>,
}

impl SiteOut {
    /// Bytes held, every class.
    pub(crate) fn bytes(&self) -> u64 {
        self.held.iter().sum()
    }

    /// Senders wait here.
    pub(crate) fn waiting(&self) -> bool {
        self.lines
            .as_ref()
            .is_some_and(|l| l.waiting.iter().any(|w| !w.is_empty()))
    }

    /// How many senders wait here.
    pub(crate) fn waiting_count(&self) -> usize {
        self.lines
            .as_ref()
            .map_or(0, |l| l.waiting.iter().map(BTreeMap::len).sum())
    }

    /// True if message `id` (the oracle's) waits here for room.
    pub(crate) fn holds_waiting(&self, id: u64) -> bool {
        self.lines
            .as_ref()
            .is_some_and(|l| l.waiting.iter().any(|w| w.values().any(|w| w.id == id)))
    }

    /// Senders of `class` wait here: a new one goes behind them.
    fn class_waits(&self, class: usize) -> bool {
        self.lines
            .as_ref()
            .is_some_and(|l| l.turns[class].waiting())
    }

    /// Takes the waiting request `corr` out of its line, its turn given
    /// up (the runtime's `Turns::give_up`, when the sender's future is
    /// dropped).
    fn give_up(&mut self, corr: u64) -> Option<Waiting> {
        let lines = self.lines.as_mut()?;
        let (class, ticket) = (0..CLASSES).find_map(|class| {
            lines.waiting[class]
                .iter()
                .find(|(_, w)| w.msg.kind == MessageKind::Request && w.msg.corr == corr)
                .map(|(t, _)| (class, *t))
        })?;
        lines.turns[class].give_up(ticket);
        let w = lines.waiting[class].remove(&ticket);
        if lines.waiting.iter().all(BTreeMap::is_empty) {
            self.lines = None;
        }
        w
    }

    /// Every waiting send, class by class, each class in its line's order;
    /// the lines are gone.
    fn take_waiting(&mut self) -> Vec<(usize, Waiting)> {
        let Some(lines) = self.lines.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (class, w) in lines.waiting.into_iter().enumerate() {
            out.extend(w.into_values().map(|w| (class, w)));
        }
        out
    }
}

/// A node's count of the bytes all its entries hold, its bounds, and
/// which entries have senders waiting.
pub(crate) struct NodeOut {
    site_bound: u64,
    node_bound: u64,
    bytes: u64,
    /// Entries holding bytes (the fair share's divisor).
    holders: usize,
    /// Entries with senders waiting (by key), visited in this order when
    /// room may have freed.
    pub(crate) waiters: BTreeSet<SiteId>,
    /// The most bytes the node held at once.
    pub(crate) peak: u64,
    /// Sends waiting in the lines of all its entries (what its
    /// application sees as [`AppCtx::waiting`](crate::AppCtx::waiting)).
    sends_waiting: usize,
    /// The most sends that waited at once.
    pub(crate) waiting_peak: usize,
}

impl NodeOut {
    pub(crate) fn new(site_bound: u64, node_bound: u64) -> Self {
        Self {
            site_bound,
            node_bound: node_bound.max(site_bound),
            bytes: 0,
            holders: 0,
            waiters: BTreeSet::new(),
            peak: 0,
            sends_waiting: 0,
            waiting_peak: 0,
        }
    }

    /// Reserves `n` bytes of `class` for `site`, unless senders of that
    /// class wait there (they go first) or a bound refuses them.
    pub(crate) fn try_reserve(&mut self, site: &mut SiteOut, class: usize, n: u64) -> bool {
        !site.class_waits(class) && self.reserve_now(site, class, n)
    }

    /// Whether `n` more bytes of `class` fit `site` under both bounds: the
    /// runtime's `Outbox::reserve_now` asks the class rule, then the
    /// node's with the site counted among the holders.
    fn fits(&self, site: &SiteOut, class: usize, n: u64) -> bool {
        if !admits_class(self.site_bound, &site.held, class, n) {
            return false;
        }
        let before = site.bytes();
        let holders = self.holders + usize::from(before == 0);
        admits(self.node_bound, self.bytes + n, holders, before, n)
    }

    /// Reserves `n` bytes of `class` under both bounds, or nothing.
    fn reserve_now(&mut self, site: &mut SiteOut, class: usize, n: u64) -> bool {
        if !self.fits(site, class, n) {
            return false;
        }
        if site.bytes() == 0 {
            self.holders += 1;
        }
        site.held[class] += n;
        self.bytes += n;
        self.peak = self.peak.max(self.bytes);
        true
    }

    /// Gives back `n` bytes of `class` that `site` held (acknowledged,
    /// handed back, refused). More than it holds is a bookkeeping bug.
    pub(crate) fn release(
        &mut self,
        site: &mut SiteOut,
        class: usize,
        n: u64,
    ) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let Some(left) = site.held[class].checked_sub(n) else {
            return Err(format!(
                "{n} bytes of class {class} given back by an entry holding {}",
                site.held[class]
            ));
        };
        site.held[class] = left;
        self.bytes -= n;
        if site.bytes() == 0 {
            self.holders -= 1;
        }
        Ok(())
    }

    /// Gives back what acknowledgements freed.
    pub(crate) fn release_freed(
        &mut self,
        site: &mut SiteOut,
        freed: &Freed,
    ) -> Result<(), String> {
        for (class, &n) in freed.by_class.iter().enumerate() {
            self.release(site, class, n)?;
        }
        Ok(())
    }

    /// Gives back the bytes of `m`.
    pub(crate) fn release_msg(&mut self, site: &mut SiteOut, m: &OutMessage) -> Result<(), String> {
        self.release(site, m.share_class(), m.footprint())
    }

    /// Moves the bytes of `msgs` from `from` to `to`, entries of this
    /// node (a merge): neither bound is asked, the node's count stays.
    pub(crate) fn move_bytes(
        &mut self,
        from: &mut SiteOut,
        to: &mut SiteOut,
        msgs: &[OutMessage],
    ) -> Result<(), String> {
        for m in msgs {
            let (class, n) = (m.share_class(), m.footprint());
            let before = to.bytes();
            self.release(from, class, n)?;
            to.held[class] += n;
            self.bytes += n;
            if before == 0 {
                self.holders += 1;
            }
        }
        Ok(())
    }

    /// `w` waits at entry `key` (`site`) in its class's line: its ticket.
    pub(crate) fn join(&mut self, key: SiteId, site: &mut SiteOut, w: Waiting) -> Ticket {
        let class = w.msg.share_class();
        let lines = site.lines.get_or_insert_with(Box::default);
        let ticket = lines.turns[class].join();
        lines.waiting[class].insert(ticket, w);
        self.waiters.insert(key);
        self.sends_waiting += 1;
        self.waiting_peak = self.waiting_peak.max(self.sends_waiting);
        ticket
    }

    /// Every send waiting at entry `key` (`site`), class by class, each
    /// class in its line's order; the entry's lines are gone (its site
    /// failed, or it merged into another).
    pub(crate) fn leave(&mut self, key: SiteId, site: &mut SiteOut) -> Vec<(usize, Waiting)> {
        self.waiters.remove(&key);
        let all = site.take_waiting();
        self.sends_waiting -= all.len();
        all
    }

    /// Takes the waiting request `corr` out of its line at entry `key`
    /// (`site`), its turn given up.
    pub(crate) fn give_up(
        &mut self,
        key: SiteId,
        site: &mut SiteOut,
        corr: u64,
    ) -> Option<Waiting> {
        let w = site.give_up(corr)?;
        self.sends_waiting -= 1;
        if !site.waiting() {
            self.waiters.remove(&key);
        }
        Some(w)
    }

    /// How many sends wait in the lines of all its entries.
    pub(crate) fn sends_waiting(&self) -> usize {
        self.sends_waiting
    }

    /// The send whose turn it is in `class`'s line at `site`, if its
    /// bytes fit now (reserved for it, and the line moves on).
    pub(crate) fn serve(&mut self, site: &mut SiteOut, class: usize) -> Option<Waiting> {
        let (ticket, n) = {
            let (t, w) = site.lines.as_ref()?.head(class)?;
            (t, w.msg.footprint())
        };
        if !self.reserve_now(site, class, n) {
            return None;
        }
        let lines = site.lines.as_mut().expect("checked above");
        lines.turns[class].served(ticket);
        let w = lines.waiting[class].remove(&ticket).expect("found above");
        if lines.waiting.iter().all(BTreeMap::is_empty) {
            site.lines = None;
        }
        self.sends_waiting -= 1;
        Some(w)
    }

    /// A waiting sender at `site` that could go and does not: its turn has
    /// room now (a release that woke nobody), or nobody's turn comes (a
    /// line that lost its head). `None` if every line is as it must be.
    pub(crate) fn stuck(&self, site: &SiteOut) -> Option<String> {
        let lines = site.lines.as_ref()?;
        for class in 0..CLASSES {
            let waiting = &lines.waiting[class];
            if waiting.is_empty() {
                continue;
            }
            let Some((_, w)) = lines.head(class) else {
                return Some(format!(
                    "{} sends of class {class} wait and none has its turn",
                    waiting.len()
                ));
            };
            if self.fits(site, class, w.msg.footprint()) {
                return Some(format!(
                    "a send of class {class} waits for room it has ({} bytes held, the node {})",
                    site.bytes(),
                    self.bytes
                ));
            }
        }
        None
    }

    /// Checks the node's count against its entries' (`sites`: every
    /// entry's holdings and whether senders wait there, by key).
    pub(crate) fn check<'a>(
        &self,
        sites: impl Iterator<Item = (SiteId, &'a SiteOut)>,
    ) -> Result<(), String> {
        let (mut bytes, mut holders, mut waiting) = (0, 0, 0);
        for (key, site) in sites {
            bytes += site.bytes();
            holders += usize::from(site.bytes() > 0);
            waiting += site.waiting_count();
            if site.waiting() != self.waiters.contains(&key) {
                return Err(format!(
                    "the node's list of entries with waiting senders is wrong about {key}"
                ));
            }
            if let Some(what) = self.stuck(site) {
                return Err(format!("at the entry for {key}: {what}"));
            }
        }
        if bytes != self.bytes || holders != self.holders {
            return Err(format!(
                "the node counts {} output bytes in {} entries, its entries hold {bytes} in {holders}",
                self.bytes, self.holders
            ));
        }
        if waiting != self.sends_waiting {
            return Err(format!(
                "the node counts {} sends waiting for room, its entries' lines hold {waiting}",
                self.sends_waiting
            ));
        }
        if self.bytes > self.node_bound {
            return Err(format!(
                "the node holds {} output bytes, above its bound {}",
                self.bytes, self.node_bound
            ));
        }
        Ok(())
    }

    /// Bytes held by all entries.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use sitenet_protocols::base::priority::Priority;

    fn msg(priority: Priority, len: usize) -> OutMessage {
        OutMessage::new(
            priority,
            1,
            Bytes::new(),
            smallvec::smallvec![Bytes::from(vec![0u8; len])],
        )
    }

    fn waiting(priority: Priority, len: usize, id: u64) -> Waiting {
        Waiting {
            msg: msg(priority, len),
            id,
            to: SiteId(1),
        }
    }

    const KEY: SiteId = SiteId(3);

    #[test]
    fn a_send_beyond_the_bound_waits_and_is_served_in_order_when_room_frees() {
        let mut node = NodeOut::new(10_000, 20_000);
        let mut site = SiteOut::default();
        let low = Priority::ALL[0];
        let first = msg(low, 6_000);
        let (class, n) = (first.share_class(), first.footprint());
        assert!(
            node.try_reserve(&mut site, class, n),
            "an empty entry takes any message"
        );
        assert!(
            !node.try_reserve(&mut site, class, n),
            "the second is beyond the bound"
        );
        node.join(KEY, &mut site, waiting(low, 6_000, 1));
        node.join(KEY, &mut site, waiting(low, 10, 2));
        // A small one of the same class may not pass the waiting ones.
        assert!(!node.try_reserve(&mut site, class, 100));
        assert!(node.serve(&mut site, class).is_none(), "no room yet");
        assert_eq!(
            node.stuck(&site),
            None,
            "waiting for room that is not there"
        );
        assert_eq!(node.check([(KEY, &site)].into_iter()), Ok(()));
        node.release_msg(&mut site, &first).unwrap();
        assert!(node.stuck(&site).is_some(), "room now: a wake-up is owed");
        let ids: Vec<u64> = std::iter::from_fn(|| node.serve(&mut site, class))
            .map(|w| w.id)
            .collect();
        assert_eq!(ids, [1, 2], "served in the order they waited");
        assert!(!site.waiting());
        node.waiters.remove(&KEY);
        assert_eq!(node.check([(KEY, &site)].into_iter()), Ok(()));
    }

    #[test]
    fn another_class_keeps_its_reserve_while_one_class_waits() {
        let mut node = NodeOut::new(100_000, 200_000);
        let mut site = SiteOut::default();
        let (low, high) = (Priority::ALL[0], Priority::ALL[3]);
        let big = msg(low, 90_000);
        assert!(node.try_reserve(&mut site, big.share_class(), big.footprint()));
        let small = msg(low, 10_000);
        assert!(!node.try_reserve(&mut site, small.share_class(), small.footprint()));
        node.join(KEY, &mut site, waiting(low, 10_000, 1));
        let urgent = msg(high, 1_000);
        assert!(
            node.try_reserve(&mut site, urgent.share_class(), urgent.footprint()),
            "a level-4 send is not refused by a level-1 backlog"
        );
    }

    #[test]
    fn bookkeeping_errors_are_reported() {
        let mut node = NodeOut::new(10_000, 20_000);
        let mut site = SiteOut::default();
        let m = msg(Priority::ALL[1], 100);
        assert!(
            node.release_msg(&mut site, &m).is_err(),
            "given back, never held"
        );
        assert!(node.try_reserve(&mut site, m.share_class(), m.footprint()));
        let other = SiteOut::default();
        let err = node
            .check([(KEY, &other)].into_iter())
            .expect_err("the node counts bytes its entries do not hold");
        assert!(err.contains("counts"), "{err}");
        node.join(KEY, &mut site, waiting(Priority::ALL[1], 100_000, 7));
        node.waiters.clear();
        let err = node.check([(KEY, &site)].into_iter()).unwrap_err();
        assert!(err.contains("waiting senders"), "{err}");
    }

    /// The node's count of waiting sends (what its application sees)
    /// follows every way a send stops waiting: served, given up, handed
    /// back or moved with its entry; the audit compares it with the lines.
    #[test]
    fn the_count_of_waiting_sends_follows_every_way_out_of_a_line() {
        let mut node = NodeOut::new(10_000, 20_000);
        let mut site = SiteOut::default();
        let low = Priority::ALL[0];
        let first = msg(low, 9_000);
        assert!(node.try_reserve(&mut site, first.share_class(), first.footprint()));
        let mut request = waiting(low, 5_000, 2);
        request.msg.kind = MessageKind::Request;
        request.msg.corr = 77;
        node.join(KEY, &mut site, waiting(low, 5_000, 1));
        node.join(KEY, &mut site, request);
        node.join(KEY, &mut site, waiting(low, 9_000, 3));
        assert_eq!((node.sends_waiting(), node.waiting_peak), (3, 3));
        assert_eq!(node.give_up(KEY, &mut site, 77).map(|w| w.id), Some(2));
        assert!(node.give_up(KEY, &mut site, 77).is_none(), "once");
        assert_eq!(node.sends_waiting(), 2);
        node.release_msg(&mut site, &first).unwrap();
        assert_eq!(
            node.serve(&mut site, first.share_class()).map(|w| w.id),
            Some(1)
        );
        assert_eq!(node.sends_waiting(), 1);
        assert_eq!(node.check([(KEY, &site)].into_iter()), Ok(()));
        let left: Vec<u64> = node
            .leave(KEY, &mut site)
            .into_iter()
            .map(|(_, w)| w.id)
            .collect();
        assert_eq!(left, [3]);
        assert_eq!((node.sends_waiting(), node.waiting_peak), (0, 3));
        assert!(node.waiters.is_empty());
        assert_eq!(node.check([(KEY, &site)].into_iter()), Ok(()));
        // A count the lines do not bear out is reported.
        node.sends_waiting = 1;
        let err = node.check([(KEY, &site)].into_iter()).unwrap_err();
        assert!(err.contains("sends waiting"), "{err}");
    }

    #[test]
    fn a_merge_moves_bytes_without_changing_the_node_count() {
        let mut node = NodeOut::new(10_000, 20_000);
        let (mut from, mut to) = (SiteOut::default(), SiteOut::default());
        let msgs = [msg(Priority::ALL[0], 500), msg(Priority::ALL[2], 700)];
        for m in &msgs {
            assert!(node.try_reserve(&mut from, m.share_class(), m.footprint()));
        }
        let before = node.bytes();
        node.move_bytes(&mut from, &mut to, &msgs).unwrap();
        assert_eq!(
            (from.bytes(), to.bytes(), node.bytes()),
            (0, before, before)
        );
        let entries = [(KEY, &from), (SiteId(5), &to)];
        assert_eq!(node.check(entries.into_iter()), Ok(()));
    }
}
