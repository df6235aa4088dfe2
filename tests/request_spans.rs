//! Tracing spans across a request's hops: the caller's
//! `sitenet.request` span and the `sitenet.handle` span of every site the
//! request passes carry the same `request` id (origin/correlation id), so
//! one id follows a request through a cluster's logs.
//!
//! One test per binary: it installs a process-wide subscriber.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, RequestId};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

#[derive(Debug, Serialize, Deserialize)]
struct Lookup(u32);
impl Message for Lookup {
    const ID: u32 = 4_100;
}

#[derive(Debug, Serialize, Deserialize)]
struct Found(u32);
impl Message for Found {
    const ID: u32 = 4_101;
}

/// A span's fields, as (name, value).
type FieldList = Vec<(String, String)>;

/// (span name, its fields) for every span opened.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, FieldList)>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: Context<'_, S>,
    ) {
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_string(), fields));
    }
}

impl Spans {
    /// The `request` field of each span called `name`, with its `hop`.
    fn of(&self, name: &str) -> Vec<(String, Option<String>)> {
        let get = |f: &[(String, String)], k: &str| {
            f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| (get(f, "request").unwrap_or_default(), get(f, "hop")))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_carries_one_id_through_every_hop() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(
        spans
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    // A asks B; B forwards to C; C answers A directly.
    let (b, c) = (listening_node(), listening_node());
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = ids.clone();
    c.handle(move |ctx, Lookup(n): Lookup| {
        seen.lock().unwrap().push(ctx.request_id());
        let _ = ctx.reply(&Found(n * 2));
    })
    .unwrap();
    let to_c = b.site(addr(&c)).unwrap();
    b.handle(move |ctx, l: Lookup| {
        let _ = ctx.forward(&to_c, &l);
    })
    .unwrap();
    let a = listening_node();
    let to_b = a.site(addr(&b)).unwrap();
    let r = to_b
        .request::<Lookup, Found>(&Lookup(21))
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.0, 42);

    let asked = spans.of("sitenet.request");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let id = asked[0].0.clone();
    assert!(id.starts_with(&format!("{}/", a.id())), "{id}");
    // B's and C's handle spans carry the caller's id: direct at B,
    // forwarded at C.
    let mut handled = spans.of("sitenet.handle");
    handled.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        handled,
        vec![
            (id.clone(), Some("direct".to_string())),
            (id.clone(), Some("forwarded".to_string())),
        ]
    );
    // And the handler can read it (to log it, or to pass it on).
    let at_c = ids.lock().unwrap()[0].expect("a request with a known origin");
    assert_eq!(at_c.to_string(), id);
    assert_eq!(at_c.origin, a.id());
    let _: RequestId = at_c;
}
