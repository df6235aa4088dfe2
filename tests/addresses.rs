//! Several addresses per site: a site reached through its descriptor, or
//! one whose handshake listed all its addresses, talks over the best
//! transport the two share (mem in one process, unix on one host, tcp
//! otherwise), and falls back in that order when an address fails or
//! belongs to someone else.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use sitenet::{Address, Node, NodeError, SiteDescriptor, SiteRef};

/// A Unix socket path of this test run, in the temporary directory.
fn unix_path(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("sitenet-{}-{tag}-{n}.sock", std::process::id()));
    format!("unix:{}", p.display())
}

/// A node listening on tcp, unix and mem at once, serving echo.
fn everywhere(tag: &str) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .listen(unix_path(tag))
        .listen(Address::unique_mem(tag).to_string())
        .configure(services)
        .start()
        .expect("node starts")
}

/// The client's view of `server` in its published statistics.
fn channel_to(client: &Node, server: &Node) -> Option<String> {
    let id = server.id().to_string();
    client
        .stats()
        .per_site
        .into_iter()
        .find(|s| s.site.as_deref() == Some(id.as_str()))
        .and_then(|s| s.channel)
}

async fn transport_used(client: &Node, server: &Node, scheme: &str) -> bool {
    eventually(|| channel_to(client, server).is_some_and(|c| c.starts_with(scheme))).await
}

async fn echo_via(site: &SiteRef) {
    echo(site, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_reaches_a_site_in_the_same_process_over_mem() {
    let server = everywhere("d-mem");
    let d = server.descriptor();
    assert_eq!(d.addresses.len(), 3);
    // The text form is what a user passes around.
    let d: SiteDescriptor = d.to_string().parse().unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site_from_descriptor(&d).unwrap();
    assert_eq!(site.id(), Some(server.id()));
    echo_via(&site).await;
    assert!(
        transport_used(&client, &server, "mem:").await,
        "{:?}",
        channel_to(&client, &server)
    );
    // The same id gives the same site, with the same queues.
    let again = client.site_from_descriptor(&d).unwrap();
    assert_eq!(again.id(), site.id());
    assert_eq!(client.site_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_address_falls_back_to_the_next_transport() {
    let server = everywhere("d-fallback");
    let mut d = server.descriptor();
    // Nobody listens under this name: the mem attempt fails at once.
    d.addresses.retain(|a| !a.starts_with("mem:"));
    d.addresses.push(Address::unique_mem("nobody").to_string());
    let client = Node::builder().start().unwrap();
    let site = client.site_from_descriptor(&d).unwrap();
    echo_via(&site).await;
    assert!(
        transport_used(&client, &server, "unix:").await,
        "{:?}",
        channel_to(&client, &server)
    );
    assert_eq!(client.metrics().perm_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_at_a_claimed_address_is_skipped_not_taken_for_the_site() {
    let server = everywhere("d-liar");
    let other = Node::builder()
        .listen(Address::unique_mem("d-other").to_string())
        .configure(services)
        .start()
        .unwrap();
    let d = SiteDescriptor {
        id: server.id(),
        // The mem address (tried first) is another site's.
        addresses: vec![other.listen_addresses()[0].clone(), addr(&server)],
    };
    let client = Node::builder().start().unwrap();
    let site = client.site_from_descriptor(&d).unwrap();
    echo_via(&site).await;
    assert!(transport_used(&client, &server, "tcp:").await);
    assert_eq!(site.id(), Some(server.id()));
    assert!(site.failure().is_none());
    let known = client
        .stats()
        .per_site
        .into_iter()
        .find(|s| s.site.as_deref() == Some(&*server.id().to_string()))
        .unwrap()
        .addresses;
    assert!(
        !known.contains(&other.listen_addresses()[0]),
        "the other site's address is forgotten: {known:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_learns_its_peers_addresses_and_reopens_over_the_best() {
    let server = everywhere("d-learn");
    let client = Node::builder().start().unwrap();
    // Asked for by its tcp address: the first channel is tcp.
    let site = client.site(addr(&server)).unwrap();
    echo_via(&site).await;
    assert!(transport_used(&client, &server, "tcp:").await);
    // The handshake listed every address; once this channel is gone, the
    // next one is opened in-process.
    client.close_hard(&site);
    assert!(
        eventually(|| client.metrics().channels_closed >= 1).await,
        "the channel closes"
    );
    echo(&site, 2).await;
    assert!(
        transport_used(&client, &server, "mem:").await,
        "{:?}",
        channel_to(&client, &server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_descriptors_are_clear_errors() {
    let server = everywhere("d-bad");
    let client = Node::builder().start().unwrap();
    let mut d = server.descriptor();
    d.addresses.push("carrier-pigeon:coop".into());
    let e = client.site_from_descriptor(&d).unwrap_err();
    assert!(matches!(e, NodeError::Address(_)), "{e}");
    assert!(e.to_string().contains("tcp:HOST:PORT"), "{e}");
    // Its own descriptor is no error: it names the local site.
    let own = client.site_from_descriptor(&client.descriptor()).unwrap();
    assert!(own.is_local());
    let e = "no-at-sign".parse::<SiteDescriptor>().unwrap_err();
    assert!(e.to_string().contains("ID@ADDRESS"), "{e}");
}

/// The user's second descriptor of a site adds its addresses, also while
/// the site's ComObject has not started (its book waits in the site
/// table): a first descriptor naming only a dead address, then
/// one naming the live one, reach the site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_descriptor_adds_addresses_before_the_first_use() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let first = SiteDescriptor {
        id: server.id(),
        addresses: vec![format!("tcp:{dead}")],
    };
    let only_dead = client.site_from_descriptor(&first).unwrap();
    let second = SiteDescriptor {
        id: server.id(),
        addresses: vec![addr(&server)],
    };
    let site = client.site_from_descriptor(&second).unwrap();
    assert_eq!(site, only_dead, "one site");
    let r = site
        .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
            &sitenet::services::Echo { seq: 5 },
        )
        .timeout(std::time::Duration::from_secs(20))
        .await
        .expect("reached at the address the second descriptor gave");
    assert_eq!(r.msg.seq, 5);
}
