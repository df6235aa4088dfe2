//! Dials on a peer's word: how many connections the node makes to
//! addresses only a peer named, at once.
//!
//! A forwarded request names its origin, and a `SiteRef` names a site, at
//! addresses the peer chose ([`claims`](crate::node::claims)): an entry made on
//! that word dials there to reply or to send. Claims bound what one peer
//! makes the node *create*; this module bounds what those entries make it
//! *dial*, so that peers cannot turn the node into an amplifier against a
//! third party (forty peers naming fresh origins at one host made a node
//! hold hundreds of connections to it at once). A dial on a peer's word is
//! allowed only while, counting it, the dials on peers' words are within
//! [`DialBounds`]:
//!
//! * **node-wide** ([`DialBounds::node`]): what all peers together make the
//!   node dial;
//! * **per source** ([`DialBounds::per_source`]): what the peers from one
//!   source address ([`Source`]: an IPv4 address, an IPv6 /64) make it
//!   dial, so one source never takes the whole node-wide bound;
//! * **per destination host** ([`DialBounds::per_host`], [`DialHost`]):
//!   what the node dials at one host (an IP address, an IPv6 /64, a host
//!   name, or this host for `mem:` and `unix:`), whoever asked.
//!
//! Over a bound the dial is **refused**, not queued: the attempt fails at
//! once as if the address did not connect (the entry tries its next
//! address, or gives up). A queue would hold every waiting entry, its
//! actor and its messages for as long as the dials ahead of it take (a
//! silent host holds each for the whole handshake timeout), and would need
//! its own bound and its own fairness between sources; a refusal holds
//! nothing, and costs the honest case little: an origin the node does not
//! know is a claim only, and its requester can ask again.
//!
//! An entry leaves this ledger when its site is proven (it is then an
//! ordinary site, see [`Action::Proven`](crate::connection::com_object::Action::Proven)) or when
//! it leaves the table. When the *asking* peer goes (it fails for good, or
//! its entry leaves), the forwarded origins it named are abandoned:
//! [`DialBound::asker_gone`] (and [`DialBound::forget`]) return them, the driver ends their dials and
//! fails them at once, and any later dial of theirs is refused
//! ([`DialRefused::AskerGone`]); a reply to a request made through a peer
//! that is gone is not worth a connection to an address it named. Sites
//! named by a peer's `SiteRef`s stay (the user holds them), and their
//! dials keep counting against the peer's source.
//!
//! Keys are the driver's (a slab index), as in [`Claims`](crate::node::claims::Claims);
//! the driver calls [`DialBound::forget`] when an entry leaves, before its
//! key can name another. A dial's [`DialTicket`] tells its end from that of
//! a later dial under a reused key.
//!
//! # Example
//!
//! ```
//! use std::net::IpAddr;
//! use sitenet_protocols::slots::admission::Source;
//! use sitenet_protocols::slots::dial_bound::{DialBound, DialBounds, DialHost, DialRefused};
//!
//! let bounds = DialBounds { node: 64, per_source: 16, per_host: 1 };
//! let mut dials = DialBound::new(bounds);
//! let attacker = Source::of(Some(IpAddr::from([10, 0, 0, 1])));
//! // Peer 1 forwards requests naming origins 10 and 11 at one host.
//! dials.named(10, 1, attacker, true);
//! dials.named(11, 1, attacker, true);
//! let ticket = dials.dial(10, DialHost::of("tcp:192.0.2.7:7000")).unwrap();
//! assert!(ticket.is_some(), "counted");
//! assert_eq!(
//!     dials.dial(11, DialHost::of("tcp:192.0.2.7:7001")),
//!     Err(DialRefused::Host { limit: 1 })
//! );
//! // An entry the user named is not on a peer's word: not counted.
//! assert_eq!(dials.dial(99, DialHost::of("tcp:192.0.2.7:7002")), Ok(None));
//! // Peer 1 goes: its origins are abandoned, their dials end.
//! let mut abandoned = dials.forget(1);
//! abandoned.sort();
//! assert_eq!(abandoned, [10, 11]);
//! assert_eq!(dials.dialing(), 0);
//! assert_eq!(dials.dial(11, DialHost::of("tcp:192.0.2.8:7000")), Err(DialRefused::AskerGone));
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::IpAddr;

use crate::slots::admission::Source;

/// The bounds on dials on peers' words (see the module documentation).
/// Each is at least 1 ([`normalised`](Self::normalised)): a node that
/// dialed nothing on a peer's word could never answer a delegated
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialBounds {
    /// Dials on any peers' words at once, node-wide. 64 by default.
    pub node: u32,
    /// Dials on the words of the peers from one source address at once.
    /// 16 by default.
    pub per_source: u32,
    /// Dials on peers' words to one destination host at once. 4 by
    /// default.
    pub per_host: u32,
}

impl Default for DialBounds {
    fn default() -> Self {
        Self {
            node: 64,
            per_source: 16,
            per_host: 4,
        }
    }
}

impl DialBounds {
    /// Each bound raised to at least 1.
    pub fn normalised(self) -> Self {
        Self {
            node: self.node.max(1),
            per_source: self.per_source.max(1),
            per_host: self.per_host.max(1),
        }
    }
}

/// The host a dial goes to, as [`DialBounds::per_host`] counts it: an IP
/// address (an IPv6 one by its /64, an IPv4-mapped one as IPv4, as
/// [`Source`] counts them), a host name (lower-cased), or this host
/// (`mem:` and `unix:` addresses, which reach nothing else).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DialHost {
    /// An IP address, normalised as a [`Source`].
    Ip(Source),
    /// A host name, lower-cased.
    Name(Box<str>),
    /// This host: an in-process or Unix-socket address.
    ThisHost,
}

impl DialHost {
    /// The host of `address` (`SCHEME:HOST:PORT`, `SCHEME:[V6]:PORT`,
    /// `unix:PATH`, `mem:NAME`): for a scheme other than `mem` and `unix`
    /// (TCP, TLS, a plugged transport), the part before the last `:PORT`.
    pub fn of(address: &str) -> Self {
        let Some((scheme, rest)) = address.split_once(':') else {
            return Self::Name(address.to_ascii_lowercase().into());
        };
        if scheme == "mem" || scheme == "unix" {
            return Self::ThisHost;
        }
        let host = match rest.rsplit_once(':') {
            Some((h, port)) if port.parse::<u16>().is_ok() => h,
            _ => rest,
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match host.parse::<IpAddr>() {
            Ok(ip) => Self::Ip(Source::of(Some(ip))),
            Err(_) => Self::Name(host.to_ascii_lowercase().into()),
        }
    }
}

/// Why a dial on a peer's word was refused: the attempt fails at once
/// (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialRefused {
    /// The node dials its bound on peers' words already.
    #[error("this node already dials {limit} addresses peers named (NodeConfig::peer_word_dials); not dialing another until one ends")]
    Node {
        /// The bound reached.
        limit: u32,
    },
    /// The peers from the asking peer's source address have the node dial
    /// their bound already.
    #[error("peers from this source address already have this node dial {limit} addresses they named (NodeConfig::peer_word_dials_per_source); not dialing another until one ends")]
    Source {
        /// The bound reached.
        limit: u32,
    },
    /// The node dials its bound at the destination host on peers' words
    /// already.
    #[error("this node already dials {limit} addresses peers named at this host (NodeConfig::peer_word_dials_per_host); not dialing another until one ends")]
    Host {
        /// The bound reached.
        limit: u32,
    },
    /// The peer that named this forwarded origin has gone: the reply is
    /// not worth a connection to an address it named.
    #[error(
        "the peer that forwarded the request naming this site has gone; its reply is not delivered"
    )]
    AskerGone,
}

/// One dial counted against the bounds: handed to [`DialBound::ended`]
/// when it ends (a later dial of an entry under the same key has another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DialTicket(u64);

/// An entry made on a peer's word.
#[derive(Debug, Clone)]
struct Named<K> {
    /// The peer whose word made it, while that peer's entry is there.
    asker: Option<K>,
    /// The asking peer's source address.
    source: Source,
    /// A forwarded origin: abandoned when its asker goes.
    forward: bool,
    /// Its dial in progress, if counted.
    dial: Option<(DialTicket, DialHost)>,
}

/// The dials on peers' words, and the entries that may make them (see the
/// module documentation).
#[derive(Debug, Clone)]
pub struct DialBound<K> {
    bounds: DialBounds,
    named: HashMap<K, Named<K>>,
    /// Asking peer → the entries its words made (and it still asks for).
    by_asker: HashMap<K, HashSet<K>>,
    dialing: u32,
    by_source: HashMap<Source, u32>,
    by_host: HashMap<DialHost, u32>,
    next_ticket: u64,
}

impl<K> Default for DialBound<K> {
    fn default() -> Self {
        Self::new(DialBounds::default())
    }
}

impl<K> DialBound<K> {
    /// No dials yet, within `bounds` (normalised).
    pub fn new(bounds: DialBounds) -> Self {
        Self {
            bounds: bounds.normalised(),
            named: HashMap::new(),
            by_asker: HashMap::new(),
            dialing: 0,
            by_source: HashMap::new(),
            by_host: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// The bounds in force.
    pub fn bounds(&self) -> DialBounds {
        self.bounds
    }

    /// Dials on peers' words in progress, node-wide.
    pub fn dialing(&self) -> u32 {
        self.dialing
    }

    /// Dials in progress on the words of peers from `source`.
    pub fn dialing_from(&self, source: Source) -> u32 {
        self.by_source.get(&source).copied().unwrap_or(0)
    }

    /// Dials on peers' words in progress to `host`.
    pub fn dialing_to(&self, host: &DialHost) -> u32 {
        self.by_host.get(host).copied().unwrap_or(0)
    }
}

impl<K: Copy + Eq + Hash> DialBound<K> {
    /// Entry `entry` was made on the word of peer `asker`, whose channel
    /// comes from `source`: a forwarded request's origin (`forward`) or a
    /// site its `SiteRef` named. Its dials count from now on.
    pub fn named(&mut self, entry: K, asker: K, source: Source, forward: bool) {
        self.leave(entry);
        self.named.insert(
            entry,
            Named {
                asker: Some(asker),
                source,
                forward,
                dial: None,
            },
        );
        self.by_asker.entry(asker).or_default().insert(entry);
    }

    /// Entry `entry` is about to dial `host`. `Ok(None)`: it is not on a
    /// peer's word, nothing is counted. `Ok(Some(ticket))`: counted until
    /// [`ended`](Self::ended) with that ticket. `Err`: refused, nothing
    /// counted (a dial it had in progress is ended).
    pub fn dial(&mut self, entry: K, host: DialHost) -> Result<Option<DialTicket>, DialRefused> {
        let Some(n) = self.named.get_mut(&entry) else {
            return Ok(None);
        };
        // One attempt at a time per entry: a dial still counted ends.
        if let Some((_, old)) = n.dial.take() {
            let source = n.source;
            self.uncount(source, &old);
        }
        let n = &self.named[&entry];
        let b = self.bounds;
        if n.forward && n.asker.is_none() {
            return Err(DialRefused::AskerGone);
        }
        if self.dialing >= b.node {
            return Err(DialRefused::Node { limit: b.node });
        }
        if self.dialing_from(n.source) >= b.per_source {
            return Err(DialRefused::Source {
                limit: b.per_source,
            });
        }
        if self.dialing_to(&host) >= b.per_host {
            return Err(DialRefused::Host { limit: b.per_host });
        }
        let source = n.source;
        self.dialing += 1;
        *self.by_source.entry(source).or_default() += 1;
        *self.by_host.entry(host.clone()).or_default() += 1;
        let ticket = DialTicket(self.next_ticket);
        self.next_ticket += 1;
        if let Some(n) = self.named.get_mut(&entry) {
            n.dial = Some((ticket, host));
        }
        Ok(Some(ticket))
    }

    /// The dial `ticket` of `entry` ended (it connected, failed, or was
    /// abandoned); nothing if it was ended already.
    pub fn ended(&mut self, entry: K, ticket: DialTicket) {
        let Some(n) = self.named.get_mut(&entry) else {
            return;
        };
        if n.dial.as_ref().map(|(t, _)| *t) != Some(ticket) {
            return;
        }
        let source = n.source;
        if let Some((_, host)) = n.dial.take() {
            self.uncount(source, &host);
        }
    }

    /// Entry `entry`'s site is proven: an ordinary site from now on, its
    /// dials no longer on anyone's word.
    pub fn proven(&mut self, entry: K) {
        self.leave(entry);
    }

    /// Entry `key` leaves the table: its own dial ends, and what it asked
    /// for is treated as by [`asker_gone`](Self::asker_gone) (returned:
    /// the forwarded origins to abandon).
    pub fn forget(&mut self, key: K) -> Vec<K> {
        self.leave(key);
        self.asker_gone(key)
    }

    /// The peer of entry `asker` has gone for good (it failed
    /// permanently, or its entry leaves): the forwarded origins it named
    /// are returned, to be abandoned (their dials end now and any later
    /// one is refused); the sites its `SiteRef`s named keep counting
    /// against its source. Nothing the second time.
    pub fn asker_gone(&mut self, asker: K) -> Vec<K> {
        let mut abandoned = Vec::new();
        for e in self.by_asker.remove(&asker).unwrap_or_default() {
            let Some(n) = self.named.get_mut(&e) else {
                continue;
            };
            n.asker = None;
            if n.forward {
                let source = n.source;
                if let Some((_, host)) = n.dial.take() {
                    self.uncount(source, &host);
                }
                abandoned.push(e);
            }
        }
        abandoned
    }

    /// How many entries are on a peer's word.
    pub fn len(&self) -> usize {
        self.named.len()
    }

    /// True if no entry is on a peer's word.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// Every key the ledger names (entries and askers, with duplicates):
    /// for checks that none outlives its entry.
    pub fn keys(&self) -> impl Iterator<Item = K> + '_ {
        self.named
            .iter()
            .flat_map(|(e, n)| std::iter::once(*e).chain(n.asker))
            .chain(self.by_asker.keys().copied())
    }

    /// `entry` is no longer on a peer's word: its dial ends, its asker
    /// forgets it.
    fn leave(&mut self, entry: K) {
        let Some(n) = self.named.remove(&entry) else {
            return;
        };
        if let Some((_, host)) = &n.dial {
            self.uncount(n.source, host);
        }
        if let Some(a) = n.asker {
            if let Some(set) = self.by_asker.get_mut(&a) {
                set.remove(&entry);
                if set.is_empty() {
                    self.by_asker.remove(&a);
                }
            }
        }
    }

    fn uncount(&mut self, source: Source, host: &DialHost) {
        self.dialing -= 1;
        dec(&mut self.by_source, &source);
        dec(&mut self.by_host, host);
    }
}

/// Takes one from `map[key]`, removing it at zero (no zero counts kept).
fn dec<Q: Eq + Hash + Clone>(map: &mut HashMap<Q, u32>, key: &Q) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests;
