//! Arbitrary bytes into a working session's input ByteBuffer, in chunks
//! chosen by the input: never panics, never stalls (a full input buffer after
//! `Ok` would mean a frame that can never complete), and the reassembly
//! budget is whole again once the session is dropped. Half the inputs
//! stream every multi-frame message (`Deliver`), checking the stream rules:
//! a start before any chunk, contiguous chunk offsets from 0, numbers in
//! order. Half read a large fragment's rest in place when offered. Half
//! are paced (`turn_budget`, so a busy node still acks and heartbeats): a
//! session that stops after a slice of deliveries with input left is fed
//! again, time passing, and must make progress each time.

use bytes::Bytes;
use sitenet_protocols::connection::handshake::MIN_BUFFER;
use sitenet_protocols::wire::message::Prelude;
use sitenet_protocols::{
    ByteBuffer, ChannelParams, Deliver, InMessage, OutMessage, Priority, ReassemblyBudget, Session,
    SessionConfig, StreamAbort,
};

/// A receiver that checks what it is told.
struct Checker {
    stream: bool,
    last: u64,
    /// Body bytes of each lane's open stream, if one is open.
    open: [Option<u64>; 4],
}

fn lane(p: Priority) -> usize {
    p.index()
}

impl Deliver for Checker {
    fn message(&mut self, m: InMessage) {
        assert!(
            self.open[lane(m.priority)].is_none(),
            "a message inside a stream of its lane"
        );
        assert_eq!(m.number, self.last + 1);
        self.last = m.number;
    }
    fn stream(&mut self, _: Priority, _: &Prelude) -> bool {
        self.stream
    }
    fn stream_start(&mut self, p: Priority, _: &Prelude, _: Bytes) {
        assert!(self.open[lane(p)].is_none(), "a start inside a stream");
        self.open[lane(p)] = Some(0);
    }
    fn stream_chunk(&mut self, p: Priority, offset: u64, data: Bytes) {
        let got = self.open[lane(p)]
            .as_mut()
            .expect("a chunk before its start");
        assert_eq!(offset, *got, "chunks are contiguous");
        *got += data.len() as u64;
    }
    fn stream_end(&mut self, p: Priority, number: u64) {
        assert!(
            self.open[lane(p)].take().is_some(),
            "an end without a start"
        );
        assert_eq!(number, self.last + 1);
        self.last = number;
    }
    fn stream_abort(&mut self, p: Priority, _: StreamAbort) {
        assert!(
            self.open[lane(p)].take().is_some(),
            "an abort without a start"
        );
    }
}
use std::time::Instant;

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let (ctl, stream) = data.split_at(4);
    // Negotiated buffer between 4 KiB and 68 KiB; a small maximum message
    // sometimes, so that the size checks are reached.
    let buffer_size = MIN_BUFFER + (u16::from_le_bytes([ctl[0], ctl[1]]) as u32);
    let max_message = if ctl[2] & 1 == 0 { 1 << 20 } else { 600 };
    let chunk = 1 + ctl[3] as usize * 16;
    let budget = ReassemblyBudget::new(1 << 20);
    let paced = ctl[2] & 8 != 0;
    let cfg = SessionConfig {
        max_message,
        turn_budget: paced.then(|| std::time::Duration::from_millis(10)),
        ..SessionConfig::default()
    };
    let mut s = Session::new(cfg, budget.clone());
    s.channel_up(
        ChannelParams {
            buffer_size,
            peer_max_message: 1 << 20,
            peer_last_received: 0,
            generation: 1,
            caps: sitenet_protocols::Capabilities::ALL,
        },
        Instant::now(),
    )
    .unwrap();
    // Send three messages so that acks 1..=3 are valid.
    for i in 0..3 {
        s.queue(OutMessage::new(
            Priority::Medium,
            i,
            Bytes::new(),
            vec![Bytes::from_static(b"0123456789")],
        ))
        .unwrap();
    }
    let now = Instant::now();
    let mut sink = ByteBuffer::new(buffer_size as usize);
    s.poll_transmit(now, &mut sink);

    let mut input = ByteBuffer::new(buffer_size as usize);
    let mut off = 0;
    let mut t = now;
    let mut checker = Checker {
        stream: ctl[2] & 2 != 0,
        last: 0,
        open: [None; 4],
    };
    while off < stream.len() {
        if input.free() == 0 && s.input_blocked() {
            // Backpressure: the reassembly budget is short. Not a stall.
            break;
        }
        // Half the inputs read a large fragment's rest in place when the
        // session offers it (zero-copy receive), the others into the ring.
        match s.direct_input().filter(|_| ctl[2] & 4 != 0) {
            Some(t) => {
                let n = chunk.min(t.len()).min(stream.len() - off);
                t[..n].copy_from_slice(&stream[off..off + n]);
                s.direct_commit(n);
                off += n;
            }
            None => {
                assert!(input.free() > 0, "input full after Ok: the session stalled");
                let n = chunk.min(input.free()).min(stream.len() - off);
                input.push(&stream[off..off + n]);
                off += n;
            }
        }
        let mut r = s.handle_input_with(t, &mut input, &mut checker);
        // Paced: each call delivers at least one message or frame, so
        // the rest is taken in at most as many calls as there are bytes.
        let mut calls = 0;
        let most = input.len() + 1;
        while r.is_ok() && s.input_paused() {
            assert!(paced, "an unpaced session paused");
            calls += 1;
            assert!(calls <= most, "a paused session made no progress");
            t += std::time::Duration::from_micros(100 * (1 + u64::from(ctl[3] & 7)));
            s.handle_timeout(t);
            if s.turn_spent(t) {
                s.begin_turn(t);
            }
            r = s.handle_input_with(t, &mut input, &mut checker);
        }
        assert!(input.len() <= input.capacity());
        if r.is_err() {
            break;
        }
        // The session may answer (acks) at any time.
        sink.clear();
        s.poll_transmit(t, &mut sink);
    }
    drop(s);
    assert_eq!(budget.available(), 1 << 20, "reassembly budget leaked");
}
