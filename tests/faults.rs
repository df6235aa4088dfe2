//! Failure detection: partitions found by heartbeats and healed, restarted
//! peers seen as new incarnations, kill and give-up handing messages back.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use sitenet::{FaultState, Node, NodeConfig, Runtime};
use sitenet_transport::fault::{FaultInjector, SEED_ENV};

fn quick(c: &mut NodeConfig) {
    c.heartbeat_interval = Duration::from_millis(50);
    c.silence_timeout = Duration::from_millis(300);
    c.handshake_timeout = Duration::from_millis(300);
    c.reconnect_max = Duration::from_millis(100);
}

async fn next_state(
    mon: &mut futures::channel::mpsc::UnboundedReceiver<sitenet::FaultEvent>,
) -> FaultState {
    tokio::time::timeout(PATIENCE, mon.next())
        .await
        .expect("a transition in time")
        .expect("monitor open")
        .state
}

/// A partition (every byte black-holed) is detected by heartbeats as a
/// temporary failure; when it heals the site is ok again, and messages sent
/// during the partition arrive exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_detected_by_heartbeats_then_healed() {
    let faults = FaultInjector::from_env_or_random(SEED_ENV);
    let _report = faults.report_on_panic();
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("part-server"))
        .configure(quick)
        .start()
        .unwrap();
    let sink = Sink::install(&server, 200, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("part-client"))
        .configure(|c| {
            quick(c);
            c.fault_injector = Some(faults.clone());
        })
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok, "initial report");
    for seq in 0..100 {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    site.flush(PATIENCE).await.unwrap();

    faults.set_blackhole(true);
    assert_eq!(
        next_state(&mut mon).await,
        FaultState::TempFailed,
        "silence is a temporary failure"
    );
    for seq in 100..200 {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    faults.set_blackhole(false);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok, "healed");
    sink.wait().await;
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Acquire),
        0
    );
    site.flush(PATIENCE).await.unwrap();
    assert_eq!(server.metrics().messages_delivered, 200);
    assert_eq!(site.fault_state(), FaultState::Ok);
}

/// A process restarted at the same address is a new site: the old one is
/// declared permanently failed (what it never acknowledged is handed back),
/// and the address then reaches the new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_peer_is_a_new_incarnation() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(quick)
        .start()
        .unwrap();
    let address = addr(&server);
    let old_id = server.id();
    let sink = Sink::install(&server, 10, None);
    let client = Node::builder().configure(quick).start().unwrap();
    let site = client.site(&address).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    for seq in 0..10 {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    sink.wait().await;
    site.flush(PATIENCE).await.unwrap();

    // The server process "dies" (it does not say it leaves) and a new one
    // starts on the same port.
    server.crash_on_shutdown();
    server.shutdown(Duration::from_secs(1)).await;
    drop(server);
    assert_eq!(next_state(&mut mon).await, FaultState::TempFailed);
    for seq in 10..15 {
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    let restarted = Node::builder()
        .listen(address.clone())
        .configure(quick)
        .start()
        .unwrap();
    assert_ne!(restarted.id(), old_id);
    let sink2 = Sink::install(&restarted, 1, None);

    assert_eq!(
        next_state(&mut mon).await,
        FaultState::PermFailed,
        "the old incarnation is gone for good"
    );
    let (reason, back) = site.failure().expect("failure recorded");
    assert!(
        matches!(
            reason,
            sitenet::SiteFailure::Open(sitenet::OpenError::WrongIdentity { .. })
        ),
        "{reason}"
    );
    assert_eq!(
        back.not_sent.len() + back.maybe_delivered.len(),
        5,
        "the 5 unsent messages are handed back"
    );
    assert!(matches!(
        site.send(&Numbered { stream: 0, seq: 99 }).try_now(),
        Err(sitenet::SendError::SiteFailed { .. })
    ));

    // The address now names the new incarnation.
    let site2 = client.site(&address).unwrap();
    site2.send(&Numbered { stream: 7, seq: 0 }).await.unwrap();
    sink2.wait().await;
    assert_eq!(site2.id(), Some(restarted.id()));
}

/// `kill` fails a site on purpose: CLOSE_HARD, then everything not
/// acknowledged is handed back as not_sent / maybe_delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_hands_back_what_was_not_acknowledged() {
    let server = listening_node_on(Runtime::dedicated("kill-server"));
    let sink = Sink::install(&server, 1, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("kill-client"))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink.wait().await;
    site.flush(PATIENCE).await.unwrap();
    // Hold the ComObject busy so the next messages stay queued, then kill.
    let guard = site.hold_busy();
    for seq in 1..=50 {
        site.send(&Numbered { stream: 0, seq }).try_now().unwrap();
    }
    client.kill(&site);
    drop(guard);
    assert_eq!(next_state(&mut mon).await, FaultState::PermFailed);
    let (reason, back) = site.failure().unwrap();
    assert_eq!(reason, sitenet::SiteFailure::Killed);
    assert_eq!(back.not_sent.len() + back.maybe_delivered.len(), 50);
    assert_eq!(site.pending_bytes(), 0, "resources freed");
}

/// With a give-up timeout, a site temporarily failed for that long becomes
/// permanently failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_up_turns_a_long_temporary_failure_permanent() {
    let closed = closed_port_address();
    let client = Node::builder()
        .configure(|c| {
            quick(c);
            c.give_up_after = Some(Duration::from_millis(500));
        })
        .start()
        .unwrap();
    let site = client.site(&closed).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    assert_eq!(next_state(&mut mon).await, FaultState::TempFailed);
    assert_eq!(next_state(&mut mon).await, FaultState::PermFailed);
    let (reason, back) = site.failure().unwrap();
    assert!(
        matches!(reason, sitenet::SiteFailure::GaveUp(_)),
        "{reason}"
    );
    assert_eq!(back.not_sent.len(), 1);
    assert!(matches!(
        site.flush(PATIENCE).await,
        Err(sitenet::FlushError::SiteFailed(_))
    ));
}

/// An open protocol that never finishes ends by its timer, on both sides: a
/// "server" that accepts and never presents itself leaves the initiator
/// temporarily failed (it keeps retrying); a "client" that connects and never
/// negotiates is closed by the node with a fault report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_never_finishes_ends_by_its_timer() {
    // Initiator side: a mute acceptor.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let client = Node::builder().configure(quick).start().unwrap();
    let site = client.site(format!("tcp:127.0.0.1:{port}")).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    let ev = tokio::time::timeout(PATIENCE, mon.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.state, FaultState::TempFailed);
    assert!(ev.reason.contains("handshake"), "{}", ev.reason);
    let (held, _) = mute.accept().unwrap();
    drop(held);

    // Acceptor side: a mute initiator.
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(quick)
        .start()
        .unwrap();
    let mut s = std::net::TcpStream::connect(addr(&server).strip_prefix("tcp:").unwrap()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut buf = [0u8; 4096];
    // PRESENT arrives, then the node closes the channel at its timeout.
    loop {
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the node kept a mute channel open: {e}"),
        }
    }
    let faults = server.faults();
    assert!(
        faults.iter().any(|f| f.reason.contains("handshake")),
        "{faults:?}"
    );
}

/// A node shut down while a peer streams to it says it is leaving, and the
/// peer hears it through its own flood: the site fails at once as shut
/// down. (Before the closing side read until its peer closed, its socket
/// closed with the flood unread and the kernel's reset discarded the
/// LEAVING frame: the peer saw a temporary failure, as after a crash, in
/// nearly every run — this test expected that.) And `wait_until` wakes on
/// deliveries: a node that only receives still re-checks its condition
/// (it used to sleep until its timeout, since only channel and fault
/// changes woke it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_shut_down_mid_stream_is_failed_as_shut_down_through_the_flood() {
    let server = listening_node();
    let _sink = Sink::install(&server, u64::MAX, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    let s2 = site.clone();
    let stream = tokio::spawn(async move {
        for seq in 0.. {
            if s2.send(&Numbered { stream: 0, seq }).await.is_err() {
                break;
            }
        }
    });
    // A missed wake-up would sleep the full 600 s; the outer bound fails it.
    let woke = tokio::time::timeout(
        Duration::from_secs(60),
        server.wait_until(|m| m.messages_delivered > 10_000, Duration::from_secs(600)),
    )
    .await
    .expect("wait_until wakes on deliveries");
    assert!(woke);
    server.shutdown(Duration::from_millis(100)).await;
    let ev = next_state(&mut mon).await;
    assert_eq!(ev, FaultState::PermFailed);
    let (why, _) = site.failure().expect("failed");
    assert_eq!(why, sitenet::SiteFailure::ShutDown);
    stream.abort();
}

/// A request nobody answers: the server holds it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Held(u64);
impl sitenet::Message for Held {
    const ID: u32 = 710;
}

/// A request sent through a reference whose entry later merges into the
/// entry of the same site known by id (an alias address) fails when that
/// site fails: the failure looks for requests of both entries, so the
/// request does not wait out its whole timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_before_a_merge_fail_with_the_site() {
    let a = listening_node();
    let b = listening_node();
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
    b.handle(move |ctx, Held(n): Held| {
        if let Some(r) = ctx.responder() {
            r.abandon(); // never answered
        }
        let _ = held_tx.send(n);
    })
    .unwrap();
    // B contacts A first: A knows B by id.
    let to_a = b.site(addr(&a)).unwrap();
    echo(&to_a, 1).await;
    let by_id = a.site_by_id(b.id()).expect("A knows B by id");
    // A contacts B under an alias of its address: that entry merges into
    // the one known by id, with the request it holds.
    let alias = addr(&b).replace("127.0.0.1", "localhost");
    let to_b = a.site(&alias).unwrap();
    let request = {
        let to_b = to_b.clone();
        tokio::spawn(async move { to_b.request::<Held, Held>(&Held(7)).timeout(PATIENCE).await })
    };
    assert_eq!(
        tokio::time::timeout(PATIENCE, held_rx.recv())
            .await
            .unwrap(),
        Some(7)
    );
    assert!(
        eventually(|| to_b.same_site(&by_id)).await,
        "the alias merged"
    );
    a.kill(&by_id);
    // Failed with the site, long before its own timeout.
    let r = tokio::time::timeout(PATIENCE / 4, request)
        .await
        .expect("the request failed with its site, not by its timeout")
        .unwrap();
    assert!(
        matches!(r, Err(sitenet::RequestError::SiteFailed(_))),
        "{r:?}"
    );
}

/// A graceful shutdown does not look to its peers like a crash: the node
/// says it is leaving (a LEAVING frame with its final ack, wire version
/// 6), and the client fails the site at once as shut down and hands back
/// what it never acknowledged, instead of taking the closed channel for a
/// lost one and retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_that_shuts_down_is_failed_at_once_as_shut_down() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    let mut states = client.monitor(&site);
    let report = server.shutdown(PATIENCE).await;
    assert_eq!(report.unacknowledged_bytes, 0);
    let t0 = std::time::Instant::now();
    assert!(
        eventually(|| site.failure().is_some()).await,
        "the client still takes the site for reachable"
    );
    let (why, handed_back) = site.failure().unwrap();
    assert_eq!(why, sitenet::SiteFailure::ShutDown);
    assert!(handed_back.maybe_delivered.is_empty() && handed_back.not_sent.is_empty());
    // Told, not timed out: well within the silence timeout (5 s) it would
    // otherwise have taken to notice, and never retried.
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    let mut last = None;
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(200), states.next()).await {
        last = Some(ev.state);
    }
    assert_eq!(last, Some(FaultState::PermFailed));
    assert_eq!(client.metrics().channels_opened, 1, "no reconnect attempt");
}

/// A request to a closed port says the site is unreachable and why
/// (connection refused) when its timeout passes, not merely "no reply":
/// an unreachable site is not a slow one. (A request to a reachable site
/// that does not answer in time is still a plain timeout:
/// `replies_later::an_abandoned_responder_leaves_the_caller_to_its_timeout`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_closed_port_is_unreachable_not_a_timeout() {
    let client = Node::builder().start().unwrap();
    let site = client.site(closed_port_address()).unwrap();
    // Unreachable first (a refused open), so the deadline finds it so.
    let mut mon = client.monitor(&site);
    assert_eq!(next_state(&mut mon).await, FaultState::Ok);
    let r = site
        .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
            &sitenet::services::Echo { seq: 1 },
        )
        .timeout(Duration::from_secs(2));
    let r = r.await;
    let Err(sitenet::RequestError::Unreachable { waited, cause }) = &r else {
        panic!("{r:?}")
    };
    assert_eq!(*waited, Duration::from_secs(2));
    assert!(cause.contains("refused"), "{cause}");
    assert!(
        r.unwrap_err().to_string().contains("unreachable"),
        "the message says so"
    );
}
