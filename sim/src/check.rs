//! The checkers' record of every application message: who sent it to
//! whom, at which priority and place in its stream, and what became of it.
//! Each delivery and hand-back is checked as it happens; [`Oracle::finish`]
//! checks that nothing is left unaccounted for once the run has settled.
//!
//! A message's full record is kept only while something can still happen
//! to it that needs more than its fate: while it is pending, or handed
//! back as maybe delivered (it may still arrive, in its place in its
//! stream). Once delivered, handed back as never delivered, or passed by
//! a later message of its stream, it keeps four bytes: its fate and the
//! site it was sent to (a hand-back after delivery names it). A stream
//! keeps only its messages not settled yet, and goes when none is left (the
//! next message starts it again: any delivery of an earlier one is judged
//! by its fate). A long run's memory then grows by four bytes a message,
//! not forty, and by nothing per pair of sites that once talked.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sitenet_protocols::base::site::SiteId;

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
    /// Handed back as maybe delivered, then passed by a later message of
    /// its stream: a delivery now would break FIFO.
    Overtaken,
}

impl Fate {
    /// Settled: nothing but the fate is needed any more (a delivery or a
    /// hand-back from here on is judged by the fate alone).
    fn settled(self) -> bool {
        !matches!(self, Fate::Pending | Fate::Maybe)
    }
}

/// Every message's fate once settled, and the site it was sent to, in
/// four bytes: the fate in the top three bits (0 while the full record is
/// kept), the site's number in the rest.
#[derive(Debug, Default)]
struct Fates(Vec<u32>);

impl Fates {
    const SHIFT: u32 = 29;
    const SITE: u32 = (1 << Self::SHIFT) - 1;

    fn push(&mut self, to: u32) {
        assert!(to <= Self::SITE, "fewer sites than 2^29");
        self.0.push(to);
    }

    /// The settled fate of message `id`, or `None` while its record is
    /// kept (or it was never sent).
    fn get(&self, id: u64) -> Option<Fate> {
        match self.0.get(usize::try_from(id).ok()?)? >> Self::SHIFT {
            1 => Some(Fate::Delivered),
            2 => Some(Fate::NotSent),
            3 => Some(Fate::DeliveredMaybe),
            4 => Some(Fate::Overtaken),
            _ => None,
        }
    }

    fn set(&mut self, id: u64, fate: Fate) {
        let code = match fate {
            Fate::Delivered => 1,
            Fate::NotSent => 2,
            Fate::DeliveredMaybe => 3,
            Fate::Overtaken => 4,
            Fate::Pending | Fate::Maybe => unreachable!("only a settled fate is kept alone"),
        };
        let v = &mut self.0[id as usize];
        *v = (*v & Self::SITE) | code << Self::SHIFT;
    }

    /// The number of the site message `id` was sent to.
    fn to(&self, id: u64) -> Option<u32> {
        let v = self.0.get(usize::try_from(id).ok()?)?;
        Some(v & Self::SITE)
    }
}

/// One message's full record: 32 bytes, kept while the message is pending
/// or maybe delivered.
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
        std::hash::BuildHasherDefault<crate::peer::SiteHasher>,
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

/// One sender's messages to one site at one priority, in sending order:
/// those not settled yet and after the last delivered, and the settled
/// ones between them (a delivery checks the gap before it against them).
/// Every message whose full record is kept is here.
#[derive(Debug, Default)]
struct Stream {
    ids: VecDeque<u64>,
    /// How many were let go from the front: `ids[0]` is number
    /// `dropped + 1`. Each was delivered, handed back as never delivered,
    /// or passed by a later delivery.
    dropped: u64,
    last_delivered: u64,
}

impl Stream {
    /// A message sent on the stream: its number (from 1).
    fn push(&mut self, id: u64) -> u64 {
        self.ids.push_back(id);
        self.dropped + self.ids.len() as u64
    }

    /// The id of the stream's message number `seq`, if still kept.
    fn id(&self, seq: u64) -> Option<u64> {
        let i = seq.checked_sub(self.dropped + 1)?;
        self.ids.get(usize::try_from(i).ok()?).copied()
    }
}

/// The record of every application message.
#[derive(Debug)]
pub(crate) struct Oracle {
    /// The full records of messages not settled yet, by id.
    msgs: BTreeMap<u64, Record>,
    /// Every message's settled fate and destination, by id.
    fates: Fates,
    /// Messages sent: the next one's id.
    sent: u64,
    sites: Sites,
    streams: BTreeMap<(SiteId, SiteId, u8), Stream>,
    /// Incarnations that crashed: their unacknowledged messages are lost
    /// with them (at most once), and messages to them must be handed back.
    crashed: BTreeSet<SiteId>,
    pub(crate) delivered: u64,
    pub(crate) handed_back: u64,
    /// Requests sent, and those not ended yet (by requester, number).
    pub(crate) requests: u64,
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
            msgs: BTreeMap::new(),
            fates: Fates::default(),
            sent: 0,
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
    pub(crate) fn sent(
        &mut self,
        from: SiteId,
        to: SiteId,
        place: Option<usize>,
        priority: u8,
        body: &[u8],
    ) -> u64 {
        let id = self.sent;
        self.sent += 1;
        let seq = self
            .streams
            .entry((from, Dest::key(to, place), priority))
            .or_default()
            .push(id);
        let place = place.map_or(NO_PLACE, |m| {
            u32::try_from(m).expect("fewer nodes than 2^32")
        });
        let (from, to) = (self.sites.number(from), self.sites.number(to));
        self.fates.push(to);
        self.msgs.insert(
            id,
            Record {
                from,
                to,
                place,
                priority,
                fate: Fate::Pending,
                seq,
                hash: hash(body),
            },
        );
        id
    }

    pub(crate) fn messages(&self) -> u64 {
        self.sent
    }

    /// Full records kept: messages pending or maybe delivered.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.msgs.len()
    }

    /// What is kept holds together: no stream is empty, and every full
    /// record is in its stream at its number.
    #[cfg(test)]
    pub(crate) fn check_kept(&self) {
        assert!(self.streams.values().all(|s| !s.ids.is_empty()));
        for (id, r) in &self.msgs {
            let s = &self.streams[&self.stream_key(r)];
            assert_eq!(s.id(r.seq), Some(*id), "{r:?} is not in its stream");
        }
    }

    /// Stream numbers kept: those after each stream's last delivery.
    #[cfg(test)]
    pub(crate) fn kept_numbers(&self) -> usize {
        self.streams.values().map(|s| s.ids.len()).sum()
    }

    pub(crate) fn crashed(&mut self, site: SiteId) {
        self.crashed.insert(site);
    }

    /// The site the application named when it sent message `id`.
    pub(crate) fn named(&self, id: u64) -> Option<SiteId> {
        self.fates.to(id).map(|to| self.sites.get(to))
    }

    /// Message `id`'s fate, from its record or its settled fate.
    fn fate(&self, id: u64) -> Option<Fate> {
        self.msgs
            .get(&id)
            .map(|r| r.fate)
            .or_else(|| self.fates.get(id))
    }

    /// Message `id` reached `fate`: its record goes once that is settled,
    /// and its stream lets go of what no delivery checks any more.
    fn settle(&mut self, id: u64, fate: Fate) {
        if !fate.settled() {
            if let Some(r) = self.msgs.get_mut(&id) {
                r.fate = fate;
            }
            return;
        }
        self.fates.set(id, fate);
        if let Some(r) = self.msgs.remove(&id) {
            let key = self.stream_key(&r);
            self.trim(key);
        }
    }

    /// The stream a record's message is in.
    fn stream_key(&self, r: &Record) -> (SiteId, SiteId, u8) {
        let to = Dest::key(self.sites.get(r.to), r.place());
        (self.sites.get(r.from), to, r.priority)
    }

    /// Lets go of the front of stream `key`: everything up to its last
    /// delivery (a message handed back as maybe delivered and passed by it
    /// is settled as such), then what is settled; and of the stream once
    /// nothing is left in it.
    fn trim(&mut self, key: (SiteId, SiteId, u8)) {
        let Some(s) = self.streams.get_mut(&key) else {
            return;
        };
        while let Some(&front) = s.ids.front() {
            if s.dropped >= s.last_delivered && self.fates.get(front).is_none() {
                break;
            }
            if let Some(r) = self.msgs.remove(&front) {
                debug_assert_eq!(r.fate, Fate::Maybe, "only a gap's messages are passed");
                self.fates.set(front, Fate::Overtaken);
            }
            s.ids.pop_front();
            s.dropped += 1;
        }
        if s.ids.is_empty() {
            self.streams.remove(&key);
        }
    }

    /// Message `id`'s sender and destination as a violation names them
    /// (only the destination once its record is gone).
    fn route_of(&self, id: u64) -> String {
        match self.route(id) {
            Some((from, to)) => format!("{from} → {to}"),
            None => format!("→ {}", self.settled_to(id)),
        }
    }

    /// The site a settled message was sent to, for a violation's text.
    fn settled_to(&self, id: u64) -> String {
        self.fates
            .to(id)
            .map_or_else(|| "?".into(), |to| self.sites.get(to).to_string())
    }

    /// Message `id` was delivered at `at` (node `node`), on the channel
    /// from `from`.
    pub(crate) fn deliver(
        &mut self,
        id: u64,
        at: SiteId,
        node: usize,
        from: SiteId,
        body: &[u8],
    ) -> Result<(), String> {
        let sites = &self.sites;
        let Some(r) = self.msgs.get(&id) else {
            return Err(match self.fates.get(id) {
                None => format!("{at} received message {id}, which was never sent"),
                Some(Fate::NotSent) => format!(
                    "message {id} (from {from} → {}) delivered after it was handed back as \
                     never delivered",
                    self.settled_to(id)
                ),
                Some(Fate::Overtaken) => format!(
                    "FIFO broken from {from} to {}: message {id}, handed back as maybe \
                     delivered, delivered after a later message of its stream",
                    self.settled_to(id)
                ),
                Some(_) => format!(
                    "message {id} (from {from} → {}) delivered twice",
                    self.settled_to(id)
                ),
            });
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
        let fate = match r.fate {
            Fate::Pending => Fate::Delivered,
            Fate::Maybe => Fate::DeliveredMaybe,
            settled => unreachable!("a settled message keeps no record: {settled:?}"),
        };
        let (key, seq) = (self.stream_key(r), r.seq);
        self.delivered += 1;
        let Some(s) = self.streams.get(&key) else {
            return Err(format!(
                "message {id} from {r_from} to {r_to} was delivered, but its stream is gone \
                 (the checker's own fault)"
            ));
        };
        if seq <= s.last_delivered {
            return Err(format!(
                "FIFO broken from {} to {} at priority {}: #{seq} delivered after #{}",
                key.0,
                Dest(key.1),
                key.2,
                s.last_delivered
            ));
        }
        // A gap is allowed only over messages already handed back (those
        // let go from the front of the stream were handed back as never
        // delivered: every delivered one is before the last delivery).
        for skipped in s.last_delivered.max(s.dropped) + 1..seq {
            let fate = s.id(skipped).and_then(|sid| self.fate(sid));
            let handed_back = matches!(fate, Some(Fate::NotSent | Fate::Maybe));
            if !handed_back {
                return Err(format!(
                    "FIFO broken from {} to {} at priority {}: #{seq} delivered before #{skipped}, \
                     which was neither delivered nor handed back",
                    key.0, Dest(key.1), key.2
                ));
            }
        }
        if let Some(s) = self.streams.get_mut(&key) {
            s.last_delivered = seq;
        }
        self.settle(id, fate);
        Ok(())
    }

    /// Message `id` was handed back to its sender.
    pub(crate) fn hand_back(&mut self, id: u64, maybe_delivered: bool) -> Result<(), String> {
        let Some(fate) = self.fate(id) else {
            return Err(format!("message {id} handed back but never sent"));
        };
        self.handed_back += 1;
        let fate = match (fate, maybe_delivered) {
            (Fate::Pending, false) => Fate::NotSent,
            (Fate::Pending, true) => Fate::Maybe,
            (Fate::Delivered, true) => Fate::DeliveredMaybe,
            (Fate::Delivered, false) => {
                return Err(format!(
                    "message {id} ({}) handed back as never delivered, but it was delivered",
                    self.route_of(id)
                ))
            }
            (_, _) => {
                return Err(format!(
                    "message {id} ({}) handed back twice",
                    self.route_of(id)
                ))
            }
        };
        self.settle(id, fate);
        Ok(())
    }

    /// Message `id` was given up before it was ever queued (a request
    /// that ended while it waited for room): it never goes, and nobody is
    /// told of it but its requester.
    pub(crate) fn given_up(&mut self, id: u64) -> Result<(), String> {
        match self.fate(id) {
            None => Err(format!("message {id} given up but never sent")),
            Some(Fate::Pending) => {
                self.settle(id, Fate::NotSent);
                Ok(())
            }
            Some(_) => Err(format!(
                "message {id} (→ {}) given up after it went",
                self.settled_to(id)
            )),
        }
    }

    /// Site `at` sent request `corr`.
    pub(crate) fn request(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.requests += 1;
        self.open_requests.start(at, corr)
    }

    /// Request `corr` of site `at` ended (answer, timeout or failure).
    pub(crate) fn answered(&mut self, at: SiteId, corr: u64) -> Result<(), String> {
        self.open_requests.end(at, corr)
    }

    /// Message `id` was delivered (whatever happened to it since).
    pub(crate) fn was_delivered(&self, id: u64) -> bool {
        self.fate(id)
            .is_some_and(|f| matches!(f, Fate::Delivered | Fate::DeliveredMaybe))
    }

    /// Site `at` submitted batch `batch`.
    pub(crate) fn batch_opened(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.start(at, batch)
    }

    /// Batch `batch` of site `at` ended.
    pub(crate) fn batch_ended(&mut self, at: SiteId, batch: u64) -> Result<(), String> {
        self.open_batches.end(at, batch)
    }

    /// Site `at` opened cooperation `coop`.
    pub(crate) fn coop_opened(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.start(at, coop)
    }

    /// Cooperation `coop` of site `at` ended.
    pub(crate) fn coop_ended(&mut self, at: SiteId, coop: u64) -> Result<(), String> {
        self.open_coops.end(at, coop)
    }

    /// After the run settled: every message of a sender still up was
    /// delivered or handed back.
    /// The first message of a live sender neither delivered nor handed
    /// back (the one [`finish`](Self::finish) names).
    pub(crate) fn first_pending(&self) -> Option<u64> {
        self.msgs
            .iter()
            .find(|(_, r)| {
                r.fate == Fate::Pending && !self.crashed.contains(&self.sites.get(r.from))
            })
            .map(|(id, _)| *id)
    }

    /// Message `id`'s sender and the site it was sent to.
    pub(crate) fn route(&self, id: u64) -> Option<(SiteId, SiteId)> {
        let r = self.msgs.get(&id)?;
        Some((self.sites.get(r.from), self.sites.get(r.to)))
    }

    pub(crate) fn finish(&self) -> Result<(), String> {
        if let Some(id) = self.first_pending() {
            let r = &self.msgs[&id];
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

    /// The full record a message keeps while it is in flight is 32 bytes
    /// (it was 72, with the sites' ids in it).
    #[test]
    fn a_record_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 32);
    }

    /// A long run's memory: every message kept its full record and its
    /// number in its stream for the whole run (66 bytes a message in a
    /// 50-site run). A settled message now keeps four bytes, and what
    /// can still happen to it is judged by them.
    #[test]
    fn settled_messages_keep_only_their_fate() {
        let mut o = Oracle::default();
        let ids: Vec<u64> = (0..1000u32)
            .map(|i| o.sent(A, B, None, (i % 3) as u8, &i.to_le_bytes()))
            .collect();
        assert_eq!((o.kept(), o.kept_numbers()), (1000, 1000));
        for (i, &id) in ids.iter().enumerate() {
            o.deliver(id, B, 1, A, &(i as u32).to_le_bytes()).unwrap();
        }
        assert_eq!((o.kept(), o.kept_numbers(), o.messages()), (0, 0, 1000));
        assert_eq!(o.fates.0.len() * 4, 4000);
        // Judged by the fate alone: a second delivery, a hand-back as
        // never delivered; a hand-back as maybe delivered is right (its
        // ack was lost), and names the site it was sent to.
        let err = o.deliver(ids[7], B, 1, A, &7u32.to_le_bytes()).unwrap_err();
        assert!(
            err.contains(&format!("(from {A} → {B}) delivered twice")),
            "{err}"
        );
        let err = o.hand_back(ids[8], false).unwrap_err();
        assert!(
            err.contains("handed back as never delivered, but it was"),
            "{err}"
        );
        o.hand_back(ids[9], true).unwrap();
        assert!(o.hand_back(ids[9], true).unwrap_err().contains("twice"));
        assert_eq!(o.named(ids[9]), Some(B));
        assert!(o.was_delivered(ids[9]));
        assert!(o.given_up(ids[10]).unwrap_err().contains("after it went"));
        assert_eq!(o.first_pending(), None);
        assert!(o.finish().is_ok());
    }

    /// A message handed back as maybe delivered keeps its record (it may
    /// still arrive, and is checked when it does) until a later message
    /// of its stream passes it; one handed back as never delivered does
    /// not, and a gap over it is still allowed. A stream that holds
    /// nothing goes, and starts again with its next message.
    #[test]
    fn hand_backs_settle_only_what_cannot_arrive() {
        let mut o = Oracle::default();
        let one = o.sent(A, B, None, 1, b"one");
        let two = o.sent(A, B, None, 1, b"two");
        let three = o.sent(A, B, None, 1, b"three");
        let four = o.sent(A, B, None, 1, b"four");
        o.hand_back(one, false).unwrap();
        o.hand_back(two, true).unwrap();
        assert_eq!(o.kept(), 3);
        assert_eq!((o.kept(), o.kept_numbers()), (3, 3));
        // #3 over #1 (never delivered) and #2 (maybe): allowed.
        o.deliver(three, B, 1, A, b"three").unwrap();
        assert_eq!((o.kept(), o.kept_numbers()), (1, 1));
        // #2 arriving now breaks FIFO, and #1 was never to arrive.
        let err = o.deliver(two, B, 1, A, b"two").unwrap_err();
        assert!(
            err.contains(&format!("FIFO broken from {A} to {B}: message {two}")),
            "{err}"
        );
        assert!(!o.was_delivered(two));
        let err = o.deliver(one, B, 1, A, b"one").unwrap_err();
        assert!(
            err.contains("after it was handed back as never delivered"),
            "{err}"
        );
        // #4 is still pending: named by the finish check with its route.
        assert_eq!(o.first_pending(), Some(four));
        assert!(o
            .finish()
            .unwrap_err()
            .contains(&format!("{A} → {B}, priority 1, #4")));
        o.deliver(four, B, 1, A, b"four").unwrap();
        assert_eq!(
            (o.first_pending(), o.kept(), o.kept_numbers()),
            (None, 0, 0)
        );
        // The stream went with its last message; the next starts it again,
        // and a gap in it is judged as before.
        let five = o.sent(A, B, None, 1, b"five");
        let six = o.sent(A, B, None, 1, b"six");
        let err = o.deliver(six, B, 1, A, b"six").unwrap_err();
        assert!(err.contains("#2 delivered before #1"), "{err}");
        o.deliver(five, B, 1, A, b"five").unwrap();
        o.deliver(six, B, 1, A, b"six").unwrap();
        assert!(o
            .deliver(four, B, 1, A, b"four")
            .unwrap_err()
            .contains("twice"));
    }

    /// A message handed back as never delivered in the middle of a stream
    /// is let go once everything before it is; a message handed back as
    /// maybe delivered that does arrive in its place is delivered.
    #[test]
    fn a_maybe_delivered_message_arriving_in_its_place_is_delivered() {
        let mut o = Oracle::default();
        let ids: Vec<u64> = (0..4u8).map(|i| o.sent(A, B, None, 0, &[i])).collect();
        o.hand_back(ids[1], false).unwrap();
        assert_eq!(o.kept_numbers(), 4);
        o.hand_back(ids[0], true).unwrap();
        o.deliver(ids[0], B, 1, A, &[0]).unwrap();
        assert!(o.was_delivered(ids[0]));
        // #1 delivered, #2 never: both let go.
        assert_eq!((o.kept(), o.kept_numbers()), (2, 2));
        o.deliver(ids[3], B, 1, A, &[3]).unwrap_err();
        o.deliver(ids[2], B, 1, A, &[2]).unwrap();
        o.deliver(ids[3], B, 1, A, &[3]).unwrap();
        assert_eq!((o.kept(), o.kept_numbers()), (0, 0));
        assert!(o.hand_back(ids[0], true).is_err(), "handed back twice");
        o.check_kept();
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
            err.contains(&format!("(from {A} → {B}) delivered twice")),
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
