//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

pub mod attacks;
pub mod cli;
pub mod counting;
pub mod hostile;
pub mod raw;
pub mod siege;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, Runtime};

/// Generous bound for anything a test awaits: never a speed target.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A numbered message from a stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Numbered {
    pub stream: u32,
    pub seq: u64,
}
impl Message for Numbered {
    const ID: u32 = 100;
}

/// One echo round trip through sitenet's built-in echo service.
pub async fn echo(site: &sitenet::SiteRef, seq: u64) {
    let r = site
        .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
            &sitenet::services::Echo { seq },
        )
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.seq, seq);
}

/// Waits (bounded by [`PATIENCE`]) until `f` holds, re-checking every few
/// milliseconds: for gauges and published statistics, which have no
/// notification of their own.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f()
}

/// A node listening on a free loopback port, serving echo and the sink.
pub fn listening_node() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .start()
        .expect("node starts")
}

pub fn listening_node_on(rt: Runtime) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .runtime(rt)
        .start()
        .expect("node starts")
}

/// Turns on sitenet's own services (echo, sink): off by default.
/// A listening node with the built-in services that gives up on an
/// unreachable site and lingers on an idle channel one second each: what
/// it holds for readers that vanish is released within seconds.
#[allow(dead_code)] // not every test binary uses it
pub fn quick_give_up_node() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.unreachable_give_up = Duration::from_secs(1);
            c.linger = Duration::from_secs(1);
        })
        .start()
        .expect("node starts")
}

pub fn services(c: &mut sitenet::NodeConfig) {
    c.builtin_services = true;
}

pub fn addr(n: &Node) -> String {
    n.listen_addresses()[0].clone()
}

/// A TCP address nobody listens on: a port bound and released at once
/// (connecting to it is refused).
#[allow(dead_code)] // not every test binary uses it
pub fn closed_port_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("tcp:127.0.0.1:{port}")
}

/// A memory figure of this process from /proc/self/status, in bytes
/// (Linux): `"VmRSS"` is what is resident now, `"VmHWM"` its peak.
pub fn proc_status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kb * 1024
}

/// Counts messages per stream and checks they arrive in order; notifies when
/// `expect` messages in total have arrived.
pub struct Sink {
    pub total: AtomicU64,
    pub out_of_order: AtomicU64,
    next: std::sync::Mutex<std::collections::HashMap<u32, u64>>,
    done: tokio::sync::Notify,
    expect: u64,
}

impl Sink {
    pub fn install(node: &Node, expect: u64, body_len: Option<usize>) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            total: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            next: Default::default(),
            done: tokio::sync::Notify::new(),
            expect,
        });
        let s = sink.clone();
        node.handle(move |ctx, m: Numbered| {
            if let Some(len) = body_len {
                assert_eq!(ctx.body().len(), len, "body length");
            }
            let mut next = s.next.lock().unwrap();
            let n = next.entry(m.stream).or_insert(0);
            if m.seq != *n {
                s.out_of_order.fetch_add(1, Ordering::Relaxed);
            }
            *n = m.seq + 1;
            drop(next);
            if s.total.fetch_add(1, Ordering::AcqRel) + 1 == s.expect {
                s.done.notify_one();
            }
        })
        .expect("handler registers");
        sink
    }

    /// Waits until `expect` messages arrived (bounded by [`PATIENCE`]).
    pub async fn wait(&self) {
        let wait = async {
            while self.total.load(Ordering::Acquire) < self.expect {
                let n = self.done.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if self.total.load(Ordering::Acquire) >= self.expect {
                    break;
                }
                n.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {} messages arrived",
                    self.total.load(Ordering::Acquire),
                    self.expect
                )
            });
    }

    pub fn wait_blocking(&self) {
        block_on(self.wait());
    }
}

/// `from` contacts `to` (an echo) and must fail permanently: the reason it
/// reports (a refused member, a refused certificate).
pub async fn failure_reaching(from: &Node, to: &Node) -> String {
    let site = from.site(addr(to)).unwrap();
    let _ = site.send(&sitenet::services::Echo { seq: 1 }).await;
    assert!(
        eventually(|| site.failure().is_some()).await,
        "the site never failed"
    );
    site.failure().unwrap().0.to_string()
}

/// Runs `f` to completion on a runtime of its own, for a test body that is
/// not async (threads of blocking peers) and must await something.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The next node event for which `keep` holds (others are skipped),
/// within [`PATIENCE`].
#[allow(dead_code)] // not every test binary uses it
pub async fn next_matching(
    events: &mut sitenet::NodeEvents,
    keep: impl Fn(&sitenet::NodeEvent) -> bool,
) -> sitenet::NodeEvent {
    use futures::StreamExt;
    tokio::time::timeout(PATIENCE, async {
        loop {
            let ev = events.next().await.expect("the node is alive");
            if keep(&ev) {
                return ev;
            }
        }
    })
    .await
    .expect("the event within the patience")
}
