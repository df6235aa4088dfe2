//! Batches end to end (`Node::batch`, the IBP operation lists): a mix of
//! sends and requests to several sites, all in flight at once (pipelined:
//! every request is sent before the first reply), a callback per
//! completion, `wait_any` one at a time, the failures listed with their
//! errors, and a dead site retried on the site now at its address.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::{addr, listening_node, Numbered, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::batch::{Done, OpError};
use sitenet::services::{Echo, EchoReply};
use sitenet::{AsyncCtx, DecodeError, DeliveryError, Message, Node, RequestError, Runtime};

#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    seq: u64,
}
impl Message for Ask {
    const ID: u32 = 500;
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    seq: u64,
}
impl Message for Answer {
    const ID: u32 = 501;
}

/// A server (on a thread of its own) whose handler for `Ask` waits, for
/// the first request, until the test lets it go.
fn held_echo() -> (Node, mpsc::Sender<()>) {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("held-echo"))
        .start()
        .unwrap();
    let (go, wait) = mpsc::channel::<()>();
    let wait = Mutex::new(Some(wait));
    server
        .handle(move |ctx, a: Ask| {
            if let Some(w) = wait.lock().unwrap().take() {
                let _ = w.recv_timeout(PATIENCE);
            }
            let _ = ctx.reply(&Answer { seq: a.seq });
        })
        .unwrap();
    (server, go)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_batch_to_many_sites_completes_every_operation_with_a_callback_each() {
    let servers: Vec<Node> = (0..3).map(|_| listening_node()).collect();
    let client = Node::builder().start().unwrap();
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(addr(s)).unwrap())
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let mut b = client.batch().on_complete(move |_, r| {
        assert!(r.is_ok(), "{r:?}");
        c.fetch_add(1, Ordering::Relaxed);
    });
    let mut requests = Vec::new();
    for seq in 0..90u64 {
        let s = &sites[seq as usize % 3];
        if seq % 3 == 0 {
            requests.push((b.request(s, &Echo { seq }, PATIENCE).unwrap(), seq));
        } else {
            b.send(s, &Numbered { stream: 0, seq }).unwrap();
        }
    }
    let report = b.submit().wait_all(PATIENCE).await;
    assert!(report.all_ok(), "{:?}", report.failures());
    assert!(report.failures().is_empty());
    assert_eq!(
        calls.load(Ordering::Relaxed),
        90,
        "one callback per operation"
    );
    for (i, seq) in requests {
        let done = report.results[i].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(done.decode::<EchoReply>().unwrap().seq, seq);
    }
    assert!(matches!(report.results[1], Some(Ok(Done::Sent))));
    // Decoding says what went wrong as a typed error.
    let reply = report.results[0].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        reply.decode::<Echo>().unwrap_err(),
        DecodeError::WrongType {
            expected: Echo::ID,
            got: EchoReply::ID
        }
    );
    let sent = report.results[1].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        sent.decode::<EchoReply>().unwrap_err(),
        DecodeError::NoReply
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_a_batch_is_sent_before_the_first_reply() {
    let (server, go) = held_echo();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut b = client.batch();
    for seq in 0..200 {
        b.request(&site, &Ask { seq }, PATIENCE).unwrap();
    }
    let mut running = b.submit();
    // The server holds its first reply: the other 199 requests go out
    // anyway, one channel, no round trip each.
    assert!(
        client
            .wait_until(|m| m.messages_sent >= 200, PATIENCE)
            .await,
        "pipelined"
    );
    assert_eq!(client.metrics().messages_delivered, 0, "no reply yet");
    go.send(()).unwrap();
    let mut seen = 0;
    while let Some((_, r)) = running.wait_any(PATIENCE).await {
        r.unwrap();
        seen += 1;
    }
    assert_eq!(seen, 200);
    assert_eq!(running.pending(), 0);
}

/// A server on `listen` whose handler for `Ask` answers if `answer`, or
/// keeps the request unanswered.
/// A node at `listen` that answers `Ask`, or (`answer` false) keeps every
/// request unanswered: their responders go to the returned list, which
/// the caller holds (dropped, each would answer "no reply").
fn ask_server(listen: &str, answer: bool) -> (Node, Arc<Mutex<Vec<sitenet::Responder>>>) {
    let node = Node::builder().listen(listen).start().unwrap();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    node.handle(move |ctx, a: Ask| {
        if answer {
            let _ = ctx.reply(&Answer { seq: a.seq });
        } else {
            k.lock().unwrap().extend(ctx.responder());
        }
    })
    .unwrap();
    (node, kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_site_is_retried_on_the_site_now_at_its_address_up_to_max_retry() {
    for retries in [0, 1] {
        // The first incarnation takes the request and never answers.
        let (first, _unanswered) = ask_server("tcp:127.0.0.1:0", false);
        let at = addr(&first);
        let client = Node::builder().start().unwrap();
        let site = client.site(&at).unwrap();
        let mut b = client.batch().max_retry(retries);
        b.request(&site, &Ask { seq: 7 }, PATIENCE).unwrap();
        let running = b.submit();
        assert!(
            first
                .wait_until(|m| m.messages_delivered >= 1, PATIENCE)
                .await
        );
        // It dies; a new incarnation (a new id) comes up at the same
        // address. The client finds it there: the old site failed for good.
        first.shutdown(Duration::from_millis(10)).await;
        drop(first);
        let _second = ask_server(&at, true);
        let report = running.wait_all(PATIENCE).await;
        let r = report.results[0].as_ref().expect("done");
        if retries == 0 {
            assert!(
                matches!(
                    r,
                    Err(OpError::Request(sitenet::RequestError::SiteFailed(_)))
                ),
                "{r:?}"
            );
            assert_eq!(report.failures().len(), 1);
        } else {
            let done = r.as_ref().unwrap();
            assert_eq!(
                done.decode::<Answer>().unwrap().seq,
                7,
                "answered by the new incarnation"
            );
            assert!(report.all_ok());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_listed_with_their_errors() {
    let client = Node::builder().start().unwrap();
    let server = listening_node();
    let site = client.site(addr(&server)).unwrap();
    let nobody = client.site("tcp:127.0.0.1:1").unwrap();
    let mut b = client.batch();
    b.request(&site, &Echo { seq: 1 }, PATIENCE).unwrap();
    b.send(&nobody, &Numbered { stream: 9, seq: 0 }).unwrap();
    let running = b.submit();
    client.kill(&nobody);
    let report = running.wait_all(PATIENCE).await;
    let f = report.failures();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, 1);
    assert!(
        matches!(
            f[0].1,
            OpError::Delivery(DeliveryError::NotSent { .. }) | OpError::Send(_)
        ),
        "{:?}",
        f[0].1
    );
    let done = report.results[0].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(done.decode::<EchoReply>().unwrap().seq, 1);
}

#[test]
fn wait_all_reports_what_was_not_done_by_its_deadline() {
    let client = Node::builder().start().unwrap();
    let nobody = client.site("tcp:127.0.0.1:1").unwrap();
    let mut b = client.batch();
    b.send(&nobody, &Numbered { stream: 9, seq: 0 }).unwrap();
    let report = futures::executor::block_on(b.submit().wait_all(Duration::from_millis(50)));
    assert!(report.results[0].is_none(), "still trying to connect");
    assert!(!report.all_ok());
}

/// `next_done` tells "nothing completed in time" from "all done"
/// (`wait_any`'s `None` means either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_done_tells_a_timeout_from_the_end() {
    let (server, go) = held_echo();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut b = client.batch();
    b.request(&site, &Ask { seq: 1 }, PATIENCE).unwrap();
    let mut running = b.submit();
    let short = Duration::from_millis(50);
    assert_eq!(
        running.next_done(short).await.unwrap_err(),
        sitenet::WaitTimedOut(short)
    );
    go.send(()).unwrap();
    let (i, r) = running
        .next_done(PATIENCE)
        .await
        .unwrap()
        .expect("the request completes");
    assert_eq!(i, 0);
    r.unwrap();
    assert!(running.next_done(short).await.unwrap().is_none());
}

/// Batches work against async handlers: every request of the
/// batch is in flight at once at the server — its futures all wait
/// together before any answers — and a handler's typed error is that
/// operation's failure, its value rendered in the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_requests_is_answered_by_async_handlers() {
    let server = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    server
        .handle_async(move |_ctx: AsyncCtx, a: Ask| {
            let g = g.clone();
            async move {
                g.acquire().await.expect("open").forget();
                if a.seq == 13 {
                    return Err(format!("unlucky {}", a.seq));
                }
                Ok(Answer { seq: a.seq * 2 })
            }
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let mut b = client.batch();
    for seq in 0..50 {
        b.request(&site, &Ask { seq }, PATIENCE).unwrap();
    }
    let running = b.submit();
    assert!(
        server
            .wait_until(|m| m.async_handlers == 50, PATIENCE)
            .await,
        "all fifty running at once"
    );
    gate.add_permits(50);
    let report = running.wait_all(PATIENCE).await;
    let f = report.failures();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, 13);
    assert!(
        matches!(f[0].1, OpError::Request(RequestError::Remote { reason: r, .. }) if r.contains("unlucky 13")),
        "{:?}",
        f[0].1
    );
    for seq in (0..50).filter(|&s| s != 13) {
        let done = report.results[seq].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(done.decode::<Answer>().unwrap().seq, seq as u64 * 2);
    }
}
