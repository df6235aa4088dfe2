//! Node-wide events over real sockets: a site up with
//! its transport, unreachable with its cause, down with a typed reason,
//! a refused peer, messages handed back while their site lives — and a
//! monitor on a site never contacted says so.

mod common;

use common::*;
use futures::StreamExt;
use sitenet::{FaultState, Node, NodeEvent, PeerRefusal, SiteFailure};
use sitenet_protocols::{AuthFailure, Cookie, OpenError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_is_up_with_its_transport_then_down_with_a_typed_reason() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let mut events = client.events();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    let ev = next_matching(&mut events, |_| true).await;
    assert_eq!(
        ev,
        NodeEvent::SiteUp {
            site: server.id(),
            address: Some(addr(&server)),
            transport: "tcp",
        }
    );
    // More traffic on the working channel announces nothing more.
    echo(&site, 2).await;
    assert_eq!(events.try_next(), None);
    // The server shuts down: the client hears it leave, typed.
    server.shutdown(PATIENCE).await;
    let ev = next_matching(&mut events, |e| matches!(e, NodeEvent::SiteDown { .. })).await;
    assert_eq!(
        ev,
        NodeEvent::SiteDown {
            site: Some(server.id()),
            address: Some(addr(&server)),
            reason: SiteFailure::ShutDown,
        }
    );
    // Published last: the failure and what was handed back are on record.
    let (why, _) = site.failure().expect("on record when SiteDown is heard");
    assert_eq!(why, SiteFailure::ShutDown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_makes_the_site_unreachable_and_a_kill_takes_it_down() {
    let address = closed_port_address();
    let client = Node::builder().start().unwrap();
    let mut events = client.events();
    let site = client.site(&address).unwrap();
    site.send(&sitenet::services::Echo { seq: 1 })
        .try_now()
        .unwrap();
    let ev = next_matching(&mut events, |_| true).await;
    let NodeEvent::SiteUnreachable {
        site: None,
        address: Some(a),
        cause,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(a, address);
    assert!(cause.contains("refused"), "{cause}");
    client.kill(&site);
    let ev = next_matching(&mut events, |e| matches!(e, NodeEvent::SiteDown { .. })).await;
    assert!(
        matches!(
            ev,
            NodeEvent::SiteDown {
                site: None,
                reason: SiteFailure::Killed,
                ..
            }
        ),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_the_wrong_cookie_is_refused_and_the_acceptor_says_so() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.cookies = vec![Cookie::new([1; 32])];
        })
        .start()
        .unwrap();
    let mut events = server.events();
    let stranger = Node::builder()
        .configure(|c| c.cookies = vec![Cookie::new([2; 32])])
        .start()
        .unwrap();
    let why = failure_reaching(&stranger, &server).await;
    assert!(why.contains("authentication failed"), "{why}");
    let ev = next_matching(&mut events, |_| true).await;
    let NodeEvent::PeerRefused {
        address,
        reason: PeerRefusal::Handshake(OpenError::AuthenticationFailed(AuthFailure::UnknownKey(_))),
    } = &ev
    else {
        panic!("{ev:?}")
    };
    assert!(address.starts_with("tcp:127.0.0.1:"), "{address}");
}

#[test]
fn a_monitor_on_a_site_never_contacted_says_so() {
    let client = Node::builder().start().unwrap();
    let site = client.site("tcp:127.0.0.1:9").unwrap();
    let mut states = client.monitor(&site);
    let first = block_on(states.next()).unwrap();
    assert_eq!(first.state, FaultState::Ok);
    assert_eq!(first.reason, "not contacted yet");
    // Once a channel has worked, the first event says nothing of it.
    let server = listening_node();
    let reached = client.site(addr(&server)).unwrap();
    block_on(echo(&reached, 1));
    let first = block_on(client.monitor(&reached).next()).unwrap();
    assert_eq!((first.state, first.reason.as_str()), (FaultState::Ok, ""));
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Blob;
impl sitenet::Message for Blob {
    const ID: u32 = 1_100;
}

/// Another layer's message.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Other;
impl sitenet::Message for Other {
    const ID: u32 = 1_101;
}

/// Messages handed back while their site lives (here: larger than the
/// peer's maximum, queued before the client knew it) are told once, with
/// the site, and found with `take_refused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_handed_back_while_its_site_lives_is_told_once_until_taken() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.max_message_size = 64 * 1024
        })
        .start()
        .unwrap();
    let client = Node::builder().start().unwrap();
    let mut events = client.events();
    let site = client.site(addr(&server)).unwrap();
    for _ in 0..2 {
        site.send(&Blob)
            .body(vec![1u8; 200 * 1024])
            .try_now()
            .expect("queued: the peer's maximum is not known yet");
    }
    site.send(&Other)
        .body(vec![1u8; 200 * 1024])
        .try_now()
        .unwrap();
    echo(&site, 1).await;
    let ev = next_matching(&mut events, |e| matches!(e, NodeEvent::HandedBack { .. })).await;
    assert_eq!(
        ev,
        NodeEvent::HandedBack {
            site: Some(server.id()),
            address: Some(addr(&server)),
        }
    );
    assert!(eventually(|| client.metrics().handed_back == 3).await);
    let back = site.take_handed_back_of(1_100);
    assert_eq!(back.len(), 2, "both, told once");
    for (why, m) in &back {
        assert!(matches!(why, sitenet::Refusal::TooLarge { .. }), "{why:?}");
        assert_eq!(m.type_id(), 1_100);
        m.decode::<Blob>().expect("decodes as it was sent");
    }
    let rest = site.take_refused();
    assert_eq!(
        rest.len(),
        1,
        "another type's message is left for its taker"
    );
    assert_eq!(rest[0].1.type_id, 1_101);
    // Known too large now: refused at the send, not handed back.
    assert!(site
        .send(&Blob)
        .body(vec![1u8; 200 * 1024])
        .try_now()
        .is_err());
    assert!(
        !std::iter::from_fn(|| events.try_next())
            .any(|e| matches!(e, NodeEvent::HandedBack { .. })),
        "told once until taken"
    );
}
