//! Retransmission across lost channels, deterministically: two sessions
//! exchange 1,000 messages of mixed sizes and priorities over a simulated
//! channel with a virtual clock; one run per frame boundary of the uncut
//! exchange and per sampled byte offset, each run cut once there. Every
//! message must arrive exactly once, in order within its priority.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
mod common;
use common::{completed_numbers, take_out};
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, FLAG_FIRST, HEADER_LEN};
use sitenet_protocols::{
    ByteBuffer, ChannelParams, InMessage, OutMessage, Priority, ReassemblyBudget, Session,
    SessionConfig,
};

const BUF: u32 = 16 * 1024;

fn session() -> Session {
    Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 30))
}

/// One side: its session, the two rings of the current channel, what it got.
struct Side {
    s: Session,
    out: ByteBuffer,
    inb: ByteBuffer,
    got: Vec<InMessage>,
    /// Bytes written to the wire on the current channel.
    written: u64,
}

impl Side {
    fn new() -> Self {
        Self {
            s: session(),
            // Large body parts go by reference, as on a real channel.
            out: ByteBuffer::with_shared(BUF as usize, 4 * BUF as usize),
            inb: ByteBuffer::new(BUF as usize),
            got: Vec::new(),
            written: 0,
        }
    }
}

/// A bidirectional simulated channel between A and B with an optional cut of
/// the A→B byte stream at an offset (counted over the current channel).
struct Net {
    a: Side,
    b: Side,
    now: Instant,
    generation: u64,
    ab: VecDeque<u8>,
    ba: VecDeque<u8>,
    /// Cut the A→B stream once, when A has written this many bytes on the
    /// first channel.
    cut_at: Option<u64>,
    cuts: u32,
    /// Start offsets (on the first channel) of every A→B frame, recorded.
    boundaries: Vec<u64>,
    /// Wire bytes of every A→B frame, recorded on the first channel.
    frames: Vec<(FrameHeader, Vec<u8>)>,
    record: bool,
    pending_frame: Vec<u8>,
}

impl Net {
    fn new(cut_at: Option<u64>) -> Self {
        let mut n = Self {
            a: Side::new(),
            b: Side::new(),
            now: Instant::now(),
            generation: 0,
            ab: VecDeque::new(),
            ba: VecDeque::new(),
            cut_at,
            cuts: 0,
            boundaries: Vec::new(),
            frames: Vec::new(),
            record: false,
            pending_frame: Vec::new(),
        };
        n.reconnect();
        n
    }

    /// Both sides lose the channel, then a new one opens: the handshake
    /// tells each side the other's last received number.
    fn reconnect(&mut self) {
        self.a.s.channel_down();
        self.b.s.channel_down();
        self.generation += 1;
        let pa = ChannelParams {
            buffer_size: BUF,
            peer_max_message: 1 << 28,
            peer_last_received: self.b.s.last_received(),
            generation: self.generation,
            caps: sitenet_protocols::Capabilities::ALL,
        };
        let pb = ChannelParams {
            peer_last_received: self.a.s.last_received(),
            ..pa
        };
        self.a.s.channel_up(pa, self.now).unwrap();
        self.b.s.channel_up(pb, self.now).unwrap();
        for side in [&mut self.a, &mut self.b] {
            side.out.clear();
            side.inb.clear();
            side.written = 0;
        }
        self.ab.clear();
        self.ba.clear();
    }

    fn record_frames(&mut self, bytes: &[u8], base: u64) {
        // Split A's output into frames (frames never span two flushes here
        // because we move whole rings; a frame may still straddle calls when
        // the ring wrapped, so accumulate).
        let mut off = base - self.pending_frame.len() as u64;
        self.pending_frame.extend_from_slice(bytes);
        loop {
            if self.pending_frame.len() < HEADER_LEN {
                break;
            }
            let hb: [u8; HEADER_LEN] = self.pending_frame[..HEADER_LEN].try_into().unwrap();
            let h = FrameHeader::decode(&hb, 1 << 20).unwrap();
            let len = HEADER_LEN + h.payload_len as usize;
            if self.pending_frame.len() < len {
                break;
            }
            let f: Vec<u8> = self.pending_frame.drain(..len).collect();
            self.boundaries.push(off);
            self.frames.push((h, f));
            off += len as u64;
        }
    }

    /// One round: both sides transmit, bytes move, both sides read. Returns
    /// whether anything moved.
    fn step(&mut self) -> bool {
        let mut moved = false;
        // A → wire, honouring the cut.
        self.a.s.poll_transmit(self.now, &mut self.a.out);
        let bytes = take_out(&mut self.a.out);
        let n = bytes.len();
        if n > 0 {
            moved = true;
            let start = self.a.written;
            if self.record {
                self.record_frames(&bytes, start);
            }
            self.a.written += n as u64;
            if let Some(at) = self
                .cut_at
                .filter(|&at| self.generation == 1 && at < self.a.written)
            {
                // The reading side receives nothing past the offset.
                let keep = (at - start) as usize;
                self.ab.extend(&bytes[..keep]);
                self.deliver_ab();
                self.cuts += 1;
                self.cut_at = None;
                self.reconnect();
                return true;
            }
            self.ab.extend(bytes);
        }
        // B → wire.
        self.b.s.poll_transmit(self.now, &mut self.b.out);
        let bytes = take_out(&mut self.b.out);
        moved |= !bytes.is_empty();
        self.ba.extend(bytes);
        moved |= self.deliver_ab();
        // wire → A.
        while !self.ba.is_empty() && self.a.inb.free() > 0 {
            let k = self.a.inb.free().min(self.ba.len());
            let chunk: Vec<u8> = self.ba.drain(..k).collect();
            self.a.inb.push(&chunk);
            let got = &mut self.a.got;
            self.a
                .s
                .handle_input(self.now, &mut self.a.inb, &mut |m| got.push(m))
                .unwrap();
            moved = true;
        }
        moved
    }

    fn deliver_ab(&mut self) -> bool {
        let mut moved = false;
        while !self.ab.is_empty() && self.b.inb.free() > 0 {
            let k = self.b.inb.free().min(self.ab.len());
            let chunk: Vec<u8> = self.ab.drain(..k).collect();
            self.b.inb.push(&chunk);
            let got = &mut self.b.got;
            self.b
                .s
                .handle_input(self.now, &mut self.b.inb, &mut |m| got.push(m))
                .unwrap();
            moved = true;
        }
        moved
    }

    /// Runs until nothing moves and every message is acknowledged, advancing
    /// the virtual clock past ack delays (never past the silence timeout
    /// without traffic: heartbeats flow every virtual second).
    fn run(&mut self) {
        for _ in 0..1_000_000 {
            let moved = self.step();
            if !moved {
                if self.a.s.unacked() == 0
                    && self.b.s.unacked() == 0
                    && self.a.s.pending_messages() == 0
                    && self.b.s.pending_messages() == 0
                {
                    return;
                }
                self.now += Duration::from_millis(25);
                self.a.s.handle_timeout(self.now);
                self.b.s.handle_timeout(self.now);
            }
        }
        panic!("the exchange did not finish");
    }
}

/// The 1,000 messages A sends (and 200 B sends back, so acks piggy-back in
/// both directions), deterministic from a seed.
fn workload(seed: u64) -> (Vec<OutMessage>, Vec<OutMessage>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let body = Bytes::from(
        (0..40_000u32)
            .map(|i| (i * 7 + 3) as u8)
            .collect::<Vec<u8>>(),
    );
    let mut mk = |n: usize, tag: u32| -> Vec<OutMessage> {
        (0..n)
            .map(|i| {
                let prio = Priority::ALL[rng.gen_range(0..4)];
                let size = match rng.gen_range(0..10) {
                    0 => rng.gen_range(8_000..40_000),
                    1..=3 => rng.gen_range(500..3_000),
                    _ => rng.gen_range(0..200),
                };
                let header = Bytes::from(((tag << 20) | i as u32).to_le_bytes().to_vec());
                OutMessage::new(prio, tag, header, vec![body.slice(..size)])
            })
            .collect()
    };
    (mk(1000, 1), mk(200, 2))
}

fn id(m: &[u8]) -> u32 {
    u32::from_le_bytes(m[..4].try_into().unwrap())
}

/// Every message exactly once, and per priority in send order.
fn check(sent: &[OutMessage], got: &[InMessage], what: &str) {
    assert_eq!(
        got.len(),
        sent.len(),
        "{what}: delivered {} of {}",
        got.len(),
        sent.len()
    );
    for p in Priority::ALL {
        let want: Vec<u32> = sent
            .iter()
            .filter(|m| m.priority == p)
            .map(|m| id(&m.header))
            .collect();
        let have: Vec<u32> = got
            .iter()
            .filter(|m| m.priority == p)
            .map(|m| id(&m.header))
            .collect();
        assert_eq!(have, want, "{what}: priority {p:?} order");
    }
    for (m, s) in got.iter().zip(got.iter().map(|g| {
        sent.iter()
            .find(|s| id(&s.header) == id(&g.header))
            .unwrap()
    })) {
        assert_eq!(
            m.body.len() as u64,
            s.body_len(),
            "{what}: body of {}",
            id(&m.header)
        );
    }
}

fn run_with_cut(cut: Option<u64>, seed: u64) -> Net {
    let (to_b, to_a) = workload(seed);
    let mut net = Net::new(cut);
    net.record = cut.is_none();
    for m in to_b.iter().cloned() {
        net.a.s.queue(m).unwrap();
    }
    for m in to_a.iter().cloned() {
        net.b.s.queue(m).unwrap();
    }
    net.run();
    check(&to_b, &net.b.got, &format!("A→B cut at {cut:?}"));
    check(&to_a, &net.a.got, &format!("B→A cut at {cut:?}"));
    net
}

#[test]
fn a_cut_at_every_frame_boundary_and_sampled_offsets_loses_nothing() {
    const SEED: u64 = 0x5173_e4e7;
    let clean = run_with_cut(None, SEED);
    let total = clean.a.written;
    let boundaries = clean.boundaries.clone();
    assert!(boundaries.len() > 300, "{} frames", boundaries.len());
    // Cuts fall around and inside both kinds of frames.
    for kind in [FrameKind::Data, FrameKind::Packed] {
        assert!(clean.frames.iter().any(|(h, _)| h.kind == kind), "{kind:?}");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let sampled: Vec<u64> = (0..300).map(|_| rng.gen_range(1..total)).collect();
    let mut runs = 0;
    let mut retransmitted = 0;
    for &cut in boundaries.iter().chain(&sampled) {
        let net = run_with_cut(Some(cut.max(1)), SEED);
        assert_eq!(net.cuts, 1, "the cut at {cut} happened");
        retransmitted += net.a.s.stats().retransmitted;
        runs += 1;
    }
    assert!(retransmitted > 0);
    eprintln!("{runs} runs ({} frame boundaries, {} sampled offsets), {retransmitted} messages retransmitted", boundaries.len(), sampled.len());
}

/// Resent messages go out first after a reconnect, in their original order,
/// before any newer message (Mozart appended them behind newer ones).
#[test]
fn resent_messages_go_first_in_number_order() {
    let (to_b, _) = workload(7);
    let mut net = Net::new(None);
    for m in to_b[..50].iter().cloned() {
        net.a.s.queue(m).unwrap();
    }
    // A sends everything; nothing reaches B.
    net.a.s.poll_transmit(net.now, &mut net.a.out);
    while net.a.s.pending_messages() > net.a.s.unacked() {
        net.a.out.clear();
        net.a.s.poll_transmit(net.now, &mut net.a.out);
    }
    let unacked: Vec<u64> = (1..=net.a.s.last_sent()).collect();
    assert_eq!(net.a.s.unacked(), 50);
    // Newer messages are queued before the channel comes back.
    for m in to_b[50..60].iter().cloned() {
        net.a.s.queue(m).unwrap();
    }
    net.reconnect();
    // Decode what A writes first: the 50 resends, by number, then the new.
    let mut numbers = Vec::new();
    while numbers.len() < 60 {
        net.a.out.clear();
        net.a.s.poll_transmit(net.now, &mut net.a.out);
        let bytes = take_out(&mut net.a.out);
        numbers.extend(completed_numbers(&bytes));
    }
    assert_eq!(
        &numbers[..50],
        &unacked[..],
        "resends first, in number order, under their original numbers"
    );
    assert_eq!(
        &numbers[50..],
        &(51..=60).collect::<Vec<u64>>()[..],
        "then the new messages"
    );
    assert_eq!(net.a.s.stats().retransmitted, 50);
}

/// A test hook resends an already acknowledged message (its exact wire
/// frames): the receiver drops it and counts a duplicate.
#[test]
fn an_already_acknowledged_message_resent_is_dropped_and_counted() {
    let mut net = Net::new(None);
    net.record = true;
    let (to_b, _) = workload(11);
    for m in to_b[..20].iter().cloned() {
        net.a.s.queue(m).unwrap();
    }
    net.run();
    assert_eq!(net.b.got.len(), 20);
    assert_eq!(net.a.s.unacked(), 0, "all acknowledged");
    // Replay the frames of message number 5 (first to last fragment, or
    // the packed frame it went in: its other messages are duplicates too).
    let last = net
        .frames
        .iter()
        .position(|(_, f)| completed_numbers(f).contains(&5))
        .unwrap();
    let first = (0..=last)
        .rev()
        .find(|&i| {
            net.frames[i].0.flags & FLAG_FIRST != 0
                && net.frames[i].0.lane == net.frames[last].0.lane
        })
        .unwrap();
    let replay: Vec<u8> = net.frames[first..=last]
        .iter()
        .filter(|(h, _)| h.lane == net.frames[last].0.lane)
        .flat_map(|(_, f)| f.clone())
        .collect();
    let before = net.b.s.stats();
    for chunk in replay.chunks(BUF as usize / 2) {
        net.b.inb.push(chunk);
        let got = &mut net.b.got;
        net.b
            .s
            .handle_input(net.now, &mut net.b.inb, &mut |m| got.push(m))
            .unwrap();
    }
    let replayed = completed_numbers(&replay).len() as u64;
    assert!(replayed >= 1);
    assert_eq!(net.b.got.len(), 20, "not delivered again");
    assert_eq!(
        net.b.s.stats().duplicates,
        before.duplicates + replayed,
        "counted as duplicates"
    );
    assert_eq!(net.b.s.stats().delivered, before.delivered);
}
