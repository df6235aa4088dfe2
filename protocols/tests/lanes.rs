//! Lanes and priorities, sans-IO: a small high-priority message overtakes a
//! huge low-priority one after at most one of its frames; each priority is
//! FIFO; under saturation levels 2, 3 and 4 share the bytes by their
//! configured weights; level 1 waits for idle time until it is promoted.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{body_equals, slice, FrameTap, Pair};
use sitenet_protocols::connection::scheduler::SchedulerConfig;
use sitenet_protocols::wire::frame::FrameKind;
use sitenet_protocols::{ByteBuffer, OutMessage, Priority, SessionConfig};

const MIB: usize = 1 << 20;

/// A message of `len` body bytes made of repeated pattern slices.
fn big(priority: Priority, type_id: u32, len: usize) -> OutMessage {
    let chunk = slice(type_id as usize * 4099, MIB);
    let mut body = vec![chunk; len / MIB];
    if len % MIB != 0 {
        body.push(slice(0, len % MIB));
    }
    OutMessage::new(priority, type_id, Bytes::new(), body)
}

fn small(priority: Priority, type_id: u32, len: usize) -> OutMessage {
    OutMessage::new(
        priority,
        type_id,
        Bytes::from_static(b"hdr"),
        vec![slice(type_id as usize, len)],
    )
}

#[test]
fn high_priority_overtakes_a_big_low_priority_message() {
    let mut pair = Pair::new(65_536, SessionConfig::default());
    let low = big(Priority::Low, 2, 16 * MIB);
    pair.a.send(low.clone());
    // Part of it: a few frames.
    pair.a_to_b(5 * 65_536).unwrap();
    // Drain what is already marshaled, so every frame from now on was
    // chosen after the high-priority message was queued.
    while !pair.a.out.is_empty() {
        let n = pair.a.out.len();
        pair.a_to_b(n).unwrap();
    }
    let frames_before = pair.b.tap.frames.len();
    assert!(frames_before >= 5);
    assert!(pair.b.delivered.is_empty());
    let high = small(Priority::High, 4, 100);
    pair.a.send(high.clone());
    pair.pump().unwrap();

    // Delivered: the high one first, then the big one.
    let order: Vec<u32> = pair.b.delivered.iter().map(|m| m.prelude.type_id).collect();
    assert_eq!(order, vec![4, 2]);
    assert_eq!(pair.b.delivered[0].priority, Priority::High);
    assert_eq!(
        pair.b.delivered[0].number, 1,
        "the high one completed first and got number 1"
    );
    assert!(body_equals(&pair.b.delivered[1].body, &low.body));
    // On the wire: at most one frame of the big one before the high one.
    let after = &pair.b.tap.frames[frames_before..];
    let high_at = after
        .iter()
        .position(|f| f.header.lane == 4)
        .expect("high frame");
    assert!(high_at <= 1, "{high_at} low-priority frames went first");
    assert!(after[high_at].header.is_first() && after[high_at].header.is_last());
    // And the big one was still far from complete at that point.
    let low_after = after.iter().filter(|f| f.header.lane == 2).count();
    assert!(low_after > 200, "only {low_after} low frames remained");
}

#[test]
fn each_priority_is_fifo_while_levels_interleave() {
    let mut pair = Pair::new(8192, SessionConfig::default());
    pair.chunks = vec![3000, 1, 700, 9000];
    let mut sent = Vec::new();
    for i in 0..120u32 {
        let p = Priority::from_lane(1 + (i * 7 % 4) as u8).unwrap();
        let len = match i % 5 {
            0 => 150_000,
            1 => 0,
            2 => 9000,
            _ => 40 + i as usize,
        };
        let m = small(p, i, len);
        pair.a.send(m.clone());
        sent.push(m);
        // Interleave queueing with sending.
        if i % 10 == 9 {
            pair.a_to_b(30_000).unwrap();
        }
    }
    pair.pump().unwrap();
    assert_eq!(pair.b.delivered.len(), sent.len());
    for p in Priority::ALL {
        let want: Vec<u32> = sent
            .iter()
            .filter(|m| m.priority == p)
            .map(|m| m.type_id)
            .collect();
        let got: Vec<u32> = pair
            .b
            .delivered
            .iter()
            .filter(|m| m.priority == p)
            .map(|m| m.prelude.type_id)
            .collect();
        assert_eq!(got, want, "order at {p:?}");
    }
    // The levels did interleave: the delivery order is not the send order.
    let all: Vec<u32> = pair.b.delivered.iter().map(|m| m.prelude.type_id).collect();
    assert_ne!(all, (0..120).collect::<Vec<_>>());
    // Every body arrived intact.
    for d in &pair.b.delivered {
        assert!(body_equals(&d.body, &sent[d.prelude.type_id as usize].body));
    }
}

/// Saturates levels 2, 3, 4 and returns the payload bytes each sent in a
/// window of `window` bytes. The output ring is drained `drain` bytes at a
/// time (so frames vary in size when `drain` is not a multiple of them).
fn shares(weights: [u32; 3], window: u64, drain: usize) -> [u64; 3] {
    let cfg = SessionConfig {
        scheduler: SchedulerConfig {
            weights,
            ..SchedulerConfig::default()
        },
        ..Default::default()
    };
    let mut s = common::working_session(cfg, sitenet_protocols::ReassemblyBudget::new(1), 65_536);
    for (i, p) in [Priority::Low, Priority::Medium, Priority::High]
        .into_iter()
        .enumerate()
    {
        for k in 0..4 {
            s.queue(big(p, (i * 10 + k) as u32, 8 * MIB)).unwrap();
        }
    }
    let now = std::time::Instant::now();
    let mut out = ByteBuffer::new(65_536);
    let mut tap = FrameTap::new(65_536);
    let mut total = 0u64;
    while total < window {
        s.poll_transmit(now, &mut out);
        let n = drain.min(out.len());
        assert!(n > 0, "a saturated session wrote nothing");
        let (x, y) = out.chunks();
        let nx = n.min(x.len());
        tap.feed(&x[..nx]);
        tap.feed(&y[..n - nx]);
        out.consume(n);
        total = tap.payload_per_lane[1..4].iter().sum();
    }
    assert_eq!(tap.payload_per_lane[0], 0);
    [
        tap.payload_per_lane[1],
        tap.payload_per_lane[2],
        tap.payload_per_lane[3],
    ]
}

fn assert_shares(weights: [u32; 3], got: [u64; 3]) {
    let total: u64 = got.iter().sum();
    let wsum: u32 = weights.iter().sum();
    for i in 0..3 {
        let share = got[i] as f64 / total as f64;
        let want = weights[i] as f64 / wsum as f64;
        assert!(
            (share - want).abs() <= 0.02,
            "weights {weights:?}: level {} got {:.3} of the bytes, expected {:.3} ({got:?})",
            i + 2,
            share,
            want
        );
    }
}

#[test]
fn saturated_levels_share_bytes_by_weight() {
    for (weights, drain) in [
        ([1, 2, 4], usize::MAX),
        ([1, 1, 1], 10_007),
        ([5, 2, 1], 3_001),
        ([1, 3, 9], 65_536),
    ] {
        let got = shares(weights, 24 * MIB as u64, drain);
        assert_shares(weights, got);
    }
}

#[test]
fn background_waits_until_promoted() {
    let mut s = common::working_session(
        SessionConfig::default(),
        sitenet_protocols::ReassemblyBudget::new(1),
        65_536,
    );
    s.queue(big(Priority::Low, 1, 64 * MIB)).unwrap();
    s.queue(small(Priority::Background, 2, 200_000)).unwrap();
    let t0 = std::time::Instant::now();
    let mut out = ByteBuffer::new(65_536);
    let mut tap = FrameTap::new(65_536);
    let mut run = |s: &mut sitenet_protocols::Session, now, frames: usize, tap: &mut FrameTap| {
        for _ in 0..frames {
            s.poll_transmit(now, &mut out);
            let (x, y) = out.chunks();
            tap.feed(x);
            tap.feed(y);
            out.clear();
        }
    };
    // While level 2 has traffic and the promotion interval has not passed,
    // level 1 sends nothing.
    run(&mut s, t0, 20, &mut tap);
    run(&mut s, t0 + Duration::from_millis(99), 20, &mut tap);
    assert_eq!(tap.payload_per_lane[0], 0);
    // After 100 ms it is promoted and competes like level 2.
    run(&mut s, t0 + Duration::from_millis(100), 40, &mut tap);
    assert!(tap.payload_per_lane[0] > 0, "background starved");
    // Its message completes (200 KB), which ends the promotion.
    run(&mut s, t0 + Duration::from_millis(100), 40, &mut tap);
    assert!(tap
        .frames
        .iter()
        .any(|f| f.header.lane == 1 && f.header.is_last()));
    assert_eq!(tap.count(FrameKind::Ack), 0);
}
