//! The node's pending requests as a sans-IO table: which reply may
//! complete a request, when a
//! request ends by its deadline, and which requests a failed site takes
//! with it. Time is an argument and nothing here waits: the runtime keeps
//! one table per node, sleeps until [`RequestTable::poll_timeout`] and
//! hands whatever it gets back (a reply future, a cooperation) to whoever
//! awaits it.
//!
//! The rules:
//!
//! * **Who may answer.** A plain reply completes a request only if it comes
//!   from the site the request was sent to: another site cannot complete,
//!   or forge a reply to, a request it never received
//!   ([`Reply::FromAnotherSite`]: discarded and counted). A delegated reply
//!   may come from any site: its correlation number, drawn at random and
//!   unguessable, proves the request went through it (docs/protocol.md
//!   §2.6).
//! * **Deadlines.** A request may have one; [`expire`](RequestTable::expire)
//!   ends, earliest first, every request whose deadline is at or before
//!   `now`, and a reply that comes later is [`Reply::Unknown`]. A request
//!   without one (a cooperation's, which has the cooperation's wait) ends
//!   only by a reply, its site's failure, or being forgotten.
//! * **A failed site** takes every request awaiting it
//!   ([`fail_site`](RequestTable::fail_site)).
//!
//! Which site is "the same" is the caller's to say (`same`): the runtime's
//! entries merge when two turn out to be one site, so identity is not
//! equality of keys.
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sitenet_protocols::node::requests::{Reply, RequestTable};
//!
//! let t0 = Instant::now(); // a virtual clock: the table never reads one
//! let s = Duration::from_secs;
//! let mut t: RequestTable<&str, &str> = RequestTable::new();
//! t.register(1, "b", "future 1", Some((t0 + s(5), s(5))));
//! t.register(2, "c", "future 2", Some((t0 + s(1), s(1))));
//! assert_eq!(t.poll_timeout(), Some(t0 + s(1)));
//! let same = |a: &&str, b: &&str| a == b;
//! // Site c answers request 1, which went to b: refused.
//! assert!(matches!(t.reply(1, &"c", false, same), Reply::FromAnotherSite));
//! // b answers it: complete.
//! assert!(matches!(t.reply(1, &"b", false, same), Reply::Complete("future 1")));
//! // Request 2 times out; its late reply is unknown.
//! assert_eq!(t.expire(t0 + s(2)), [(2, "future 2", s(1), "c")]);
//! assert!(matches!(t.reply(2, &"c", false, same), Reply::Unknown));
//! assert!(t.is_empty());
//! ```

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::base::timer::TimerQueue;

/// One pending request.
#[derive(Debug)]
struct Pending<S, W> {
    /// The site it was sent to.
    site: S,
    /// Who awaits the reply.
    waiter: W,
    /// When it ends unanswered, and after how long.
    deadline: Option<(Instant, Duration)>,
}

/// What a reply did to the table.
#[derive(Debug)]
pub enum Reply<W> {
    /// It completes the request: here is who awaits it.
    Complete(W),
    /// The request exists but went to another site, and the reply is not a
    /// delegated one: discard it (and count it).
    FromAnotherSite,
    /// No such request: it completed, timed out or was forgotten already
    /// (a late reply), or never existed.
    Unknown,
}

/// The pending requests of a node, keyed by correlation number: `S` names
/// the site a request went to, `W` who awaits the reply, `H` hashes the
/// correlation numbers (a driver that registers one per request may pick a
/// faster hasher than std's: the numbers are its own random draws). Each
/// costs one map entry, and one [`TimerQueue`] entry if it has a deadline:
/// request deadlines follow the contract of every other wait of the
/// protocol (`protocols::timer`), a deadline taken once is consumed.
#[derive(Debug)]
pub struct RequestTable<S, W, H = std::collections::hash_map::RandomState> {
    pending: HashMap<u64, Pending<S, W>, H>,
    /// Deadlines, earliest first (ties by correlation number).
    deadlines: TimerQueue<u64>,
}

impl<S, W, H: Default> Default for RequestTable<S, W, H> {
    fn default() -> Self {
        Self {
            pending: HashMap::default(),
            deadlines: TimerQueue::default(),
        }
    }
}

impl<S, W> RequestTable<S, W> {
    /// An empty table hashing with std's hasher.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S, W, H: std::hash::BuildHasher> RequestTable<S, W, H> {
    /// Registers request `corr`, sent to `site`, awaited by `waiter`, ending
    /// unanswered at `deadline` (the instant and the timeout it came from;
    /// `None`: only a reply, a failure or [`forget`](Self::forget) end it).
    /// Returns true if its deadline is now the earliest: a driver sleeping
    /// until a later one must wake. A correlation number already pending
    /// replaces that request (the runtime draws them at random: 2^-64).
    pub fn register(
        &mut self,
        corr: u64,
        site: S,
        waiter: W,
        deadline: Option<(Instant, Duration)>,
    ) -> bool {
        if let Some(old) = self.pending.insert(
            corr,
            Pending {
                site,
                waiter,
                deadline,
            },
        ) {
            self.unschedule(corr, &old);
        }
        match deadline {
            Some((at, _)) => self.deadlines.set(corr, at),
            None => false,
        }
    }

    fn unschedule(&mut self, corr: u64, p: &Pending<S, W>) {
        if let Some((at, _)) = p.deadline {
            self.deadlines.stop(corr, at);
        }
    }

    fn take(&mut self, corr: u64) -> Option<Pending<S, W>> {
        let p = self.pending.remove(&corr)?;
        self.unschedule(corr, &p);
        Some(p)
    }

    /// Ends request `corr` without a reply (its awaiter gave up); returns
    /// who awaited it.
    pub fn cancel(&mut self, corr: u64) -> Option<W> {
        self.take(corr).map(|p| p.waiter)
    }

    /// A reply to `corr` arrived from site `from` (`delegated`: a
    /// delegated reply, which any site may send). `same` says whether the
    /// site a request was sent to is `from`. See [`Reply`].
    pub fn reply<F: ?Sized>(
        &mut self,
        corr: u64,
        from: &F,
        delegated: bool,
        same: impl Fn(&S, &F) -> bool,
    ) -> Reply<W> {
        match self.pending.get(&corr) {
            None => Reply::Unknown,
            Some(p) if delegated || same(&p.site, from) => match self.take(corr) {
                Some(p) => Reply::Complete(p.waiter),
                None => Reply::Unknown,
            },
            Some(_) => Reply::FromAnotherSite,
        }
    }

    /// The earliest deadline, for the driver's one sleep.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.next_deadline()
    }

    /// Ends every request whose deadline is at or before `now`, earliest
    /// first: `(corr, waiter, timeout, site)` each (the site, so the driver
    /// can say why no reply came: an unreachable site is not a slow one).
    /// Ended requests are gone: a reply that comes later is
    /// [`Reply::Unknown`].
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, W, Duration, S)> {
        let due: Vec<u64> = self.deadlines.expire(now).collect();
        due.into_iter()
            .filter_map(|corr| {
                let p = self.pending.remove(&corr)?;
                let timeout = p.deadline.map_or(Duration::ZERO, |d| d.1);
                Some((corr, p.waiter, timeout, p.site))
            })
            .collect()
    }

    /// Ends every request sent to a site `failed` says has failed; returns
    /// their awaiters, in no particular order.
    pub fn fail_site(&mut self, failed: impl Fn(&S) -> bool) -> Vec<W> {
        let corrs: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| failed(&p.site))
            .map(|(&c, _)| c)
            .collect();
        corrs
            .into_iter()
            .filter_map(|c| self.take(c).map(|p| p.waiter))
            .collect()
    }

    /// Forgets requests `corrs` (an ended cooperation's): a reply that comes
    /// later is [`Reply::Unknown`].
    pub fn forget(&mut self, corrs: &[u64]) {
        for &c in corrs {
            self.take(c);
        }
    }

    /// Ends every request (the node stops); returns their awaiters.
    pub fn drain(&mut self) -> Vec<W> {
        self.deadlines.clear();
        self.pending.drain().map(|(_, p)| p.waiter).collect()
    }

    /// Every pending request's number and awaiter, in no particular order
    /// (for a driver's own checks).
    pub fn awaiters(&self) -> impl Iterator<Item = (u64, &W)> {
        self.pending.iter().map(|(&c, p)| (c, &p.waiter))
    }

    /// How many requests are pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// No request is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &u32, b: &u32) -> bool {
        a == b
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn only_the_site_asked_completes_a_plain_reply_any_site_a_delegated_one() {
        let t0 = Instant::now();
        let mut t = RequestTable::new();
        t.register(7, 1u32, "w7", Some((t0 + s(5), s(5))));
        t.register(8, 1u32, "w8", None);
        assert!(matches!(
            t.reply(7, &2, false, same),
            Reply::FromAnotherSite
        ));
        assert_eq!(t.len(), 2, "a refused reply leaves the request pending");
        assert!(matches!(t.reply(7, &1, false, same), Reply::Complete("w7")));
        // Completed: its deadline went with it.
        assert_eq!(t.poll_timeout(), None);
        // A delegated reply from another site completes request 8.
        assert!(matches!(t.reply(8, &3, true, same), Reply::Complete("w8")));
        assert!(t.is_empty());
        assert!(matches!(t.reply(8, &1, false, same), Reply::Unknown));
        assert!(matches!(t.reply(99, &1, true, same), Reply::Unknown));
    }

    #[test]
    fn deadlines_end_requests_earliest_first_and_only_when_due() {
        let t0 = Instant::now();
        let mut t = RequestTable::new();
        assert!(t.register(1, 0u32, 'a', Some((t0 + s(3), s(3)))));
        assert!(!t.register(2, 0u32, 'b', Some((t0 + s(9), s(9)))));
        assert!(
            t.register(3, 0u32, 'c', Some((t0 + s(1), s(1)))),
            "earlier than the driver's sleep: it must wake"
        );
        t.register(4, 0u32, 'd', None);
        assert_eq!(t.poll_timeout(), Some(t0 + s(1)));
        assert!(t.expire(t0).is_empty(), "nothing due yet");
        assert_eq!(t.expire(t0 + s(3)), [(3, 'c', s(1), 0), (1, 'a', s(3), 0)]);
        assert_eq!(t.poll_timeout(), Some(t0 + s(9)));
        assert!(matches!(t.reply(1, &0, false, same), Reply::Unknown));
        // The request without a deadline never expires.
        assert_eq!(t.expire(t0 + s(1000)), [(2, 'b', s(9), 0)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn cancel_forget_and_failure_remove_deadlines_too() {
        let t0 = Instant::now();
        let mut t = RequestTable::new();
        for c in 0..6u64 {
            t.register(c, (c % 2) as u32, c, Some((t0 + s(c + 1), s(c + 1))));
        }
        assert_eq!(t.cancel(0), Some(0));
        assert_eq!(t.cancel(0), None);
        t.forget(&[2, 4]);
        assert_eq!(t.poll_timeout(), Some(t0 + s(2)));
        let mut failed = t.fail_site(|site| *site == 1);
        failed.sort();
        assert_eq!(failed, [1, 3, 5]);
        assert!(t.is_empty());
        assert_eq!(t.poll_timeout(), None, "no deadline outlives its request");
    }

    #[test]
    fn a_correlation_number_registered_twice_keeps_one_deadline() {
        let t0 = Instant::now();
        let mut t = RequestTable::new();
        t.register(1, 0u32, "old", Some((t0 + s(1), s(1))));
        t.register(1, 0u32, "new", Some((t0 + s(5), s(5))));
        assert_eq!(t.poll_timeout(), Some(t0 + s(5)));
        assert_eq!(t.len(), 1);
        assert_eq!(t.drain(), ["new"]);
        assert_eq!(t.poll_timeout(), None);
    }
    /// Deadlines in the timer queue against a model: whatever mix of
    /// registrations, replies, cancels and clock steps, `expire` ends
    /// exactly the pending requests whose deadline is due, earliest first
    /// (ties by correlation number), and `poll_timeout` is the earliest
    /// deadline of a request still pending — no deadline outlives its
    /// request, none is returned twice.
    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        #[derive(Debug, Clone)]
        enum Op {
            Register(u64, Option<u64>),
            Reply(u64),
            Cancel(u64),
            Step(u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0u64..8, proptest::option::of(0u64..20)).prop_map(|(c, d)| Op::Register(c, d)),
                (0u64..8).prop_map(Op::Reply),
                (0u64..8).prop_map(Op::Cancel),
                (0u64..6).prop_map(Op::Step),
            ]
        }

        proptest! {
            #[test]
            fn expire_matches_the_model(ops in proptest::collection::vec(op(), 0..60)) {
                let t0 = Instant::now();
                let ms = Duration::from_millis;
                let mut now = 0u64;
                let mut t = RequestTable::new();
                // corr -> deadline (ms since t0), for pending requests.
                let mut model: BTreeMap<u64, Option<u64>> = BTreeMap::new();
                for op in ops {
                    match op {
                        Op::Register(c, d) => {
                            let at = d.map(|d| now + d);
                            let earliest = t.register(c, 0u32, c, at.map(|a| (t0 + ms(a), ms(a - now))));
                            model.insert(c, at);
                            let min = model.iter().filter_map(|(&k, &a)| a.map(|a| (a, k))).min();
                            prop_assert_eq!(earliest, at.is_some() && min == at.map(|a| (a, c)));
                        }
                        Op::Reply(c) => {
                            let r = t.reply(c, &0, false, |a: &u32, b: &u32| a == b);
                            match model.remove(&c) {
                                Some(_) => prop_assert!(matches!(r, Reply::Complete(w) if w == c)),
                                None => prop_assert!(matches!(r, Reply::Unknown)),
                            }
                        }
                        Op::Cancel(c) => {
                            prop_assert_eq!(t.cancel(c), model.remove(&c).map(|_| c));
                        }
                        Op::Step(d) => {
                            now += d;
                            let mut due: Vec<(u64, u64)> = model
                                .iter()
                                .filter_map(|(&k, &a)| a.filter(|&a| a <= now).map(|a| (a, k)))
                                .collect();
                            due.sort();
                            let ended: Vec<u64> = t.expire(t0 + ms(now)).into_iter().map(|e| e.0).collect();
                            let want: Vec<u64> = due.iter().map(|&(_, k)| k).collect();
                            prop_assert_eq!(&ended, &want);
                            for k in want {
                                model.remove(&k);
                            }
                        }
                    }
                    let next = model.values().flatten().min().map(|&a| t0 + ms(a));
                    prop_assert_eq!(t.poll_timeout(), next);
                    prop_assert_eq!(t.len(), model.len());
                }
            }
        }
    }
}
