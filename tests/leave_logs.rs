//! What a node logs when a peer leaves in order (its node's graceful
//! shutdown, a LEAVING frame): news at INFO, not a warning. A stress run of
//! 10,000 clients ending printed a warning per client (two, with the
//! protocol machine's own), burying real faults.
//!
//! One test per binary: it installs a process-wide subscriber.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use sitenet::Node;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// (level, message) of every event.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message));
    }
}

#[test]
fn a_peer_that_shuts_down_in_order_is_logged_as_news_not_as_a_fault() {
    let events = Events::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))
        .unwrap();
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let sink = Sink::install(&server, 1, None);
    block_on(async {
        site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
        sink.wait().await;
    });
    client
        .shutdown_blocking(Duration::from_secs(5))
        .unwrap_or_default();
    assert!(server
        .wait_until_blocking(|m| m.perm_failures >= 1, PATIENCE)
        .unwrap());
    let seen = events.0.lock().unwrap().clone();
    let warned: Vec<_> = seen
        .iter()
        .filter(|(l, m)| *l <= tracing::Level::WARN && m.contains("failed permanently"))
        .collect();
    assert!(
        warned.is_empty(),
        "warnings for an orderly leave: {warned:?}"
    );
    assert!(
        seen.iter()
            .any(|(l, m)| *l == tracing::Level::INFO && m.contains("site left")),
        "the leave is logged at INFO"
    );
}
