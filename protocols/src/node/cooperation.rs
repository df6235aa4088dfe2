//! [`Cooperation`]: Paradis-Net's cooperation, as a state machine without
//! I/O. A cooperation is a set of expected replies, each described by a
//! receive descriptor ([`Expect`]: from one site or any, of one type or any,
//! with a size limit); it completes when every descriptor is filled. It
//! ends early when it is cancelled, when its wait times out, or when a
//! site a descriptor waits for fails. Scatter/gather to N sites and a
//! single request/reply are two uses of it.
//!
//! The rules:
//!
//! * A reply fills the first unfilled descriptor it matches, in the order
//!   the descriptors were added; a reply that matches none is refused
//!   ([`Offered::Unexpected`]), and so is any reply once the cooperation
//!   has ended ([`Offered::Ended`]): the caller discards and counts them.
//! * A body longer than the descriptor's limit is truncated to it, and its
//!   real size kept ([`Filled::size`]); a shorter one is fine.
//! * The end is final: complete, cancelled, timed out or failed, once.
//! * **Its requests end with it.** The requests sent for it are recorded
//!   ([`Cooperation::sent`]); once it has ended, [`Cooperation::take_requests`]
//!   hands them over, and the driver forgets them in its request table, so
//!   a reply that comes later is unknown there (discarded and counted), not
//!   offered to a cooperation that is over. A request sent after the end is
//!   refused at once (`sent` returns false).
//!
//! Sites are a type parameter `S` (the runtime's site handles), compared
//! with `==`.

use bytes::Bytes;

/// A receive descriptor: what one expected reply looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect<S> {
    /// The site it must come from (`None`: any site whose reply reaches the
    /// cooperation — the replies to its requests, and declared cooperation
    /// replies from any site).
    pub from: Option<S>,
    /// Its message type (`None`: any type).
    pub type_id: Option<u32>,
    /// Body bytes kept at most (`None`: all of them).
    pub max_body: Option<usize>,
}

impl<S> Expect<S> {
    /// A reply from any site, of any type, whole.
    pub fn any() -> Self {
        Self {
            from: None,
            type_id: None,
            max_body: None,
        }
    }

    fn matches(&self, from: &S, type_id: u32) -> bool
    where
        S: PartialEq,
    {
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::CoopIgnoresFrom) {
            return self.type_id.is_none_or(|t| t == type_id);
        }
        self.from.as_ref().is_none_or(|f| f == from) && self.type_id.is_none_or(|t| t == type_id)
    }
}

/// A reply that filled a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled<S> {
    /// The site it came from.
    pub from: S,
    /// Its message type.
    pub type_id: u32,
    /// Its typed header, still serialised.
    pub header: Bytes,
    /// Its body, truncated to the descriptor's limit.
    pub body: Bytes,
    /// The body's real size (more than `body.len()` if it was truncated).
    pub size: u64,
}

impl<S> Filled<S> {
    /// True if the body was longer than the descriptor allowed.
    pub fn truncated(&self) -> bool {
        self.size > self.body.len() as u64
    }
}

/// How a cooperation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End<S> {
    /// Every descriptor was filled.
    Complete,
    /// It was cancelled.
    Cancelled,
    /// Its wait timed out first.
    TimedOut,
    /// It was waited for with no descriptor to fill: it could never
    /// complete, so it ended at once instead of sleeping out its timeout
    /// (see [`Cooperation::wait_starts`]).
    NothingExpected,
    /// A site one of its unfilled descriptors waits for failed (or
    /// answered with an error).
    Failed {
        /// The site.
        site: S,
        /// Why.
        reason: String,
    },
}

/// What [`Cooperation::offer`] did with a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// It filled descriptor `index`; `complete` if that was the last one.
    Filled {
        /// The descriptor.
        index: usize,
        /// Every descriptor is filled now.
        complete: bool,
    },
    /// It matches no unfilled descriptor: discard it.
    Unexpected,
    /// The cooperation has ended: discard it.
    Ended,
}

/// See the module documentation.
///
/// # Example
///
/// A scatter/gather to sites `"a"` and `"b"` (any `PartialEq + Clone` type
/// names a site: the runtime uses its site handles):
///
/// ```
/// use bytes::Bytes;
/// use sitenet_protocols::node::cooperation::{Cooperation, End, Expect, Offered};
///
/// let mut c = Cooperation::new();
/// for site in ["a", "b"] {
///     // A reply of type 7 from `site`, its body kept to 4 bytes at most.
///     c.expect(Expect { from: Some(site), type_id: Some(7), max_body: Some(4) });
/// }
/// let (h, body) = (Bytes::new(), Bytes::from);
/// let filled = |index, complete| Offered::Filled { index, complete };
/// assert_eq!(c.offer("b", 7, h.clone(), body("yes")), filled(1, false));
/// assert_eq!(c.offer("c", 7, h.clone(), body("no")), Offered::Unexpected); // not asked
/// assert_eq!(c.offer("a", 7, h.clone(), body("maybe")), filled(0, true));
/// assert_eq!(c.end(), Some(&End::Complete));
/// assert_eq!(c.offer("a", 7, h, body("late")), Offered::Ended);
///
/// // The replies in the order the descriptors were added, truncated to their limit.
/// let replies: Vec<_> = c.filled().map(|f| f.expect("filled").clone()).collect();
/// assert_eq!((replies[0].from, &replies[0].body[..]), ("a", &b"mayb"[..]));
/// assert!(replies[0].truncated() && replies[0].size == 5);
/// assert_eq!((replies[1].from, &replies[1].body[..]), ("b", &b"yes"[..]));
/// ```
#[derive(Debug, Clone)]
pub struct Cooperation<S> {
    descriptors: Vec<(Expect<S>, Option<Filled<S>>)>,
    end: Option<End<S>>,
    /// Correlation numbers of the requests sent for it, until
    /// [`take_requests`](Self::take_requests) hands them over.
    requests: Vec<u64>,
}

impl<S> Default for Cooperation<S> {
    fn default() -> Self {
        Self {
            descriptors: Vec::new(),
            end: None,
            requests: Vec::new(),
        }
    }
}

impl<S: PartialEq + Clone> Cooperation<S> {
    /// A cooperation expecting nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a descriptor; returns its index (the order replies fill them
    /// in, and the order [`filled`](Self::filled) lists them).
    pub fn expect(&mut self, e: Expect<S>) -> usize {
        self.descriptors.push((e, None));
        self.descriptors.len() - 1
    }

    /// A reply from `from`: it fills the first unfilled descriptor it
    /// matches, truncated to that descriptor's limit.
    pub fn offer(&mut self, from: S, type_id: u32, header: Bytes, body: Bytes) -> Offered {
        if self.end.is_some() {
            return Offered::Ended;
        }
        let Some(index) = self
            .descriptors
            .iter()
            .position(|(e, f)| f.is_none() && e.matches(&from, type_id))
        else {
            return Offered::Unexpected;
        };
        let (e, slot) = &mut self.descriptors[index];
        let size = body.len() as u64;
        let body = match e.max_body {
            Some(max) if body.len() > max => body.slice(..max),
            _ => body,
        };
        *slot = Some(Filled {
            from,
            type_id,
            header,
            body,
            size,
        });
        let complete = self.descriptors.iter().all(|(_, f)| f.is_some());
        if complete {
            self.end = Some(End::Complete);
        }
        Offered::Filled { index, complete }
    }

    /// `site` failed (or answered with an error): the cooperation fails if
    /// an unfilled descriptor waits for that very site (one from any site
    /// may still be filled by another). Returns true if it ended now.
    pub fn site_failed(&mut self, site: &S, reason: &str) -> bool {
        if self.end.is_some() {
            return false;
        }
        let waits = self
            .descriptors
            .iter()
            .any(|(e, f)| f.is_none() && e.from.as_ref() == Some(site));
        if waits {
            self.end = Some(End::Failed {
                site: site.clone(),
                reason: reason.to_string(),
            });
        }
        waits
    }

    /// A wait for it starts. One that expects nothing could never
    /// complete: it ends at once with [`End::NothingExpected`] (a wait
    /// would otherwise sleep its whole timeout and report nothing
    /// missing). Returns true if it ended now.
    pub fn wait_starts(&mut self) -> bool {
        if self.descriptors.is_empty() {
            self.end_with(End::NothingExpected)
        } else {
            false
        }
    }

    /// Cancels it (unless it already ended). Returns true if it ended now.
    pub fn cancel(&mut self) -> bool {
        self.end_with(End::Cancelled)
    }

    /// Its wait timed out (unless it already ended). Returns true if it
    /// ended now.
    pub fn time_out(&mut self) -> bool {
        self.end_with(End::TimedOut)
    }

    fn end_with(&mut self, e: End<S>) -> bool {
        if self.end.is_some() {
            return false;
        }
        self.end = Some(e);
        true
    }

    /// How it ended, if it has.
    pub fn end(&self) -> Option<&End<S>> {
        self.end.as_ref()
    }

    /// Each descriptor's reply so far, in the order they were added.
    pub fn filled(&self) -> impl Iterator<Item = Option<&Filled<S>>> {
        self.descriptors.iter().map(|(_, f)| f.as_ref())
    }

    /// Descriptors not filled yet.
    pub fn missing(&self) -> usize {
        self.descriptors.iter().filter(|(_, f)| f.is_none()).count()
    }

    /// Request `corr` was registered for it (its reply will be offered
    /// here). False if it has ended already: the driver forgets the
    /// request at once, since nothing would ever hand it over.
    pub fn sent(&mut self, corr: u64) -> bool {
        if self.end.is_some() {
            return false;
        }
        self.requests.push(corr);
        true
    }

    /// Once it has ended, the requests sent for it (each once: they are
    /// handed over, and a second call returns none); the driver forgets
    /// them in its request table. Before the end, none: they still await
    /// their replies.
    pub fn take_requests(&mut self) -> Vec<u64> {
        if self.end.is_none() {
            return Vec::new();
        }
        #[cfg(feature = "planted-bugs")]
        if crate::base::planted::active(crate::base::planted::Bug::CoopKeepsRequests) {
            self.requests.pop();
        }
        std::mem::take(&mut self.requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_with_nothing_expected_ends_at_once() {
        let mut c: Cooperation<&str> = Cooperation::new();
        assert!(c.wait_starts());
        assert_eq!(c.end(), Some(&End::NothingExpected));
        assert!(!c.wait_starts(), "ended once");
        assert!(!c.time_out());
        let mut c: Cooperation<&str> = Cooperation::new();
        c.expect(Expect::any());
        assert!(!c.wait_starts(), "something to wait for");
        assert_eq!(c.end(), None);
    }
    use proptest::prelude::*;

    fn from(s: u8) -> Expect<u8> {
        Expect {
            from: Some(s),
            ..Expect::any()
        }
    }

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn scatter_gather_completes_when_every_site_answered() {
        let mut c = Cooperation::new();
        for s in 1..=3 {
            c.expect(from(s));
        }
        assert_eq!(
            c.offer(2, 9, Bytes::new(), body(1)),
            Offered::Filled {
                index: 1,
                complete: false
            }
        );
        assert_eq!(
            c.offer(2, 9, Bytes::new(), body(1)),
            Offered::Unexpected,
            "one reply per descriptor"
        );
        assert_eq!(
            c.offer(4, 9, Bytes::new(), body(1)),
            Offered::Unexpected,
            "a site not asked"
        );
        c.offer(3, 9, Bytes::new(), body(1));
        assert_eq!(c.end(), None);
        assert_eq!(c.missing(), 1);
        assert_eq!(
            c.offer(1, 9, Bytes::new(), body(1)),
            Offered::Filled {
                index: 0,
                complete: true
            }
        );
        assert_eq!(c.end(), Some(&End::Complete));
        assert_eq!(c.offer(1, 9, Bytes::new(), body(1)), Offered::Ended, "late");
        let froms: Vec<u8> = c.filled().map(|f| f.unwrap().from).collect();
        assert_eq!(froms, [1, 2, 3]);
    }

    #[test]
    fn a_type_descriptor_takes_only_its_type_and_any_takes_the_rest() {
        let mut c = Cooperation::new();
        c.expect(Expect {
            type_id: Some(5),
            ..Expect::any()
        });
        c.expect(Expect::<u8>::any());
        assert_eq!(
            c.offer(1, 6, Bytes::new(), body(0)),
            Offered::Filled {
                index: 1,
                complete: false
            }
        );
        assert_eq!(c.offer(1, 6, Bytes::new(), body(0)), Offered::Unexpected);
        assert_eq!(
            c.offer(2, 5, Bytes::new(), body(0)),
            Offered::Filled {
                index: 0,
                complete: true
            }
        );
    }

    #[test]
    fn a_long_body_is_truncated_and_its_size_kept_a_short_one_is_fine() {
        let mut c = Cooperation::new();
        let limit = |n| Expect {
            max_body: Some(n),
            ..Expect::<u8>::any()
        };
        c.expect(limit(10));
        c.expect(limit(10));
        c.offer(1, 1, Bytes::new(), body(25));
        c.offer(1, 1, Bytes::new(), body(3));
        let f: Vec<_> = c.filled().map(|f| f.unwrap().clone()).collect();
        assert_eq!(
            (f[0].body.len(), f[0].size, f[0].truncated()),
            (10, 25, true)
        );
        assert_eq!(
            (f[1].body.len(), f[1].size, f[1].truncated()),
            (3, 3, false)
        );
    }

    #[test]
    fn a_failed_site_ends_it_only_if_a_descriptor_waits_for_that_site() {
        let mut c = Cooperation::new();
        c.expect(from(1));
        c.expect(Expect::any());
        assert!(!c.site_failed(&2, "gone"), "another site may fill `any`");
        assert_eq!(c.end(), None);
        assert!(c.site_failed(&1, "gone"));
        assert_eq!(
            c.end(),
            Some(&End::Failed {
                site: 1,
                reason: "gone".into()
            })
        );
        assert!(!c.cancel(), "the end is final");
    }

    #[test]
    fn cancel_and_timeout_end_it_once_and_refuse_later_replies() {
        let mut c = Cooperation::new();
        c.expect(from(1));
        assert!(c.cancel());
        assert!(!c.time_out());
        assert_eq!(c.end(), Some(&End::Cancelled));
        assert_eq!(c.offer(1, 1, Bytes::new(), body(1)), Offered::Ended);
        let mut c = Cooperation::new();
        c.expect(from(1));
        assert!(c.time_out());
        assert_eq!(c.end(), Some(&End::TimedOut));
    }

    #[test]
    fn its_requests_are_handed_over_once_when_it_ends_and_none_after() {
        let mut c = Cooperation::new();
        c.expect(from(1));
        c.expect(from(2));
        assert!(c.sent(10) && c.sent(11));
        assert!(c.take_requests().is_empty(), "still awaiting their replies");
        c.offer(1, 0, Bytes::new(), body(1));
        assert!(c.time_out());
        assert_eq!(c.take_requests(), [10, 11], "every one, the answered too");
        assert!(c.take_requests().is_empty(), "handed over once");
        assert!(!c.sent(12), "a request after the end is refused");
        assert!(c.take_requests().is_empty());
    }

    proptest! {
        /// Against a model: whatever the descriptors and the replies, a
        /// reply fills the first unfilled matching descriptor or none, and
        /// the cooperation completes exactly when all are filled.
        #[test]
        fn fills_first_match_and_completes_when_all_filled(
            ds in prop::collection::vec((prop::option::of(0u8..3), prop::option::of(0u32..3)), 1..6),
            rs in prop::collection::vec((0u8..3, 0u32..3), 0..12),
        ) {
            let mut c = Cooperation::new();
            for (f, t) in &ds {
                c.expect(Expect { from: *f, type_id: *t, max_body: None });
            }
            let mut model: Vec<bool> = vec![false; ds.len()];
            for (s, t) in rs {
                let ended = model.iter().all(|f| *f);
                let first = ds.iter().zip(&model).position(|((f, ty), done)| {
                    !done && f.is_none_or(|f| f == s) && ty.is_none_or(|ty| ty == t)
                });
                let got = c.offer(s, t, Bytes::new(), Bytes::new());
                match (ended, first) {
                    (true, _) => prop_assert_eq!(got, Offered::Ended),
                    (false, None) => prop_assert_eq!(got, Offered::Unexpected),
                    (false, Some(i)) => {
                        model[i] = true;
                        let complete = model.iter().all(|f| *f);
                        prop_assert_eq!(got, Offered::Filled { index: i, complete });
                    }
                }
                prop_assert_eq!(c.end() == Some(&End::Complete), model.iter().all(|f| *f));
            }
        }
    }
}
