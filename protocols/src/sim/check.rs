//! The checkers' record of every application message: who sent it to
//! whom, at which priority and place in its stream, and what became of it.
//! Each delivery and hand-back is checked as it happens; [`Oracle::finish`]
//! checks that nothing is left unaccounted for once the run has settled.

use std::collections::{BTreeMap, BTreeSet};

use crate::site::SiteId;

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Delivered,
    /// Handed back as never delivered.
    NotSent,
    /// Handed back as maybe delivered (and not seen delivered).
    Maybe,
    /// Delivered, then handed back as maybe delivered (its ack was lost).
    DeliveredMaybe,
}

/// One message's record: 32 bytes, kept for the whole run (a long run
/// holds one per message sent, so its size is the checkers' memory).
#[derive(Debug)]
struct Record {
    /// The sender ([`Sites`]' number).
    from: u32,
    /// The site the application named ([`Sites`]' number).
    to: u32,
    /// Sent to the address of node `place` (where `to` listened): any
    /// incarnation there may receive it. [`NO_PLACE`]: sent to `to`.
    place: u32,
    priority: u8,
    fate: Fate,
    seq: u64,
    /// The body's hash, checked on delivery.
    hash: u64,
}

/// [`Record::place`] of a message sent to a site, not an address.
const NO_PLACE: u32 = u32::MAX;

impl Record {
    fn place(&self) -> Option<usize> {
        (self.place != NO_PLACE).then_some(self.place as usize)
    }
}

/// The sites the records name, each by a number (a record holds 4 bytes
/// per site named, not 16).
#[derive(Debug, Default)]
struct Sites {
    ids: Vec<SiteId>,
    numbers: std::collections::HashMap<
        SiteId,
        u32,
        std::hash::BuildHasherDefault<super::peer::SiteHasher>,
    >,
}

impl Sites {
    /// `site`'s number, given one the first time.
    fn number(&mut self, site: SiteId) -> u32 {
        let next = self.ids.len() as u32;
        let n = *self.numbers.entry(site).or_insert(next);
        if n == next {
            self.ids.push(site);
        }
        n
    }

    fn get(&self, n: u32) -> SiteId {
        self.ids[n as usize]
    }
}

/// A multiply-rotate hash over 8-byte words (FNV-like, a word at a time):
/// enough to tell a corrupted, truncated or reordered body from the one
/// sent, at a fraction of a byte-wise hash's cost.
fn hash(body: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ body.len() as u64;
    let mut words = body.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    for b in words.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A stream's destination as a violation names it: a site, or the
/// address of a node (an even key).
struct Dest(SiteId);

impl Dest {
    /// The destination of a stream of messages to site `to`, or (`place`)
    /// to the address of that node: a key of its own per address, even
    /// where site ids are odd.
    fn key(to: SiteId, place: Option<usize>) -> SiteId {
        place.map_or(to, |m| SiteId((m as u128) << 1))
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 .0 {
            d if d & 1 == 0 => write!(f, "the address of node {:x}", d >> 1),
            _ => write!(f, "{}", self.0),
        }
    }
}

/// One sender's messages to one site at one priority, in sending order.
#[derive(Debug, Default)]
struct Stream {
    ids: Vec<u64>,
    last_delivered: u64,
}

/// The record of every application message.
#[derive(Debug)]
pub(super) struct Oracle {
    msgs: Vec<Record>,
    sites: Sites,
    streams: BTreeMap<(SiteId, SiteId, u8), Stream>,
    /// Incarnations that crashed: their unacknowledged messages are lost
    /// with them (at most once), and messages to them must be handed back.
    crashed: BTreeSet<SiteId>,
    pub(super) delivered: u64,
    pub(super) handed_back: u64,
    /// Requests sent, and those not ended yet (by requester, number).
    pub(super) requests: u64,
    open_requests: Ongoing,
    /// Cooperations not ended yet.
    open_coops: Ongoing,
    /// Batches not ended yet.
    open_batches: Ongoing,
}

/// Things of one kind (requests, cooperations, batches) that each site
/// started and that must each end exactly once, by site and number.
#[derive(Debug)]
struct Ongoing {
    /// What they are, for the messages.
    what: &'static str,
    open: BTreeSet<(SiteId, u64)>,
}

impl Ongoing {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            open: BTreeSet::new(),
        }
    }

    /// Site `at` started number `n`.
    fn start(&mut self, at: SiteId, n: u64) -> Result<(), String> {
        match self.open.insert((at, n)) {
            true => Ok(()),
            false => Err(format!(
                "{at} started {} {n:#x} while it was open",
                self.what
            )),
        }
    }

    /// Number `n` of site `at` ended.
    fn end(&mut self, at: SiteId, n: u64) -> Result<(), String> {
        match self.open.remove(&(at, n)) {
            true => Ok(()),
            false => Err(format!(
                "{} {n:#x} of {at} ended twice, or never started",
                self.what
            )),
        }
    }

    /// After the run settled: none of a site that did not crash is open.
    fn finish(&self, crashed: &BTreeSet<SiteId>) -> Result<(), String> {
        match self.open.iter().find(|(at, _)| !crashed.contains(at)) {
            None => Ok(()),
            Some((at, n)) => Err(format!("{} {n:#x} of {at} never ended", self.what)),
        }
    }
}

impl Default for Oracle {
    fn default() -> Self {
        Self {
            msgs: Vec::new(),
            sites: Sites::default(),
            streams: BTreeMap::new(),
            crashed: BTreeSet::new(),
            delivered: 0,
            handed_back: 0,
            requests: 0,
            open_requests: Ongoing::new("request"),
            open_coops: Ongoing::new("cooperation"),
            open_batches: Ongoing::new("batch"),
        }
    }
}

impl Oracle {
    /// A message about to be queued; returns its id.
    /// `place`: sent to the address of that node, not to site `to`; such
    /// messages are a stream of their own per address ([`Dest::key`]).
    pub(super) fn sent(
        &mut self,
        from: SiteId,
        to: SiteId,
        place: Option<usize>,
        priority: u8,
        body: &[u8],
    ) -> u64 {
        let id = self.msgs.len() as u64;
        let s = self
            .streams
            .entry((from, Dest::key(to, place), priority))
            .or_default();
        s.ids.push(id);
        let seq = s.ids.len() as u64;
        let place = place.map_or(NO_PLACE, |m| {
            u32::try_from(m).expect("fewer nodes than 2^32")
        });
        let (from, to) = (self.sites.number(from), self.sites.number(to));
        self.msgs.push(Record {
            from,
            to,
            place,
            priority,
            fate: Fate::Pending,
            seq,
            hash: hash(body),
        });
        id
    }

    pub(super) fn messages(&self) -> u64 {
        self.msgs.len() as u64
    }

    pub(super) fn crashed(&mut self, site: SiteId) {
        self.crashed.insert(site);
    }

    /// The site the application named when it sent message `id`.
    pub(super) fn named(&self, id: u64) -> Option<SiteId> {
        self.msgs.get(id as usize).map(|r| self.sites.get(r.to))
    }

    /// Message `id` was delivered at `at` (node `node`), on the channel
    /// from `from`.
    pub(super) fn deliver(
        &mut self,
        id: u64,
        at: SiteId,
        node: usize,
        from: SiteId,
        body: &[u8],
    ) -> Result<(), String> {
        let sites = &self.sites;
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("{at} received message {id}, which was never sent"));
        };
        let (r_from, r_to, r_place) = (sites.get(r.from), sites.get(r.to), r.place());
        if r.hash != hash(body) {
            return Err(format!(
                "message {id} from {r_from} arrived with a body it was not sent with"
            ));
        }
        let right_place = match r_place {
            Some(m) => m == node,
            None => r_to == at,
        };
        if !right_place || r_from != from {
            return Err(format!(
                "message {id} from {r_from} to {r_to} was delivered at {at} as coming from {from}"
            ));
        }
        match r.fate {
            Fate::Pending => r.fate = Fate::Delivered,
            Fate::Maybe => r.fate = Fate::DeliveredMaybe,
            Fate::Delivered | Fate::DeliveredMaybe => {
                return Err(format!(
                    "message {id} ({r_from} → {r_to}, priority {}, #{}) delivered twice",
                    r.priority, r.seq
                ))
            }
            Fate::NotSent => {
                return Err(format!(
                    "message {id} ({r_from} → {r_to}) delivered after it was handed back as never \
                     delivered"
                ))
            }
        }
        let (key, seq) = ((r_from, Dest::key(r_to, r_place), r.priority), r.seq);
        self.delivered += 1;
        let s = self
            .streams
            .get_mut(&key)
            .expect("every message has a stream");
        if seq <= s.last_delivered {
            return Err(format!(
                "FIFO broken from {} to {} at priority {}: #{seq} delivered after #{}",
                key.0,
                Dest(key.1),
                key.2,
                s.last_delivered
            ));
        }
        // A gap is allowed only over messages already handed back.
        for skipped in s.last_delivered + 1..seq {
            let sid = s.ids[skipped as usize - 1];
            if !matches!(self.msgs[sid as usize].fate, Fate::NotSent | Fate::Maybe) {
                return Err(format!(
                    "FIFO broken from {} to {} at priority {}: #{seq} delivered before #{skipped}, \
                     which was neither delivered nor handed back",
                    key.0, Dest(key.1), key.2
                ));
            }
        }
        s.last_delivered = seq;
        Ok(())
    }

    /// Message `id` was handed back to its sender.
    pub(super) fn hand_back(&mut self, id: u64, maybe_delivered: bool) -> Result<(), String> {
        let sites = &self.sites;
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("message {id} handed back but never sent"));
        };
        let (r_from, r_to) = (sites.get(r.from), sites.get(r.to));
        self.handed_back += 1;
        r.fate = match (r.fate, maybe_delivered) {
            (Fate::Pending, false) => Fate::NotSent,
            (Fate::Pending, true) => Fate::Maybe,
            (Fate::Delivered, true) => Fate::DeliveredMaybe,
            (Fate::Delivered, false) => {
                return Err(format!(
                    "message {id} ({r_from} → {r_to}) handed back as never delivered, but it was \
                     delivered"
                ))
            }
            (_, _) => {
                return Err(format!(
                    "message {id} ({r_from} → {r_to}) handed back twice"
                ))
            }
        };
        Ok(())
    }

    /// Message `id` was given up before it was ever queued (a request
    /// that ended while it waited for room): it never goes, and nobody is
    /// told of it but its requester.
    pub(super) fn given_up(&mut self, id: u64) -> Result<(), String> {
        let Some(r) = self.msgs.get_mut(id as usize) else {
            return Err(format!("message {id} given up but never sent"));
        };
        match r.fate {
            Fate::Pending => {
                r.fate = Fate::NotSent;
                Ok(())
            }
            _ => Err(format!(
                "message {id} ({} → {}) given up after it went",
                self.sites.get(r.from),
                self.sites.get(r.to)
            )),
        }
    }

    /// Site `at` sent request `corr`.
    pub(super) fn request(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.requests += 1;
        self.open_requests.start(at, corr)
    }

    /// Request `corr` of site `at` ended (answer, timeout or failure).
    pub(super) fn answered(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.open_requests.end(at, corr)
    }

    /// Message `id` was delivered (whatever happened to it since).
    pub(super) fn was_delivered(&self, id: u64) -> bool {
        self.msgs
            .get(id as usize)
            .is_some_and(|r| matches!(r.fate, Fate::Delivered | Fate::DeliveredMaybe))
    }

    /// Site `at` submitted batch `batch`.
    pub(super) fn batch_opened(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.start(at, batch)
    }

    /// Batch `batch` of site `at` ended.
    pub(super) fn batch_ended(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.end(at, batch)
    }

    /// Site `at` opened cooperation `coop`.
    pub(super) fn coop_opened(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.start(at, coop)
    }

    /// Cooperation `coop` of site `at` ended.
    pub(super) fn coop_ended(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.end(at, coop)
    }

    /// After the run settled: every message of a sender still up was
    /// delivered or handed back.
    /// The first message of a live sender neither delivered nor handed
    /// back (the one [`finish`](Self::finish) names).
    pub(super) fn first_pending(&self) -> Option<u64> {
        self.msgs
            .iter()
            .position(|r| {
                r.fate == Fate::Pending && !self.crashed.contains(&self.sites.get(r.from))
            })
            .map(|i| i as u64)
    }

    /// Message `id`'s sender and the site it was sent to.
    pub(super) fn route(&self, id: u64) -> Option<(SiteId, SiteId)> {
        let r = self.msgs.get(usize::try_from(id).ok()?)?;
        Some((self.sites.get(r.from), self.sites.get(r.to)))
    }

    pub(super) fn finish(&self) -> Result<(), String> {
        if let Some(id) = self.first_pending() {
            let r = &self.msgs[id as usize];
            return Err(format!(
                "message {id} ({} → {}, priority {}, #{}) neither delivered nor handed back \
                 after the run settled",
                self.sites.get(r.from),
                self.sites.get(r.to),
                r.priority,
                r.seq
            ));
        }
        self.open_requests.finish(&self.crashed)?;
        self.open_coops.finish(&self.crashed)?;
        self.open_batches.finish(&self.crashed)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: SiteId = SiteId(0xa1);
    const B: SiteId = SiteId(0xb3);

    /// The record every message keeps for the whole run is 32 bytes: a
    /// long run's memory is mostly these (it was 72, with the sites' ids
    /// in it).
    #[test]
    fn a_record_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 32);
    }

    /// What the oracle judges, each with the sites named by their ids (the
    /// records keep numbers for them).
    #[test]
    fn deliveries_are_judged_and_named_by_site() {
        let mut o = Oracle::default();
        let first = o.sent(A, B, None, 2, b"one");
        let second = o.sent(A, B, None, 2, b"two");
        let third = o.sent(A, B, None, 2, b"three");
        assert_eq!((o.named(second), o.route(third)), (Some(B), Some((A, B))));
        // A body it was not sent with, a wrong receiver, a wrong sender.
        let err = o.deliver(first, B, 1, A, b"eno").unwrap_err();
        assert!(err.contains("body"), "{err}");
        let err = o.deliver(first, A, 0, A, b"one").unwrap_err();
        assert!(err.contains(&format!("delivered at {A}")), "{err}");
        assert!(o.deliver(first, B, 1, B, b"one").is_err());
        o.deliver(first, B, 1, A, b"one").unwrap();
        let err = o.deliver(first, B, 1, A, b"one").unwrap_err();
        assert!(
            err.contains(&format!("({A} → {B}, priority 2, #1) delivered twice")),
            "{err}"
        );
        // The third handed back as never sent: a gap over it is allowed,
        // its delivery is not.
        o.hand_back(third, false).unwrap();
        assert!(o.deliver(third, B, 1, A, b"three").is_err());
        assert_eq!(o.first_pending(), Some(second));
        let err = o.finish().unwrap_err();
        assert!(
            err.contains(&format!("message {second} ({A} → {B}")),
            "{err}"
        );
        // Sent to an address: any incarnation at that node may take it.
        let by_address = o.sent(A, B, Some(7), 0, b"x");
        assert!(o.deliver(by_address, SiteId(0xc5), 6, A, b"x").is_err());
        o.deliver(by_address, SiteId(0xc5), 7, A, b"x").unwrap();
        // A crashed sender's pending messages are lost with it.
        o.crashed(A);
        assert_eq!(o.first_pending(), None);
        assert!(o.finish().is_ok());
        // Out of order: #2 before #1, which is neither delivered nor
        // handed back.
        let mut o = Oracle::default();
        let _ = o.sent(B, A, None, 1, b"one");
        let second = o.sent(B, A, None, 1, b"two");
        let err = o.deliver(second, A, 0, B, b"two").unwrap_err();
        assert!(
            err.contains(&format!(
                "FIFO broken from {B} to {A} at priority 1: #2 delivered before #1"
            )),
            "{err}"
        );
    }
}
