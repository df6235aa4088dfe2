//! Where a remote site can be reached: every address it is known at, best
//! transport first, and what a failed open at one of them means.
//!
//! A site may listen on several transports at once (`mem:` for sites in
//! its process, `unix:` for its host, `tcp:` for everyone). Each side lists
//! them in the handshake (PRESENT, NEGOTIATE), so after one channel a site
//! knows all of its peer's addresses. Opens then try them in the order
//! mem, unix, tcp: a `mem:` name resolves only inside the process that
//! registered it and a `unix:` path only on its host, so the first that
//! connects is the cheapest transport the two sites share, and the others
//! are the fallback.
//!
//! Transports a user plugged in (`pipe:NAME`, `quic:HOST:PORT`: see
//! `sitenet_transport::plug`) come last, after tcp and tls, in the order
//! they were listed: sitenet knows nothing of what they cost, and TCP is
//! known to work wherever it connects; a user who prefers a plugged
//! transport names the site at that address only. A book keeps a plugged
//! address only if the node has that transport ([`PluggedSchemes`]): a
//! peer's listen list may name transports this node lacks, which are
//! skipped like an unknown scheme.
//!
//! The rule for failures ([`AddressBook::failed`]):
//!
//! - the transport could not connect, timed out, or the handshake broke:
//!   try the next address; when none is left, the attempt is over and the
//!   ComObject backs off as for any failed open (the next attempt starts
//!   again from the best address);
//! - the site at an address is not the one expected (wrong identity,
//!   another version, ourselves): at an address the user gave, the site
//!   there is a new incarnation and the old one failed for good (as with a
//!   single address); at an address only *claimed* for it (learned from a
//!   handshake or a descriptor) it proves nothing about the site, so that
//!   address is forgotten and the next one tried — the site fails only when
//!   no address is left;
//! - a refusal (another channel wins the link decision) ends the attempt:
//!   the site answered, there is nothing to fall back from;
//! - a book made on a peer's word for a site not yet proven
//!   ([`AddressBook::claimed_once`]) has one round only: when it ends
//!   without a channel, the site is gone for good.
//!
//! Learned addresses are never bound to the site in the site table: whoever
//! answers there must still prove the expected identity, so a peer cannot
//! divert another site's traffic by listing its address.

use std::sync::Arc;

use crate::connection::error::{OpenError, OpenFailure};

/// The transports sitenet knows, in the order they are preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransportKind {
    /// An in-process channel (`mem:NAME`): no descriptor, no kernel.
    Mem,
    /// A Unix domain socket (`unix:PATH`): same host, no TCP stack.
    Unix,
    /// TCP (`tcp:HOST:PORT`).
    Tcp,
    /// TLS over TCP (`tls:HOST:PORT`): what a node holding a certificate
    /// listens on and dials.
    Tls,
    /// A transport the user plugged in under a scheme of its own (one of
    /// the node's [`PluggedSchemes`]).
    Plugged,
}

impl TransportKind {
    /// The transport an address's scheme names, or `None` for a scheme
    /// this build does not know or an address with nothing after its
    /// scheme. A peer's listen list may name a transport of a newer build:
    /// such addresses are skipped, not an error.
    pub fn of(address: &str) -> Option<Self> {
        Self::of_with(address, &PluggedSchemes::default())
    }

    /// [`of`](Self::of), knowing the transports in `plugged` too: an
    /// address of one of them is [`TransportKind::Plugged`].
    ///
    /// ```
    /// use sitenet_protocols::{PluggedSchemes, TransportKind};
    ///
    /// let plugged = PluggedSchemes::new(["pipe"]);
    /// assert_eq!(TransportKind::of_with("pipe:a", &plugged), Some(TransportKind::Plugged));
    /// assert_eq!(TransportKind::of_with("tcp:h:1", &plugged), Some(TransportKind::Tcp));
    /// assert_eq!(TransportKind::of_with("quic:h:1", &plugged), None);
    /// assert_eq!(TransportKind::of("pipe:a"), None); // no transport plugged in
    /// ```
    pub fn of_with(address: &str, plugged: &PluggedSchemes) -> Option<Self> {
        let (scheme, rest) = address.split_once(':')?;
        if rest.is_empty() {
            return None;
        }
        match scheme {
            "mem" => Some(Self::Mem),
            "unix" => Some(Self::Unix),
            "tcp" => Some(Self::Tcp),
            "tls" => Some(Self::Tls),
            s if plugged.contains(s) => Some(Self::Plugged),
            _ => None,
        }
    }
}

/// The schemes of the transports a node has plugged in (beyond mem, unix,
/// tcp and tls): the addresses an [`AddressBook`] keeps for them. Plain
/// data (the transports themselves live in the driver); cheap to clone,
/// and empty by default: a node with no plugged transport.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluggedSchemes(Option<Arc<[Box<str>]>>);

impl PluggedSchemes {
    /// The schemes named (without their colon).
    pub fn new<S: Into<Box<str>>>(schemes: impl IntoIterator<Item = S>) -> Self {
        let v: Vec<Box<str>> = schemes.into_iter().map(Into::into).collect();
        if v.is_empty() {
            Self(None)
        } else {
            Self(Some(v.into()))
        }
    }

    /// Whether `scheme` is one of them.
    pub fn contains(&self, scheme: &str) -> bool {
        self.iter().any(|s| s == scheme)
    }

    /// The schemes, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().flat_map(|v| v.iter().map(|s| &**s))
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

/// What the ComObject does after an open attempt failed at the current
/// address (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Try [`AddressBook::current`] now, without a backoff.
    TryNext,
    /// Every address was tried (or the site answered and refused): back off
    /// and start again from the best address.
    RoundOver,
    /// The site is gone for good.
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    address: Arc<str>,
    kind: TransportKind,
    /// Given by the local user (`Node::site`): the site found there first
    /// is the site this entry names, so another one there later means it
    /// failed. Claimed addresses (learned) prove nothing.
    given: bool,
}

/// The addresses of one remote site, best transport first, with the cursor
/// of the open attempt in progress. An empty book means the site cannot be
/// called (it only connects to us).
///
/// # Example
///
/// ```
/// use sitenet_protocols::{AddressBook, Fallback, OpenError, OpenFailure, SiteId, TransportKind};
///
/// // A site's descriptor lists its addresses in any order; a scheme this
/// // build does not know is skipped.
/// let mut book =
///     AddressBook::claimed(["tcp:10.0.0.2:7000", "quic:10.0.0.2:7001", "unix:/tmp/b", "mem:b"]);
/// let best_first: Vec<&str> = book.addresses().collect();
/// assert_eq!(best_first, ["mem:b", "unix:/tmp/b", "tcp:10.0.0.2:7000"]);
/// assert_eq!(book.current_kind(), Some(TransportKind::Mem));
///
/// // `mem:b` is not registered in this process: try the next address now.
/// let no_listener = OpenFailure::Transport("no mem listener named b".into());
/// assert_eq!(book.failed(&no_listener), Fallback::TryNext);
/// assert_eq!(book.current(), Some("unix:/tmp/b"));
///
/// // Another site answers at the Unix path: a claimed address proves
/// // nothing, so it is forgotten and TCP is tried.
/// let other = OpenError::WrongIdentity { expected: SiteId(0xB), got: SiteId(0xC) };
/// assert_eq!(book.failed(&OpenFailure::Open(other)), Fallback::TryNext);
/// assert_eq!(book.addresses().count(), 2);
///
/// // TCP fails too: the round is over, back off and start from the best again.
/// assert_eq!(book.failed(&no_listener), Fallback::RoundOver);
/// assert_eq!(book.current(), Some("mem:b"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressBook {
    /// The first address inline: a site the user named by one address
    /// (the common case) keeps its book without an allocation of its own,
    /// so a parked site's form keeps no small block beside it (see
    /// [`crate::connection::com_object::Parked`]).
    known: smallvec::SmallVec<[Known; 1]>,
    /// Index of the address the current (or next) attempt uses (below
    /// [`MAX_ADDRESSES`]).
    cursor: u8,
    /// Made on a peer's word for a site not yet proven (a forwarded
    /// request's origin, see [`claimed_once`](Self::claimed_once)): one
    /// round, each address tried once; a round that ends without a
    /// channel is [`Fallback::Permanent`].
    once: bool,
    /// Made on a peer's word: the entry is a claim its holder gives up
    /// when the site's id is proven (see [`proven`](Self::proven)).
    on_claim: bool,
}

pub use crate::base::limits::{MAX_ADDRESSES, MAX_ADDRESS_LEN};

impl AddressBook {
    /// A book holding the address the user gave for the site, if it names
    /// a known transport (else the book is empty: the driver rejected such
    /// an address before creating a site).
    pub fn given(address: &str) -> Self {
        Self::given_shared(address.into())
    }

    /// [`given`](Self::given), sharing the caller's copy of the address
    /// (a site table keeps one text per site for all its uses).
    pub fn given_shared(address: Arc<str>) -> Self {
        Self::given_shared_with(address, &PluggedSchemes::default())
    }

    /// [`given_shared`](Self::given_shared) on a node with the plugged
    /// transports `plugged`.
    pub fn given_shared_with(address: Arc<str>, plugged: &PluggedSchemes) -> Self {
        let mut b = Self::default();
        b.insert_shared(address, true, plugged);
        b
    }

    /// A book of claimed addresses only (a descriptor, a peer's listen
    /// list), in preference order; unknown schemes are skipped.
    pub fn claimed<'a>(addresses: impl IntoIterator<Item = &'a str>) -> Self {
        Self::claimed_with(addresses, &PluggedSchemes::default())
    }

    /// [`claimed`](Self::claimed) on a node with the plugged transports
    /// `plugged` (their addresses are kept, last).
    ///
    /// ```
    /// use sitenet_protocols::{AddressBook, PluggedSchemes};
    ///
    /// let plugged = PluggedSchemes::new(["pipe"]);
    /// let book = AddressBook::claimed_with(["pipe:b", "quic:h:1", "tcp:h:1", "mem:b"], &plugged);
    /// assert_eq!(book.addresses().collect::<Vec<_>>(), ["mem:b", "tcp:h:1", "pipe:b"]);
    /// ```
    pub fn claimed_with<'a>(
        addresses: impl IntoIterator<Item = &'a str>,
        plugged: &PluggedSchemes,
    ) -> Self {
        let mut b = Self::default();
        b.learn_with(addresses, plugged);
        b
    }

    /// A book of addresses a peer named for a site this node does not know
    /// (a forwarded request's origin): each is tried once, and if none
    /// gives a channel the site fails for good ([`Fallback::Permanent`]
    /// after the round, [`failed`](Self::failed)) — an unreachable or
    /// bogus origin costs one bounded attempt, not retries for ever. A
    /// working channel ends the rule ([`proven`](Self::proven)).
    ///
    /// ```
    /// use sitenet_protocols::{AddressBook, Fallback, OpenFailure};
    ///
    /// let mut book = AddressBook::claimed_once(["mem:nowhere", "tcp:10.0.0.9:7000"]);
    /// let refused = OpenFailure::Transport("connection refused".into());
    /// assert_eq!(book.failed(&refused), Fallback::TryNext);
    /// assert_eq!(book.failed(&refused), Fallback::Permanent);
    /// ```
    pub fn claimed_once<'a>(addresses: impl IntoIterator<Item = &'a str>) -> Self {
        Self::claimed_once_with(addresses, &PluggedSchemes::default())
    }

    /// [`claimed_once`](Self::claimed_once) on a node with the plugged
    /// transports `plugged`.
    pub fn claimed_once_with<'a>(
        addresses: impl IntoIterator<Item = &'a str>,
        plugged: &PluggedSchemes,
    ) -> Self {
        let mut b = Self::claimed_with(addresses, plugged).on_claim();
        b.once = true;
        b
    }

    /// Marks the book as made on a peer's word (a `SiteRef` in a message
    /// naming a site this node did not know): [`proven`](Self::proven)
    /// then says so once, for the claim to be released. Its rounds are
    /// ordinary ones.
    pub fn on_claim(mut self) -> Self {
        self.on_claim = true;
        self
    }

    /// True while the book is one round only (see
    /// [`claimed_once`](Self::claimed_once)).
    pub fn is_once(&self) -> bool {
        self.once
    }

    /// A channel to the site works: its id is proven, and later rounds
    /// are ordinary ones. True the first time for a book made on a peer's
    /// word ([`claimed_once`](Self::claimed_once),
    /// [`on_claim`](Self::on_claim)): the claim on the site ends.
    pub fn proven(&mut self) -> bool {
        self.once = false;
        std::mem::take(&mut self.on_claim)
    }

    /// Adds the addresses a handshake or a descriptor claims for the site
    /// (skipping unknown schemes, duplicates, addresses longer than
    /// [`MAX_ADDRESS_LEN`], and any beyond [`MAX_ADDRESSES`]). Returns how
    /// many were new.
    pub fn learn<'a>(&mut self, addresses: impl IntoIterator<Item = &'a str>) -> usize {
        self.learn_with(addresses, &PluggedSchemes::default())
    }

    /// [`learn`](Self::learn) on a node with the plugged transports
    /// `plugged` (their addresses are kept, after every built-in kind).
    pub fn learn_with<'a>(
        &mut self,
        addresses: impl IntoIterator<Item = &'a str>,
        plugged: &PluggedSchemes,
    ) -> usize {
        addresses
            .into_iter()
            .filter(|a| self.insert(a, false, plugged))
            .count()
    }

    fn insert(&mut self, address: &str, given: bool, plugged: &PluggedSchemes) -> bool {
        // Checked before a copy is made.
        if address.len() > MAX_ADDRESS_LEN
            || TransportKind::of_with(address, plugged).is_none()
            || self.known.len() >= MAX_ADDRESSES
            || self.known.iter().any(|k| &*k.address == address)
        {
            return false;
        }
        self.insert_shared(address.into(), given, plugged)
    }

    fn insert_shared(&mut self, address: Arc<str>, given: bool, plugged: &PluggedSchemes) -> bool {
        let Some(kind) =
            TransportKind::of_with(&address, plugged).filter(|_| address.len() <= MAX_ADDRESS_LEN)
        else {
            return false;
        };
        if self.known.len() >= MAX_ADDRESSES || self.known.iter().any(|k| k.address == address) {
            return false;
        }
        // After every address of the same or a better transport: the order
        // within a transport is the order they were listed in.
        let at = self.known.partition_point(|k| k.kind <= kind);
        // Grown one address at a time: learning is rare, and most sites
        // know one or two addresses (a doubling Vec would hold four).
        self.known.reserve_exact(1);
        self.known.insert(
            at,
            Known {
                address,
                kind,
                given,
            },
        );
        if at < usize::from(self.cursor) {
            self.cursor += 1;
        }
        true
    }

    /// True if the site can be called at some address.
    pub fn can_open(&self) -> bool {
        !self.known.is_empty()
    }

    /// The address the next open attempt uses (the best one unless a
    /// fallback is in progress).
    pub fn current(&self) -> Option<&str> {
        self.known
            .get(usize::from(self.cursor))
            .or_else(|| self.known.first())
            .map(|k| &*k.address)
    }

    /// The kind of transport [`current`](Self::current) uses.
    pub fn current_kind(&self) -> Option<TransportKind> {
        self.known
            .get(usize::from(self.cursor))
            .or_else(|| self.known.first())
            .map(|k| k.kind)
    }

    /// Every known address, best first.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.known.iter().map(|k| &*k.address)
    }

    /// The attempt at [`current`](Self::current) worked: the next attempt
    /// (after this channel ends) starts again from the best address, which
    /// may have come up meanwhile.
    pub fn succeeded(&mut self) {
        self.cursor = 0;
    }

    /// The attempt at [`current`](Self::current) failed with `failure`:
    /// what now (see the module documentation).
    pub fn failed(&mut self, failure: &OpenFailure) -> Fallback {
        if usize::from(self.cursor) >= self.known.len() {
            self.cursor = 0;
            return self.round_over();
        }
        match failure {
            OpenFailure::Open(OpenError::Refused(_)) => {
                self.cursor = 0;
                Fallback::RoundOver
            }
            OpenFailure::Open(e) if e.is_permanent() => {
                if self.known[usize::from(self.cursor)].given {
                    return Fallback::Permanent;
                }
                // Someone else answers there: not this site's address.
                self.known.remove(usize::from(self.cursor));
                if self.known.is_empty() {
                    Fallback::Permanent
                } else {
                    self.next_or_round_over()
                }
            }
            _ => {
                self.cursor += 1;
                self.next_or_round_over()
            }
        }
    }

    fn next_or_round_over(&mut self) -> Fallback {
        if usize::from(self.cursor) < self.known.len() {
            Fallback::TryNext
        } else {
            self.cursor = 0;
            self.round_over()
        }
    }

    /// The end of a round without a channel: another round, unless the
    /// book was one round only.
    fn round_over(&self) -> Fallback {
        if self.once {
            Fallback::Permanent
        } else {
            Fallback::RoundOver
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::site::SiteId;
    use crate::connection::handshake::RefuseReason;

    fn transport() -> OpenFailure {
        OpenFailure::Transport("connection refused".into())
    }

    /// A book of one address (a site the user named, the common case)
    /// keeps it inline: thousands of idle sites each keep a book, and a
    /// small block of its own per book would be made on whichever thread
    /// starts the site. A second address moves them out, both kept.
    #[test]
    fn a_book_of_one_address_keeps_it_inline() {
        let mut b = AddressBook::given("tcp:127.0.0.1:1");
        assert!(!b.known.spilled());
        assert!(std::mem::size_of::<AddressBook>() <= 40);
        b.learn(["mem:b"]);
        assert!(b.known.spilled());
        assert_eq!(b.addresses().count(), 2);
    }

    fn wrong_identity() -> OpenFailure {
        OpenFailure::Open(OpenError::WrongIdentity {
            expected: SiteId(1),
            got: SiteId(2),
        })
    }

    fn list(b: &AddressBook) -> Vec<&str> {
        b.addresses().collect()
    }

    #[test]
    fn addresses_are_ordered_mem_unix_tcp_and_stable_within_a_transport() {
        let b = AddressBook::claimed([
            "tcp:10.0.0.1:1",
            "unix:/a",
            "tcp:10.0.0.2:2",
            "mem:x",
            "unix:/b",
        ]);
        assert_eq!(
            list(&b),
            [
                "mem:x",
                "unix:/a",
                "unix:/b",
                "tcp:10.0.0.1:1",
                "tcp:10.0.0.2:2"
            ]
        );
        assert_eq!(b.current(), Some("mem:x"));
        assert_eq!(b.current_kind(), Some(TransportKind::Mem));
    }

    #[test]
    fn unknown_schemes_duplicates_and_excess_are_skipped() {
        let mut b = AddressBook::given("tcp:h:1");
        assert_eq!(
            b.learn(["quic:h:1", "tcp:h:1", "nothing", "mem:", "mem:a"]),
            1
        );
        assert_eq!(list(&b), ["mem:a", "tcp:h:1"]);
        let many: Vec<String> = (0..40).map(|i| format!("tcp:h:{}", 100 + i)).collect();
        b.learn(many.iter().map(String::as_str));
        assert_eq!(b.addresses().count(), MAX_ADDRESSES);
        assert!(TransportKind::of("tcp").is_none());
    }

    #[test]
    fn plugged_schemes_are_kept_last_only_when_the_node_has_them() {
        let plugged = PluggedSchemes::new(["pipe", "quic"]);
        let mut b = AddressBook::claimed_with(
            ["quic:h:1", "pipe:a", "tcp:h:1", "ftp:x", "pipe:", "tls:h:2"],
            &plugged,
        );
        assert_eq!(list(&b), ["tcp:h:1", "tls:h:2", "quic:h:1", "pipe:a"]);
        assert_eq!(b.learn_with(["pipe:b", "mem:m", "pipe:a"], &plugged), 2);
        assert_eq!(
            list(&b),
            ["mem:m", "tcp:h:1", "tls:h:2", "quic:h:1", "pipe:a", "pipe:b"]
        );
        // Learned without the node's schemes: skipped.
        assert_eq!(b.learn(["pipe:c"]), 0);
        let g = AddressBook::given_shared_with("pipe:x".into(), &plugged);
        assert_eq!(g.current_kind(), Some(TransportKind::Plugged));
        assert!(!AddressBook::given("pipe:x").can_open());
        assert!(PluggedSchemes::default().is_empty());
        assert_eq!(plugged.iter().collect::<Vec<_>>(), ["pipe", "quic"]);
        let once = AddressBook::claimed_once_with(["pipe:a"], &plugged);
        assert!(once.is_once() && once.can_open());
    }

    /// An address is a peer's words: one longer than `MAX_ADDRESS_LEN` is
    /// neither kept, nor tried, nor handed on.
    #[test]
    fn an_overlong_address_is_not_kept() {
        let long = format!("tcp:{}:1", "h".repeat(100_000));
        let mut b = AddressBook::claimed([long.as_str()]);
        assert_eq!(b.addresses().count(), 0);
        assert_eq!(b.learn([long.as_str()]), 0);
        assert!(AddressBook::given(&long).addresses().next().is_none());
    }

    #[test]
    fn transport_failures_fall_back_in_order_then_the_round_is_over() {
        let mut b = AddressBook::claimed(["tcp:h:1", "unix:/s", "mem:m"]);
        assert_eq!(b.current(), Some("mem:m"));
        assert_eq!(b.failed(&transport()), Fallback::TryNext);
        assert_eq!(b.current(), Some("unix:/s"));
        assert_eq!(b.failed(&transport()), Fallback::TryNext);
        assert_eq!(b.current(), Some("tcp:h:1"));
        assert_eq!(b.failed(&transport()), Fallback::RoundOver);
        // The next round starts from the best address again.
        assert_eq!(b.current(), Some("mem:m"));
        assert_eq!(
            list(&b).len(),
            3,
            "nothing is forgotten for a transport failure"
        );
    }

    #[test]
    fn a_wrong_identity_at_a_claimed_address_forgets_it_and_tries_the_next() {
        let mut b = AddressBook::claimed(["mem:other", "tcp:h:1"]);
        assert_eq!(b.failed(&wrong_identity()), Fallback::TryNext);
        assert_eq!(b.current(), Some("tcp:h:1"));
        assert_eq!(list(&b), ["tcp:h:1"]);
        // The last claimed address lying too: no address is left.
        assert_eq!(b.failed(&wrong_identity()), Fallback::Permanent);
        assert!(!b.can_open());
    }

    #[test]
    fn a_wrong_identity_at_the_given_address_is_permanent() {
        let mut b = AddressBook::given("tcp:h:1");
        b.learn(["mem:m"]);
        // The claimed mem address lies: forgotten, the given one is next.
        assert_eq!(b.failed(&wrong_identity()), Fallback::TryNext);
        assert_eq!(b.current(), Some("tcp:h:1"));
        // The given address answers with another site: a new incarnation.
        assert_eq!(b.failed(&wrong_identity()), Fallback::Permanent);
        assert_eq!(list(&b), ["tcp:h:1"]);
    }

    #[test]
    fn every_permanent_open_error_at_a_claimed_address_means_try_the_next() {
        for e in [
            OpenError::VersionMismatch {
                local: crate::wire::version::VersionRange::exactly(7),
                peer: crate::wire::version::VersionRange::exactly(9),
            },
            OpenError::SelfConnection(SiteId(3)),
        ] {
            let mut b = AddressBook::claimed(["mem:m", "tcp:h:1"]);
            assert_eq!(b.failed(&OpenFailure::Open(e)), Fallback::TryNext);
            assert_eq!(list(&b), ["tcp:h:1"]);
        }
    }

    #[test]
    fn a_refusal_ends_the_round_without_forgetting() {
        let mut b = AddressBook::claimed(["mem:m", "tcp:h:1"]);
        b.failed(&transport());
        assert_eq!(b.current(), Some("tcp:h:1"));
        let refused = OpenFailure::Open(OpenError::Refused(RefuseReason::LostTie));
        assert_eq!(b.failed(&refused), Fallback::RoundOver);
        assert_eq!(b.current(), Some("mem:m"));
        assert_eq!(list(&b).len(), 2);
    }

    #[test]
    fn learning_during_a_fallback_keeps_the_cursor_on_its_address() {
        let mut b = AddressBook::claimed(["unix:/s", "tcp:h:1"]);
        b.failed(&transport());
        assert_eq!(b.current(), Some("tcp:h:1"));
        b.learn(["mem:m"]);
        assert_eq!(b.current(), Some("tcp:h:1"));
        b.succeeded();
        assert_eq!(b.current(), Some("mem:m"));
    }

    #[test]
    fn a_book_on_a_peers_word_has_one_round_until_proven() {
        let mut b = AddressBook::claimed_once(["tcp:h:1", "mem:m"]);
        assert!(b.is_once());
        assert_eq!(b.failed(&transport()), Fallback::TryNext);
        assert_eq!(b.failed(&transport()), Fallback::Permanent);
        // Lying at the last address ends it too.
        let mut b = AddressBook::claimed_once(["mem:m"]);
        assert_eq!(b.failed(&wrong_identity()), Fallback::Permanent);
        // A refusal is an answer: not the end.
        let mut b = AddressBook::claimed_once(["mem:m"]);
        let refused = OpenFailure::Open(OpenError::Refused(RefuseReason::LostTie));
        assert_eq!(b.failed(&refused), Fallback::RoundOver);
        // Proven: ordinary rounds from then on.
        assert!(b.proven());
        assert!(!b.proven());
        assert_eq!(b.failed(&transport()), Fallback::RoundOver);
    }

    #[test]
    fn an_empty_book_cannot_open_and_a_failure_there_is_a_round_over() {
        let mut b = AddressBook::default();
        assert!(!b.can_open());
        assert_eq!(b.current(), None);
        assert_eq!(b.failed(&transport()), Fallback::RoundOver);
    }
}
