//! Many sites, few channel slots, over real sockets: a server with a hard
//! limit of a few descriptors serves many clients, and a client with one
//! slot talks to several servers — nothing lost, nothing duplicated, order
//! kept, and the limits never exceeded.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig, SendOptions};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_transport::TransController;

fn controller(weak: usize, hard: usize) -> TransController {
    controller_holding(weak, hard, Duration::from_millis(20))
}

fn controller_holding(weak: usize, hard: usize, min_hold: Duration) -> TransController {
    TransController::new(
        SlotConfig::new(weak, hard).unwrap(),
        Box::new(DefaultPolicy { min_hold }),
    )
}

/// A server on a loopback port whose channels take slots of `slots`.
fn server_on(slots: &TransController) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            quick(c);
            c.trans_controller = Some(slots.clone());
        })
        .start()
        .unwrap()
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
    let server = server_on(&slots);
    let sink = Sink::install(&server, CLIENTS as u64 * PER_CLIENT, None);
    let mut clients = Vec::new();
    for stream in 0..CLIENTS {
        let client = Node::builder().configure(quick).start().unwrap();
        let site = client.site(addr(&server)).unwrap();
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
        .map(|s| client.site(addr(s)).unwrap())
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

/// A preemption in the middle of a big message loses nothing. The server
/// has one slot below its weak limit; client A streams big messages back to
/// back, and once its channel is older than the minimum hold, client B
/// connects. B's channel is younger than the minimum hold, so the only
/// channel the server may preempt is A's, in the middle of a message (the
/// `busy` reason). A waits for a slot (B's quiet channel goes next), sends
/// the interrupted message again from its first fragment, and every message
/// arrives once, whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_in_the_middle_of_a_big_message_loses_nothing() {
    const BIG: usize = 48 << 20;
    const COUNT: u64 = 4;
    const MIN_HOLD: Duration = Duration::from_millis(100);
    let slots = controller_holding(1, 2, MIN_HOLD);
    let server = server_on(&slots);
    let pattern = |i: usize| (i % 251) as u8;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    server
        .handle(move |ctx, m: Numbered| {
            let body = ctx.body();
            let len = if m.stream == 0 { BIG } else { 8 };
            let whole = body.len() == len && body.iter().enumerate().all(|(i, b)| *b == pattern(i));
            let _ = tx.send((m.stream, m.seq, whole));
        })
        .unwrap();
    let a = Node::builder().configure(quick).start().unwrap();
    let to_server = a.site(addr(&server)).unwrap();
    let body = bytes::Bytes::from((0..BIG).map(pattern).collect::<Vec<u8>>());
    let big = {
        let s = to_server.clone();
        tokio::spawn(async move {
            for seq in 0..COUNT {
                let opts = SendOptions::default().body(body.clone());
                s.send(&Numbered { stream: 0, seq })
                    .options(opts)
                    .await
                    .unwrap();
            }
            s.flush(PATIENCE).await.unwrap();
        })
    };
    // A's channel carries the first message; the minimum hold is a span of
    // time, so it is waited for as one.
    assert!(
        server.wait_until(|m| m.reads > 20, PATIENCE).await,
        "the big messages do not arrive"
    );
    tokio::time::sleep(MIN_HOLD * 2).await;
    let b = Node::builder().configure(quick).start().unwrap();
    let b_site = b.site(addr(&server)).unwrap();
    let small = SendOptions::default().body(vec![0u8, 1, 2, 3, 4, 5, 6, 7]);
    b_site
        .send(&Numbered { stream: 1, seq: 0 })
        .options(small)
        .await
        .unwrap();
    b_site.flush(PATIENCE).await.unwrap();
    big.await.unwrap();
    let mut got = Vec::new();
    while got.len() < COUNT as usize + 1 {
        got.push(
            tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let from_a: Vec<_> = got.iter().filter(|g| g.0 == 0).collect();
    assert_eq!(
        from_a,
        (0..COUNT)
            .map(|seq| (0, seq, true))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>(),
        "A's messages, each once, whole, in order"
    );
    assert!(got.contains(&(1, 0, true)));
    let s = slots.stats();
    let busy = s
        .preemptions
        .iter()
        .find(|(r, _)| *r == "busy")
        .map_or(0, |(_, n)| *n);
    assert!(
        busy >= 1,
        "A was not preempted in the middle of a message: {s:?}"
    );
    assert!(s.peak_in_use <= 2, "{s:?}");
    assert_eq!(server.metrics().duplicates, 0);
}

/// A preemption names its lease, so a stale one — the slot controller
/// chose a site's channel, and its call arrives after that channel has
/// been replaced — does not close the new channel: a preemption for a
/// lease the site no longer holds is ignored (and counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_preemption_never_closes_the_channel_that_replaced_its_own() {
    let server = listening_node();
    let client = Node::builder().configure(quick).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 0).await;
    let first = client
        .channel_lease(&site)
        .await
        .expect("a working channel in a slot");
    // The channel is replaced (closed hard, then reopened for the next
    // request) …
    client.close_hard(&site);
    echo(&site, 1).await;
    assert!(
        client
            .wait_until(|m| m.channels_opened == 2, PATIENCE)
            .await,
        "{:?}",
        client.metrics()
    );
    let second = client.channel_lease(&site).await.expect("the new channel");
    assert_ne!(first, second);
    // … and only then does a preemption of the first arrive.
    client.deliver_preemption(&site, first);
    // Answered after the preemption was handled (one mailbox).
    assert_eq!(client.channel_lease(&site).await, Some(second));
    let m = client.metrics();
    assert_eq!(m.preemptions, 0, "the new channel was preempted: {m:?}");
    assert_eq!(m.preemptions_stale, 1, "{m:?}");
    echo(&site, 2).await;
    assert_eq!(client.metrics().channels_opened, 2);
}
