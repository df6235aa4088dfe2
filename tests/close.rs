//! The close protocol end to end: weak close when no reference is left, weak
//! close rejected by a peer that still needs the channel, hard close (the
//! preemption the fd-slot controller will use), each racing with traffic.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig, Runtime};
use sitenet_transport::fault::{FaultInjector, SEED_ENV};

fn fast_linger(c: &mut NodeConfig) {
    c.linger = Duration::from_millis(100);
    c.reopen_after_peer_hard_close = Duration::from_millis(20);
    c.reconnect_max = Duration::from_millis(50);
}

/// When the last SiteRef is dropped and the channel idles for the linger
/// time, the ComObject closes weakly; the peer (holding no reference)
/// accepts; a later send reopens a channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_close_after_the_last_reference_is_dropped() {
    let server = listening_node();
    let client = Node::builder().configure(fast_linger).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    drop(site);
    assert!(
        client.wait_until(|m| m.orderly_closes == 1, PATIENCE).await,
        "{:?}",
        client.metrics()
    );
    assert!(
        server.wait_until(|m| m.orderly_closes == 1, PATIENCE).await,
        "{:?}",
        server.metrics()
    );
    let m = client.metrics();
    assert_eq!(
        (m.weak_closes_started, m.channels_closed, m.temp_failures),
        (1, 1, 0),
        "{m:?}"
    );
    // Not a failure: a new reference simply reopens.
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 2).await;
    assert_eq!(client.metrics().channels_opened, 2);
    assert_eq!(site.fault_state(), sitenet::FaultState::Ok);
}

/// A server that holds SiteRefs only while its handlers run tries to close
/// weakly when idle; the client still holds a reference and rejects; the
/// server does not try again within the linger time, and the channel stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_close_rejected_by_a_peer_that_still_needs_the_channel() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            c.linger = Duration::from_millis(300);
            services(c);
        })
        .start()
        .unwrap();
    let client = listening_node();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    assert!(
        server
            .wait_until(|m| m.weak_closes_rejected >= 1, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    // Right after the reject, requests go on over the same channel and the
    // server does not immediately try again.
    for seq in 2..20 {
        echo(&site, seq).await;
    }
    let (ms, mc) = (server.metrics(), client.metrics());
    assert_eq!(
        ms.weak_closes_started, 1,
        "no retry soon after a reject: {ms:?}"
    );
    assert_eq!((mc.channels_opened, mc.channels_closed), (1, 0), "{mc:?}");
}

/// A hard close from either side while messages stream: the channel closes,
/// is reopened, and every message arrives exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_close_racing_with_a_stream_loses_nothing() {
    const N: u64 = 20_000;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("hard-server"))
        .configure(fast_linger)
        .start()
        .unwrap();
    let sink = Sink::install(&server, N + 1, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("hard-client"))
        .configure(fast_linger)
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    // The channel is working before the stream starts, so each hard close
    // hits a working channel with messages queued and in flight.
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    site.flush(PATIENCE).await.unwrap();
    let mut seq = 1;
    for (round, closer) in ["client", "server"].into_iter().enumerate() {
        // A batch creates need: the channel is (re)opened for it.
        for _ in 0..N / 4 {
            site.send(&Numbered { stream: 0, seq }).await.unwrap();
            seq += 1;
        }
        let opened = round as u64 + 1;
        assert!(
            client
                .wait_until(|m| m.channels_opened == opened, PATIENCE)
                .await,
            "{:?}",
            client.metrics()
        );
        if closer == "client" {
            // The sender preempts its own channel …
            client.close_hard(&site);
        } else {
            // … then the receiver preempts it from its side (it has no
            // address for the client: the client calls back).
            let back = server
                .site_by_id(client.id())
                .expect("server knows the client");
            server.close_hard(&back);
        }
        for _ in 0..N / 4 {
            site.send(&Numbered { stream: 0, seq }).await.unwrap();
            seq += 1;
        }
        let closes = round as u64 + 1;
        assert!(
            client
                .wait_until(|m| m.orderly_closes == closes, PATIENCE)
                .await,
            "{:?}",
            client.metrics()
        );
        assert!(
            server
                .wait_until(|m| m.orderly_closes == closes, PATIENCE)
                .await,
            "{:?}",
            server.metrics()
        );
    }
    site.flush(PATIENCE).await.unwrap();
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    assert_eq!(sink.total.load(Ordering::Acquire), seq);
    let (mc, ms) = (client.metrics(), server.metrics());
    assert_eq!(
        (mc.hard_closes_started, ms.hard_closes_started),
        (1, 1),
        "{mc:?} {ms:?}"
    );
    assert_eq!(
        (mc.temp_failures, ms.temp_failures),
        (0, 0),
        "a hard close is not a failure: {mc:?} {ms:?}"
    );
}

/// A hard close whose channel is cut before the answer comes: the wait ends
/// (by the loss, or by the close timer) and the site reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_racing_with_a_lost_channel_and_reconnect() {
    const N: u64 = 5_000;
    let faults = FaultInjector::from_env_or_random(SEED_ENV);
    let _report = faults.report_on_panic();
    let server = listening_node_on(Runtime::dedicated("race-server"));
    let sink = Sink::install(&server, N, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("race-client"))
        .configure(|c| {
            fast_linger(c);
            c.close_timeout = Duration::from_millis(200);
            c.fault_injector = Some(faults.clone());
        })
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    site.flush(PATIENCE).await.unwrap();
    for seq in 1..N {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
        if seq % 1000 == 500 {
            client.close_hard(&site);
            faults.cut_after(40);
        }
    }
    site.flush(PATIENCE).await.unwrap();
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    assert_eq!(server.metrics().messages_delivered, N);
}

/// The runtime side of
/// `site_needs::a_site_with_messages_queued_reopens_at_once_after_a_peers_hard_close`
/// (found by `sitenet sim`): a server preempts a client's channel
/// (CLOSE_HARD), and the client then has messages to send. The server
/// cannot call back (the client does not listen) and would not (it has
/// nothing for the client). The client used to wait
/// `reopen_after_peer_hard_close` (5 s by default, an hour here) before
/// reopening; now its messages reopen the channel at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_preempted_with_messages_to_send_does_not_wait_for_a_callback() {
    const N: u64 = 100;
    let server = listening_node();
    let sink = Sink::install(&server, N, None);
    let client = Node::builder()
        .configure(|c| c.reopen_after_peer_hard_close = Duration::from_secs(3600))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    site.flush(PATIENCE).await.unwrap();
    let back = server
        .site_by_id(client.id())
        .expect("server knows the client");
    server.close_hard(&back);
    assert!(
        client.wait_until(|m| m.orderly_closes == 1, PATIENCE).await,
        "{:?}",
        client.metrics()
    );
    for seq in 1..N {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    site.flush(PATIENCE).await.unwrap();
    sink.wait().await;
    assert_eq!(sink.total.load(Ordering::Acquire), N);
    assert_eq!(client.metrics().channels_opened, 2);
}
