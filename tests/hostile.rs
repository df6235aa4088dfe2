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
