//! A busy node must not look dead: with handlers that take milliseconds
//! per message, a paced session (`SessionConfig::turn_budget`) stops
//! between slices of deliveries, so its driver writes the acknowledgements
//! and heartbeats the ack policy makes due, and ends a turn whose handler
//! time is spent. Virtual clock: each handler call "takes" a fixed time.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{completed_numbers, working_session_at};
use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use sitenet_protocols::{ByteBuffer, OutMessage, Priority, ReassemblyBudget, SessionConfig};

const RING: usize = 65_536;

/// What the receiving driver saw.
#[derive(Debug, Default)]
struct Run {
    /// Message numbers delivered, in order.
    delivered: Vec<u64>,
    /// When it wrote frames, and what kinds.
    writes: Vec<(Duration, Vec<FrameKind>)>,
    /// Turns ended because their handler time was spent.
    yields: u32,
}

fn kinds(bytes: &[u8]) -> Vec<FrameKind> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + HEADER_LEN <= bytes.len() {
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&bytes[off..off + HEADER_LEN]);
        let h = FrameHeader::decode(&hb, RING).unwrap();
        out.push(h.kind);
        off += HEADER_LEN + h.payload_len as usize;
    }
    out
}

/// `n` small one-way messages from A to B, whose handler takes `cost`
/// each; B's driver follows the pause contract.
fn run(n: u64, cost: Duration, turn_budget: Option<Duration>) -> Run {
    let t0 = Instant::now();
    let cfg = SessionConfig {
        turn_budget,
        ..SessionConfig::default()
    };
    let budget = ReassemblyBudget::new(1 << 30);
    let mut a = working_session_at(cfg.clone(), budget.clone(), RING as u32, t0);
    let mut b = working_session_at(cfg, budget, RING as u32, t0);
    for i in 0..n {
        let body = Bytes::from(i.to_le_bytes().to_vec());
        a.queue(OutMessage::new(
            Priority::Medium,
            5,
            Bytes::new(),
            vec![body],
        ))
        .unwrap();
    }
    let (mut wire, mut back) = (ByteBuffer::new(RING), ByteBuffer::new(RING));
    let mut now = t0;
    let mut r = Run::default();
    while (r.delivered.len() as u64) < n {
        a.poll_transmit(now, &mut wire);
        let before = r.delivered.len();
        let d = &mut r.delivered;
        b.handle_input(now, &mut wire, &mut |m| d.push(m.number))
            .unwrap();
        // The handlers ran: time passed.
        now += cost * (r.delivered.len() - before) as u32;
        if b.poll_timeout().is_some_and(|at| at <= now) {
            b.handle_timeout(now);
        }
        if b.poll_transmit(now, &mut back) > 0 {
            let bytes = common::take_out(&mut back);
            r.writes.push((now - t0, kinds(&bytes)));
        }
        if b.input_paused() && b.turn_spent(now) {
            r.yields += 1;
        }
        if !b.input_paused() && wire.is_empty() && a.queued_bytes() == 0 {
            break;
        }
    }
    r
}

/// The longest time B wrote nothing, from the start to its last delivery.
fn longest_silence(r: &Run, end: Duration) -> Duration {
    let mut last = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for (at, _) in &r.writes {
        longest = longest.max(*at - last);
        last = *at;
    }
    longest.max(end.saturating_sub(last))
}

#[test]
fn a_one_millisecond_handler_gets_acks_out_by_the_ack_delay() {
    let ms = Duration::from_millis;
    let n = 3_000;
    let r = run(n, ms(1), Some(ms(10)));
    assert_eq!(
        r.delivered,
        (1..=n).collect::<Vec<_>>(),
        "each once, in order"
    );
    let (first, kinds) = &r.writes[0];
    assert!(kinds.contains(&FrameKind::Ack), "{kinds:?}");
    // The ack delay is 20 ms; a slice takes about 5 ms.
    assert!(*first <= ms(30), "first ack after {first:?}");
    let longest = longest_silence(&r, ms(n));
    assert!(longest <= ms(30), "{longest:?} without a frame");
    // A turn ends about every 10 ms of handler time.
    assert!(r.yields >= 250, "{} turns ended", r.yields);
    // Unpaced, the same run writes nothing until every message was
    // handled: what the busy node did before.
    let r = run(n, ms(1), None);
    assert_eq!(r.delivered.len() as u64, n);
    assert!(r.writes[0].0 >= ms(n - 100), "{:?}", r.writes[0]);
}

#[test]
fn a_twenty_millisecond_handler_still_acks_and_heartbeats() {
    let ms = Duration::from_millis;
    // 300 × 20 ms = 6 s: beyond the 5 s silence timeout of the peer.
    let n = 300;
    let r = run(n, ms(20), Some(ms(10)));
    assert_eq!(r.delivered.len() as u64, n);
    // One message per slice: the ack delay is honoured to a handler call.
    let longest = longest_silence(&r, ms(20 * n));
    assert!(longest <= ms(40), "{longest:?} without a frame");
    assert!(r.yields as u64 >= n - 1, "{} turns ended", r.yields);
}

#[test]
fn fast_handlers_end_no_turn_and_add_no_ack() {
    let n = 3_000;
    let r = run(n, Duration::ZERO, Some(Duration::from_millis(10)));
    assert_eq!(r.delivered, (1..=n).collect::<Vec<_>>());
    assert_eq!(r.yields, 0);
    // No time passes: no ack delay, no heartbeat is due; threshold acks
    // are the ack policy's own (one per 100 messages, at most).
    let acks = r
        .writes
        .iter()
        .filter(|w| w.1.contains(&FrameKind::Ack))
        .count() as u64;
    assert!(acks <= n / 100 + 1, "{acks} ack frames");
    let _ = completed_numbers;
}
