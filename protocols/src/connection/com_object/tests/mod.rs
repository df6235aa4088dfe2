//! Deterministic tests of the ComObject's connection logic, with a virtual
//! clock and a seeded RNG.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::base::priority::Priority;
use crate::connection::address_book::AddressBook;
use crate::connection::error::{OpenError, Refusal};
use crate::connection::handshake::{
    Continuity, HandshakeNonces, Negotiate, NegotiateAns, Nonce, Opened, PairSecret, Present,
    RefuseReason,
};
use crate::connection::session::CloseReason;
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::message::OutMessage;
use crate::{Agreed, Capabilities, Speaks, PROTOCOL_VERSION};

const LOCAL: SiteId = SiteId(0x10);
const PEER: SiteId = SiteId(0x20);

/// The nonce of our PRESENT in the tests' handshakes.
const NONCE: Nonce = [0xAC; 32];
/// The nonce of the peer's NEGOTIATE in the tests' handshakes.
const PEER_NONCE: Nonce = [0x1A; 32];
/// The secret the tests' first channel agrees (see `opened`).
const PAIR: PairSecret = PairSecret([0x5E; 16]);

/// The tests' handshake of a channel the peer opens to us.
fn from_peer() -> HandshakeNonces {
    HandshakeNonces {
        acceptor: LOCAL,
        acceptor_nonce: NONCE,
        initiator: PEER,
        initiator_nonce: PEER_NONCE,
    }
}

struct H {
    com: ComObject,
    now: Instant,
}

fn cfg() -> ComConfig {
    ComConfig {
        give_up_after: Some(Duration::from_secs(60)),
        ..ComConfig::default()
    }
}

fn msg(len: usize) -> OutMessage {
    OutMessage::new(
        Priority::Medium,
        1,
        Bytes::new(),
        vec![Bytes::from(vec![7u8; len])],
    )
}

fn opened(generation: u64, peer_max_message: u64) -> Opened {
    Opened {
        present: Present {
            versions: Speaks::CURRENT.versions,
            caps: Speaks::CURRENT.caps,
            site: PEER,
            listen: vec![],
            nonce: NONCE,
        },
        buffer_size: 65_536,
        peer_max_message,
        peer_last_received: 0,
        generation,
        // The first channel of a session: the peer answers fresh, and the
        // pair keeps `PAIR`.
        peer_fresh: generation == 1,
        pair_secret: (generation == 1).then_some(PAIR),
        // Two fresh sides stay in the pair's first numbering.
        session: 0,
        agreed: Agreed::CURRENT,
    }
}

fn negotiate(last_generation: u64, attempt: Attempt) -> Negotiate {
    Negotiate {
        version: PROTOCOL_VERSION,
        caps: Capabilities::ALL,
        site: PEER,
        listen: vec![],
        buffer_size: 16_384,
        max_message: 1 << 20,
        last_received: 0,
        last_generation,
        attempt,
        nonce: PEER_NONCE,
        // The peer of the tests holds `PAIR`.
        proof: Some(from_peer().proof(&PAIR)),
        cookie: None,
        // The pair's first numbering, as the tests' sessions are.
        session: 0,
    }
}

/// What a stranger claiming the peer's id sends: no proof.
fn forged(last_generation: u64) -> Negotiate {
    Negotiate {
        proof: None,
        nonce: [0xF0; 32],
        ..negotiate(last_generation, Attempt::UNKNOWN)
    }
}

/// True if the actions are exactly one report of a temporary failure.
fn only_temp_failed(a: &[Action]) -> bool {
    matches!(
        a,
        [Action::Fault {
            state: FaultState::TempFailed,
            ..
        }]
    )
}

/// The address book of a site that can be called (at a given address) or
/// not.
fn book(can_open: bool) -> AddressBook {
    if can_open {
        AddressBook::given("tcp:peer:1")
    } else {
        AddressBook::default()
    }
}

impl H {
    fn new(cfg: ComConfig, can_open: bool) -> Self {
        let now = Instant::now();
        let budget = ReassemblyBudget::new(1 << 30);
        Self {
            com: ComObject::new(cfg, budget, LOCAL, book(can_open), 1, 42, now),
            now,
        }
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.com.poll_action()).collect()
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.com.handle_timeout(self.now);
    }

    /// Runs to the next deadline.
    fn run_to_next_deadline(&mut self) -> Instant {
        let at = self.com.poll_timeout().expect("a deadline");
        assert!(at >= self.now, "deadline in the past");
        self.now = at;
        self.com.handle_timeout(at);
        at
    }

    /// Queues a message and opens: returns the attempt's sequence number.
    fn queue_and_request_open(&mut self) -> u64 {
        self.com.queue(msg(10)).unwrap();
        let a = self.actions();
        assert!(matches!(a[..], [Action::RequestSlot]), "{a:?}");
        assert_eq!(self.com.state(), ComState::WaitingForSlot);
        self.grant()
    }

    fn grant(&mut self) -> u64 {
        self.grant_at().0
    }

    /// Grants the slot asked for: the attempt's number and address.
    fn grant_at(&mut self) -> (u64, String) {
        self.com.slot_granted();
        let a = self.actions();
        let [Action::Open(req)] = &a[..] else {
            panic!("expected an open: {a:?}")
        };
        assert_eq!(req.attempt.opener, 1);
        assert_eq!(self.com.state(), ComState::Opening);
        (req.attempt.seq, req.address.clone())
    }

    fn working(&mut self) -> ChannelId {
        let attempt = self.queue_and_request_open();
        let id = self
            .com
            .open_succeeded(attempt, &opened(1, 1 << 20), self.now)
            .expect("working");
        assert_eq!(self.com.state(), ComState::Working);
        self.actions();
        id
    }
}

mod addresses;
mod close;
mod continuity;
mod fresh;
mod line;
mod open;
mod park;
