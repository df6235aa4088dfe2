//! The cookie level over real sockets: only nodes that
//! hold a shared cookie get past the handshake; a refused peer fails
//! permanently with "authentication failed", and the acceptor counts it
//! and allocates nothing for it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::raw::RawPeer;
use common::*;
use sitenet::Node;
use sitenet_protocols::{AuthFailure, Cookie, Keyring, OpenError, SiteId};

fn cookie(b: u8) -> Cookie {
    Cookie::new([b; 32])
}

/// A listening node with the echo service holding `cookies` (the first
/// proves), on its own slot controller.
fn server(cookies: Vec<Cookie>) -> (Node, sitenet_transport::TransController) {
    use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
    let slots = sitenet_transport::TransController::new(
        SlotConfig::from_fd_limit(1024),
        Box::new(DefaultPolicy::default()),
    );
    let s = slots.clone();
    let node = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            c.cookies = cookies;
            c.trans_controller = Some(s);
        })
        .start()
        .expect("node starts");
    (node, slots)
}

fn client(cookies: Vec<Cookie>) -> Node {
    Node::builder()
        .configure(move |c| c.cookies = cookies)
        .start()
        .expect("node starts")
}

/// `from` contacts `to` and must fail permanently, naming authentication.
async fn refused(from: &Node, to: &Node) -> String {
    let why = failure_reaching(from, to).await;
    assert!(why.contains("authentication failed"), "{why}");
    why
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_the_same_cookie_exchange() {
    let (server, _) = server(vec![cookie(1)]);
    let member = client(vec![cookie(1)]);
    let site = member.site(addr(&server)).unwrap();
    for seq in 0..20 {
        echo(&site, seq).await;
    }
    assert_eq!(server.metrics().auth_refused, 0);
    assert!(site.failure().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_cookie_is_refused_both_ways_and_counted() {
    let (server, _) = server(vec![cookie(1)]);
    let stranger = client(vec![cookie(2)]);
    let why = refused(&stranger, &server).await;
    assert!(why.contains("refused this node's cookie"), "{why}");
    assert!(eventually(|| server.metrics().auth_refused >= 1).await);
    assert_eq!(server.site_count(), 0, "nothing allocated for it");
    // The other direction: the server, holding cookie 1, calls a node
    // holding cookie 2.
    let (other, _) = self::server(vec![cookie(2)]);
    refused(&server, &other).await;
    assert!(eventually(|| other.metrics().auth_refused >= 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cookie_is_refused_both_ways() {
    // The acceptor holds a cookie, the initiator none.
    let (guarded, _) = server(vec![cookie(1)]);
    let open = client(vec![]);
    refused(&open, &guarded).await;
    assert!(eventually(|| guarded.metrics().auth_refused >= 1).await);
    assert_eq!(guarded.site_count(), 0);
    // The initiator holds one, the acceptor none: the acceptor cannot
    // prove itself; both refuse.
    let (open_server, _) = server(vec![]);
    let member = client(vec![cookie(1)]);
    refused(&member, &open_server).await;
    assert!(eventually(|| open_server.metrics().auth_refused >= 1).await);
    assert_eq!(open_server.site_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_cookie_keeps_old_and_new_members_in() {
    // Rotation: the server proves with the new cookie (2) and still
    // accepts the old (1).
    let (server, _) = server(vec![cookie(2), cookie(1)]);
    let old = client(vec![cookie(1)]);
    let new = client(vec![cookie(2)]);
    echo(&old.site(addr(&server)).unwrap(), 1).await;
    echo(&new.site(addr(&server)).unwrap(), 2).await;
    assert_eq!(server.metrics().auth_refused, 0);
    // Once the old cookie is dropped everywhere, a node still holding only
    // it is out.
    let (rotated, _) = self::server(vec![cookie(2)]);
    let late = client(vec![cookie(1)]);
    refused(&late, &rotated).await;
}

/// A flood of raw peers that hold no cookie (or a wrong one): each is
/// refused in the acceptor's handshake, before a site entry, a ComObject
/// or a slot exists for it, while a member keeps exchanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_peers_get_nothing_allocated_while_a_member_exchanges() {
    let (server, slots) = server(vec![cookie(1)]);
    let target = addr(&server);
    let member = client(vec![cookie(1)]);
    let site = member.site(&target).unwrap();
    echo(&site, 0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let echoed = Arc::new(AtomicU64::new(0));
    let exchange = {
        let (stop, echoed) = (stop.clone(), echoed.clone());
        tokio::spawn(async move {
            let mut seq = 1;
            while !stop.load(Ordering::Relaxed) {
                echo(&site, seq).await;
                echoed.fetch_add(1, Ordering::Relaxed);
                seq += 1;
            }
        })
    };
    const N: u64 = 200;
    let flood = tokio::task::spawn_blocking(move || {
        for i in 0..N {
            let keys = if i % 2 == 0 {
                Keyring::default()
            } else {
                Keyring::new(vec![cookie(9)])
            };
            let id = SiteId(rand::random::<u128>());
            match RawPeer::try_connect_keyed(&target, id, vec![], keys) {
                Err(OpenError::AuthenticationFailed(AuthFailure::Refused)) => {}
                Err(e) => panic!("raw peer {i}: {e}"),
                Ok(_) => panic!("raw peer {i} got in without the cookie"),
            }
        }
    });
    flood.await.unwrap();
    assert!(eventually(|| server.metrics().auth_refused == N).await);
    let before = echoed.load(Ordering::Relaxed);
    assert!(eventually(|| echoed.load(Ordering::Relaxed) > before + 5).await);
    stop.store(true, Ordering::Relaxed);
    exchange.await.unwrap();
    let m = server.metrics();
    let s = slots.stats();
    assert_eq!(server.site_count(), 1, "only the member: {m:?}");
    assert_eq!(s.peak_in_use, 1, "only the member's slot: {s:?}");
    assert_eq!(
        m.unproven_claims_refused, 0,
        "no stranger reached a ComObject"
    );
    assert_eq!(m.channels_opened, 1, "{m:?}");
}

/// A non-member that read a connected member's id (the stats service hands
/// ids out) claims it: refused by the cookie, the member's session is
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_claim_on_a_members_id_is_refused() {
    let (server, _) = server(vec![cookie(1)]);
    let target = addr(&server);
    let member = client(vec![cookie(1)]);
    let site = member.site(&target).unwrap();
    echo(&site, 0).await;
    let id = member.id();
    let forged = tokio::task::spawn_blocking(move || {
        RawPeer::try_connect_keyed(&target, id, vec![], Keyring::default()).map(|_| ())
    })
    .await
    .unwrap();
    assert_eq!(
        forged,
        Err(OpenError::AuthenticationFailed(AuthFailure::Refused))
    );
    echo(&site, 1).await;
    let m = server.metrics();
    assert_eq!(m.auth_refused, 1);
    assert_eq!(
        m.channels_opened, 1,
        "the member's channel was never replaced"
    );
    assert_eq!(server.site_count(), 1);
    tokio::time::timeout(Duration::from_secs(60), echo(&site, 2))
        .await
        .expect("the member still exchanges");
}
