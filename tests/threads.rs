//! Threads: nodes start from any context, handles are Send + Sync + Clone,
//! dropping a node never blocks, and many nodes share one runtime.

mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::Node;

fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

#[test]
fn handles_are_send_sync_clone() {
    assert_send_sync_clone::<Node>();
    assert_send_sync_clone::<sitenet::SiteRef>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_from_several_workers_then_drop_inside_async_code() {
    const WORKERS: u32 = 4;
    const PER: u64 = 2_000;
    let server = listening_node();
    let sink = Sink::install(&server, WORKERS as u64 * PER, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let tasks: Vec<_> = (0..WORKERS)
        .map(|stream| {
            let site = site.clone();
            tokio::spawn(async move {
                for seq in 0..PER {
                    site.send(&Numbered { stream, seq }).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    sink.wait().await;
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // Dropping inside async code must neither block nor panic.
    drop(site);
    drop(client);
    let r = server.shutdown(Duration::from_secs(5)).await;
    assert_eq!(r.unacknowledged_bytes, 0);
    drop(server);
}

#[actix_rt::test]
async fn a_node_starts_inside_an_actix_system() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 5 })
        .body(vec![1u8, 2, 3])
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.seq, 5);
    assert_eq!(&r.body[..], &[1, 2, 3]);
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// 1,000 nodes in one process, connecting out only, share one runtime: the
/// process does not start a thread per node.
#[test]
fn a_thousand_nodes_share_one_runtime() {
    const NODES: usize = 1000;
    let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
    let want = (4 * NODES as u64 + 256).min(hard);
    if soft < want {
        rlimit::Resource::NOFILE.set(want, hard).unwrap();
    }
    let server = listening_node();
    let target = addr(&server);
    let before = thread_count();
    let nodes: Vec<Node> = (0..NODES)
        .map(|_| Node::builder().start().unwrap())
        .collect();
    block_on(async {
        let mut tasks = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let site = n.site(&target).unwrap();
            tasks.push(async move {
                site.request::<Echo, EchoReply>(&Echo { seq: i as u64 })
                    .timeout(PATIENCE)
                    .await
            });
        }
        let results = futures::future::join_all(tasks).await;
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap().msg.seq, i as u64);
        }
    });
    let after = thread_count();
    assert_eq!(server.site_count(), NODES);
    assert!(
        after < before + 16,
        "{NODES} nodes started {} threads",
        after - before
    );
    drop(nodes);
}

/// A node's sites are spread over the threads of its runtime
/// (`NodeBuilder::threads`), and what one client sends still arrives in
/// its order: each site's session and handlers stay on one thread.
#[test]
fn a_nodes_sites_spread_over_its_threads_in_order() {
    const CLIENTS: u32 = 4;
    const PER: u64 = 500;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .threads(2)
        .start()
        .unwrap();
    assert_eq!(server.runtime().threads(), 2);
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let sink = Sink::install(&server, u64::from(CLIENTS) * PER, None);
    let probe = seen.clone();
    server
        .handle(move |_ctx, _: Probe| {
            probe.lock().unwrap().insert(std::thread::current().id());
        })
        .unwrap();
    let clients: Vec<Node> = (0..CLIENTS)
        .map(|_| Node::builder().threads(2).start().unwrap())
        .collect();
    block_on(async {
        let tasks = clients.iter().enumerate().map(|(i, c)| {
            let site = c.site(addr(&server)).unwrap();
            async move {
                for seq in 0..PER {
                    site.send(&Numbered {
                        stream: i as u32,
                        seq,
                    })
                    .await
                    .unwrap();
                }
                site.send(&Probe).await.unwrap();
            }
        });
        futures::future::join_all(tasks).await;
        sink.wait().await;
    });
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    assert!(server
        .wait_until_blocking(
            |m| m.messages_delivered >= u64::from(CLIENTS) * (PER + 1),
            PATIENCE
        )
        .unwrap());
    // Four client sites on the server: keys 0..4 over two threads.
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "handlers ran on both threads"
    );
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Probe;
impl sitenet::Message for Probe {
    const ID: u32 = 4_321;
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Bump;
impl sitenet::Message for Bump {
    const ID: u32 = 4_322;
}

/// A `handle_mut` handler called by sites on two threads at once takes
/// turns: a call that finds it busy waits, and is not failed as a
/// re-entry.
#[test]
fn a_mut_handler_takes_turns_across_threads() {
    const CLIENTS: usize = 4;
    const PER: u64 = 200;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .threads(2)
        .start()
        .unwrap();
    let mut count = 0u64;
    server
        .handle_mut(move |ctx, _: Bump| {
            count += 1;
            // Widen the window in which another thread may call it.
            for _ in 0..8 {
                std::thread::yield_now();
            }
            let _ = ctx.reply(&EchoReply { seq: count });
        })
        .unwrap();
    let clients: Vec<Node> = (0..CLIENTS)
        .map(|_| Node::builder().threads(2).start().unwrap())
        .collect();
    let answers = block_on(async {
        let tasks = clients.iter().map(|c| {
            let site = c.site(addr(&server)).unwrap();
            async move {
                let asks =
                    (0..PER).map(|_| site.request::<Bump, EchoReply>(&Bump).timeout(PATIENCE));
                futures::future::join_all(asks).await
            }
        });
        futures::future::join_all(tasks).await
    });
    let mut counts: Vec<u64> = answers
        .into_iter()
        .flatten()
        .map(|r| r.expect("no call fails as a re-entry").msg.seq)
        .collect();
    counts.sort_unstable();
    let all: Vec<u64> = (1..=CLIENTS as u64 * PER).collect();
    assert_eq!(counts, all, "each call saw the state the previous left");
}

/// A runtime's threads, its sites' placement and its blocking
/// check.
#[test]
fn a_runtime_pool_spreads_nodes_and_sites() {
    let rt = sitenet::Runtime::pool("pool-test", 3);
    assert_eq!(rt.threads(), 3);
    assert!(!rt.is_current_thread());
    let ids: Vec<_> = (0..3)
        .map(|k| {
            let (tx, rx) = std::sync::mpsc::channel();
            let r = rt.clone();
            assert!(rt.arbiter_for(k).spawn(async move {
                tx.send((std::thread::current().id(), r.is_current_thread()))
                    .unwrap();
            }));
            rx.recv().unwrap()
        })
        .collect();
    assert!(ids.iter().all(|(_, on_pool)| *on_pool));
    let distinct: HashSet<_> = ids.iter().map(|(t, _)| *t).collect();
    assert_eq!(distinct.len(), 3, "keys 0..3 on three threads");
    // Nodes made on the pool take its threads as homes in turn.
    let homes: HashSet<_> = (0..3)
        .map(|_| {
            let (tx, rx) = std::sync::mpsc::channel();
            rt.spread().spawn(async move {
                tx.send(std::thread::current().id()).unwrap();
            });
            rx.recv().unwrap()
        })
        .collect();
    assert_eq!(homes.len(), 3);
    // One process-wide pool per size.
    let a = sitenet::Runtime::shared_with_threads(3);
    let b = sitenet::Runtime::shared_with_threads(3);
    let on = |rt: &sitenet::Runtime| {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.arbiter_for(0)
            .spawn(async move { tx.send(std::thread::current().id()).unwrap() });
        rx.recv().unwrap()
    };
    assert_eq!(on(&a), on(&b));
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    client: u32,
}
impl sitenet::Message for Hello {
    const ID: u32 = 4_323;
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Back;
impl sitenet::Message for Back {
    const ID: u32 = 4_324;
}

/// A site first met on an in-process channel runs on the thread
/// that connected it, so both ends of the pair share a thread and talk
/// without waking another. Each of six clients, on nodes spread over a
/// three-thread pool, says hello; the server's handler (on the server's
/// site for that client) records its thread and answers; the client's
/// handler (on its site for the server, the thread that connected)
/// records its own. Placed by key instead, the server's sites would cycle
/// over the threads out of step with the clients'.
#[test]
fn a_site_met_on_an_in_process_channel_runs_on_the_thread_that_connected() {
    const CLIENTS: u32 = 6;
    let rt = sitenet::Runtime::pool("colocate", 3);
    let server = Node::builder()
        .runtime(rt.clone())
        .listen(sitenet::Address::unique_mem("colocate").to_string())
        .start()
        .unwrap();
    type Seen = Arc<Mutex<Vec<(u32, std::thread::ThreadId)>>>;
    let at_server: Seen = Arc::default();
    let seen = at_server.clone();
    server
        .handle(move |ctx, m: Hello| {
            seen.lock()
                .unwrap()
                .push((m.client, std::thread::current().id()));
            ctx.sender().send(&Back).try_now().unwrap();
        })
        .unwrap();
    let at_client: Seen = Arc::default();
    let clients: Vec<Node> = (0..CLIENTS)
        .map(|i| {
            let node = Node::builder().runtime(rt.clone()).start().unwrap();
            let seen = at_client.clone();
            node.handle(move |_ctx, _: Back| {
                seen.lock().unwrap().push((i, std::thread::current().id()));
            })
            .unwrap();
            node
        })
        .collect();
    block_on(async {
        for (i, c) in clients.iter().enumerate() {
            let site = c.site(addr(&server)).unwrap();
            site.send(&Hello { client: i as u32 }).await.unwrap();
        }
    });
    for c in &clients {
        assert!(c
            .wait_until_blocking(|m| m.messages_delivered >= 1, PATIENCE)
            .unwrap());
    }
    let mut s = at_server.lock().unwrap().clone();
    let mut c = at_client.lock().unwrap().clone();
    s.sort_by_key(|e| e.0);
    c.sort_by_key(|e| e.0);
    assert_eq!(s.len(), CLIENTS as usize);
    assert_eq!(s, c, "each pair on one thread (client, thread)");
    let threads: HashSet<_> = s.iter().map(|e| e.1).collect();
    assert!(threads.len() > 1, "the pairs spread over the pool");
}
