//! Who a peer is, under attack: a claim on a site's id is answered with the
//! documented refusal (never a bare close a peer cannot tell from a crash),
//! a bound on the pair secrets a node remembers is never a way to forget a
//! confirmed site, and a site that restarts with its certificate is let
//! back in at once.

use std::time::Duration;

use crate::common::raw::{self, RawPeer};
use crate::common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};
use sitenet_protocols::{Keyring, OpenError, RefuseReason, SiteId};

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
    site.request::<Hello, Hello>(&Hello(n))
        .timeout(Duration::from_secs(30))
        .await
        .expect("hello answered")
        .msg
        .0
}

/// Claims `id` at `server` without any proof, as a stranger would, and
/// checks the node answers with a refusal for `reason` (not a bare close:
/// `None` there is a channel closed without an answer). `what` names the
/// claim in the failure message.
async fn assert_claim_refused(server: &Node, id: SiteId, reason: RefuseReason, what: &str) {
    let target = addr(server);
    let answer = tokio::task::spawn_blocking(move || {
        RawPeer::open(
            &target,
            id,
            raw::initiator(id, Vec::new(), Keyring::default()),
            &[],
        )
        .map(drop)
    })
    .await
    .unwrap();
    assert!(
        matches!(&answer, Err(Some(OpenError::Refused(r))) if *r == reason),
        "{what} got {answer:?}, not a refusal as {reason:?}"
    );
}

/// A claim on the id of a site the node has a confirmed session with,
/// while that site is idle (its entry parked), is refused with `Unproven`
/// on the wire: the answer is written before the channel closes, not lost
/// with the parked actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_an_idle_confirmed_site_is_answered_with_a_refusal() {
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
    assert_claim_refused(
        &server,
        client.id(),
        RefuseReason::Unproven,
        "a claim on an idle confirmed site",
    )
    .await;
    assert_eq!(server.metrics().unproven_claims_refused, 1);
    // The genuine site, back, is still served.
    relay.release();
    assert_eq!(hello(&site, 2).await, 2);
}

/// A claim on the id of a site that left in order (it wrote LEAVING) is
/// refused with `Closing` on the wire, not closed without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_site_that_left_is_answered_with_a_refusal() {
    let server = hello_server(|_| {});
    let client = Node::builder().start().unwrap();
    let id = client.id();
    let site = client.site(addr(&server)).unwrap();
    assert_eq!(hello(&site, 1).await, 1);
    let parks = server.metrics().parks;
    drop(site);
    client.shutdown(Duration::from_secs(10)).await;
    assert!(
        eventually(|| server.metrics().parks > parks).await,
        "{:?}",
        server.metrics()
    );
    assert_claim_refused(
        &server,
        id,
        RefuseReason::Closing,
        "a claim on a site that left",
    )
    .await;
}

/// The node remembers a bounded number of pair secrets after it forgets
/// their sites. Throw-away handshakes — many fresh sites that each talk
/// once and go, from the victim's own address — must not push a
/// confirmed site's secret out of that memory: a stranger then claiming
/// the site's id is refused, and the site itself, back, gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throwaway_pairs_cannot_flush_a_confirmed_sites_secret() {
    const REMEMBERED: usize = 16;
    let fast = |c: &mut sitenet::NodeConfig| {
        c.linger = Duration::from_millis(100);
        c.remembered_pairs = REMEMBERED;
    };
    let server = hello_server(fast);
    let client = Node::builder().configure(fast).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    assert_eq!(hello(&site, 1).await, 1);
    // The client goes idle: both sides forget each other and keep the
    // pair's secret.
    drop(site);
    assert!(
        server
            .wait_until(|m| m.sites_reclaimed == 1, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    // Ten times as many throw-away sites as the memory holds, half of them
    // confirming their pair (they send a message), all from 127.0.0.1.
    let target = addr(&server);
    let throwaways = 10 * REMEMBERED as u64;
    tokio::task::spawn_blocking(move || {
        for i in 0..throwaways {
            let mut p = RawPeer::connect(&target);
            if i % 2 == 0 {
                p.send(731, sitenet_protocols::MessageKind::OneWay, 0, &[0xc0], &[]);
            }
        }
    })
    .await
    .unwrap();
    assert!(
        server
            .wait_until(|m| m.sites_reclaimed > throwaways, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    // A stranger claims the client's id: refused, the secret still held.
    assert_claim_refused(
        &server,
        client.id(),
        RefuseReason::Unproven,
        "a stranger's claim on a confirmed site's id",
    )
    .await;
    // The client, back, proves the pair and is served.
    let site = client.site(addr(&server)).unwrap();
    assert_eq!(hello(&site, 2).await, 2);
}

/// A node takes its id from its TLS certificate, so a restart keeps it. A
/// site that shut down in order (it wrote LEAVING: the node marked it shut
/// down) and starts again with its certificate is let in at once, on a new
/// entry, not refused as `Closing` until the node forgets the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_restarted_with_its_certificate_after_leaving_is_let_in_at_once() {
    use sitenet_transport::tls::certs::{self, Validity};
    use sitenet_transport::tls::TlsIdentity;
    let ca = certs::new_ca().unwrap();
    let identity = |site: SiteId| {
        let s = certs::new_site(&ca, site, &Validity::default()).expect("site certificate");
        TlsIdentity::from_pem(&s.cert_pem, &s.key_pem, &ca.cert_pem).expect("identity")
    };
    let server_id = identity(SiteId(rand::random()));
    // The old entry would be forgotten only after the linger time: longer
    // than the test's patience, so a refusal until then shows.
    let server = Node::builder()
        .listen("tls:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            c.tls = Some(server_id);
            c.linger = 2 * PATIENCE;
        })
        .start()
        .expect("node starts");
    let a = SiteId(rand::random());
    let client = |id: TlsIdentity| {
        Node::builder()
            .configure(move |c| c.tls = Some(id))
            .start()
            .expect("node starts")
    };
    let first = client(identity(a));
    let site = first.site(addr(&server)).unwrap();
    echo(&site, 0).await;
    drop(site);
    let perm = server.metrics().perm_failures;
    first.shutdown(Duration::from_secs(10)).await;
    drop(first);
    assert!(
        server
            .wait_until(|m| m.perm_failures > perm, PATIENCE)
            .await,
        "the server saw the site leave: {:?}",
        server.metrics()
    );
    let again = client(identity(a));
    assert_eq!(again.id(), a);
    let site = again.site(addr(&server)).unwrap();
    tokio::time::timeout(Duration::from_secs(60), echo(&site, 1))
        .await
        .expect("the restarted site is let in at once");
    assert_eq!(server.metrics().unproven_claims_refused, 0);
}
