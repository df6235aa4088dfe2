//! Threads: nodes start from any context, handles are Send + Sync + Clone,
//! dropping a node never blocks, and many nodes share one runtime.

mod common;

use std::time::Duration;

use common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, SendOptions};

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
        .request_with::<Echo, EchoReply>(
            &Echo { seq: 5 },
            SendOptions::default().body(vec![1u8, 2, 3]),
            PATIENCE,
        )
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
                site.request::<Echo, EchoReply>(&Echo { seq: i as u64 }, PATIENCE)
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
