//! Replies later: a handler takes its request's `Responder` and
//! answers from a spawned task or another thread; every request gets one
//! answer — the reply, an error, or "no reply" at once when the handler
//! answers nothing or drops the responder, so no caller waits out its
//! timeout.

mod common;

use std::time::{Duration, Instant};

use common::{addr, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, RequestError};

#[derive(Debug, Serialize, Deserialize)]
struct Ask(u64);
impl Message for Ask {
    const ID: u32 = 640;
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer(u64);
impl Message for Answer {
    const ID: u32 = 641;
}

#[derive(Debug, Serialize, Deserialize)]
struct Note(u64);
impl Message for Note {
    const ID: u32 = 642;
}

fn node() -> Node {
    Node::builder().listen("tcp:127.0.0.1:0").start().unwrap()
}

async fn ask(client: &Node, server: &Node, n: u64) -> Result<u64, RequestError> {
    let site = client.site(addr(server)).unwrap();
    site.request::<Ask, Answer>(&Ask(n))
        .timeout(PATIENCE)
        .await
        .map(|r| r.msg.0)
}

/// A reply given later: the handler cannot wait, so it takes the responder,
/// spawns the work, awaits another site there, and answers from the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_answers_from_a_spawned_task_after_awaiting_another_site() {
    let back = node();
    back.handle(|ctx, Ask(n): Ask| {
        let _ = ctx.reply(&Answer(n + 1));
    })
    .unwrap();
    let front = node();
    let to_back = front.site(addr(&back)).unwrap();
    front
        .handle(move |ctx, Ask(n): Ask| {
            let responder = ctx.responder().expect("a request has a responder");
            let to_back = to_back.clone();
            ctx.spawn(async move {
                match to_back
                    .request::<Ask, Answer>(&Ask(n))
                    .timeout(PATIENCE)
                    .await
                {
                    Ok(r) => responder.reply(&Answer(r.msg.0 * 10)).unwrap(),
                    Err(e) => responder.fail(e.to_string()).unwrap(),
                }
            });
        })
        .unwrap();
    let client = node();
    // Several at once: none waits behind another's round trip.
    let asks = (0..8).map(|n| ask(&client, &front, n));
    let got: Vec<u64> = futures::future::join_all(asks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, (0..8).map(|n| (n + 1) * 10).collect::<Vec<_>>());
}

/// From a plain thread, after the handler returned: `Send + 'static`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_answers_from_another_thread() {
    let server = node();
    server
        .handle(|ctx, Ask(n): Ask| {
            let responder = ctx.responder().unwrap();
            assert!(ctx.responder().is_none(), "taken once");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                responder.reply(&Answer(n * 2)).unwrap();
            });
        })
        .unwrap();
    let client = node();
    assert_eq!(ask(&client, &server, 21).await, Ok(42));
}

/// Asks `server` with a 30 s timeout: the answer must be "no reply" with a
/// reason that says `why`, well before the timeout.
async fn no_reply_at_once(server: &Node, why: &str) {
    let client = node();
    let site = client.site(addr(server)).unwrap();
    let t0 = Instant::now();
    let e = site
        .request::<Ask, Answer>(&Ask(1))
        .timeout(Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RequestError::NoReply { reason, .. } if reason.contains(why)),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
}

/// A handler that forgot to answer: the caller hears "no reply" at once,
/// not after its timeout (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_answers_nothing_ends_the_request_at_once() {
    let server = node();
    server.handle(|_ctx, _: Ask| {}).unwrap();
    no_reply_at_once(&server, "returned").await;
}

/// A responder dropped unanswered says so at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_dropped_unanswered_ends_the_request_at_once() {
    let server = node();
    server
        .handle(|ctx, _: Ask| {
            let responder = ctx.responder().unwrap();
            std::thread::spawn(move || drop(responder));
        })
        .unwrap();
    no_reply_at_once(&server, "dropped").await;
}

/// An abandoned responder answers nothing: the caller waits out its own
/// timeout (a server that must look silent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_responder_leaves_the_caller_to_its_timeout() {
    let server = node();
    server
        .handle(|ctx, _: Ask| ctx.responder().unwrap().abandon())
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let t = Duration::from_millis(300);
    let e = site
        .request::<Ask, Answer>(&Ask(1))
        .timeout(t)
        .await
        .unwrap_err();
    assert_eq!(e, RequestError::Timeout(t));
}

/// `fail` answers with an error the caller can tell from "no reply".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_can_answer_with_an_error() {
    let server = node();
    server
        .handle(|ctx, Ask(n): Ask| {
            let responder = ctx.responder().unwrap();
            std::thread::spawn(move || responder.fail(format!("no such key {n}")).unwrap());
        })
        .unwrap();
    let client = node();
    assert_eq!(
        ask(&client, &server, 7).await,
        Err(RequestError::Remote {
            type_id: Ask::ID,
            reason: "no such key 7".into(),
            value: None
        })
    );
}

/// A forwarded request's responder answers the origin directly (a
/// delegated reply), later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_answered_later_by_its_final_site() {
    let owner = node();
    owner
        .handle(|ctx, Ask(n): Ask| {
            assert!(ctx.forwarded_by().is_some());
            let responder = ctx.responder().unwrap();
            std::thread::spawn(move || responder.reply(&Answer(n + 100)).unwrap());
        })
        .unwrap();
    let relay = node();
    let to_owner = relay.site(addr(&owner)).unwrap();
    relay
        .handle(move |ctx, a: Ask| {
            ctx.forward(&to_owner, &a).unwrap();
            assert!(ctx.responder().is_none(), "forwarded: answered here");
        })
        .unwrap();
    let client = node();
    assert_eq!(ask(&client, &relay, 1).await, Ok(101));
}

/// A one-way message has no responder, and answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_message_has_no_responder() {
    let server = node();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    server
        .handle(move |ctx, Note(n): Note| {
            tx.lock()
                .unwrap()
                .send((n, ctx.responder().is_none()))
                .unwrap();
        })
        .unwrap();
    let client = node();
    client
        .site(addr(&server))
        .unwrap()
        .send(&Note(5))
        .await
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), (5, true));
}
