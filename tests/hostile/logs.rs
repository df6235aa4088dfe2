//! The log lines hostile peers can make a node write: bounded node-wide,
//! not only per peer, however many peers there are, with what was dropped
//! summarised by kind; and a refused non-member shown at the level
//! `sitenet node` writes by default (WARN).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::common::raw::RawPeer;
use crate::common::*;
use parking_lot::Mutex;
use sitenet::services::Echo;
use sitenet::{Message, Node};
use sitenet_protocols::node::log_limit::{LINES_PER_WINDOW, NODE_LINES_PER_WINDOW};
use sitenet_protocols::{Cookie, Keyring, MessageKind, SiteId};

/// The WARN lines written anywhere in this process (each test runs in a
/// process of its own under nextest), each as its fields `name=value`.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// Installs the layer that collects them (once per process).
    fn install() -> Self {
        use tracing_subscriber::layer::SubscriberExt;
        let w = Self::default();
        let subscriber = tracing_subscriber::registry().with(w.clone());
        tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
        w
    }

    fn count(&self) -> u64 {
        self.0.lock().len() as u64
    }

    fn matching(&self, what: &str) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|l| l.contains(what))
            .cloned()
            .collect()
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut f = Fields(String::new());
            event.record(&mut f);
            self.0.lock().push(f.0);
        }
    }
}

/// A server that answers echo and gives up a site it cannot call back
/// after 100 ms (a throw-away site fails permanently at once).
fn giving_up_server(configure: impl FnOnce(&mut sitenet::NodeConfig)) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.unreachable_give_up = Duration::from_millis(100);
            configure(c);
        })
        .start()
        .unwrap()
}

/// Throw-away sites, each new (a fresh id) and each leaving one echo reply
/// unacknowledged, so each fails permanently with a message handed back:
/// one WARN line each, 15,703 from one source in 10 s (5.4 MiB), when the
/// only limit was per peer. The node writes at most its budget per window
/// plus a summary, and counts the rest by kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_sites_cannot_flood_the_log() {
    const SITES: u64 = 300;
    let warnings = Warnings::install();
    let server = giving_up_server(|_| {});
    let target = addr(&server);
    let header = rmp_serde::to_vec(&Echo { seq: 1 }).unwrap();
    let t = target.clone();
    tokio::task::spawn_blocking(move || {
        for _ in 0..SITES {
            let mut p = RawPeer::connect(&t);
            p.send(Echo::ID, MessageKind::Request, 1, &header, b"");
            // The reply is read, never acknowledged; then the site goes.
            p.read_until_data();
        }
    })
    .await
    .unwrap();
    assert!(
        eventually(|| server.metrics().perm_failures >= SITES).await,
        "{:?}",
        server.metrics()
    );
    let written = warnings.matching("message=site failed permanently").len() as u64;
    let all = warnings.count();
    // The attack lasts well under a window here; two windows of budget
    // (and their summaries) leave room for a slow machine.
    let bound = 2 * u64::from(NODE_LINES_PER_WINDOW) + 2;
    assert!(
        all <= bound,
        "{all} warnings ({written} 'site failed permanently') for {SITES} throw-away sites"
    );
    let m = server.metrics();
    assert!(m.logs_suppressed >= SITES - written, "{m:?}");
    // The summary comes (from the timer: no line carries it), saying how
    // many lines of which kind were dropped.
    assert!(
        eventually(|| !warnings.matching("log lines suppressed").is_empty()).await,
        "no summary"
    );
    let summary = warnings.matching("log lines suppressed").remove(0);
    assert!(
        summary.contains("site failed permanently"),
        "the summary names the kind: {summary}"
    );
}

/// A node that refuses a non-member (no cookie, a wrong one) says so at
/// WARN, the level `sitenet node` writes by default, naming the peer's
/// address and the reason; a stream of refusals from one source writes a
/// few lines, not one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_non_member_is_logged_at_the_default_level() {
    const TRIES: u64 = 50;
    let warnings = Warnings::install();
    let server = giving_up_server(|c| c.cookies = vec![Cookie::new([1; 32])]);
    let target = addr(&server);
    tokio::task::spawn_blocking(move || {
        for i in 0..TRIES {
            let keys = if i % 2 == 0 {
                Keyring::default()
            } else {
                Keyring::new(vec![Cookie::new([9; 32])])
            };
            let id = SiteId(rand::random::<u128>());
            assert!(
                RawPeer::try_connect_keyed(&target, id, Vec::new(), keys).is_err(),
                "a non-member was let in"
            );
        }
    })
    .await
    .unwrap();
    assert!(eventually(|| server.metrics().auth_refused >= TRIES).await);
    let refused = warnings.matching("connection refused");
    assert!(!refused.is_empty(), "no WARN line for a refused non-member");
    let line = &refused[0];
    assert!(line.contains("tcp:127.0.0.1:"), "names the address: {line}");
    assert!(
        line.to_lowercase().contains("cookie"),
        "names the reason: {line}"
    );
    assert!(
        refused.len() as u64 <= u64::from(LINES_PER_WINDOW) * 2,
        "{} lines for {TRIES} refusals from one source",
        refused.len()
    );
}
