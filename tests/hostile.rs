//! The hostile-peer suite (issue 17): what a peer that breaks the rules —
//! on purpose or by bug — may cost a node. Each test states its bound; a
//! legitimate site keeps working beside the attack.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

/// Counts WARN-level events written anywhere in this process (each test
/// runs in a process of its own under nextest).
struct CountWarnings(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn count_warnings() -> Arc<AtomicU64> {
    use tracing_subscriber::layer::SubscriberExt;
    let n = Arc::new(AtomicU64::new(0));
    let subscriber = tracing_subscriber::registry().with(CountWarnings(n.clone()));
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
    n
}

/// What the server handles under id 700.
#[derive(Serialize, Deserialize)]
struct Expected {
    n: u64,
}
impl Message for Expected {
    const ID: u32 = 700;
}

/// What the bad peer sends under the same id: a header that does not
/// decode as `Expected`.
#[derive(Serialize, Deserialize)]
struct Malformed(String, String, String);
impl Message for Malformed {
    const ID: u32 = 700;
}

/// Issue 17: one warning line per malformed message, with no rate limit —
/// 53 MiB received became 534 MiB of stderr. A peer gets a few lines per
/// window; the rest are counted and summarised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_malformed_messages_do_not_flood_the_log() {
    let warnings = count_warnings();
    let server = listening_node();
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    server
        .handle(move |_ctx, _m: Expected| {
            h.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    let bad = Node::builder().start().unwrap();
    let site = bad.site(&server.listen_addresses()[0]).unwrap();
    const N: u64 = 2_000;
    for _ in 0..N {
        site.send(&Malformed("a".into(), "b".into(), "c".into()))
            .await
            .unwrap();
    }
    // A good message after them: once it is handled, every bad one was seen.
    site.send(&Expected { n: 1 }).await.unwrap();
    assert!(eventually(|| handled.load(Ordering::Relaxed) == 1).await);
    let m = server.metrics();
    assert_eq!(m.unhandled, N, "each malformed message is counted");
    let written = warnings.load(Ordering::Relaxed);
    assert!(
        written <= 20,
        "{written} warnings for {N} malformed messages from one peer"
    );
    assert!(m.logs_suppressed >= N - written, "{m:?}");
}

/// Issue 17: sites that handshake, send echo requests with large bodies,
/// never read and then vanish left 7.5 M queued replies (1.15 GiB) held
/// after they had gone: the output bound was per site, with no bound for
/// the node and no give-up by default. The node's output is now bounded
/// across sites with a fair share (a site that reads still gets room), and
/// what is owed to a site that cannot be called back is released after
/// `unreachable_give_up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_replies_owed_to_vanished_readers_are_bounded_and_released() {
    use sitenet::protocols::MessageKind;
    use sitenet::services::{Echo, EchoReply};
    const NODE_BOUND: u64 = 8 << 20;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.max_message_size = 1 << 20;
            c.output_bound = 2 << 20;
            c.node_output_bound = NODE_BOUND;
            c.unreachable_give_up = std::time::Duration::from_secs(1);
            c.linger = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    // Six peers that never read, each asking for 6.4 MB of echoes.
    let hogs: Vec<_> = (0..6)
        .map(|_| {
            let target = target.clone();
            std::thread::spawn(move || {
                let mut p = raw::RawPeer::connect(&target);
                let body = vec![7u8; 32 * 1024];
                for seq in 0..200u64 {
                    let header = rmp_serde::to_vec(&Echo { seq }).unwrap();
                    p.send(Echo::ID, MessageKind::Request, seq + 1, &header, &body);
                }
                p
            })
        })
        .collect();
    let hogs: Vec<_> = hogs.into_iter().map(|h| h.join().unwrap()).collect();
    // A client that reads is still answered while they hold their share.
    let client = Node::builder().start().unwrap();
    let site = client.site(&target).unwrap();
    for seq in 0..50 {
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq }, sitenet::SendOptions::default(), PATIENCE)
            .await
            .expect("a reading client is answered beside the hogs");
        assert_eq!(r.msg.seq, seq);
    }
    let held = server.stats().output_bytes;
    assert!(held > 0 && held <= NODE_BOUND, "held {held}");
    assert_eq!(server.stats().output_bytes_bound, NODE_BOUND);
    // They vanish: everything owed to them is returned, and their entries go.
    drop(hogs);
    assert!(
        eventually(|| server.stats().output_bytes == 0).await,
        "still held: {}",
        server.stats().output_bytes
    );
    assert!(
        eventually(|| server.site_count() <= 1).await,
        "{} sites left",
        server.site_count()
    );
    assert!(server.metrics().perm_failures >= 6);
}

/// Issue 17: 20–55 % of short `sitenet ping` runs left the server holding
/// an unacknowledged reply for ever: `shutdown` signalled the site actors
/// and returned, and the process exited before they wrote their final
/// acknowledgement. `shutdown` now returns once they have. (The server is
/// given no unreachable give-up here, so only the acknowledgement can free
/// the reply.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_short_honest_run_leaves_nothing_owed() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.unreachable_give_up = std::time::Duration::from_secs(3600);
        })
        .start()
        .unwrap();
    for round in 0..10 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sitenet"))
            .args(["ping", &addr(&server), "--count", "3", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        // The replies were acknowledged before the process exited: the
        // server frees them as soon as it reads that (milliseconds).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while server.stats().output_bytes != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "run {round}: the server still holds {} bytes owed to a client that left",
                server.stats().output_bytes
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// Issue 17: `shutdown` did not refuse new sends during its wait, though
/// its documentation said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_shutdown_refuses_new_sends_while_it_waits() {
    // A site nobody answers at: what is queued for it is never
    // acknowledged, so shutdown waits its whole deadline.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Node::builder().start().unwrap();
    let site = client.site(&format!("tcp:127.0.0.1:{port}")).unwrap();
    site.try_send(&Expected { n: 0 }).unwrap();
    let c = client.clone();
    let shutting = tokio::spawn(async move { c.shutdown(std::time::Duration::from_secs(3)).await });
    let mut refused = false;
    while !shutting.is_finished() {
        match site.try_send(&Expected { n: 1 }) {
            Err(sitenet::SendError::Shutdown) => {
                refused = true;
                break;
            }
            Ok(()) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused,
        "sends were accepted for the whole of shutdown's wait"
    );
    let report = shutting.await.unwrap();
    assert!(report.unacknowledged_bytes > 0);
}

/// Issue 17: on give-up, messages still in the outbox landed in
/// `take_refused`, not in `failure().not_sent`. Every message accepted for
/// a site that is then given up is in its failure's `not_sent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_messages_queued_as_a_site_is_given_up_are_in_not_sent() {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Node::builder()
            .configure(|c| c.give_up_after = Some(std::time::Duration::from_millis(100)))
            .start()
            .unwrap();
        let site = client.site(&format!("tcp:127.0.0.1:{port}")).unwrap();
        let sender = site.clone();
        let accepted = std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                match sender.try_send(&Expected { n }) {
                    Ok(()) => n += 1,
                    Err(sitenet::SendError::QueueFull { .. }) => std::thread::yield_now(),
                    Err(sitenet::SendError::SiteFailed { .. }) => return n,
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .join()
        .unwrap();
        // Sends that raced with the failure are handed back by the actor's
        // next turn: once nothing is held, everything is accounted for.
        assert!(eventually(|| site.pending_bytes() == 0).await);
        let (_, back) = site.failure().expect("given up");
        let refused = site.take_refused();
        assert!(refused.is_empty(), "{} in take_refused", refused.len());
        assert_eq!(
            (back.not_sent.len() + back.maybe_delivered.len()) as u64,
            accepted
        );
    }
}

/// Issue 17: tracked deliveries hung for ever once the last `Node` handle
/// dropped (only `shutdown` failed them): a message sent and not yet
/// acknowledged stayed in the stopped actor's ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_dropping_the_node_fails_its_tracked_deliveries() {
    // A server (on a thread of its own) whose handler holds the message,
    // so it is delivered but not acknowledged.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let (got_tx, got_rx) = std::sync::mpsc::channel::<()>();
    let got_tx = std::sync::Mutex::new(got_tx);
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(sitenet::Runtime::dedicated("held-server"))
        .start()
        .unwrap();
    server
        .handle(move |_ctx, _m: Expected| {
            let _ = got_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv_timeout(PATIENCE);
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(&addr(&server)).unwrap();
    let delivery = site
        .try_send_tracked(&Expected { n: 0 }, sitenet::SendOptions::default())
        .unwrap();
    tokio::task::spawn_blocking(move || got_rx.recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the server holds the message");
    // The last `Node` handle goes; a `SiteRef` (which keeps the node's
    // state, not the node) is still held, as a user's data structure would.
    drop(client);
    let r = tokio::time::timeout(PATIENCE, delivery)
        .await
        .expect("the delivery ends when the node is dropped");
    assert!(matches!(r, Err(sitenet::DeliveryError::Shutdown)), "{r:?}");
    let _ = release_tx.send(());
    drop(site);
}

/// A request the forgery test's server answers.
#[derive(Serialize, Deserialize)]
struct Ask {
    seq: u64,
}
impl Message for Ask {
    const ID: u32 = 710;
}

/// Its reply.
#[derive(Serialize, Deserialize)]
struct Answer {
    seq: u64,
}
impl Message for Answer {
    const ID: u32 = 711;
}

/// Issue 17: a forged claim on a site's id broke that pair for good. A
/// stranger that read a client's id claimed it (as a site that never
/// worked with the server) while the client was cut off: the server reset
/// the pair's numbering and sent the client's reply to the stranger, and
/// the real client got no reply. The claim must prove the pair's
/// continuity; refused, it changes nothing, and the client, back, gets
/// every reply once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_forged_claim_on_a_client_in_backoff_breaks_nothing() {
    use std::time::Duration;
    let server = listening_node();
    // Counts every request handled (a resend delivered twice would show).
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    server
        .handle(move |ctx, a: Ask| {
            h.fetch_add(1, Ordering::SeqCst);
            let _ = ctx.reply(&Answer { seq: a.seq });
        })
        .unwrap();
    let relay = common::raw::Relay::to(&addr(&server));
    // A client that does not listen (only it can restore the channel),
    // reaching the server through the relay. Its handshakes wait as long as
    // the relay holds them: it does not try the server's own address
    // before the relay is released.
    let client = Node::builder()
        .configure(|c| c.handshake_timeout = Duration::from_secs(60))
        .start()
        .unwrap();
    let site = client.site(&relay.address).unwrap();
    let ask = |seq: u64| {
        let site = site.clone();
        async move {
            site.request::<Ask, Answer>(
                &Ask { seq },
                sitenet::SendOptions::default(),
                Duration::from_secs(30),
            )
            .await
            .map(|r| r.msg.seq)
        }
    };
    assert_eq!(ask(0).await.unwrap(), 0);
    // Request 1 is answered, and the answer lost on the way: the server
    // holds it, unacknowledged, when the client is cut off.
    relay.lose_from_target();
    let sent = server.metrics().messages_sent;
    let pending = tokio::spawn(ask(1));
    assert!(eventually(|| server.metrics().messages_sent > sent).await);
    let closed = server.metrics().channels_closed;
    relay.cut_and_hold();
    assert!(eventually(|| server.metrics().channels_closed > closed).await);
    // A stranger claims the client's id, as a site that never worked with
    // the server, and keeps its channel if it gets one.
    let target = addr(&server);
    let victim = client.id();
    let forger = tokio::task::spawn_blocking(move || {
        common::raw::RawPeer::try_connect_as(&target, victim, Vec::new())
    })
    .await
    .unwrap();
    relay.release();
    let reply = pending.await.unwrap();
    assert_eq!(
        reply.as_ref().ok(),
        Some(&1),
        "request 1: {reply:?}; the forger got {:?}",
        forger.as_ref().map(|_| "a channel")
    );
    assert_eq!(ask(2).await.unwrap(), 2);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        3,
        "a request was handled twice"
    );
    assert!(
        matches!(forger, Err(sitenet::protocols::OpenError::Refused(_))),
        "the forged claim was accepted"
    );
    assert_eq!(server.metrics().claims_refused, 1);
}
