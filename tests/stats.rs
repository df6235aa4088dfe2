//! `Node::stats`: slots, transport memory against its bound, sites, and
//! per-site counters that follow the traffic.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sitenet::{Node, Priority};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_follow_the_traffic_by_level_and_keep_their_bounds() {
    let server = listening_node();
    let sink = Sink::install(&server, 30, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..10 {
        for (stream, p) in [
            (0, Priority::Low),
            (1, Priority::Medium),
            (2, Priority::High),
        ] {
            site.send(&Numbered { stream, seq })
                .priority(p)
                .body(vec![0u8; 100])
                .await
                .unwrap();
        }
    }
    sink.wait().await;
    site.flush(PATIENCE).await.unwrap();
    // Counters are published within a few milliseconds of the last event.
    let deadline = Instant::now() + PATIENCE;
    let per_site = loop {
        let s = client.stats();
        let p = s.per_site.into_iter().next().expect("one site");
        if p.messages_sent == [0, 10, 10, 10] || Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(per_site.messages_sent, [0, 10, 10, 10], "{per_site:?}");
    assert!(per_site.bytes_sent[1] >= 10 * 100);
    assert_eq!(per_site.queue_depth, 0);
    assert!(per_site.connected);
    let s = client.stats();
    assert_eq!((s.sites_live, s.sites_idle), (1, 0));
    assert!(s.transport_bytes > 0 && s.transport_bytes <= s.transport_bytes_bound);
    assert!(s.transport_bytes_peak >= s.transport_bytes);
    assert!(s.slots.in_use >= 1);
    let srv = server.stats();
    let from_client = &srv.per_site[0];
    assert_eq!(from_client.messages_received, [0, 10, 10, 10]);
}

/// Pending handshakes (and refused members) show in
/// `Node::stats`, with their bound, not only in `Metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_handshakes_show_in_the_stats_with_their_bound() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            c.max_pending_handshakes = 40;
            c.handshake_silence = Duration::from_secs(60);
            c.handshake_timeout = Duration::from_secs(60);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let hostport = target.strip_prefix("tcp:").unwrap().to_string();
    // Idle sockets from one source: at most its per-source cap (8) pend.
    let idle: Vec<_> = (0..5)
        .map(|_| std::net::TcpStream::connect(&hostport).unwrap())
        .collect();
    assert!(eventually(|| server.stats().handshakes_pending == 5).await);
    let s = server.stats();
    assert_eq!(s.handshakes_pending_bound, 40);
    assert!(s.handshakes_pending_peak >= 5);
    assert_eq!(s.auth_refused, 0);
    assert_eq!(s.sites_live, 0, "a pending handshake makes no site entry");
    let json = serde_json::to_value(&s).unwrap();
    for key in [
        "handshakes_pending",
        "handshakes_pending_peak",
        "handshakes_pending_bound",
        "auth_refused",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    drop(idle);
    assert!(eventually(|| server.stats().handshakes_pending == 0).await);
}

/// A site's held bytes are reported per class of its output bound: a
/// backlog of low-priority messages to a site nobody answers shows in the
/// low class only, and goes once the messages are handed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_bytes_are_reported_per_class() {
    let client = Node::builder().start().unwrap();
    let site = client.site(closed_port_address()).unwrap();
    for seq in 0..3 {
        site.send(&Numbered { stream: 0, seq })
            .priority(Priority::Low)
            .body(vec![0u8; 1000])
            .try_now()
            .unwrap();
    }
    let held = site.pending_bytes();
    assert!(held >= 3000, "{held} bytes held");
    let mut by_class = [0; 5];
    assert!(
        eventually(|| {
            by_class = client
                .stats()
                .per_site
                .first()
                .map(|s| s.pending_bytes_by_class)
                .unwrap_or_default();
            by_class[Priority::Low.index()] == held
        })
        .await,
        "per class {by_class:?}, held {held}"
    );
    let others: u64 = by_class.iter().sum::<u64>() - by_class[Priority::Low.index()];
    assert_eq!(others, 0, "{by_class:?}");
    client.kill(&site);
    assert!(eventually(|| site.pending_bytes() == 0).await);
}
