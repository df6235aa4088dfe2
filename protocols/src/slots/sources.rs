//! What one source address may hold of the slots and of the waiting line.
//!
//! A peer's site id is its own word: a host can present a fresh one on
//! every connection, so a bound per site bounds nothing. What it cannot
//! choose as freely is the address it connects from, so accepted channels
//! and line places are charged to their **source** — an IPv4 address, an
//! IPv6 /64, as for pending handshakes ([`Source`]). Our own open attempts
//! are charged to no remote source (they are our initiative), and neither
//! are channels with no address (Unix sockets, in-process): they form one
//! group ([`Source::of(None)`](Source::of)) that counts as a source wanting
//! slots but is never past its share.
//!
//! **The rule: a fair share of what is short, nothing while nothing is.**
//! A source's share of `limit` (slots: the hard limit; places: the line's
//! length) is `max(1, limit / wanting)` ([`fair_share`]), where `wanting`
//! counts the sources that hold or wait for one (the newcomer included).
//! It bounds nothing by itself — a free slot goes to whoever presents
//! itself, and an empty place to whoever is told to wait — and only
//! decides who yields when another source wants what one holds:
//!
//! * **A freed slot** goes to a waiter whose source holds at most its
//!   share of the slots, before the waiters of a source past it (each
//!   policy's own order decides among the first, then among the others).
//! * **A slot to give back** (preemption, or a turn under `Share`) is taken
//!   from a source past its share first, if one of its channels can be.
//! * **A full line** makes room for a newcomer by dropping the newest place
//!   of the other source holding the most, if that is more than its share
//!   of the line and more than the newcomer's source holds — its newest,
//!   so its entries nearest their turn keep their place; what it holds
//!   beyond its share is its own to lose. A source holding no more than
//!   its share keeps its places, and the newcomer is refused as before.
//!
//! So one source can use the whole table and the whole line while nobody
//! else wants them (a NAT, a host running many clients), and cannot keep
//! anyone out when someone does: a newcomer from another source always
//! gets a place while one source holds more than its share of the line,
//! and the next slot freed while one source holds more than its share of
//! the slots. A fixed cap per source (say a quarter of the table) would
//! instead idle three quarters of the table for a lone honest NAT, and
//! still let four addresses keep everyone else out. When every source
//! holds at most its share — the simulator's sites, one address each —
//! nothing here changes any decision.

pub use crate::slots::admission::Source;

/// A source's share of `limit` while `wanting` sources want some of it:
/// `limit / wanting`, at least 1 (and `limit` for no or one source).
///
/// ```
/// use sitenet_protocols::slots::fair_share;
/// assert_eq!(fair_share(144, 1), 144); // alone, the whole table
/// assert_eq!(fair_share(144, 2), 72);
/// assert_eq!(fair_share(24, 48), 1); // never less than one
/// assert_eq!(fair_share(24, 0), 24);
/// ```
pub fn fair_share(limit: usize, wanting: usize) -> usize {
    (limit / wanting.max(1)).max(1)
}
