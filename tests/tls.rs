//! The TLS level over real sockets: mutual TLS in which each
//! site's certificate names its site id, driven inside the TransObject. A
//! member can be only the site its certificate names; a certificate from
//! another CA, or an expired one, gets nowhere; a node without a
//! certificate cannot reach a TLS node; a site restarted with its
//! certificate is let back in.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime};

use common::*;
use sitenet::services::Echo;
use sitenet::Node;
use sitenet_protocols::{AuthFailure, ByteBuffer, Cookie, Initiator, LocalInfo, OpenError, SiteId};
use sitenet_transport::tls::certs::{self, CertAndKey, Validity};
use sitenet_transport::tls::TlsIdentity;

fn identity_for(ca: &CertAndKey, site: SiteId, trusted: &str, validity: Validity) -> TlsIdentity {
    let s = certs::new_site(ca, site, &validity).expect("site certificate");
    TlsIdentity::from_pem(&s.cert_pem, &s.key_pem, trusted).expect("identity")
}

/// A site certificate of `ca` for a fresh site, trusting `ca`.
fn identity(ca: &CertAndKey) -> TlsIdentity {
    identity_for(
        ca,
        SiteId(rand::random()),
        &ca.cert_pem,
        Validity::default(),
    )
}

fn server(id: TlsIdentity) -> Node {
    Node::builder()
        .listen("tls:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            c.tls = Some(id);
        })
        .start()
        .expect("node starts")
}

fn client(id: TlsIdentity) -> Node {
    Node::builder()
        .configure(move |c| c.tls = Some(id))
        .start()
        .expect("node starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_certificates_exchange_over_tls() {
    let ca = certs::new_ca().unwrap();
    let (a, b) = (identity(&ca), identity(&ca));
    let (a_id, b_id) = (a.site(), b.site());
    let server = server(b);
    let client = client(a);
    // Each node is the site its certificate names.
    assert_eq!(server.id(), b_id);
    assert_eq!(client.id(), a_id);
    assert!(addr(&server).starts_with("tls:127.0.0.1:"));
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..50 {
        echo(&site, seq).await;
    }
    // Large messages cross TLS whole (fragments, zero-copy receive into
    // their place, many TLS records each).
    let sink = Sink::install(&server, 8, Some(3 << 20));
    for i in 0..8u64 {
        let body = bytes::Bytes::from(vec![i as u8; 3 << 20]);
        let m = Numbered { stream: 0, seq: i };
        site.send(&m).body(body).await.unwrap();
    }
    sink.wait().await;
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(server.site_count(), 1);
    assert_eq!(server.metrics().auth_refused, 0);
}

/// A member (its certificate is good, for site A) claims another member's
/// id (B) in its NEGOTIATE: the acceptor's machine refuses it, and the
/// member B's session with the node is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_claiming_another_members_id_is_refused() {
    let ca = certs::new_ca().unwrap();
    let server = server(identity(&ca));
    let victim = client(identity(&ca));
    let site = victim.site(addr(&server)).unwrap();
    echo(&site, 0).await;
    let mallory = identity(&ca);
    let (target, victim_id) = (addr(&server), victim.id());
    let claim = tokio::task::spawn_blocking(move || claim_over_tls(&target, &mallory, victim_id))
        .await
        .unwrap();
    match claim {
        Err(OpenError::AuthenticationFailed(AuthFailure::Refused)) => {}
        other => panic!("a member claimed another's id: {other:?}"),
    }
    assert!(eventually(|| server.metrics().auth_refused == 1).await);
    echo(&site, 1).await;
    let m = server.metrics();
    assert_eq!(
        m.channels_opened, 1,
        "the victim's channel was never replaced"
    );
    assert_eq!(server.site_count(), 1);
}

/// Runs the initiator's open protocol by hand over TLS with `cert`,
/// claiming to be `claim`.
fn claim_over_tls(target: &str, cert: &TlsIdentity, claim: SiteId) -> Result<(), OpenError> {
    let sock = TcpStream::connect(target.strip_prefix("tls:").unwrap()).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let name = "any.site.sitenet".try_into().unwrap();
    let conn = rustls::ClientConnection::new(cert.client_config(), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, sock);
    let local = LocalInfo {
        site: claim,
        listen: vec![],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    };
    let mut hs = Initiator::new(local, None, 0, 0, rand::random());
    let mut inb = ByteBuffer::new(65_536);
    let mut outb = ByteBuffer::new(65_536);
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "the node closed the channel during the handshake");
        inb.push(&buf[..n]);
        let done = hs.handle_input(&mut inb, &mut outb)?;
        let (a, b) = outb.chunks();
        s.write_all(&[a, b].concat()).unwrap();
        s.flush().unwrap();
        outb.clear();
        if done.is_some() {
            return Ok(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_a_foreign_ca_is_refused() {
    let ca = certs::new_ca().unwrap();
    let foreign = certs::new_ca().unwrap();
    let server = server(identity(&ca));
    // Trusting only its own CA, it refuses the node's certificate.
    let stranger = client(identity(&foreign));
    let why = failure_reaching(&stranger, &server).await;
    assert!(why.contains("TLS refused"), "{why}");
    // Trusting the node's CA too, its own certificate is refused by the
    // node.
    let both = format!("{}{}", foreign.cert_pem, ca.cert_pem);
    let id = identity_for(&foreign, SiteId(rand::random()), &both, Validity::default());
    let stranger = client(id);
    let why = failure_reaching(&stranger, &server).await;
    assert!(why.contains("TLS refused"), "{why}");
    assert!(eventually(|| server.metrics().auth_refused >= 2).await);
    assert_eq!(server.site_count(), 0, "nothing allocated for them");
    assert_eq!(server.metrics().channels_opened, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused() {
    let ca = certs::new_ca().unwrap();
    let server = server(identity(&ca));
    let day = Duration::from_secs(24 * 3600);
    let expired = Validity {
        not_before: SystemTime::now() - 30 * day,
        not_after: SystemTime::now() - day,
    };
    let id = identity_for(&ca, SiteId(rand::random()), &ca.cert_pem, expired);
    let late = client(id);
    let why = failure_reaching(&late, &server).await;
    assert!(why.contains("TLS refused"), "{why}");
    assert!(eventually(|| server.metrics().auth_refused >= 1).await);
    assert_eq!(server.site_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_certificate_cannot_reach_a_tls_node() {
    let ca = certs::new_ca().unwrap();
    let server = server(identity(&ca));
    let plain = Node::builder().start().unwrap();
    // At its tls: address: it knows at once that it cannot.
    let why = failure_reaching(&plain, &server).await;
    assert!(why.contains("holds no certificate"), "{why}");
    // At the same port as plain TCP: it waits for a PRESENT that never
    // comes while the node waits for a TLS hello; the node closes the
    // silent channel (NodeConfig::handshake_silence), having allocated
    // nothing for it.
    let port = addr(&server).rsplit(':').next().unwrap().to_string();
    let site = plain.site(format!("tcp:127.0.0.1:{port}")).unwrap();
    let _ = site.send(&Echo { seq: 1 }).try_now();
    assert!(eventually(|| server.metrics().handshakes_silent >= 1).await);
    assert_eq!(server.site_count(), 0);
    assert_eq!(server.metrics().channels_opened, 0);
    // And a node with a certificate listens on nothing else.
    let e = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(move |c| c.tls = Some(identity(&ca)))
        .start()
        .unwrap_err();
    assert!(e.to_string().contains("listens only on tls:"), "{e}");
}

/// A node takes its id from its certificate, so a restart keeps it but
/// not the pair's secret: its certificate proves it is that site, and the
/// peer lets it back in. (Without TLS the same claim is refused as a
/// possible forgery: tests/hostile/peers.rs,
/// `a_forged_claim_on_a_client_in_backoff_breaks_nothing`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_restarted_with_its_certificate_is_let_back_in() {
    let ca = certs::new_ca().unwrap();
    let server = server(identity(&ca));
    let a = identity(&ca);
    let a_id = a.site();
    let faults = sitenet_transport::FaultInjector::new(18);
    let f = faults.clone();
    let first = Node::builder()
        .configure(move |c| {
            c.tls = Some(a.clone());
            c.fault_injector = Some(f);
        })
        .start()
        .unwrap();
    let site = first.site(addr(&server)).unwrap();
    // Two round trips: the server has heard from us on the channel, so
    // it holds the pair's secret as confirmed.
    echo(&site, 0).await;
    echo(&site, 1).await;
    // The process dies: nothing more reaches the server (no CLOSE), the
    // socket goes.
    faults.set_blackhole(true);
    first.shutdown(Duration::from_millis(100)).await;
    drop(site);
    drop(first);
    let again = client(identity_again(&ca, a_id));
    assert_eq!(again.id(), a_id);
    let site = again.site(addr(&server)).unwrap();
    tokio::time::timeout(PATIENCE, echo(&site, 2))
        .await
        .expect("the restarted site is let back in");
    assert_eq!(server.metrics().unproven_claims_refused, 0);
}

/// The same site's certificate, made again (a restart may be given a
/// renewed certificate; the id is what counts).
fn identity_again(ca: &CertAndKey, site: SiteId) -> TlsIdentity {
    identity_for(ca, site, &ca.cert_pem, Validity::default())
}

/// Cookie and TLS combine: a member with a good certificate but without
/// the cookie is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_cookie_combine() {
    let ca = certs::new_ca().unwrap();
    let cookie = Cookie::new([5; 32]);
    let b = identity(&ca);
    let c2 = cookie.clone();
    let server = Node::builder()
        .listen("tls:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            c.tls = Some(b);
            c.cookies = vec![c2];
        })
        .start()
        .unwrap();
    let a = identity(&ca);
    let member = Node::builder()
        .configure(move |c| {
            c.tls = Some(a);
            c.cookies = vec![cookie];
        })
        .start()
        .unwrap();
    let site = member.site(addr(&server)).unwrap();
    echo(&site, 0).await;
    let no_cookie = client(identity(&ca));
    let why = failure_reaching(&no_cookie, &server).await;
    assert!(why.contains("authentication failed"), "{why}");
}

/// Half-open connections (Erlang's TLS distribution once stopped accepting
/// under them): idle sockets and stalled TLS hellos at a `tls:` address.
/// The TLS handshake runs inside the node's pending handshake, so the same
/// caps hold it: the oldest silent socket makes room, and a member still
/// gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_do_not_stop_a_tls_node_accepting() {
    let ca = certs::new_ca().unwrap();
    let b = identity(&ca);
    let server = Node::builder()
        .listen("tls:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            c.tls = Some(b);
            c.max_pending_handshakes = 20;
            // Long: the caps, not the clock, must keep the node open.
            c.handshake_silence = Duration::from_secs(60);
            c.handshake_timeout = Duration::from_secs(60);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let hostport = target.strip_prefix("tls:").unwrap().to_string();
    let held = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for i in 0..100 {
            let mut s = TcpStream::connect(&hostport).unwrap();
            if i % 40 == 0 {
                // A TLS record header, then nothing: a stalled hello.
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
            }
            held.push(s);
        }
        held
    })
    .await
    .unwrap();
    let member = client(identity(&ca));
    let site = member.site(&target).unwrap();
    tokio::time::timeout(PATIENCE, echo(&site, 0))
        .await
        .expect("a member gets in past 100 half-open connections");
    let m = server.metrics();
    assert!(m.handshakes_pending_peak <= 20, "{m:?}");
    assert_eq!(server.site_count(), 1);
    drop(held);
}

/// Review finding: a node without a certificate could listen on a `tls:`
/// address. It ran no TLS there while advertising `tls:`, so every member
/// dialing it failed, and nothing said why. Now a configuration error.
#[test]
fn a_tls_listen_address_needs_a_certificate() {
    let e = Node::builder()
        .listen("tls:127.0.0.1:0")
        .start()
        .unwrap_err();
    assert!(e.to_string().contains("needs a certificate"), "{e}");
}
