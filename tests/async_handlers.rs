//! Async handlers, typed remote errors and handlers without `Sync`
//!: `Node::handle_async` runs a future per message on the
//! node's runtime and answers with its output; `handle_result` and async
//! handlers may answer `Err(e)` with a type of the application's, which
//! `SiteRef::request_result` hands back to be matched; the node runs a
//! bounded number of futures (beyond, "busy" at once), drops them when it
//! stops, and answers a panic as an error; `handle_mut` takes state that
//! is not `Sync`.

mod common;

use std::cell::{Cell, RefCell};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{addr, eventually, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{AsyncCtx, Message, Node, RequestError, SendError, SendOptions};
use tokio::sync::Semaphore;

#[derive(Debug, Serialize, Deserialize)]
struct Ask(u64);
impl Message for Ask {
    const ID: u32 = 660;
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Answer(u64);
impl Message for Answer {
    const ID: u32 = 661;
}

/// One-way.
#[derive(Debug, Serialize, Deserialize)]
struct Note(u64);
impl Message for Note {
    const ID: u32 = 662;
}

/// Too large for a node with a small `max_message_size`.
#[derive(Debug, Serialize, Deserialize)]
struct Big(String);
impl Message for Big {
    const ID: u32 = 663;
}

/// The application's own error type, matched by the caller.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum AskError {
    TooBig { max: u64 },
    Odd(u64),
}

/// Another error type: what `AskError` does not decode as.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Unrelated {
    code: String,
}

fn node() -> Node {
    Node::builder().listen("tcp:127.0.0.1:0").start().unwrap()
}

fn now() -> SendOptions {
    SendOptions::default()
}

/// A gate async handlers wait at until the test opens it.
fn gate() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(0))
}

async fn pass(gate: &Semaphore) {
    gate.acquire().await.expect("the gate stays open").forget();
}

/// An async handler: it awaits another site before it answers,
/// and the futures run at once — all twenty wait at the back end's gate
/// together before any is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handler_awaits_another_site_before_answering() {
    let back = node();
    let open = gate();
    let g = open.clone();
    back.handle_async(move |_ctx: AsyncCtx, Ask(n): Ask| {
        let g = g.clone();
        async move {
            pass(&g).await;
            Answer(n + 1)
        }
    })
    .unwrap();
    let front = node();
    let to_back = front.site(addr(&back)).unwrap();
    front
        .handle_async(move |ctx: AsyncCtx, Ask(n): Ask| {
            let to_back = to_back.clone();
            async move {
                assert!(ctx.is_request() && ctx.sender_id().is_some());
                let r = to_back
                    .request::<Ask, Answer>(&Ask(n))
                    .timeout(PATIENCE)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(Answer(r.msg.0 * 10))
            }
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&front)).unwrap();
    let asks: Vec<_> = (0..20)
        .map(|n| {
            site.request::<Ask, Answer>(&Ask(n))
                .options(now())
                .timeout(PATIENCE)
        })
        .collect();
    let answers = tokio::spawn(futures::future::join_all(asks));
    // Every one is in flight at both nodes before the first answer.
    assert!(eventually(|| back.metrics().async_handlers == 20).await);
    assert_eq!(front.metrics().async_handlers, 20);
    open.add_permits(20);
    let got: Vec<u64> = answers
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().msg.0)
        .collect();
    assert_eq!(got, (0..20).map(|n| (n + 1) * 10).collect::<Vec<_>>());
    assert!(eventually(|| front.metrics().async_handlers == 0).await);
    assert!(eventually(|| back.metrics().async_handlers == 0).await);
}

/// The typed error a handler returns is the caller's to match, from a
/// synchronous `handle_result` and from an async handler alike; a plain
/// `request` reads it in the reason, and a caller expecting another type
/// is told it does not decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_error_is_matched_by_the_caller() {
    let rule = |n: u64| {
        if n > 100 {
            Err(AskError::TooBig { max: 100 })
        } else if n % 2 == 1 {
            Err(AskError::Odd(n))
        } else {
            Ok(Answer(n / 2))
        }
    };
    let sync_server = node();
    sync_server
        .handle_result(move |_ctx, Ask(n): Ask| rule(n))
        .unwrap();
    let async_server = node();
    async_server
        .handle_async(move |_ctx: AsyncCtx, Ask(n): Ask| async move { rule(n) })
        .unwrap();
    let client = node();
    for server in [&sync_server, &async_server] {
        let site = client.site(addr(server)).unwrap();
        let ask = |n| {
            site.request::<Ask, Answer>(&Ask(n))
                .options(now())
                .timeout(PATIENCE)
                .or_error::<AskError>()
        };
        assert_eq!(ask(8).await.unwrap().map(|r| r.msg), Ok(Answer(4)));
        assert_eq!(ask(7).await.unwrap().err(), Some(AskError::Odd(7)));
        match ask(500).await.unwrap() {
            Err(AskError::TooBig { max }) => assert_eq!(max, 100),
            other => panic!("{other:?}"),
        }
        // A caller that does not ask for the value reads it.
        let e = site
            .request::<Ask, Answer>(&Ask(7))
            .options(now())
            .timeout(PATIENCE)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, RequestError::Remote { type_id: Ask::ID, reason, value: Some(_) }
                if reason == r#"the handler returned an error: {"Odd":7}"#),
            "{e:?}"
        );
        // Another type: said, with the handler's reason.
        let e = site
            .request::<Ask, Answer>(&Ask(500))
            .options(now())
            .timeout(PATIENCE)
            .or_error::<Unrelated>()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, RequestError::Decode(r) if r.to_string().contains("Unrelated") && r.to_string().contains("TooBig")),
            "{e}"
        );
        // A one-way message's output goes nowhere; the node goes on.
        site.send(&Ask(7)).try_now().unwrap();
        assert_eq!(ask(2).await.unwrap().map(|r| r.msg), Ok(Answer(1)));
    }
    // A type the peer has no handler for says so with `or_error` too.
    let client_site = client.site(addr(&sync_server)).unwrap();
    let e = client_site
        .request::<Note, Answer>(&Note(1))
        .options(now())
        .timeout(PATIENCE)
        .or_error::<AskError>()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RequestError::NoHandler { type_id: Note::ID }),
        "{e}"
    );
}

/// The node's own site: an async handler answers its requests too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_site_is_answered_by_an_async_handler() {
    let n = node();
    n.handle_async(|ctx: AsyncCtx, Ask(k): Ask| async move {
        assert_eq!(ctx.sender_id(), Some(ctx.node().id()));
        if k == 0 {
            Err(AskError::Odd(0))
        } else {
            Ok(Answer(k))
        }
    })
    .unwrap();
    let me = n.local_site();
    let r = me
        .request::<Ask, Answer>(&Ask(5))
        .options(now())
        .timeout(PATIENCE)
        .or_error::<AskError>();
    assert_eq!(r.await.unwrap().map(|r| r.msg), Ok(Answer(5)));
    let r = me
        .request::<Ask, Answer>(&Ask(0))
        .options(now())
        .timeout(PATIENCE)
        .or_error::<AskError>();
    assert_eq!(r.await.unwrap().err(), Some(AskError::Odd(0)));
}

/// A panic — in the future, or in making it — is caught, counted, and
/// answered as an error; the node goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_async_handler_is_answered_as_an_error_and_counted() {
    let server = node();
    server
        .handle_async(|_ctx: AsyncCtx, Ask(n): Ask| {
            assert_ne!(n, 2, "panics making the future");
            async move {
                assert_ne!(n, 1, "panics in the future");
                Answer(n)
            }
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    for n in [1, 2] {
        let e = site
            .request::<Ask, Answer>(&Ask(n))
            .options(now())
            .timeout(PATIENCE)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            RequestError::Remote {
                type_id: Ask::ID,
                reason: format!("async handler for type {} panicked", Ask::ID),
                value: None
            }
        );
    }
    assert_eq!(server.metrics().handler_panics, 2);
    let r = site
        .request::<Ask, Answer>(&Ask(3))
        .options(now())
        .timeout(PATIENCE)
        .await;
    assert_eq!(r.unwrap().msg, Answer(3));
    assert!(eventually(|| server.metrics().async_handlers == 0).await);
}

/// An output that answers nothing, for a request nobody answered
/// otherwise: "no reply", at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handler_answering_nothing_ends_the_request_at_once() {
    let server = node();
    server
        .handle_async(|_ctx: AsyncCtx, _: Ask| async {})
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let t0 = Instant::now();
    let e = site
        .request::<Ask, Answer>(&Ask(1))
        .options(now())
        .timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RequestError::NoReply { reason: r, .. } if r.contains("answers nothing")),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// A future may take its responder and answer elsewhere (here with a
/// body, from a thread); its output is then dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handler_may_answer_through_its_responder() {
    let server = node();
    server
        .handle_async(|ctx: AsyncCtx, Ask(n): Ask| async move {
            let responder = ctx.responder().expect("a request");
            assert!(ctx.responder().is_none(), "taken once");
            std::thread::spawn(move || {
                let body = vec![bytes::Bytes::from(vec![7u8; n as usize])];
                responder
                    .reply_with(&Answer(n), SendOptions::new().parts(body))
                    .unwrap();
            });
            Answer(999) // dropped: the responder answers
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let r = site
        .request::<Ask, Answer>(&Ask(5))
        .options(now())
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!((r.msg, r.body.len()), (Answer(5), 5));
}

/// At `max_async_handlers` running futures a request is refused at once
/// as busy (its handler not run) and a one-way message goes to the
/// unhandled hook; both are counted, and the node serves again once the
/// futures end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_request_is_refused_busy_at_once() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_async_handlers = 2)
        .start()
        .unwrap();
    assert_eq!(server.config().max_async_handlers, 2);
    let open = gate();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (g, r) = (open.clone(), ran.clone());
    server
        .handle_async(move |_ctx: AsyncCtx, Ask(n): Ask| {
            r.lock().unwrap().push(n);
            let g = g.clone();
            async move {
                pass(&g).await;
                Answer(n)
            }
        })
        .unwrap();
    server
        .handle_async(|_ctx: AsyncCtx, _: Note| async {})
        .unwrap();
    let (tx, unhandled) = mpsc::channel();
    let tx = Mutex::new(tx);
    server.on_unhandled(move |u| {
        let _ = tx.lock().unwrap().send((u.type_id, u.reason));
    });
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let held: Vec<_> = (0..2)
        .map(|n| {
            tokio::spawn(
                site.request::<Ask, Answer>(&Ask(n))
                    .options(now())
                    .timeout(PATIENCE),
            )
        })
        .collect();
    assert!(eventually(|| server.metrics().async_handlers == 2).await);
    let t0 = Instant::now();
    let e = site
        .request::<Ask, Answer>(&Ask(2))
        .options(now())
        .timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RequestError::Busy { reason: r, .. } if r.contains("max_async_handlers")),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    site.send(&Note(1)).try_now().unwrap();
    let (type_id, reason) = unhandled.recv_timeout(PATIENCE).unwrap();
    assert_eq!(type_id, Note::ID);
    assert!(reason.contains("max_async_handlers"), "{reason}");
    assert_eq!(server.metrics().async_handlers_busy, 2);
    let mut ran_now = ran.lock().unwrap().clone();
    ran_now.sort_unstable(); // (the two held ones were sent from two tasks)
    assert_eq!(ran_now, [0, 1], "the refused one never ran");
    open.add_permits(3);
    for (n, h) in held.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().msg, Answer(n as u64));
    }
    assert!(eventually(|| server.metrics().async_handlers == 0).await);
    let r = site
        .request::<Ask, Answer>(&Ask(3))
        .options(now())
        .timeout(PATIENCE)
        .await;
    assert_eq!(r.unwrap().msg, Answer(3));
}

/// Sends on `tx` when dropped: proof that a future was dropped.
struct Dropped(mpsc::Sender<()>);
impl Drop for Dropped {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A node that stops drops the futures still running: none outlives it,
/// and the caller is not left to its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_drops_its_running_futures() {
    let server = node();
    let (tx, dropped) = mpsc::channel();
    let tx = Mutex::new(tx);
    server
        .handle_async(move |_ctx: AsyncCtx, _: Ask| {
            let guard = Dropped(tx.lock().unwrap().clone());
            async move {
                let _guard = guard;
                futures::future::pending::<Answer>().await
            }
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let asked = tokio::spawn(
        site.request::<Ask, Answer>(&Ask(1))
            .options(now())
            .timeout(PATIENCE),
    );
    assert!(eventually(|| server.metrics().async_handlers == 1).await);
    let t0 = Instant::now();
    drop(server);
    dropped
        .recv_timeout(PATIENCE)
        .expect("the future is dropped");
    let e = asked.await.unwrap().unwrap_err();
    assert!(matches!(e, RequestError::SiteFailed(_)), "{e}");
    assert!(t0.elapsed() < PATIENCE / 2, "{:?}", t0.elapsed());
}

/// A graceful shutdown lets the running futures answer first (within its
/// deadline), and drops those that outlast it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_running_futures_within_its_deadline() {
    let server = node();
    let open = gate();
    let g = open.clone();
    let (tx, dropped) = mpsc::channel();
    let tx = Mutex::new(tx);
    server
        .handle_async(move |_ctx: AsyncCtx, Ask(n): Ask| {
            let (g, guard) = (g.clone(), Dropped(tx.lock().unwrap().clone()));
            async move {
                let _guard = guard;
                if n == 0 {
                    futures::future::pending::<()>().await; // never answers
                }
                pass(&g).await;
                Answer(n)
            }
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let answered = tokio::spawn(
        site.request::<Ask, Answer>(&Ask(1))
            .options(now())
            .timeout(PATIENCE),
    );
    assert!(eventually(|| server.metrics().async_handlers == 1).await);
    let stopping = {
        let server = server.clone();
        tokio::spawn(async move { server.shutdown(PATIENCE).await })
    };
    // The shutdown waits for it: let it answer now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!stopping.is_finished());
    open.add_permits(1);
    assert_eq!(answered.await.unwrap().unwrap().msg, Answer(1));
    stopping.await.unwrap();
    dropped.recv_timeout(PATIENCE).unwrap();

    // One that never answers is dropped at the deadline.
    let server = node();
    let g = open.clone();
    let (tx, dropped) = mpsc::channel();
    let tx = Mutex::new(tx);
    server
        .handle_async(move |_ctx: AsyncCtx, Ask(_): Ask| {
            let (_g, guard) = (g.clone(), Dropped(tx.lock().unwrap().clone()));
            async move {
                let _guard = guard;
                futures::future::pending::<Answer>().await
            }
        })
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    let asked = tokio::spawn(
        site.request::<Ask, Answer>(&Ask(0))
            .options(now())
            .timeout(PATIENCE),
    );
    assert!(eventually(|| server.metrics().async_handlers == 1).await);
    server.shutdown(Duration::from_millis(200)).await;
    dropped
        .recv_timeout(PATIENCE)
        .expect("dropped at the deadline");
    assert!(asked.await.unwrap().is_err());
}

/// An async handler forwards: the owner (async too) answers the origin
/// directly, a typed error included; a forward that cannot go leaves the
/// request the forwarder's to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handler_forwards_and_the_owner_answers_a_typed_error() {
    let owner = node();
    owner
        .handle_async(|ctx: AsyncCtx, Ask(n): Ask| async move {
            assert!(ctx.forwarded_by().is_some(), "came through the relay");
            if n % 2 == 1 {
                Err(AskError::Odd(n))
            } else {
                Ok(Answer(n * 100))
            }
        })
        .unwrap();
    let relay = node();
    let to_owner = relay.site(addr(&owner)).unwrap();
    relay
        .handle_async(move |ctx: AsyncCtx, Ask(n): Ask| {
            let to_owner = to_owner.clone();
            async move {
                ctx.forward(&to_owner, &Ask(n))
                    .map_err(|_| AskError::TooBig { max: 0 })?;
                // A second forward finds the request answered.
                assert!(ctx.forward(&to_owner, &Ask(n)).is_err());
                Ok::<Option<Answer>, AskError>(None)
            }
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&relay)).unwrap();
    let ask = |n| {
        site.request::<Ask, Answer>(&Ask(n))
            .options(now())
            .timeout(PATIENCE)
            .or_error::<AskError>()
    };
    assert_eq!(ask(2).await.unwrap().map(|r| r.msg), Ok(Answer(200)));
    assert_eq!(ask(3).await.unwrap().err(), Some(AskError::Odd(3)));

    // A forward that cannot be queued (too large for this node): still
    // the relay's request, answered with its output.
    let small = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_message_size = 64 * 1024)
        .start()
        .unwrap();
    let to_owner = small.site(addr(&owner)).unwrap();
    small
        .handle_async(move |ctx: AsyncCtx, Ask(n): Ask| {
            let to_owner = to_owner.clone();
            async move {
                let e = ctx.forward(&to_owner, &Big("x".repeat(1 << 20)));
                assert!(matches!(e, Err(SendError::TooLarge { .. })), "{e:?}");
                Answer(n + 1)
            }
        })
        .unwrap();
    let site = client.site(addr(&small)).unwrap();
    let r = site
        .request::<Ask, Answer>(&Ask(4))
        .options(now())
        .timeout(PATIENCE)
        .await;
    assert_eq!(r.unwrap().msg, Answer(5));
}

/// `handle_mut`: state that is `Send` but not `Sync` (a `Cell`, a
/// `RefCell`), owned by the handler, no `Arc<Mutex<…>>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_without_sync_keeps_its_state() {
    let server = node();
    let calls = Cell::new(0u64);
    let seen = RefCell::new(Vec::new());
    server
        .handle_mut(move |ctx, Ask(n): Ask| {
            calls.set(calls.get() + 1);
            seen.borrow_mut().push(n);
            let _ = ctx.reply(&Answer(
                calls.get() * 1000 + seen.borrow().iter().sum::<u64>(),
            ));
        })
        .unwrap();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let mut got = Vec::new();
    for n in 1..=3 {
        let r = site
            .request::<Ask, Answer>(&Ask(n))
            .options(now())
            .timeout(PATIENCE)
            .await;
        got.push(r.unwrap().msg.0);
    }
    assert_eq!(got, [1001, 2003, 3006]);
    // One handler per type, as `handle`.
    assert!(server.handle_mut(|_ctx, _: Ask| {}).is_err());
}

/// Handlers of every kind are replaced at run time by the same kind or
/// another: a `handle_mut` counter reloaded as a `handle_result`, then as
/// an async handler, each answering the requests after its replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_of_any_kind_is_replaced_at_run_time() {
    let server = node();
    let client = node();
    let site = client.site(addr(&server)).unwrap();
    let ask = |n| site.request::<Ask, Answer>(&Ask(n)).timeout(PATIENCE);
    let mut count = 0u64;
    server
        .handle_mut(move |ctx, Ask(n): Ask| {
            count += 1;
            let _ = ctx.reply(&Answer(n + count));
        })
        .unwrap();
    assert_eq!(ask(10).await.unwrap().msg, Answer(11));
    assert_eq!(ask(10).await.unwrap().msg, Answer(12));
    // Reloaded, still with state of its own and no Sync.
    let mut count = 100u64;
    assert!(server
        .replace_handler_mut(move |ctx, Ask(n): Ask| {
            count += 1;
            let _ = ctx.reply(&Answer(n + count));
        })
        .unwrap());
    assert_eq!(ask(10).await.unwrap().msg, Answer(111));
    assert!(server
        .replace_handler_result(|_ctx, Ask(n): Ask| Answer(n * 2))
        .unwrap());
    assert_eq!(ask(10).await.unwrap().msg, Answer(20));
    assert!(server
        .replace_handler_async(|_ctx: AsyncCtx, Ask(n): Ask| async move { Answer(n * 3) })
        .unwrap());
    assert_eq!(ask(10).await.unwrap().msg, Answer(30));
}
