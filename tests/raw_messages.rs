//! Raw messages over real sockets: a type id and
//! bytes without serde, handled by a range of ids or the fallback,
//! answered raw (at once or from a spawned task); handlers replaced and
//! removed while messages arrive; a failed site's handed-back messages
//! decoded and sent again to another server.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{
    DecodeError, Message, Node, NodeError, Priority, RawMessage, RequestError, Runtime, SendError,
    SendOptions, RESERVED_IDS,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// The next item of `rx`, within the tests' patience.
async fn next<T>(rx: &mut UnboundedReceiver<T>) -> T {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("within the patience")
        .expect("the sender lives")
}

/// Records every message no handler took: `(type_id, reason)`.
fn record_unhandled(node: &Node) -> UnboundedReceiver<(u32, String)> {
    let (tx, rx) = unbounded_channel();
    node.on_unhandled(move |u| {
        let _ = tx.send((u.type_id, u.reason));
    });
    rx
}

/// A raw handler that passes on what it gets, tagged.
fn tagged(
    tag: &'static str,
    tx: &UnboundedSender<(&'static str, RawMessage)>,
) -> impl Fn(&mut sitenet::Ctx<'_>, RawMessage) + Send + Sync + 'static {
    let tx = tx.clone();
    move |_ctx, m| {
        let _ = tx.send((tag, m));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_send_reaches_the_handler_of_its_range() {
    let server = listening_node();
    let (tx, mut rx) = unbounded_channel();
    let seen = tx.clone();
    server
        .handle_raw(1000..2000, move |ctx, m| {
            let _ = seen.send((m, ctx.priority(), ctx.sender_id(), ctx.type_id()));
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();

    site.send_raw(1000, vec![1u8, 2, 3]).try_now().unwrap();
    site.send_raw(1999, Bytes::from_static(b"last id"))
        .await
        .unwrap();
    // Parts and a priority: one body at the receiver.
    let opts = SendOptions::new()
        .priority(Priority::High)
        .parts([Bytes::from_static(b"two "), Bytes::from_static(b"parts")]);
    site.send_raw(1500, Vec::<u8>::new())
        .options(opts)
        .await
        .unwrap();
    // A body larger than a frame, as it was.
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    site.send_raw(1501, Vec::<u8>::new())
        .body(big.clone())
        .try_now()
        .unwrap();

    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut rx).await);
    }
    got.sort_by_key(|(m, ..)| m.type_id);
    let ids: Vec<u32> = got.iter().map(|(m, ..)| m.type_id).collect();
    assert_eq!(ids, [1000, 1500, 1501, 1999]);
    for (m, _, from, type_id) in &got {
        assert!(m.header.is_empty(), "a raw message has no typed header");
        assert_eq!(*from, Some(client.id()));
        assert_eq!(*type_id, m.type_id, "Ctx::type_id is the message's");
    }
    assert_eq!(&got[0].0.body[..], &[1u8, 2, 3][..]);
    assert_eq!(&got[1].0.body[..], b"two parts");
    assert_eq!(got[1].1, Priority::High);
    assert_eq!(got[2].0.body, big);
    assert_eq!(&got[3].0.body[..], b"last id");

    // sitenet's own ids are not for raw messages.
    assert_eq!(
        site.send_raw(RESERVED_IDS + 1, Vec::new()).try_now(),
        Err(SendError::ReservedId(RESERVED_IDS + 1))
    );
    let r = site
        .request_raw(u32::MAX, Vec::new())
        .timeout(PATIENCE)
        .await;
    assert_eq!(
        r.unwrap_err(),
        RequestError::Send(SendError::ReservedId(u32::MAX))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_request_is_answered_raw_at_once_or_from_a_spawned_task() {
    let server = listening_node();
    server
        .handle_raw(10..20, |ctx, m| match m.type_id {
            // At once, from the handler.
            10 => {
                let doubled: Vec<u8> = m.body.iter().map(|b| b * 2).collect();
                ctx.reply_raw(11, doubled).unwrap();
            }
            // Later, from a task the handler spawned.
            12 => {
                let responder = ctx.responder().expect("a request");
                ctx.spawn(async move {
                    tokio::task::yield_now().await;
                    let mut body = m.body.to_vec();
                    body.reverse();
                    responder.reply_raw(13, body).unwrap();
                });
            }
            // A failure, said to the caller.
            14 => {
                let _ = ctx.responder().expect("a request").fail("no such term");
            }
            // No answer at all.
            _ => {}
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();

    let r = site
        .request_raw(10, vec![1u8, 2, 3])
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!((r.type_id, &r.body[..]), (11, &[2u8, 4, 6][..]));
    assert!(r.header.is_empty());

    // Built in a loop from temporaries, awaited together.
    let requests: Vec<_> = (0..20u8)
        .map(|i| {
            site.request_raw(12, vec![i, i + 1, i + 2])
                .timeout(PATIENCE)
        })
        .collect();
    for (i, r) in futures::future::join_all(requests)
        .await
        .into_iter()
        .enumerate()
    {
        let r = r.unwrap();
        let i = i as u8;
        assert_eq!((r.type_id, &r.body[..]), (13, &[i + 2, i + 1, i][..]));
    }

    let r = site.request_raw(14, Vec::new()).timeout(PATIENCE).await;
    assert_eq!(
        r.unwrap_err(),
        RequestError::Remote {
            type_id: 14,
            reason: "no such term".into(),
            value: None
        }
    );
    let r = site.request_raw(15, Vec::new()).timeout(PATIENCE).await;
    assert!(matches!(r, Err(RequestError::NoReply { .. })), "{r:?}");
    // No handler for the id: the caller is told at once.
    let r = site.request_raw(20, Vec::new()).timeout(PATIENCE).await;
    assert!(
        matches!(&r, Err(RequestError::NoHandler { type_id: 20 })),
        "{r:?}"
    );

    // A one-way message cannot be answered.
    let (tx, mut rx) = unbounded_channel();
    server
        .handle_raw(30..=30, move |ctx, _m| {
            let _ = tx.send(ctx.reply_raw(31, Vec::new()));
        })
        .unwrap();
    site.send_raw(30, Vec::new()).try_now().unwrap();
    assert_eq!(
        next(&mut rx).await,
        Err(SendError::NothingToAnswer { type_id: 30 })
    );
}

/// A typed message with no typed handler: its header reaches the fallback.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Stray {
    text: String,
}
impl Message for Stray {
    const ID: u32 = 7;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_gets_the_ids_no_typed_handler_and_no_range_takes() {
    let server = listening_node();
    let sink = Sink::install(&server, 1, None); // typed, id 100
    let (tx, mut rx) = unbounded_channel();
    server.handle_raw(200..300, tagged("range", &tx)).unwrap();
    server.handle_raw_fallback(tagged("fallback", &tx)).unwrap();
    assert!(matches!(
        server.handle_raw_fallback(tagged("second", &tx)),
        Err(NodeError::DuplicateFallback)
    ));
    let mut unhandled = record_unhandled(&server);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();

    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink.wait().await;
    site.send_raw(250, &b"in range"[..]).await.unwrap();
    assert_eq!(next(&mut rx).await.0, "range");
    site.send_raw(5, &b"anywhere"[..]).await.unwrap();
    let (tag, m) = next(&mut rx).await;
    assert_eq!(
        (tag, m.type_id, &m.body[..]),
        ("fallback", 5, &b"anywhere"[..])
    );
    site.send_raw(300, Vec::new()).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        (
            "fallback",
            RawMessage {
                type_id: 300,
                ..Default::default()
            }
        )
    );
    // A typed message nobody handles typed: the fallback gets its header.
    let stray = Stray {
        text: "to nobody".into(),
    };
    site.send(&stray).await.unwrap();
    let (tag, m) = next(&mut rx).await;
    assert_eq!((tag, m.type_id), ("fallback", Stray::ID));
    let decoded: Stray = rmp_serde::from_slice(&m.header).unwrap();
    assert_eq!(decoded, stray);
    // Answered through the fallback too.
    server.replace_raw_fallback(|ctx, m| {
        let _ = ctx.reply_raw(m.type_id, m.body);
    });
    let r = site
        .request_raw(42, &b"echo"[..])
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!((r.type_id, &r.body[..]), (42, &b"echo"[..]));
    // And from the node itself, without the network.
    let local = server.local_site();
    let r = local
        .request_raw(43, &b"me"[..])
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!((r.type_id, &r.body[..]), (43, &b"me"[..]));

    // Without a fallback, the rest goes to on_unhandled.
    assert!(server.remove_raw_fallback());
    assert!(!server.remove_raw_fallback());
    site.send_raw(6, Vec::new()).await.unwrap();
    let (type_id, reason) = next(&mut unhandled).await;
    assert_eq!(type_id, 6);
    assert!(reason.contains("no handler"), "{reason}");
    assert!(rx.try_recv().is_err(), "no raw handler saw it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_handler_wins_over_the_range_holding_its_id() {
    let server = listening_node();
    let sink = Sink::install(&server, 1, None); // typed, id 100
    let (tx, mut rx) = unbounded_channel();
    server.handle_raw(0..1000, tagged("range", &tx)).unwrap();
    let mut unhandled = record_unhandled(&server);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();

    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink.wait().await;
    // A raw message of the typed handler's id goes to the typed handler,
    // whose header does not decode: unhandled, never the range's.
    site.send_raw(Numbered::ID, &b"not msgpack"[..])
        .await
        .unwrap();
    let (type_id, reason) = next(&mut unhandled).await;
    assert_eq!(type_id, Numbered::ID);
    assert!(reason.contains("does not decode"), "{reason}");
    // Its neighbours are the range's.
    site.send_raw(Numbered::ID + 1, Vec::new()).await.unwrap();
    let (tag, m) = next(&mut rx).await;
    assert_eq!((tag, m.type_id), ("range", Numbered::ID + 1));
    assert!(rx.try_recv().is_err());
    assert_eq!(sink.total.load(Ordering::Acquire), 1);
}

#[test]
fn overlapping_or_reserved_ranges_are_refused() {
    let node = Node::builder().start().unwrap();
    let nothing = |_: &mut sitenet::Ctx<'_>, _: RawMessage| {};
    node.handle_raw(100..200, nothing).unwrap();
    for (range, registered) in [
        (50..=100, 100..=199),
        (199..=300, 100..=199),
        (120..=130, 100..=199),
        (0..=1000, 100..=199),
    ] {
        match node.handle_raw(range.clone(), nothing) {
            Err(NodeError::OverlappingRange {
                range: r,
                registered: g,
            }) => {
                assert_eq!((r, g), (range, registered))
            }
            other => panic!("{range:?}: {other:?}"),
        }
    }
    // The whole id space is a range like any other.
    assert!(matches!(
        node.handle_raw(.., nothing),
        Err(NodeError::OverlappingRange { .. })
    ));
    assert!(matches!(
        node.handle_raw(7..7, nothing),
        Err(NodeError::EmptyRange)
    ));
    assert!(matches!(
        node.handle_raw(RESERVED_IDS - 1..=RESERVED_IDS, nothing),
        Err(NodeError::ReservedId(RESERVED_IDS))
    ));
    // Adjacent ranges are disjoint.
    node.handle_raw(200..=200, nothing).unwrap();
    node.handle_raw(..100, nothing).unwrap();
    node.handle_raw(201.., nothing).unwrap();
}

/// A handler of generation `generation`: records `(generation, seq)`.
fn generation(
    generation: u32,
    tx: &UnboundedSender<(u32, u64)>,
) -> impl Fn(&mut sitenet::Ctx<'_>, Numbered) + Send + Sync + 'static {
    let tx = tx.clone();
    move |_ctx, m| {
        let _ = tx.send((generation, m.seq));
    }
}

/// Handlers replaced while messages stream in: each message runs the
/// handler in place when it arrives — the old before a swap, the new
/// after, none ever missing (nothing unhandled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_handler_swaps_behaviour_while_messages_arrive() {
    const N: u64 = 3000;
    const SWAPS: u32 = 20;
    let server = listening_node();
    let (tx, mut rx) = unbounded_channel();
    server.handle(generation(0, &tx)).unwrap();
    let mut unhandled = record_unhandled(&server);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();

    // Before: the first generation.
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    assert_eq!(next(&mut rx).await, (0, 0));

    let sender = {
        let site = site.clone();
        tokio::spawn(async move {
            for seq in 1..N {
                site.send(&Numbered { stream: 0, seq }).await.unwrap();
            }
        })
    };
    // Each swap after the next message arrived: swaps land mid-stream.
    let mut arrived = Vec::new();
    for g in 1..=SWAPS {
        arrived.push(next(&mut rx).await);
        assert!(
            server.replace_handler(generation(g, &tx)).unwrap(),
            "replaced"
        );
    }
    while arrived.len() < (N - 1) as usize {
        arrived.push(next(&mut rx).await);
    }
    sender.await.unwrap();

    // In order, each exactly once, and the generations never go back: a
    // message looked up after a swap never runs an older handler.
    let seqs: Vec<u64> = arrived.iter().map(|&(_, s)| s).collect();
    assert_eq!(seqs, (1..N).collect::<Vec<_>>());
    assert!(
        arrived.windows(2).all(|w| w[0].0 <= w[1].0),
        "generations went back"
    );
    assert!(unhandled.try_recv().is_err(), "a message found no handler");
    assert_eq!(server.metrics().unhandled, 0);

    // After: the last generation, at once.
    site.send(&Numbered { stream: 0, seq: N }).await.unwrap();
    assert_eq!(next(&mut rx).await, (SWAPS, N));
    assert!(rx.try_recv().is_err());
}

/// Swaps at known points of a stream: a raw control message, sent on the
/// same lane between the typed ones (so delivered in order with them),
/// replaces their handler from the node's I/O thread. Every message before
/// it runs the old handler, every one after it the new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_between_two_messages_splits_them_between_old_and_new() {
    const SWAP: u32 = 900;
    let server = listening_node();
    let (tx, mut rx) = unbounded_channel();
    server.handle(generation(0, &tx)).unwrap();
    let swapper = tx.clone();
    server
        .handle_raw(SWAP..=SWAP, move |ctx, m| {
            let g = u32::from_le_bytes(m.body[..].try_into().expect("4 bytes"));
            assert!(ctx.node().replace_handler(generation(g, &swapper)).unwrap());
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..300u64 {
        if seq > 0 && seq % 100 == 0 {
            let g = (seq / 100) as u32;
            site.send_raw(SWAP, g.to_le_bytes().to_vec()).await.unwrap();
        }
        site.send(&Numbered { stream: 0, seq }).await.unwrap();
    }
    for seq in 0..300u64 {
        assert_eq!(next(&mut rx).await, ((seq / 100) as u32, seq));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_handler_leaves_its_messages_to_on_unhandled() {
    let server = listening_node();
    let (tx, mut rx) = unbounded_channel();
    server.handle(generation(0, &tx)).unwrap();
    let mut unhandled = record_unhandled(&server);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    assert_eq!(next(&mut rx).await, (0, 0));

    assert!(server.remove_handler::<Numbered>());
    assert!(!server.remove_handler::<Numbered>());
    site.send(&Numbered { stream: 0, seq: 1 }).await.unwrap();
    let (type_id, reason) = next(&mut unhandled).await;
    assert_eq!(type_id, Numbered::ID);
    assert!(reason.contains("no handler"), "{reason}");
    assert!(rx.try_recv().is_err());
    // Sitenet's own services stay.
    assert!(!server.remove_handler::<sitenet::services::Echo>());
    echo(&site, 3).await;

    // A raw range, replaced and then removed.
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    server
        .handle_raw(500..600, move |ctx, _m| {
            c.fetch_add(1, Ordering::Relaxed);
            let _ = ctx.reply_raw(1, &b"old"[..]);
        })
        .unwrap();
    let r = site
        .request_raw(550, Vec::new())
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(&r.body[..], b"old");
    let replaced = server
        .replace_raw(500..=599, |ctx, _m| {
            let _ = ctx.reply_raw(1, &b"new"[..]);
        })
        .unwrap();
    assert!(replaced);
    let r = site
        .request_raw(550, Vec::new())
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(&r.body[..], b"new");
    assert!(matches!(
        server.replace_raw(550..700, |_, _| {}),
        Err(NodeError::OverlappingRange { .. })
    ));
    assert!(server.remove_raw(500..600));
    let r = site.request_raw(550, Vec::new()).timeout(PATIENCE).await;
    assert!(
        matches!(&r, Err(RequestError::NoHandler { type_id: 550 })),
        "{r:?}"
    );
    let (type_id, _) = next(&mut unhandled).await;
    assert_eq!(type_id, 550);
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// A message carrying a site reference.
#[derive(Serialize, Deserialize)]
struct Carry(sitenet::SiteRef);
impl Message for Carry {
    const ID: u32 = 8;
}

/// What a killed site handed back — typed messages, raw ones and a
/// request — is decoded and sent again to a second server: everything
/// one-way arrives there; the request cannot be resent as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_back_messages_are_decoded_and_resent_to_a_second_server() {
    let first = listening_node_on(Runtime::dedicated("raw-first"));
    let sink = Sink::install(&first, 1, None);
    let client = Node::builder()
        .runtime(Runtime::dedicated("raw-client"))
        .start()
        .unwrap();
    let site = client.site(addr(&first)).unwrap();
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    sink.wait().await;
    site.flush(PATIENCE).await.unwrap();

    // Held busy, the site queues what follows; then it is killed.
    let guard = site.hold_busy();
    for seq in 1..=5 {
        site.send(&Numbered { stream: 0, seq }).try_now().unwrap();
    }
    for i in 0..3u8 {
        site.send_raw(700 + u32::from(i), vec![i; 10])
            .try_now()
            .unwrap();
    }
    site.send(&Carry(site.clone())).try_now().unwrap();
    let mut request = site.request_raw(800, Vec::new()).timeout(PATIENCE);
    assert!(
        futures::poll!(&mut request).is_pending(),
        "queued, awaiting its reply"
    );
    client.kill(&site);
    drop(guard);
    assert!(
        client
            .wait_until(|_| site.failure().is_some(), PATIENCE)
            .await
    );
    assert!(matches!(request.await, Err(RequestError::SiteFailed(_))));
    let (reason, back) = site.failure().unwrap();
    assert_eq!(reason, sitenet::SiteFailure::Killed);
    let returned: Vec<_> = back
        .not_sent
        .into_iter()
        .chain(back.maybe_delivered)
        .collect();
    assert_eq!(returned.len(), 10, "{returned:?}");

    // Typed ones decode as their type, and as nothing else.
    let mut seqs: Vec<u64> = returned
        .iter()
        .filter(|m| m.type_id() == Numbered::ID)
        .map(|m| m.decode::<Numbered>().unwrap().seq)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let raw = returned.iter().find(|m| m.type_id() == 701).unwrap();
    assert_eq!(&raw.body()[..], &[1u8; 10][..]);
    assert!(raw.header().is_empty());
    assert_eq!(
        raw.decode::<Numbered>().unwrap_err(),
        DecodeError::WrongType {
            expected: Numbered::ID,
            got: 701
        }
    );
    // A site reference inside decodes on the node that sent it.
    let carried = returned.iter().find(|m| m.type_id() == Carry::ID).unwrap();
    let carried = carried.decode::<Carry>().unwrap().0;
    assert_eq!(carried.id(), Some(first.id()));
    let typed = returned
        .iter()
        .find(|m| m.type_id() == Numbered::ID)
        .unwrap();
    assert!(matches!(
        typed.decode::<Stray>(),
        Err(DecodeError::WrongType { .. })
    ));

    // A second server takes them all.
    let second = listening_node();
    let sink2 = Sink::install(&second, 5, None);
    let (tx, mut rx) = unbounded_channel();
    second.handle_raw(700..800, tagged("raw", &tx)).unwrap();
    let to = client.site(addr(&second)).unwrap();
    let mut refused = Vec::new();
    for m in returned {
        let kind = m.kind();
        match to.resend(m).await {
            Ok(()) => {}
            Err(SendError::NotResendable(why)) => refused.push((kind, why)),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, sitenet_protocols::MessageKind::Request);
    assert!(refused[0].1.contains("request"), "{}", refused[0].1);
    sink2.wait().await; // the five typed ones
    let mut raws = Vec::new();
    for _ in 0..3 {
        let (_, m) = next(&mut rx).await;
        raws.push((m.type_id, m.body));
    }
    raws.sort_by_key(|(id, _)| *id);
    for (i, (id, body)) in raws.into_iter().enumerate() {
        assert_eq!(id, 700 + i as u32);
        assert_eq!(&body[..], &[i as u8; 10][..]);
    }
    // The dead site takes nothing more.
    assert!(matches!(
        site.send_raw(700, Vec::new()).try_now(),
        Err(SendError::SiteFailed { .. })
    ));
}
