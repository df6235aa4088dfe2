//! Shared test harness for the protocol-level tests: a "Pair" of working
//! sessions joined by ByteBuffers, a wire tap that decodes the frames moving
//! through it, and cheap deterministic payloads.
//!
//! Every test binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use sitenet_protocols::wire::message::Prelude;
use sitenet_protocols::{
    ByteBuffer, ChannelParams, Deliver, InMessage, OutMessage, Priority, ProtocolError,
    ReassemblyBudget, Session, SessionConfig, StreamAbort,
};

/// Maximum message size used by the tests (the default, 256 MiB).
pub const MAX_MESSAGE: u64 = 256 * 1024 * 1024;

/// A pseudo-random byte pattern (8 MiB + 64 KiB), generated once per test
/// binary. Message parts are slices of it, so generating a multi-MiB message
/// costs nothing and every offset has distinct-looking content.
pub fn pattern() -> &'static Bytes {
    static P: OnceLock<Bytes> = OnceLock::new();
    P.get_or_init(|| {
        let n = 8 * 1024 * 1024 + 64 * 1024;
        let mut v = Vec::with_capacity(n);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        while v.len() < n {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        v.truncate(n);
        Bytes::from(v)
    })
}

/// `len` bytes of the pattern starting at `offset` (wrapped into range).
pub fn slice(offset: usize, len: usize) -> Bytes {
    let p = pattern();
    assert!(len <= p.len(), "pattern slice too long");
    let off = offset % (p.len() - len + 1);
    p.slice(off..off + len)
}

/// Channel parameters of a fresh channel between two fresh sessions.
pub fn params(buffer_size: u32) -> ChannelParams {
    ChannelParams {
        buffer_size,
        peer_max_message: MAX_MESSAGE,
        peer_last_received: 0,
        generation: 1,
        caps: sitenet_protocols::Capabilities::ALL,
    }
}

/// A session with a working channel of `buffer_size`.
pub fn working_session(cfg: SessionConfig, budget: ReassemblyBudget, buffer_size: u32) -> Session {
    working_session_at(cfg, budget, buffer_size, Instant::now())
}

/// A session whose channel came up at `now`.
pub fn working_session_at(
    cfg: SessionConfig,
    budget: ReassemblyBudget,
    buffer_size: u32,
    now: Instant,
) -> Session {
    let mut s = Session::new(cfg, budget);
    s.channel_up(params(buffer_size), now)
        .expect("fresh channel_up");
    s
}

/// Encodes a frame (header + payload) as it appears on the wire.
pub fn frame_bytes(h: &FrameHeader, payload: &[u8]) -> Vec<u8> {
    let mut hb = [0u8; HEADER_LEN];
    h.encode(&mut hb);
    let mut v = hb.to_vec();
    v.extend_from_slice(payload);
    v
}

/// A record of one frame seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Its header.
    pub header: FrameHeader,
}

/// The numbers of the messages in the packed frame `h` with `payload`,
/// which must decode (a correct sender wrote it).
pub fn packed_numbers(h: &FrameHeader, payload: &[u8]) -> Vec<u64> {
    let mut arena = bytes::BytesMut::new();
    let mut entries =
        sitenet_protocols::connection::packed::Entries::new(h.lane, (payload, &[]), u64::MAX);
    let mut numbers = Vec::new();
    while let Some(e) = entries.next_entry(&mut arena) {
        e.unwrap_or_else(|e| panic!("sender wrote an invalid packed entry: {e}"));
        numbers.push(h.msg_number + numbers.len() as u64);
    }
    numbers
}

/// The first `n` bytes an output buffer holds (ring bytes and shared
/// pieces, in wire order), taken out of it.
pub fn take_some(out: &mut ByteBuffer, n: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(n);
    while bytes.len() < n && !out.is_empty() {
        let mut slices = [std::io::IoSlice::new(&[]); 16];
        let k = out.io_slices(&mut slices, n - bytes.len());
        let got: usize = slices[..k].iter().map(|s| s.len()).sum();
        for s in &slices[..k] {
            bytes.extend_from_slice(s);
        }
        out.consume(got);
    }
    bytes
}

/// Everything an output buffer holds, in wire order (its ring bytes and
/// shared pieces), taken out of it: what a driver's vectored writes send.
pub fn take_out(out: &mut ByteBuffer) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(out.len());
    while !out.is_empty() {
        let mut slices = [std::io::IoSlice::new(&[]); 16];
        let k = out.io_slices(&mut slices, usize::MAX);
        let n: usize = slices[..k].iter().map(|s| s.len()).sum();
        for s in &slices[..k] {
            bytes.extend_from_slice(s);
        }
        out.consume(n);
    }
    bytes
}

/// A working session with default settings, the smallest buffer and a
/// 1 GiB reassembly budget: the receiver the decoding tests feed.
pub fn fresh() -> Session {
    working_session(
        SessionConfig::default(),
        ReassemblyBudget::new(1 << 30),
        sitenet_protocols::connection::handshake::MIN_BUFFER,
    )
}

/// The numbers of the messages that the whole frames in `bytes` complete,
/// in wire order: a DATA frame's on its last fragment, and one for each
/// message of a PACKED frame.
pub fn completed_numbers(bytes: &[u8]) -> Vec<u64> {
    let mut numbers = Vec::new();
    let mut off = 0;
    while off + HEADER_LEN <= bytes.len() {
        let h = FrameHeader::decode(bytes[off..off + HEADER_LEN].try_into().unwrap(), 1 << 20)
            .expect("a valid frame header");
        let payload = &bytes[off + HEADER_LEN..off + HEADER_LEN + h.payload_len as usize];
        off += HEADER_LEN + h.payload_len as usize;
        match h.kind {
            FrameKind::Data if h.is_last() => numbers.push(h.msg_number),
            FrameKind::Packed => numbers.extend(packed_numbers(&h, payload)),
            _ => {}
        }
    }
    numbers
}

/// Decodes the frames of one direction's byte stream as the bytes pass, and
/// checks the wire rules a correct sender must follow:
/// * every header decodes (against the negotiated frame size);
/// * per lane, a message's FIRST frame only after the previous one's LAST
///   (at most one partly sent message per lane), contiguous offsets;
/// * the LAST frames of first transmissions carry 1, 2, 3, … in wire order;
///   a PACKED frame's messages are numbered on from its `msg_number`, and
///   it comes only between messages of its lane.
#[derive(Debug)]
pub struct FrameTap {
    max_payload: usize,
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    payload_left: u64,
    /// The payload of the PACKED frame being read, and its header.
    packed: Option<(FrameHeader, Vec<u8>)>,
    /// Messages seen in PACKED frames.
    pub packed_messages: u64,
    /// Every frame seen, in order.
    pub frames: Vec<Seen>,
    /// Payload bytes per lane (index = lane - 1, lane 5 = control).
    pub payload_per_lane: [u64; 5],
    /// Per lane: bytes of the message in progress (None between messages).
    open: HashMap<u8, u64>,
    /// Highest message number seen on the wire.
    pub last_number: u64,
    /// Largest frame seen, header included.
    pub max_frame: usize,
}

impl FrameTap {
    /// A tap for a channel whose negotiated buffer is `buffer_size`.
    pub fn new(buffer_size: usize) -> Self {
        Self {
            max_payload: buffer_size.min(MAX_FRAME_LEN) - HEADER_LEN,
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            payload_left: 0,
            packed: None,
            packed_messages: 0,
            frames: Vec::new(),
            payload_per_lane: [0; 5],
            open: HashMap::new(),
            last_number: 0,
            max_frame: 0,
        }
    }

    /// Feeds bytes in wire order.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.payload_left > 0 {
                let n = (self.payload_left as usize).min(data.len());
                self.payload_left -= n as u64;
                if let Some((_, buf)) = &mut self.packed {
                    buf.extend_from_slice(&data[..n]);
                }
                data = &data[n..];
                if self.payload_left == 0 {
                    if let Some((h, buf)) = self.packed.take() {
                        self.on_packed(h, &buf);
                    }
                }
                continue;
            }
            let n = (HEADER_LEN - self.hdr_have).min(data.len());
            self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&data[..n]);
            self.hdr_have += n;
            data = &data[n..];
            if self.hdr_have == HEADER_LEN {
                self.hdr_have = 0;
                let h = FrameHeader::decode(&self.hdr, self.max_payload)
                    .unwrap_or_else(|e| panic!("sender wrote an invalid frame header: {e}"));
                self.on_header(h);
                self.payload_left = h.payload_len as u64;
                if h.kind == FrameKind::Packed {
                    self.packed = Some((h, Vec::new()));
                }
            }
        }
    }

    fn on_header(&mut self, h: FrameHeader) {
        let len = HEADER_LEN + h.payload_len as usize;
        self.max_frame = self.max_frame.max(len);
        self.payload_per_lane[h.lane as usize - 1] += h.payload_len as u64;
        if h.kind == FrameKind::Data {
            let open = self.open.get(&h.lane).copied();
            if h.is_first() {
                assert!(
                    open.is_none(),
                    "lane {}: a new message started while one is partly sent",
                    h.lane
                );
                assert_eq!(h.frag_offset, 0);
            } else {
                let got = open.unwrap_or_else(|| {
                    panic!("lane {}: continuation without first fragment", h.lane)
                });
                assert_eq!(
                    h.frag_offset, got,
                    "lane {}: non-contiguous fragment offset",
                    h.lane
                );
            }
            let so_far = open.unwrap_or(0) + h.payload_len as u64;
            if h.is_last() {
                self.open.remove(&h.lane);
                if h.msg_number > self.last_number {
                    assert_eq!(
                        h.msg_number,
                        self.last_number + 1,
                        "message numbers on the wire skip"
                    );
                    self.last_number = h.msg_number;
                }
            } else {
                self.open.insert(h.lane, so_far);
            }
        }
        self.frames.push(Seen { header: h });
    }

    /// A whole PACKED frame: its messages must decode, and be numbered on
    /// from the last number seen (or be resends of earlier numbers).
    fn on_packed(&mut self, h: FrameHeader, payload: &[u8]) {
        assert!(
            !self.open.contains_key(&h.lane),
            "lane {}: packed messages while one is partly sent",
            h.lane
        );
        for n in packed_numbers(&h, payload) {
            if n > self.last_number {
                assert_eq!(n, self.last_number + 1, "message numbers on the wire skip");
                self.last_number = n;
            }
            self.packed_messages += 1;
        }
    }

    /// Frames seen of `kind`.
    pub fn count(&self, kind: FrameKind) -> usize {
        self.frames.iter().filter(|f| f.header.kind == kind).count()
    }
}

/// One end of a [`Pair`]: a session, its output buffer (what it sends) and
/// its input buffer (what it receives), the messages it delivered, and a tap
/// on the bytes it receives.
pub struct Side {
    /// The session.
    pub session: Session,
    /// Output ByteBuffer (sender side of this end).
    pub out: ByteBuffer,
    /// Input ByteBuffer (receiver side of this end).
    pub input: ByteBuffer,
    /// Messages delivered to this end, in delivery order.
    pub delivered: Vec<InMessage>,
    /// Frames received by this end.
    pub tap: FrameTap,
    /// Whether this end streams every message that spans several frames
    /// (its stream events go to `events`).
    pub streaming: bool,
    /// What this end's streams showed, in order.
    pub events: Vec<StreamEvent>,
}

/// What a streaming receiver was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The typed header of a streamed message of type `type_id`.
    Start {
        lane: Priority,
        type_id: u32,
        header: Bytes,
    },
    /// Body bytes at `offset`.
    Chunk {
        lane: Priority,
        offset: u64,
        data: Bytes,
    },
    /// Complete, numbered `number`.
    End { lane: Priority, number: u64 },
    /// Ended without its end.
    Abort { lane: Priority, why: StreamAbort },
}

/// A [`Deliver`] that records: whole messages to `delivered`, streams to
/// `events`.
pub struct Recorder<'a> {
    /// Stream every message asked about.
    pub stream: bool,
    /// Whole messages.
    pub delivered: &'a mut Vec<InMessage>,
    /// Stream events.
    pub events: &'a mut Vec<StreamEvent>,
}

impl Deliver for Recorder<'_> {
    fn message(&mut self, m: InMessage) {
        self.delivered.push(m);
    }
    fn stream(&mut self, _lane: Priority, _prelude: &Prelude) -> bool {
        self.stream
    }
    fn stream_start(&mut self, lane: Priority, prelude: &Prelude, header: Bytes) {
        self.events.push(StreamEvent::Start {
            lane,
            type_id: prelude.type_id,
            header,
        });
    }
    fn stream_chunk(&mut self, lane: Priority, offset: u64, data: Bytes) {
        self.events.push(StreamEvent::Chunk { lane, offset, data });
    }
    fn stream_end(&mut self, lane: Priority, number: u64) {
        self.events.push(StreamEvent::End { lane, number });
    }
    fn stream_abort(&mut self, lane: Priority, why: StreamAbort) {
        self.events.push(StreamEvent::Abort { lane, why });
    }
}

impl Side {
    fn new(session: Session, buffer_size: usize, negotiated: usize) -> Self {
        Self {
            session,
            // Large body parts go by reference, as on a real channel.
            out: ByteBuffer::with_shared(buffer_size, 4 * buffer_size),
            input: ByteBuffer::new(buffer_size),
            delivered: Vec::new(),
            tap: FrameTap::new(negotiated),
            streaming: false,
            events: Vec::new(),
        }
    }

    /// Queues a message (panics if the session refuses it).
    pub fn send(&mut self, m: OutMessage) {
        self.session.queue(m).map_err(|b| b.0).expect("queue");
    }
}

/// Two sessions, A and B, each with a working channel to the other, joined
/// by ByteBuffers. Bytes move in chunks whose sizes cycle through `chunks`.
pub struct Pair {
    /// Session A.
    pub a: Side,
    /// Session B.
    pub b: Side,
    /// Virtual clock.
    pub now: Instant,
    /// Chunk sizes (cycled) used to move bytes from an output to an input.
    pub chunks: Vec<usize>,
    chunk_idx: usize,
    /// Whether to tap frames (off for the allocation test).
    pub tapping: bool,
}

impl Pair {
    /// Two fresh sessions with a working channel of `buffer_size` and
    /// ByteBuffers of that size.
    pub fn new(buffer_size: usize, cfg: SessionConfig) -> Self {
        Self::with_budgets(
            buffer_size,
            cfg,
            ReassemblyBudget::new(1 << 40),
            ReassemblyBudget::new(1 << 40),
        )
    }

    /// As [`Pair::new`] with explicit reassembly budgets.
    pub fn with_budgets(
        buffer_size: usize,
        cfg: SessionConfig,
        ba: ReassemblyBudget,
        bb: ReassemblyBudget,
    ) -> Self {
        Self::asymmetric(buffer_size, buffer_size, buffer_size, cfg, ba, bb)
    }

    /// Negotiated `buffer_size`, while A's and B's own ByteBuffers are
    /// `a_buf` and `b_buf` bytes (each at least the negotiated size).
    pub fn asymmetric(
        negotiated: usize,
        a_buf: usize,
        b_buf: usize,
        cfg: SessionConfig,
        ba: ReassemblyBudget,
        bb: ReassemblyBudget,
    ) -> Self {
        assert!(a_buf >= negotiated && b_buf >= negotiated);
        let now = Instant::now();
        let a = working_session_at(cfg.clone(), ba, negotiated as u32, now);
        let b = working_session_at(cfg, bb, negotiated as u32, now);
        Self {
            a: Side::new(a, a_buf, negotiated),
            b: Side::new(b, b_buf, negotiated),
            now,
            chunks: vec![usize::MAX],
            chunk_idx: 0,
            tapping: true,
        }
    }

    /// Advances the virtual clock.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Moves bytes from `from`'s output to `to`'s input, at most `limit`
    /// bytes, letting `from` marshal more frames as room appears and `to`
    /// consume every complete frame after each chunk. Returns bytes moved.
    fn transfer(
        from: &mut Side,
        to: &mut Side,
        now: Instant,
        chunks: &[usize],
        chunk_idx: &mut usize,
        tapping: bool,
        limit: usize,
    ) -> Result<usize, ProtocolError> {
        let mut moved = 0;
        while moved < limit {
            // As a driver does: fire what is due before transmitting.
            if from.session.poll_timeout().is_some_and(|t| t <= now) {
                from.session.handle_timeout(now);
            }
            if from.out.is_empty() || from.out.free() >= from.out.capacity() / 4 {
                from.session.poll_transmit(now, &mut from.out);
            }
            if from.out.is_empty() {
                break;
            }
            let want = chunks[*chunk_idx % chunks.len()].max(1);
            *chunk_idx += 1;
            // As a driver does: a large fragment's rest is read in place
            // (zero-copy receive) when the session asks for it.
            let in_place = to.session.direct_input().map_or(0, |t| t.len());
            let free = if in_place > 0 {
                in_place
            } else {
                to.input.free()
            };
            assert!(
                free > 0,
                "receiver input buffer full with no complete frame: deadlock"
            );
            let n = want.min(from.out.len()).min(free).min(limit - moved);
            let bytes = take_some(&mut from.out, n);
            if tapping {
                to.tap.feed(&bytes);
            }
            if in_place > 0 {
                let target = to.session.direct_input().expect("asked above");
                target[..bytes.len()].copy_from_slice(&bytes);
                to.session.direct_commit(bytes.len());
            } else {
                to.input.push(&bytes);
            }
            moved += bytes.len();
            let mut recorder = Recorder {
                stream: to.streaming,
                delivered: &mut to.delivered,
                events: &mut to.events,
            };
            to.session
                .handle_input_with(now, &mut to.input, &mut recorder)?;
            assert!(to.input.len() <= to.input.capacity());
        }
        Ok(moved)
    }

    /// Moves at most `limit` bytes from A to B.
    pub fn a_to_b(&mut self, limit: usize) -> Result<usize, ProtocolError> {
        Self::transfer(
            &mut self.a,
            &mut self.b,
            self.now,
            &self.chunks,
            &mut self.chunk_idx,
            self.tapping,
            limit,
        )
    }

    /// Moves at most `limit` bytes from B to A.
    pub fn b_to_a(&mut self, limit: usize) -> Result<usize, ProtocolError> {
        Self::transfer(
            &mut self.b,
            &mut self.a,
            self.now,
            &self.chunks,
            &mut self.chunk_idx,
            self.tapping,
            limit,
        )
    }

    /// Pumps both directions until neither moves a byte.
    pub fn pump(&mut self) -> Result<(), ProtocolError> {
        loop {
            let ab = self.a_to_b(usize::MAX)?;
            let ba = self.b_to_a(usize::MAX)?;
            if ab == 0 && ba == 0 {
                return Ok(());
            }
        }
    }
}

/// True if `body` equals the concatenation of `parts` (compared slice by
/// slice, without building the concatenation).
pub fn body_equals(body: &[u8], parts: &[Bytes]) -> bool {
    let total: usize = parts.iter().map(Bytes::len).sum();
    if total != body.len() {
        return false;
    }
    let mut off = 0;
    for p in parts {
        if &body[off..off + p.len()] != p.as_ref() {
            return false;
        }
        off += p.len();
    }
    true
}
