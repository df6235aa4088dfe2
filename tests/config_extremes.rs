//! A node's settings at their extremes: every duration `Duration::MAX`
//! (never), and two nodes still exchange, with nothing panicking.

mod common;

use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig};

/// Every duration setting of a node to `d`.
fn every_duration(c: &mut NodeConfig, d: Duration) {
    c.ack_delay = d;
    c.background_promotion = d;
    c.handshake_timeout = d;
    c.connect_timeout = d;
    c.reconnect_min = d;
    c.reconnect_max = d;
    c.handshake_silence = d;
    c.heartbeat_interval = d;
    c.silence_timeout = d;
    c.close_timeout = d;
    c.reassembly_idle = d;
    c.turn_budget = d;
    c.linger = d;
    c.ring_idle = d;
    c.reopen_after_peer_hard_close = d;
    c.line_give_up = d;
    c.give_up_after = Some(d);
    c.unreachable_give_up = d;
}

/// Two nodes set to `d` everywhere exchange a request and its reply.
async fn exchange_with_every_duration(d: Duration) {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .configure(|c| every_duration(c, d))
        .start()
        .unwrap();
    let client = Node::builder()
        .configure(|c| every_duration(c, d))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..3 {
        echo(&site, seq).await;
    }
    assert_eq!(client.metrics().handler_panics, 0);
    assert_eq!(server.metrics().handler_panics, 0);
}

/// Regression: `Duration::MAX` for "never" (an ack delay, a handshake
/// timeout, the heartbeat, the silence timeout, the reassembly's idle
/// time, the linger time) made a deadline past what the clock holds, and
/// the node's actors panicked ("overflow when adding duration to
/// instant"): the request never got its reply. A duration is now at most
/// `MAX_DURATION` (about 31 years), and the node says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_of_never_are_taken_as_the_longest_a_node_waits() {
    exchange_with_every_duration(Duration::MAX).await;
    let node = Node::builder()
        .configure(|c| every_duration(c, Duration::MAX))
        .start()
        .unwrap();
    let cfg = node.config();
    assert_eq!(cfg.linger, sitenet::MAX_DURATION);
    assert_eq!(cfg.give_up_after, Some(sitenet::MAX_DURATION));
    assert_eq!(
        sitenet::MAX_DURATION,
        Duration::from_secs(1_000_000_000),
        "the documented value"
    );
}

/// Settings no node can work with are refused when it starts, by name:
/// a zero bound on connecting or on the open protocol (a channel opened
/// only by a race, if at all: two nodes set so exchanged in some runs and
/// timed out in others), a zero heartbeat interval, and a silence timeout
/// no longer than the heartbeat interval (an idle channel taken for dead
/// between two heartbeats).
#[test]
fn settings_that_cannot_work_are_refused_by_name() {
    type Set = fn(&mut NodeConfig);
    let cases: [(&str, Set); 7] = [
        ("connect_timeout", |c| c.connect_timeout = Duration::ZERO),
        ("handshake_timeout", |c| {
            c.handshake_timeout = Duration::ZERO
        }),
        ("handshake_silence", |c| {
            c.handshake_silence = Duration::ZERO
        }),
        ("heartbeat_interval", |c| {
            c.heartbeat_interval = Duration::ZERO
        }),
        ("silence_timeout", |c| c.silence_timeout = Duration::ZERO),
        ("silence_timeout", |c| {
            c.silence_timeout = Duration::from_millis(500);
        }),
        ("silence_timeout", |c| {
            c.heartbeat_interval = Duration::from_secs(5);
        }),
    ];
    for (name, set) in cases {
        let e = Node::builder()
            .configure(set)
            .start()
            .err()
            .unwrap_or_else(|| panic!("{name}: a node started"));
        assert!(matches!(e, sitenet::NodeError::Config(_)), "{name}: {e:?}");
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
    // A faster failure detector, consistent, starts.
    Node::builder()
        .configure(|c| {
            c.heartbeat_interval = Duration::from_millis(250);
            c.silence_timeout = Duration::from_secs(2);
        })
        .start()
        .unwrap();
}

/// Every size, count and bound of a node at its type's largest value:
/// taken as "no limit", and two such nodes exchange. Regression: a
/// `max_message_size` of `u64::MAX` overflowed doubling it into the
/// output bound's floor (a panic in a debug build, a wrapped bound in a
/// release one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_sizes_and_counts_are_taken() {
    fn largest(c: &mut NodeConfig) {
        c.buffer_size = u32::MAX;
        c.max_message_size = u64::MAX;
        c.output_bound = u64::MAX;
        c.reassembly_budget = u64::MAX;
        c.ack_bytes = u64::MAX;
        c.ack_messages = u32::MAX;
        c.max_pending_handshakes = usize::MAX;
        c.max_pending_handshakes_per_source = usize::MAX;
        c.reassembly_min_rate = u64::MAX;
        c.sink_streams_per_sender = usize::MAX;
        c.node_output_bound = u64::MAX;
        c.forward_claims_per_peer = u32::MAX;
        c.site_ref_claims_per_peer = u32::MAX;
        c.remembered_pairs = usize::MAX;
        c.max_async_handlers = usize::MAX;
    }
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .configure(largest)
        .start()
        .unwrap();
    let client = Node::builder().configure(largest).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..3 {
        echo(&site, seq).await;
    }
    assert_eq!(client.config().output_bound, u64::MAX);
}

/// Regression: `Duration::MAX` given to a wait for "no timeout" (a
/// request's, a batch's) panicked at once ("overflow when adding duration
/// to instant"), in the caller's task. Every wait takes it as the longest
/// one (`sitenet_protocols::base::timer::MAX_WAIT`, about 31 years).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_of_never_are_taken_by_requests_batches_and_flushes() {
    use sitenet::services::{Echo, EchoReply};
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let never = Duration::MAX;
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 1 })
        .timeout(never)
        .await
        .unwrap();
    assert_eq!(r.msg.seq, 1);
    site.flush(never).await.unwrap();
    let mut b = client.batch();
    b.request(&site, &Echo { seq: 2 }, never).unwrap();
    assert!(b.submit().wait_all(never).await.all_ok());
    let mut b = client.batch();
    b.request(&site, &Echo { seq: 3 }, never).unwrap();
    assert!(b.submit().wait_any(never).await.is_some());
    let s = site.clone();
    let r = tokio::task::spawn_blocking(move || {
        s.request::<Echo, EchoReply>(&Echo { seq: 4 })
            .timeout(never)
            .blocking()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.msg.seq, 4);
}
