//! Cooperations end to end (`Node::cooperation`, Paradis-Net): scatter/
//! gather to several sites, request/reply with a body limit, a timeout with
//! the replies that came, cancel waking every waiter, a failed site, and
//! late replies discarded and counted.

mod common;

use std::time::Duration;

use common::{addr, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{AsyncCtx, CoopError, Expect, Message, Node, Runtime, SendOptions};

#[derive(Debug, Serialize, Deserialize)]
struct Count {
    /// How long the server takes before it answers, in ms.
    delay_ms: u64,
}
impl Message for Count {
    const ID: u32 = 400;
}

#[derive(Debug, Serialize, Deserialize)]
struct Total(u64);
impl Message for Total {
    const ID: u32 = 401;
}

/// A server answering `Count` with `Total(n)` and a body of `body` bytes.
fn server(n: u64, body: usize) -> Node {
    // A thread of its own: a slow handler holds only its node's thread.
    let node = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("coop-server"))
        .start()
        .unwrap();
    node.handle(move |ctx, c: Count| {
        // A slow server, on purpose (the scenario, not a wait).
        std::thread::sleep(Duration::from_millis(c.delay_ms));
        let _ = ctx.reply_with(&Total(n), SendOptions::new().body(vec![n as u8; body]));
    })
    .unwrap();
    node
}

fn now() -> SendOptions {
    SendOptions::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_gather_completes_when_every_site_answered() {
    let servers: Vec<Node> = (1..=3).map(|n| server(n, 4)).collect();
    let client = Node::builder().start().unwrap();
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(addr(s)).unwrap())
        .collect();
    let coop = client.cooperation();
    assert!(coop.check().is_none());
    for s in &sites {
        coop.expect(Expect::from_site(s).of::<Total>());
    }
    for s in &sites {
        coop.request_with(s, &Count { delay_ms: 0 }, now())
            .await
            .unwrap();
    }
    let answers = coop.wait(PATIENCE).await.unwrap();
    let totals: Vec<u64> = answers
        .iter()
        .map(|a| a.decode::<Total>().unwrap().0)
        .collect();
    assert_eq!(totals, [1, 2, 3], "in descriptor order");
    for (a, s) in answers.iter().zip(&sites) {
        assert_eq!(a.from.id(), s.id());
    }
    assert!(coop.check().unwrap().is_ok(), "check agrees");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_is_truncated_to_its_descriptor_and_its_size_reported() {
    let (long, short) = (server(1, 100), server(2, 3));
    let client = Node::builder().start().unwrap();
    let coop = client.cooperation();
    for s in [&long, &short] {
        let site = client.site(addr(s)).unwrap();
        coop.expect(Expect::from_site(&site).max_body(10));
        coop.request_with(&site, &Count { delay_ms: 0 }, now())
            .await
            .unwrap();
    }
    let a = coop.wait(PATIENCE).await.unwrap();
    assert_eq!(
        (a[0].body.len(), a[0].size, a[0].truncated()),
        (10, 100, true)
    );
    assert_eq!(
        (a[1].body.len(), a[1].size, a[1].truncated()),
        (3, 3, false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_returns_the_replies_that_came_and_a_late_one_is_discarded_and_counted() {
    let quick = server(1, 0);
    // The slow server answers when the test lets it (on a thread of its
    // own: a handler that blocks holds its node's I/O thread).
    let slow = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("slow-server"))
        .start()
        .unwrap();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    slow.handle(move |ctx, _c: Count| {
        let _ = wait.lock().unwrap().recv_timeout(PATIENCE);
        let _ = ctx.reply(&Total(2));
    })
    .unwrap();
    let client = Node::builder().start().unwrap();
    let coop = client.cooperation();
    let q = client.site(addr(&quick)).unwrap();
    let s = client.site(addr(&slow)).unwrap();
    coop.expect(Expect::from_site(&q));
    coop.expect(Expect::from_site(&s));
    coop.request_with(&q, &Count { delay_ms: 0 }, now())
        .await
        .unwrap();
    coop.request_with(&s, &Count { delay_ms: 0 }, now())
        .await
        .unwrap();
    // The quick reply is in.
    assert!(
        client
            .wait_until(|m| m.messages_delivered >= 1, PATIENCE)
            .await
    );
    match coop.wait(Duration::from_millis(100)).await {
        Err(CoopError::TimedOut { answers, missing }) => {
            assert_eq!(missing, 1);
            assert_eq!(answers[0].as_ref().unwrap().decode::<Total>().unwrap().0, 1);
            assert!(answers[1].is_none());
        }
        other => panic!("{other:?}"),
    }
    let before = client.metrics().replies_discarded;
    go.send(()).unwrap();
    assert!(
        client
            .wait_until(|m| m.replies_discarded > before, PATIENCE)
            .await,
        "the late reply is discarded and counted"
    );
    assert!(matches!(
        coop.check(),
        Some(Err(CoopError::TimedOut { .. }))
    ));
}

/// A cooperation waited on with nothing to expect can never complete: the
/// wait ends at once, and says why, instead of sleeping its whole timeout
/// for `TimedOut { answers: [], missing: 0 }`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooperation_with_nothing_to_expect_fails_at_once() {
    let client = Node::builder().start().unwrap();
    let coop = client.cooperation();
    let t0 = std::time::Instant::now();
    let r = coop.wait(PATIENCE).await;
    assert!(matches!(r, Err(CoopError::NothingExpected)), "{r:?}");
    assert!(t0.elapsed() < PATIENCE / 4, "{:?}", t0.elapsed());
    assert!(matches!(
        coop.check(),
        Some(Err(CoopError::NothingExpected))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wakes_every_waiter_and_later_replies_are_discarded() {
    let slow = server(1, 0);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&slow)).unwrap();
    let coop = client.cooperation();
    coop.expect(Expect::from_site(&site));
    coop.request_with(&site, &Count { delay_ms: 300 }, now())
        .await
        .unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let c = coop.clone();
            tokio::spawn(async move { c.wait(PATIENCE).await })
        })
        .collect();
    coop.cancel();
    for w in waiters {
        let r = tokio::time::timeout(PATIENCE, w).await.unwrap().unwrap();
        assert!(matches!(r, Err(CoopError::Cancelled)), "{r:?}");
    }
    assert!(
        client
            .wait_until(|m| m.replies_discarded >= 1, PATIENCE)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_site_fails_the_cooperation_waiting_for_it() {
    let s = server(1, 0);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&s)).unwrap();
    let coop = client.cooperation();
    coop.expect(Expect::from_site(&site));
    coop.request_with(&site, &Count { delay_ms: 300 }, now())
        .await
        .unwrap();
    client.kill(&site);
    let r = coop.wait(PATIENCE).await;
    assert!(matches!(r, Err(CoopError::Failed { .. })), "{r:?}");
}

/// Regression (found reading the diff): a request sent through a
/// cooperation that had already ended stayed in the node's table of
/// pending requests for ever when no reply came, and a site with a pending
/// request keeps its channel: the idle channel never closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_an_ended_cooperation_does_not_keep_its_channel_open() {
    // The server never closes the channel itself (its linger is long).
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.linger = Duration::from_secs(600))
        .start()
        .unwrap();
    // It never answers, and holds no reference to the client (a kept
    // responder would, and keep the channel open).
    server
        .handle(|ctx, _c: Count| {
            if let Some(r) = ctx.responder() {
                r.abandon();
            }
        })
        .unwrap();
    let client = Node::builder()
        .configure(|c| c.linger = Duration::from_millis(50))
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let coop = client.cooperation();
    coop.expect(Expect::from_site(&site));
    coop.cancel();
    coop.request_with(&site, &Count { delay_ms: 0 }, now())
        .await
        .unwrap();
    site.flush(PATIENCE).await.unwrap();
    drop((coop, site));
    // Unreferenced and idle: the channel closes after the linger time (a
    // generous bound for 50 ms).
    assert!(
        client
            .wait_until(|m| m.channels_closed >= 1, Duration::from_secs(30))
            .await,
        "the channel stayed open"
    );
}

#[derive(Debug, Serialize, Deserialize)]
struct Vote(bool);
impl Message for Vote {
    const ID: u32 = 402;
}

/// A type declared a cooperation reply (`Node::cooperation_reply`): one-way
/// messages of it, from sites that were never asked anything, fill the
/// open cooperation; one that no cooperation waits for is discarded and
/// counted; the type cannot also have a handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_reply_types_fill_a_cooperation_from_sites_never_asked() {
    let coordinator = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    coordinator.cooperation_reply::<Vote>().unwrap();
    assert!(
        coordinator.handle(|_ctx, _v: Vote| {}).is_err(),
        "one role per type"
    );
    let voters: Vec<Node> = (0..3).map(|_| Node::builder().start().unwrap()).collect();
    let to: Vec<_> = voters
        .iter()
        .map(|v| v.site(addr(&coordinator)).unwrap())
        .collect();
    // Nobody waits yet: discarded and counted.
    to[0].send(&Vote(false)).await.unwrap();
    assert!(
        coordinator
            .wait_until(|m| m.replies_discarded >= 1, PATIENCE)
            .await
    );
    let coop = coordinator.cooperation();
    for _ in 0..3 {
        coop.expect(Expect::any().of::<Vote>());
    }
    for s in &to {
        s.send(&Vote(true)).await.unwrap();
    }
    let votes = coop.wait(PATIENCE).await.unwrap();
    assert!(votes.iter().all(|v| v.decode::<Vote>().unwrap().0));
    let mut from: Vec<_> = votes.iter().map(|v| v.from.id()).collect();
    from.sort();
    from.dedup();
    assert_eq!(from.len(), 3, "one vote from each site");
}

/// The site an answer's `from` names is held until the answer is read, so
/// the node cannot have reclaimed it and a send to it does not fail with a
/// misleading `RuntimeStopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_names_a_site_that_was_not_reclaimed() {
    let fast = |c: &mut sitenet::NodeConfig| {
        c.linger = Duration::from_millis(100);
        common::services(c);
    };
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(fast)
        .start()
        .unwrap();
    let client = Node::builder().configure(fast).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let coop = client.cooperation();
    coop.expect(Expect::any().of::<sitenet::services::EchoReply>());
    coop.request(&site, &sitenet::services::Echo { seq: 1 })
        .await
        .unwrap();
    while coop.check().is_none() {
        tokio::task::yield_now().await;
    }
    drop(site);
    // Several linger times: either the client forgets the site, or it
    // keeps it and rejects the server's weak closes.
    assert!(
        common::eventually(
            || client.metrics().sites_reclaimed > 0 || server.metrics().weak_closes_rejected >= 2
        )
        .await
    );
    let answers = coop.wait(PATIENCE).await.unwrap();
    assert_eq!(
        client.metrics().sites_reclaimed,
        0,
        "the answer's site is kept"
    );
    common::echo(&answers[0].from, 2).await;
}

/// Cooperations work against async handlers: each site's
/// future awaits before it answers (the last asked answers first), the
/// replies fill their descriptors; a handler's typed error fails the
/// cooperation with the handler's reason, as any error reply does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooperation_gathers_the_answers_of_async_handlers() {
    let servers: Vec<Node> = (1..=3u64)
        .map(|n| {
            let node = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
            node.handle_async(move |ctx: AsyncCtx, c: Count| async move {
                if c.delay_ms == 999 {
                    return Err(format!("site {n} refuses"));
                }
                ctx.node()
                    .runtime()
                    .delay(Duration::from_millis(c.delay_ms))
                    .await;
                Ok(Total(n))
            })
            .unwrap();
            node
        })
        .collect();
    let client = Node::builder().start().unwrap();
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(addr(s)).unwrap())
        .collect();
    let coop = client.cooperation();
    for s in &sites {
        coop.expect(Expect::from_site(s).of::<Total>());
    }
    for (i, s) in sites.iter().enumerate() {
        let delay_ms = 20 * (3 - i as u64);
        coop.request_with(s, &Count { delay_ms }, now())
            .await
            .unwrap();
    }
    let answers = coop.wait(PATIENCE).await.unwrap();
    let totals: Vec<u64> = answers
        .iter()
        .map(|a| a.decode::<Total>().unwrap().0)
        .collect();
    assert_eq!(totals, [1, 2, 3], "in descriptor order");

    let coop = client.cooperation();
    coop.expect(Expect::from_site(&sites[1]).of::<Total>());
    coop.request_with(&sites[1], &Count { delay_ms: 999 }, now())
        .await
        .unwrap();
    match coop.wait(PATIENCE).await {
        Err(CoopError::Failed { site, reason }) => {
            assert_eq!(site, sites[1].id());
            assert!(reason.contains("site 2 refuses"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
