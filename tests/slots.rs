//! Many sites, few channel slots, over real sockets: a server with a hard
//! limit of a few descriptors serves many clients, and a client with one
//! slot talks to several servers — nothing lost, nothing duplicated, order
//! kept, and the limits never exceeded.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use sitenet::protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet::transport::TransController;
use sitenet::{Node, NodeConfig};

fn controller(weak: usize, hard: usize) -> TransController {
    TransController::new(
        SlotConfig::new(weak, hard).unwrap(),
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(20),
        }),
    )
}

fn quick(c: &mut NodeConfig) {
    c.reconnect_min = Duration::from_millis(5);
    c.reconnect_max = Duration::from_millis(100);
    c.reopen_after_peer_hard_close = Duration::from_millis(20);
}

/// The Mozart paper's situation in small: 20 client sites, a server with a
/// hard limit of 4 slots (weak 3). Accepts past the hard limit are closed at
/// once, the server preempts channels past its weak limit, and every
/// client's stream still arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_four_slots_serves_twenty_clients_losing_nothing() {
    const CLIENTS: u32 = 20;
    const PER_CLIENT: u64 = 200;
    let slots = controller(3, 4);
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            quick(c);
            c.trans_controller = Some(slots.clone());
        })
        .start()
        .unwrap();
    let sink = Sink::install(&server, CLIENTS as u64 * PER_CLIENT, None);
    let mut clients = Vec::new();
    for stream in 0..CLIENTS {
        let client = Node::builder().configure(quick).start().unwrap();
        let site = client.site(&addr(&server)).unwrap();
        clients.push((client, site, stream));
    }
    let sends = clients.iter().map(|(_, site, stream)| async move {
        for seq in 0..PER_CLIENT {
            site.send(&Numbered {
                stream: *stream,
                seq,
            })
            .await
            .unwrap();
        }
    });
    futures::future::join_all(sends).await;
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    assert_eq!(
        sink.total.load(Ordering::Relaxed),
        CLIENTS as u64 * PER_CLIENT
    );
    let s = slots.stats();
    assert!(s.peak_in_use <= 4, "hard limit exceeded: {s:?}");
    assert!(
        s.total_preemptions() + s.accepts_refused > 0,
        "20 clients on 4 slots without a preemption or a refusal: {s:?}"
    );
    let m = server.metrics();
    assert_eq!(m.duplicates, 0, "{m:?}");
    assert_eq!(m.accepts_refused, s.accepts_refused);
}

/// A client with one connect slot (hard limit 2) streams to three servers:
/// its sites wait in line, the controller preempts its own channels in turn,
/// and every stream arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_one_slot_talks_to_three_servers_in_turn() {
    const PER_SERVER: u64 = 300;
    let servers: Vec<Node> = (0..3)
        .map(|_| {
            Node::builder()
                .listen("tcp:127.0.0.1:0")
                .configure(quick)
                .start()
                .unwrap()
        })
        .collect();
    let sinks: Vec<_> = servers
        .iter()
        .map(|s| Sink::install(s, PER_SERVER, None))
        .collect();
    let slots = controller(1, 2);
    let client = Node::builder()
        .configure(|c| {
            quick(c);
            c.trans_controller = Some(slots.clone());
        })
        .start()
        .unwrap();
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(&addr(s)).unwrap())
        .collect();
    for seq in 0..PER_SERVER {
        for site in &sites {
            site.send(&Numbered { stream: 0, seq }).await.unwrap();
        }
    }
    for sink in &sinks {
        sink.wait().await;
        assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    }
    let s = slots.stats();
    assert!(s.peak_in_use <= 2, "{s:?}");
    assert!(s.queued > 0, "three sites on one slot never waited: {s:?}");
    assert!(s.total_preemptions() > 0, "{s:?}");
    assert!(client.metrics().slot_waits > 0);
}
