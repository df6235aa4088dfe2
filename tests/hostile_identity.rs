//! Who a peer is, under attack: a claim on a site's id is answered with the
//! documented refusal (never a bare close a peer cannot tell from a crash),
//! a bound on the pair secrets a node remembers is never a way to forget a
//! confirmed site, and a site that restarts with its certificate is let
//! back in at once.

mod common;

use std::time::Duration;

use common::raw::{self, RawPeer};
use common::*;
use serde::{Deserialize, Serialize};
use sitenet::protocols::{Keyring, OpenError, RefuseReason, SiteId};
use sitenet::{Message, Node};

/// A request the victims below make.
#[derive(Serialize, Deserialize)]
struct Hello(u64);
impl Message for Hello {
    const ID: u32 = 730;
}

/// A server answering [`Hello`].
fn hello_server(configure: impl Fn(&mut sitenet::NodeConfig) + Send + 'static) -> Node {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            configure(c);
        })
        .start()
        .expect("node starts");
    server
        .handle(|ctx, h: Hello| {
            let _ = ctx.reply(&Hello(h.0));
        })
        .unwrap();
    server
}

async fn hello(site: &sitenet::SiteRef, n: u64) -> u64 {
    site.request::<Hello, Hello>(&Hello(n), Duration::from_secs(30))
        .await
        .expect("hello answered")
        .msg
        .0
}

/// Claims `id` at `target` without any proof, as a stranger would: the
/// node's answer (`None`: it closed the channel without one).
async fn forge_claim(target: String, id: SiteId) -> Result<(), Option<OpenError>> {
    tokio::task::spawn_blocking(move || {
        RawPeer::open(
            &target,
            id,
            raw::initiator(id, Vec::new(), Keyring::default()),
            &[],
        )
        .map(drop)
    })
    .await
    .unwrap()
}

/// A claim on the id of a site the node has a confirmed session with,
/// while that site is idle (its entry parked), is refused with `Unproven`
/// on the wire: the answer is written before the channel closes, not lost
/// with the parked actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_claim_on_an_idle_confirmed_site_is_answered_with_a_refusal() {
    let server = hello_server(|_| {});
    let relay = raw::Relay::to(&addr(&server));
    let client = Node::builder().start().unwrap();
    let site = client.site(&relay.address).unwrap();
    assert_eq!(hello(&site, 1).await, 1);
    // The reply is acknowledged: the server owes the client nothing.
    let victim = client.id().to_string();
    assert!(
        eventually(|| server
            .stats()
            .per_site
            .iter()
            .any(|s| s.site.as_deref() == Some(&victim[..])
                && s.messages_sent.iter().sum::<u64>() > 0
                && s.queue_depth == 0))
        .await
    );
    // The client is cut off: the server keeps its session, idle (the
    // client listens nowhere, so nothing calls it back), and parks it.
    let parks = server.metrics().parks;
    relay.cut_and_hold();
    assert!(
        eventually(|| server.metrics().parks > parks).await,
        "{:?}",
        server.metrics()
    );
    let answer = forge_claim(addr(&server), client.id()).await;
    assert!(
        matches!(answer, Err(Some(OpenError::Refused(RefuseReason::Unproven)))),
        "a claim on an idle confirmed site got {answer:?}"
    );
    assert_eq!(server.metrics().unproven_claims_refused, 1);
    // The genuine site, back, is still served.
    relay.release();
    assert_eq!(hello(&site, 2).await, 2);
}

/// A claim on the id of a site that left in order (it wrote LEAVING) is
/// refused with `Closing` on the wire, not closed without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_claim_on_a_site_that_left_is_answered_with_a_refusal() {
    let server = hello_server(|_| {});
    let client = Node::builder().start().unwrap();
    let id = client.id();
    let site = client.site(&addr(&server)).unwrap();
    assert_eq!(hello(&site, 1).await, 1);
    let parks = server.metrics().parks;
    drop(site);
    client.shutdown(Duration::from_secs(10)).await;
    assert!(
        eventually(|| server.metrics().parks > parks).await,
        "{:?}",
        server.metrics()
    );
    let answer = forge_claim(addr(&server), id).await;
    assert!(
        matches!(answer, Err(Some(OpenError::Refused(RefuseReason::Closing)))),
        "a claim on a site that left got {answer:?}"
    );
}
