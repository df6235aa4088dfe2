//! CPU cost of sitenet's per-message work, without sockets: two working
//! sessions joined by their ByteBuffers in memory, so the figures are the
//! protocol's own (marshal, number, frame, unmarshal, acknowledge, free) and
//! do not drift with the kernel or this machine's idle-core wake-ups.
//!
//! Run with `cargo bench --bench hot_paths`. Compare figures only within one
//! run; the two-process figures (`sitenet send`, `sitenet ping`) are the
//! end-to-end ones.

use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_LEN};
use sitenet_protocols::{
    ByteBuffer, ChannelParams, MessageKind, OutMessage, Priority, ReassemblyBudget, Session,
    SessionConfig,
};

const RING: usize = 64 * 1024;

/// Two sessions with a working channel and the rings between them.
struct Pair {
    a: Session,
    b: Session,
    a_out: ByteBuffer,
    b_in: ByteBuffer,
    b_out: ByteBuffer,
    a_in: ByteBuffer,
}

impl Pair {
    fn new() -> Self {
        let params = ChannelParams {
            buffer_size: RING as u32,
            peer_max_message: 1 << 28,
            peer_last_received: 0,
            generation: 1,
            caps: sitenet_protocols::Capabilities::ALL,
        };
        let session = || {
            let mut s = Session::new(SessionConfig::default(), ReassemblyBudget::new(1 << 30));
            s.channel_up(params, std::time::Instant::now())
                .expect("fresh channel");
            s
        };
        Self {
            a: session(),
            b: session(),
            a_out: ByteBuffer::new(RING),
            b_in: ByteBuffer::new(RING),
            b_out: ByteBuffer::new(RING),
            a_in: ByteBuffer::new(RING),
        }
    }

    /// Moves everything `from` holds into `to` (as far as it has room).
    fn carry(from: &mut ByteBuffer, to: &mut ByteBuffer) {
        let n = from.len().min(to.free());
        let (x, y) = from.chunks();
        let nx = n.min(x.len());
        to.push(&x[..nx]);
        to.push(&y[..n - nx]);
        from.consume(n);
    }

    /// Queues `msgs` on A and runs both sides until B delivered them all and
    /// A freed them on B's acknowledgement. Returns the count delivered.
    fn exchange(&mut self, msgs: Vec<OutMessage>) -> usize {
        let want = msgs.len();
        for m in msgs {
            self.a.queue(m).expect("queued");
        }
        let now = Instant::now();
        let mut delivered = 0;
        while delivered < want || self.a.unacked() > 0 {
            self.a.poll_transmit(now, &mut self.a_out);
            Self::carry(&mut self.a_out, &mut self.b_in);
            self.b
                .handle_input(now, &mut self.b_in, &mut |m| {
                    delivered += 1;
                    criterion::black_box(m);
                })
                .expect("valid stream");
            if delivered == want {
                self.b.ack_now();
            }
            self.b.poll_transmit(now, &mut self.b_out);
            Self::carry(&mut self.b_out, &mut self.a_in);
            self.a
                .handle_input(now, &mut self.a_in, &mut |_| {})
                .expect("valid acks");
        }
        self.a.take_freed();
        delivered
    }
}

fn messages(n: usize, size: usize) -> Vec<OutMessage> {
    let body = Bytes::from(vec![0x5A; size]);
    // A typical small typed header: a stream id and a sequence number.
    let header = Bytes::from_static(&[0x92, 0xcf, 1, 2, 3, 4, 5, 6, 7, 8, 0xcd, 1, 0]);
    (0..n)
        .map(|_| OutMessage {
            priority: Priority::Medium,
            type_id: 7,
            kind: MessageKind::OneWay,
            corr: 0,
            header: header.clone(),
            body: vec![body.clone()].into(),
            tracked: false,
        })
        .collect()
}

/// Marshal → ring → unmarshal → deliver → acknowledge → free, per message.
fn one_way(c: &mut Criterion) {
    let mut g = c.benchmark_group("session_one_way");
    for (size, batch) in [
        (64usize, 1000usize),
        (1024, 1000),
        (60 * 1024, 50),
        (1 << 20, 4),
    ] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |bench, &size| {
            let mut pair = Pair::new();
            bench.iter_batched(
                || messages(batch, size),
                |msgs| assert_eq!(pair.exchange(msgs), batch),
                criterion::BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

/// The fixed 32-byte frame header, both ways.
fn frame_header(c: &mut Criterion) {
    let h = FrameHeader {
        kind: FrameKind::Data,
        lane: 3,
        flags: 3,
        payload_len: 120,
        ack: 12_345,
        msg_number: 67_890,
        frag_offset: 0,
    };
    c.bench_function("frame_header_encode_decode", |bench| {
        let mut b = [0u8; HEADER_LEN];
        bench.iter(|| {
            criterion::black_box(&h).encode(&mut b);
            FrameHeader::decode(criterion::black_box(&b), MAX_FRAME_LEN - HEADER_LEN)
                .expect("valid")
        });
    });
}

criterion_group!(benches, one_way, frame_header);
criterion_main!(benches);
