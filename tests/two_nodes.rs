//! Two nodes over TCP loopback.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Priority, Runtime, SendOptions};

/// 10,000 messages of 64 KiB each way at once: far more than the socket
/// buffers hold, so both directions are busy writing while they must keep
/// reading. A channel that paused reads behind writes would deadlock here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_at_once_does_not_deadlock() {
    const N: u64 = 10_000;
    const SIZE: usize = 64 * 1024;
    // Separate runtime threads: each node's reads and writes really race.
    let a = listening_node_on(Runtime::dedicated("test-a"));
    let b = listening_node_on(Runtime::dedicated("test-b"));
    let sink_a = Sink::install(&a, N, Some(SIZE));
    let sink_b = Sink::install(&b, N, Some(SIZE));
    let body = Bytes::from(vec![7u8; SIZE]);
    let to_b = a.site(addr(&b)).unwrap();
    let to_a = b.site(addr(&a)).unwrap();
    let send = |site: sitenet::SiteRef, stream: u32| {
        let body = body.clone();
        tokio::spawn(async move {
            for seq in 0..N {
                site.send(&Numbered { stream, seq })
                    .body(body.clone())
                    .await
                    .unwrap();
            }
        })
    };
    let ta = send(to_b.clone(), 1);
    let tb = send(to_a.clone(), 2);
    sink_a.wait().await;
    sink_b.wait().await;
    ta.await.unwrap();
    tb.await.unwrap();
    assert_eq!(
        sink_a
            .out_of_order
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        sink_b
            .out_of_order
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // One channel between the two sites, whoever connected first.
    let opened = a.metrics().channels_opened + b.metrics().channels_opened;
    assert!(opened >= 2, "each side saw the channel open: {opened}");
    // Everything is acknowledged eventually: the senders' memory is freed.
    eprintln!("a: {:?}\nb: {:?}", a.metrics(), b.metrics());
    let ra = a.shutdown(PATIENCE).await;
    let rb = b.shutdown(PATIENCE).await;
    assert_eq!(ra.unacknowledged_bytes, 0);
    assert_eq!(rb.unacknowledged_bytes, 0);
}

#[derive(Debug, Serialize, Deserialize)]
struct Square(u64);
impl Message for Square {
    const ID: u32 = 200;
}
#[derive(Debug, Serialize, Deserialize)]
struct Squared(u64);
impl Message for Squared {
    const ID: u32 = 201;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_reply_and_errors() {
    let server = listening_node();
    server
        .handle(|ctx, Square(x)| {
            if x == 13 {
                panic!("unlucky");
            }
            ctx.reply_with(&Squared(x * x), SendOptions::new().body(ctx.body().clone()))
                .unwrap();
        })
        .unwrap();
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for x in (0..200u64).filter(|x| *x != 13) {
        let body = Bytes::from(x.to_le_bytes().to_vec());
        let r = site
            .request::<Square, Squared>(&Square(x))
            .priority(Priority::High)
            .body(body.clone())
            .timeout(PATIENCE)
            .await
            .unwrap();
        assert_eq!(r.msg.0, x * x);
        assert_eq!(r.body, body);
    }
    // A handler that panics: the requester gets a remote error, the server
    // keeps working, and the message counts as delivered.
    let e = site
        .request::<Square, Squared>(&Square(13))
        .timeout(PATIENCE)
        .await
        .unwrap_err();
    assert!(
        matches!(e, sitenet::RequestError::Remote { reason: ref r, .. } if r.contains("panicked")),
        "{e:?}"
    );
    assert_eq!(server.metrics().handler_panics, 1);
    // A type with no handler: said as such, not a closed channel.
    let e = site
        .request::<Squared, Squared>(&Squared(1))
        .timeout(PATIENCE)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            sitenet::RequestError::NoHandler {
                type_id: Squared::ID
            }
        ),
        "{e:?}"
    );
    // A handler that answers nothing: "no reply" at once, not
    // a timeout.
    let kept = std::sync::Mutex::new(Vec::new());
    server
        .handle(move |ctx, m: Numbered| {
            if m.seq == 1 {
                // Kept, never answered: the request times out; the late
                // reply (none here) would be discarded.
                kept.lock().unwrap().extend(ctx.responder());
            }
        })
        .unwrap();
    let numbered = |seq| Numbered { stream: 0, seq };
    let e = site
        .request::<Numbered, Squared>(&numbered(0))
        .timeout(PATIENCE)
        .await
        .unwrap_err();
    assert!(matches!(e, sitenet::RequestError::NoReply { .. }), "{e:?}");
    let e = site
        .request::<Numbered, Squared>(&numbered(1))
        .timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        sitenet::RequestError::Timeout(Duration::from_millis(200))
    );
    assert_eq!(server.metrics().protocol_errors, 0);
    assert_eq!(
        client.metrics().channels_closed,
        0,
        "application faults never close a channel"
    );
    let r = site
        .request::<Square, Squared>(&Square(3))
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.0, 9);
}

/// Requests built in a `map` from temporaries can be awaited together: the
/// request is encoded when it is made and the future owns what it needs,
/// borrowing neither the message nor the `SiteRef` (were it to borrow
/// them, this test would not compile: E0515).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_built_in_a_loop_own_their_messages() {
    let server = listening_node();
    server
        .handle(|ctx, Square(x)| {
            let _ = ctx.reply(&Squared(x * x));
        })
        .unwrap();
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let asked: Vec<_> = (0..10u64)
        .map(|x| {
            site.request::<Square, Squared>(&Square(x))
                .timeout(PATIENCE)
        })
        .collect();
    drop(site); // each future holds a reference of its own
    let got: Vec<u64> = futures::future::join_all(asked)
        .await
        .into_iter()
        .map(|r| r.unwrap().msg.0)
        .collect();
    assert_eq!(got, (0..10u64).map(|x| x * x).collect::<Vec<_>>());
}

#[test]
fn registering_an_id_twice_or_a_reserved_id_fails() {
    let n = sitenet::Node::builder().start().unwrap();
    n.handle(|_, _m: Square| {}).unwrap();
    assert!(matches!(
        n.handle(|_, _m: Square| {}),
        Err(sitenet::NodeError::DuplicateHandler(200))
    ));
    assert!(matches!(
        n.handle(|_, _m: sitenet::services::Echo| {}),
        Err(sitenet::NodeError::ReservedId(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_larger_than_the_maximum_is_refused_at_send() {
    let server = sitenet::Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_message_size = 64 * 1024)
        .start()
        .unwrap();
    let sink = Sink::install(&server, 1, None);
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    // First message opens the channel and teaches the client the peer's limit.
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink.wait().await;
    let big = Bytes::from(vec![0u8; 128 * 1024]);
    let e = site
        .send(&Numbered { stream: 0, seq: 1 })
        .body(big)
        .try_now()
        .unwrap_err();
    assert!(
        matches!(e, sitenet::SendError::TooLarge { max: 65536, .. }),
        "{e:?}"
    );
}

/// Messages no handler takes (no handler for the type, or an undecodable
/// header) reach the `unhandled` hook; the channel stays up. Async work from
/// a handler runs through `ctx.spawn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhandled_hook_and_spawned_handler_work() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Text(String);
    impl Message for Text {
        const ID: u32 = 300;
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct Wide {
        a: u64,
        b: String,
        c: Vec<u32>,
    }
    impl Message for Wide {
        const ID: u32 = 301;
    }
    let server = listening_node();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_unhandled(move |u| {
        let _ = tx.send((u.type_id, u.reason, u.body.len()));
    });
    // Type 301 expects `Wide`; a client that sends a `Text` under id 301
    // (a mismatched peer) produces an undecodable header.
    server.handle(|_ctx, _w: Wide| {}).unwrap();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    server
        .handle(move |ctx, Square(x)| {
            let done = done_tx.clone();
            ctx.spawn(async move {
                let _ = done.send(x);
            });
        })
        .unwrap();
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Text("no handler".into()))
        .body(vec![1u8, 2])
        .await
        .unwrap();
    #[derive(Debug, Serialize, Deserialize)]
    struct FakeWide(String);
    impl Message for FakeWide {
        const ID: u32 = 301;
    }
    site.send(&FakeWide("not a Wide".into())).await.unwrap();
    site.send(&Square(7)).await.unwrap();
    let (id, reason, body) = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((id, body), (300, 2));
    assert!(reason.contains("no handler"), "{reason}");
    let (id, reason, _) = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id, 301);
    assert!(reason.contains("does not decode"), "{reason}");
    assert_eq!(
        tokio::time::timeout(PATIENCE, done_rx.recv())
            .await
            .unwrap(),
        Some(7)
    );
    assert_eq!(server.metrics().unhandled, 2);
    assert_eq!(client.metrics().channels_closed, 0);
}

/// A site contacted under an address it did not list (here `localhost`
/// instead of `127.0.0.1`), and already known because it connected to us
/// first: the new entry merges into the known one, so there is still one
/// site, one channel, and the message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_address_merges_into_the_known_site() {
    let a = listening_node();
    let b = listening_node();
    let sink_b = Sink::install(&b, 1, None);
    let sink_a = Sink::install(&a, 1, None);
    // B contacts A first: A learns B by id (and B's listen address).
    let to_a = b.site(addr(&a)).unwrap();
    to_a.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink_a.wait().await;
    // A contacts B under an alias of B's address.
    let alias = addr(&b).replace("127.0.0.1", "localhost");
    let to_b = a.site(&alias).unwrap();
    to_b.send(&Numbered { stream: 1, seq: 0 }).await.unwrap();
    sink_b.wait().await;
    assert_eq!(to_b.id(), Some(b.id()), "the alias resolves to B");
    to_b.flush(PATIENCE).await.unwrap();
    // Later sends through the alias reference go to the same site.
    assert_eq!(a.metrics().channels_opened, 1, "{:?}", a.metrics());
    assert_eq!(b.metrics().channels_opened, 1, "{:?}", b.metrics());
}

/// BMI's list I/O: a body sent as several parts arrives as one body, the
/// parts in order, each message whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_in_parts_arrives_whole_and_in_order() {
    let server = listening_node();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    server
        .handle(move |ctx, m: Numbered| {
            let _ = tx.send((m.seq, ctx.body().clone()));
        })
        .unwrap();
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let big = Bytes::from(vec![9u8; 200_000]);
    for seq in 0..3u64 {
        let parts = [
            Bytes::from(format!("head {seq} ")),
            big.clone(),
            Bytes::from_static(b" tail"),
        ];
        site.send(&Numbered { stream: 0, seq })
            .parts(parts)
            .await
            .unwrap();
    }
    for seq in 0..3u64 {
        let (got, body) = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, seq);
        let head = format!("head {seq} ");
        assert_eq!(body.len(), head.len() + 200_000 + 5);
        assert_eq!(&body[..head.len()], head.as_bytes());
        assert!(body[head.len()..head.len() + 200_000]
            .iter()
            .all(|&b| b == 9));
        assert_eq!(&body[body.len() - 5..], b" tail");
    }
}

/// Requests end at their own deadlines, whatever order they were sent in:
/// the node's one deadline task is woken by a request with an earlier
/// deadline than those it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_time_out_in_the_order_of_their_deadlines() {
    // A server that never answers.
    let server = sitenet::Node::builder()
        .listen("tcp:127.0.0.1:0")
        .start()
        .unwrap();
    // Its handler keeps every request's responder and answers none.
    let kept = std::sync::Mutex::new(Vec::new());
    server
        .handle(move |ctx, _m: Numbered| kept.lock().unwrap().extend(ctx.responder()))
        .unwrap();
    let client = sitenet::Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, ms) in [600u64, 200, 400].into_iter().enumerate() {
        let (site, tx) = (site.clone(), tx.clone());
        tokio::spawn(async move {
            let r = site
                .request::<Numbered, Numbered>(&Numbered {
                    stream: 0,
                    seq: i as u64,
                })
                .timeout(Duration::from_millis(ms))
                .await;
            let _ = tx.send((ms, r.map(|_| ())));
        });
    }
    let mut order = Vec::new();
    for _ in 0..3 {
        let (ms, r) = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(r, Err(sitenet::RequestError::Timeout(d)) if d == Duration::from_millis(ms)),
            "{r:?}"
        );
        order.push(ms);
    }
    assert_eq!(order, [200, 400, 600]);
}

/// Nodes that leave their TCP receive buffers to the kernel's autotuning
/// (`NodeConfig::tcp_receive_buffer` and `tcp_loopback_receive_buffer`
/// `None`, for long fat links) connect,
/// accept and carry 8 MiB messages both ways like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_autotuned_receive_buffers_carry_large_messages() {
    let autotuned = |c: &mut sitenet::NodeConfig| {
        services(c);
        c.tcp_receive_buffer = None;
        c.tcp_loopback_receive_buffer = None;
    };
    let a = sitenet::Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(autotuned)
        .start()
        .unwrap();
    let b = sitenet::Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(autotuned)
        .start()
        .unwrap();
    let sink_b = Sink::install(&b, 4, Some(8 << 20));
    let sink_a = Sink::install(&a, 4, Some(8 << 20));
    let body = Bytes::from(vec![3u8; 8 << 20]);
    let (to_b, to_a) = (a.site(addr(&b)).unwrap(), b.site(addr(&a)).unwrap());
    for seq in 0..4 {
        let m = Numbered { stream: 0, seq };
        to_b.send(&m).body(body.clone()).await.unwrap();
        to_a.send(&m).body(body.clone()).await.unwrap();
    }
    sink_b.wait().await;
    sink_a.wait().await;
}
