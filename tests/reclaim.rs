//! What a site that left costs is returned: an entry with no `SiteRef`,
//! nothing queued or unacknowledged and no channel is reclaimed after the
//! linger time, and a site that comes back to a node that forgot it is
//! talked to afresh (docs/protocol.md §3.3, §4.4 "Forgotten sessions").

mod common;

use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig};

fn fast_linger(c: &mut NodeConfig) {
    c.linger = Duration::from_millis(100);
    services(c);
}

/// The site table does not keep a permanent entry for every fresh site id
/// that completed a handshake (5,000 such entries would be 21 MB never
/// returned). Here 200 client sites, each a new incarnation, talk to a
/// server and leave; the server's table empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_that_left_are_reclaimed_after_the_linger_time() {
    const CLIENTS: u64 = 200;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(fast_linger)
        .start()
        .unwrap();
    for i in 0..CLIENTS {
        let client = Node::builder().start().unwrap();
        let site = client.site(addr(&server)).unwrap();
        echo(&site, i).await;
        drop(site);
        let report = client.shutdown(PATIENCE).await;
        assert_eq!(report.unacknowledged_bytes, 0);
    }
    assert!(
        server
            .wait_until(|m| m.sites_reclaimed == CLIENTS, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    assert_eq!(server.site_count(), 0, "every entry returned");
    // The server still serves a newcomer.
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    assert_eq!(server.site_count(), 1);
}

/// A site referenced by a `SiteRef` is never reclaimed: the node that holds
/// it rejects the peer's weak close and keeps its entry, and so does the
/// peer (its channel stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_site_is_kept() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(fast_linger)
        .start()
        .unwrap();
    let client = Node::builder().configure(fast_linger).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    // The server, holding no reference, tries to close weakly; the client
    // rejects. Several linger times pass meanwhile.
    assert!(
        server
            .wait_until(|m| m.weak_closes_rejected >= 2, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    assert_eq!(client.site_count(), 1);
    assert_eq!(server.site_count(), 1);
    assert_eq!(client.metrics().sites_reclaimed, 0);
    assert_eq!(server.metrics().sites_reclaimed, 0);
    echo(&site, 2).await;
}

/// The server forgets a client that still remembers it; the client comes
/// back through the same entry, learns in the handshake that the server is
/// fresh, numbers afresh, and a numbered stream arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_that_forgot_us_is_talked_to_afresh() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(fast_linger)
        .start()
        .unwrap();
    const N: u64 = 2_000;
    let sink = Sink::install(&server, N, None);
    // The client lingers long: it keeps its entry and session.
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..N / 2 {
        site.send(&Numbered { stream: 1, seq }).await.unwrap();
    }
    echo(&site, 1).await;
    drop(site);
    // The server closes weakly (the client, unreferenced, accepts) and
    // then forgets the client.
    assert!(
        server
            .wait_until(|m| m.sites_reclaimed == 1, PATIENCE)
            .await,
        "{:?}",
        server.metrics()
    );
    assert_eq!(server.site_count(), 0);
    assert_eq!(client.site_count(), 1, "the client remembers");
    let site = client.site(addr(&server)).unwrap();
    for seq in N / 2..N {
        site.send(&Numbered { stream: 1, seq }).await.unwrap();
    }
    sink.wait().await;
    echo(&site, 2).await;
    let (mc, ms) = (client.metrics(), server.metrics());
    assert_eq!(mc.peers_forgot, 1, "{mc:?}");
    assert_eq!(mc.handed_back, 0, "everything was acknowledged: {mc:?}");
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        sink.total.load(std::sync::atomic::Ordering::Relaxed),
        N,
        "exactly once"
    );
    assert_eq!(ms.duplicates, 0);
    assert_eq!(ms.protocol_errors + mc.protocol_errors, 0);
}

/// Every ComObject is reclaimable from the moment it exists, even one
/// started but never driven: `prepare()` on a site then dropped, or a site
/// from a descriptor prepared and dropped, leaves no actor behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_prepared_and_dropped_unused_are_reclaimed() {
    let node = Node::builder().configure(fast_linger).start().unwrap();
    for i in 0..50u128 {
        let site = node.site(format!("tcp:127.0.0.1:{}", 1000 + i)).unwrap();
        site.prepare();
        let d = sitenet::SiteDescriptor {
            id: sitenet_protocols::SiteId(0xD00 + i),
            addresses: vec![format!("tcp:127.0.0.1:{}", 2000 + i)],
        };
        let described = node.site_from_descriptor(&d).unwrap();
        described.prepare();
    }
    assert!(
        eventually(|| node.site_count() == 0).await,
        "{} entries never reclaimed",
        node.site_count()
    );
    assert_eq!(node.metrics().sites_reclaimed, 100);
}

/// A request of the test below.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello(u64);
impl sitenet::Message for Hello {
    const ID: u32 = 720;
}

/// A claim on a site's id must prove the pair's continuity to a
/// node that holds a confirmed secret for it. A client that forgot the
/// server (its channel was lost, then its entry reclaimed) while the server
/// kept its entry for the client (it holds the client's `SiteRef`) comes
/// back with the secret it kept (`NodeConfig::remembered_pairs`) and is
/// answered: it is not taken for a stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_forgot_a_site_still_proves_the_pair() {
    use std::sync::{Arc, Mutex};
    let server = listening_node();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    server
        .handle(move |ctx, h: Hello| {
            k.lock().unwrap().push(ctx.sender());
            let _ = ctx.reply(&Hello(h.0));
        })
        .unwrap();
    let relay = common::raw::Relay::to(&addr(&server));
    let client = Node::builder().configure(fast_linger).start().unwrap();
    let hello = |site: sitenet::SiteRef, n: u64| async move {
        site.request::<Hello, Hello>(&Hello(n))
            .timeout(Duration::from_secs(10))
            .await
            .map(|r| r.msg.0)
    };
    let site = client.site(&relay.address).unwrap();
    assert_eq!(hello(site.clone(), 1).await.unwrap(), 1);
    // The channel is lost; the client, holding no reference any more,
    // forgets the server.
    drop(site);
    relay.cut_and_hold();
    assert!(
        client
            .wait_until(|m| m.sites_reclaimed == 1, PATIENCE)
            .await,
        "{:?}",
        client.metrics()
    );
    relay.release();
    let site = client.site(&relay.address).unwrap();
    assert_eq!(hello(site, 2).await.unwrap(), 2);
    assert_eq!(kept.lock().unwrap().len(), 2);
    // At most its first attempt, made before it knew whom the address
    // reaches, was refused.
    assert!(
        server.metrics().unproven_claims_refused <= 1,
        "{:?}",
        server.metrics()
    );
}
