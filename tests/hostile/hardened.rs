//! Holes a review of the ComObject and the site table looks for, each
//! checked closed over real sockets.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};
use sitenet_protocols::SiteId;

#[derive(Debug, Serialize, Deserialize)]
struct WhoAreYou;
impl Message for WhoAreYou {
    const ID: u32 = 600;
}

#[derive(Debug, Serialize, Deserialize)]
struct IAm {
    id: String,
}
impl Message for IAm {
    const ID: u32 = 601;
}

#[derive(Debug, Serialize, Deserialize)]
struct Blob;
impl Message for Blob {
    const ID: u32 = 602;
}

/// Runs the initiator's open protocol by hand over a blocking socket (see
/// `common::raw`), as a site that lists `listen` (addresses it does not
/// own) and never speaks again. Returns the socket, kept open so the
/// channel stays working.
fn lying_initiator(target: &str, listen: Vec<String>) -> TcpStream {
    raw::RawPeer::connect_as(target, SiteId(rand::random::<u128>()), listen).socket
}

/// A victim node whose request (`WhoAreYou`, a 3 s timeout, in a thread of
/// its own) reached a server that never answers; returned once it arrived,
/// with the server, the victim, the waiting thread and the request's id.
#[allow(clippy::type_complexity)]
fn a_request_never_answered() -> (
    Node,
    Node,
    std::thread::JoinHandle<Result<sitenet::Reply<IAm>, sitenet::RequestError>>,
    (u64, sitenet::Responder),
) {
    let server = listening_node();
    let (corr_tx, corr_rx) = std::sync::mpsc::channel();
    let corr_tx = std::sync::Mutex::new(corr_tx);
    server
        .handle(move |ctx, _: WhoAreYou| {
            // The server keeps the request's responder (the test holds it):
            // the request stays unanswered, not answered "no reply".
            let held = (ctx.correlation_id(), ctx.responder().expect("a request"));
            let _ = corr_tx.lock().unwrap().send(held);
        })
        .unwrap();
    let victim = listening_node();
    let site = victim.site(addr(&server)).unwrap();
    let asking = std::thread::spawn(move || {
        site.request::<WhoAreYou, IAm>(&WhoAreYou)
            .timeout(Duration::from_secs(3))
            .blocking()
    });
    let corr = corr_rx
        .recv_timeout(PATIENCE)
        .expect("request reached the server");
    (server, victim, asking, corr)
}

/// Appends one DATA frame holding a whole `IAm` message of `kind` (a
/// reply of some sort) with request id `corr`, numbered `msg_number`.
fn reply_frame(
    v: &mut Vec<u8>,
    kind: sitenet_protocols::MessageKind,
    corr: u64,
    msg_number: u64,
    header: &[u8],
) {
    use sitenet_protocols::wire::frame::{FrameHeader, FrameKind};
    let mut payload = sitenet_protocols::Prelude {
        type_id: IAm::ID,
        kind,
        header_len: header.len() as u32,
        body_len: 0,
        corr,
    }
    .encode()
    .to_vec();
    payload.extend_from_slice(header);
    let h = FrameHeader::whole(FrameKind::Data, 3, msg_number, payload.len() as u32, 0);
    let mut hb = [0u8; sitenet_protocols::HEADER_LEN];
    h.encode(&mut hb);
    v.extend_from_slice(&hb);
    v.extend_from_slice(&payload);
}

/// Sends what `f` writes into a ring to the socket.
fn send_frames(s: &mut TcpStream, f: impl FnOnce(&mut Vec<u8>)) {
    let mut v = Vec::new();
    f(&mut v);
    s.write_all(&v).unwrap();
}

/// The reassembly budget against a hostile peer: four first fragments
/// announcing the maximum message, then nothing, must not hold the node's
/// whole budget and make a healthy peer's 300 kB messages fail as protocol
/// errors. A peer holds budget only for bytes it sent.
#[test]
fn a_peer_announcing_maximum_messages_does_not_starve_a_healthy_peer() {
    use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, FLAG_FIRST};
    use sitenet_protocols::{MessageKind, Prelude};
    const MAX: u64 = 1 << 20;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            c.max_message_size = MAX;
            c.reassembly_budget = 4 * MAX;
        })
        .start()
        .unwrap();
    let sink = Sink::install(&server, 20, Some(300_000));
    let mut hostile = lying_initiator(&addr(&server), vec![]);
    send_frames(&mut hostile, |v| {
        for lane in 1..=4u8 {
            let p = Prelude {
                type_id: Numbered::ID,
                kind: MessageKind::OneWay,
                header_len: 0,
                body_len: MAX - sitenet_protocols::PRELUDE_LEN as u64,
                corr: 0,
            }
            .encode();
            let h = FrameHeader {
                kind: FrameKind::Data,
                lane,
                flags: FLAG_FIRST,
                payload_len: p.len() as u32,
                ack: 0,
                msg_number: 0,
                frag_offset: 0,
            };
            let mut hb = [0u8; sitenet_protocols::HEADER_LEN];
            h.encode(&mut hb);
            v.extend_from_slice(&hb);
            v.extend_from_slice(&p);
        }
    });
    assert!(server
        .wait_until_blocking(|m| m.channels_opened >= 1, PATIENCE)
        .unwrap());
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..20 {
        site.send(&Numbered { stream: 1, seq })
            .body(vec![5u8; 300_000])
            .blocking()
            .unwrap();
    }
    sink.wait_blocking();
    let m = server.metrics();
    assert_eq!(m.protocol_errors, 0, "the healthy peer was never cut off");
    assert_eq!(client.metrics().channels_opened, 1);
    drop(hostile);
}

/// The site table: an unauthenticated peer that lists the address of
/// another site must not take over the traffic meant for that site. An
/// address is bound to a site only when we connect there ourselves and
/// find it.
#[test]
fn a_peer_listing_another_sites_address_does_not_take_over_its_traffic() {
    let server = listening_node();
    let server_id = server.id().to_string();
    server
        .handle(move |ctx, _: WhoAreYou| {
            let _ = ctx.reply(&IAm {
                id: server_id.clone(),
            });
        })
        .unwrap();
    let victim = listening_node();
    // The liar connects to the victim first, claiming the server's address.
    let _liar = lying_initiator(&addr(&victim), vec![addr(&server)]);
    assert!(
        victim
            .wait_until_blocking(|m| m.channels_opened >= 1, PATIENCE)
            .unwrap(),
        "the liar's channel never worked"
    );
    // The victim now talks to the server by its address: the server answers.
    let site = victim.site(addr(&server)).unwrap();
    let r = site
        .request::<WhoAreYou, IAm>(&WhoAreYou)
        .timeout(Duration::from_secs(20))
        .blocking()
        .expect("the server itself answers");
    assert_eq!(r.msg.id, server.id().to_string());
    assert_eq!(site.id(), Some(server.id()));
}

/// A message bigger than the peer's maximum, queued before the first
/// handshake, is handed back, never sent, with a typed error: resent, the
/// peer would refuse it, the channel close, and it go out first again for
/// ever, holding up the messages behind it.
#[test]
fn a_message_too_large_for_the_peer_queued_before_the_first_handshake_is_handed_back() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_message_size = 64 * 1024)
        .start()
        .unwrap();
    let sink = Sink::install(&server, 1, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    // Both queued before any channel exists: the client does not know the
    // server's maximum yet.
    site.send(&Blob)
        .body(vec![1u8; 200 * 1024])
        .try_now()
        .expect("queued: the peer's maximum is not known yet");
    site.send(&Numbered { stream: 0, seq: 0 })
        .try_now()
        .unwrap();
    sink.wait_blocking();
    assert!(client
        .wait_until_blocking(|m| m.handed_back == 1, PATIENCE)
        .unwrap());
    let back = site.take_refused();
    assert_eq!(back.len(), 1);
    assert!(
        matches!(
            back[0].0,
            sitenet_protocols::Refusal::TooLarge { max: 65_536, .. }
        ),
        "{:?}",
        back[0].0
    );
    assert_eq!(back[0].1.body_len(), 200 * 1024);
    let m = server.metrics();
    assert_eq!(m.protocol_errors, 0, "the server never saw it");
    assert_eq!(client.metrics().channels_opened, 1, "no reconnect loop");
    // Nothing is left held for the site.
    assert!(client
        .wait_until_blocking(|_| site.pending_bytes() == 0, PATIENCE)
        .unwrap());
}

/// A send racing with the site's permanent failure (the sender finds the
/// site not failed yet and queues while the ComObject fails) is handed
/// back, not lost.
#[test]
fn a_send_racing_with_kill_is_handed_back_not_lost() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    {
        // The ComObject is busy: the kill is queued behind it, and the send
        // checks the site before the kill runs.
        let _busy = site.hold_busy();
        client.kill(&site);
        site.send(&Numbered { stream: 7, seq: 0 })
            .try_now()
            .expect("not failed yet when the send checks");
    }
    assert!(client
        .wait_until_blocking(|m| m.perm_failures == 1, PATIENCE)
        .unwrap());
    let (reason, back) = site.failure().expect("failed");
    assert_eq!(reason, sitenet::SiteFailure::Killed);
    assert_eq!(back.not_sent.len(), 1, "the racing send is handed back");
    assert!(back.maybe_delivered.is_empty());
    assert_eq!(site.pending_bytes(), 0);
}

/// A listen list too long for our own PRESENT or NEGOTIATE is refused when
/// the node starts, saying what to change, instead of failing every
/// handshake.
#[test]
fn a_listen_list_too_long_for_the_handshake_is_refused_at_start() {
    let mut b = Node::builder();
    for _ in 0..17 {
        b = b.listen("tcp:127.0.0.1:0");
    }
    match b.start() {
        Err(sitenet::NodeError::Config(e)) => {
            assert!(matches!(e, sitenet::ConfigError::Handshake(_)), "{e:?}");
            assert!(e.to_string().contains("listen"), "{e}")
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    // Sixteen short addresses are fine.
    let mut b = Node::builder();
    for _ in 0..16 {
        b = b.listen("tcp:127.0.0.1:0");
    }
    let n = b.start().expect("16 listen addresses fit");
    assert_eq!(n.listen_addresses().len(), 16);
}

/// A send to an entry being merged (an alias address of a site already
/// known) is neither lost nor overtaken: a merge seals the outbox and moves
/// everything in order, and a racing send follows the redirect after what
/// was moved.
#[test]
fn a_stream_through_an_alias_address_survives_the_merge_in_order() {
    const N: u64 = 20_000;
    let server = listening_node();
    let sink = Sink::install(&server, N + 1, None);
    let client = Node::builder().start().unwrap();
    let port = addr(&server).rsplit(':').next().unwrap().to_string();
    // The site is known by its IP address first …
    let by_ip = client.site(addr(&server)).unwrap();
    by_ip
        .send(&Numbered { stream: 9, seq: 0 })
        .blocking()
        .unwrap();
    assert!(client
        .wait_until_blocking(|m| m.channels_opened >= 1, PATIENCE)
        .unwrap());
    // … then a stream goes to it by a name it does not list: the alias entry
    // opens, finds the known site, and merges while the stream runs.
    let alias = client.site(format!("tcp:localhost:{port}")).unwrap();
    for seq in 0..N {
        alias.send(&Numbered { stream: 1, seq }).blocking().unwrap();
    }
    sink.wait_blocking();
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a message overtook another across the merge"
    );
    assert_eq!(alias.id(), Some(server.id()));
    let report = client.shutdown_blocking(PATIENCE).unwrap();
    assert_eq!(report.unacknowledged_bytes, 0);
}

/// Replies: a third site must not answer (or forge an answer to) a request
/// sent elsewhere. A reply completes only a request sent to its own site,
/// and correlation ids are unpredictable.
#[test]
fn a_reply_from_another_site_does_not_complete_a_request() {
    use sitenet_protocols::MessageKind;
    // The server tells the test the request's id, as a third site that
    // guessed it would know it.
    let (_server, victim, asking, (corr, _held)) = a_request_never_answered();
    // A third site answers with that id.
    let mut forger = lying_initiator(&addr(&victim), vec![]);
    let header = rmp_serde::to_vec(&IAm {
        id: "forged".into(),
    })
    .unwrap();
    send_frames(&mut forger, |v| {
        reply_frame(v, MessageKind::Reply, corr, 1, &header);
    });
    match asking.join().unwrap() {
        Err(sitenet::RequestError::Timeout(_)) => {}
        other => panic!("the forged reply completed the request: {other:?}"),
    }
    assert!(victim.metrics().replies_discarded >= 1);
    drop(forger);
}

/// A delegated reply is accepted from any site (the site
/// a request was forwarded to answers the origin directly), so the request
/// id is all that proves it went through that site. A third site that does
/// not know the id cannot complete the request — not with the ids a
/// counter would give, nor with random ones — and each forgery is
/// discarded and counted.
#[test]
fn a_delegated_reply_with_a_guessed_id_does_not_complete_a_request() {
    use sitenet_protocols::MessageKind;
    let (_server, victim, asking, _held) = a_request_never_answered();
    let mut forger = lying_initiator(&addr(&victim), vec![]);
    let header = rmp_serde::to_vec(&IAm {
        id: "forged".into(),
    })
    .unwrap();
    let guesses: Vec<u64> = (1..=64).chain((0..36).map(|_| rand::random())).collect();
    send_frames(&mut forger, |v| {
        for (i, corr) in guesses.iter().enumerate() {
            reply_frame(v, MessageKind::DelegatedReply, *corr, i as u64 + 1, &header);
        }
    });
    match asking.join().unwrap() {
        Err(sitenet::RequestError::Timeout(_)) => {}
        other => panic!("a forged delegated reply completed the request: {other:?}"),
    }
    assert!(victim
        .wait_until_blocking(|m| m.replies_discarded >= guesses.len() as u64, PATIENCE)
        .unwrap());
    drop(forger);
}

/// Built-in services are opt-in, so no peer can make any node answer
/// echoes and hold sink streams: a default node answers only its user's
/// types.
#[test]
fn a_default_node_serves_no_builtin_services() {
    use sitenet::services::{Echo, EchoReply};
    let plain = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&plain)).unwrap();
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 1 })
        .timeout(Duration::from_secs(20))
        .blocking();
    assert!(
        matches!(r, Err(sitenet::RequestError::NoHandler { .. })),
        "a default node answered an echo: {r:?}"
    );
    assert_eq!(plain.metrics().unhandled, 1);
    // Opted in, it answers.
    let served = listening_node();
    let site = client.site(addr(&served)).unwrap();
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 2 })
        .timeout(Duration::from_secs(20))
        .blocking()
        .unwrap();
    assert_eq!(r.msg.seq, 2);
}

/// A sender waiting for outbox space does not hang after shutdown:
/// shutdown fails every waiter with a typed error.
#[test]
fn a_sender_waiting_for_room_fails_at_shutdown_instead_of_hanging() {
    // A peer that accepts and never answers: nothing is ever acknowledged.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!("tcp:{}", silent.local_addr().unwrap());
    let client = Node::builder()
        .configure(|c| {
            c.max_message_size = 4096;
            c.output_bound = 8192;
        })
        .start()
        .unwrap();
    let site = client.site(&target).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        for seq in 0.. {
            let r = site
                .send(&Numbered { stream: 0, seq })
                .body(vec![0u8; 1000])
                .blocking();
            if r.is_err() {
                let _ = tx.send(r);
                return;
            }
        }
    });
    // The bound is reached within a few sends; then the sender waits.
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the sender should be waiting for room"
    );
    let report = client.shutdown_blocking(Duration::from_millis(10)).unwrap();
    assert!(report.unacknowledged_bytes > 0);
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiting sender returned after shutdown");
    assert_eq!(r, Err(sitenet::SendError::Shutdown));
    sender.join().unwrap();
    drop(silent);
}

/// A `*_blocking` call on the node's own runtime thread would wait for work
/// only that thread can do: it fails at once with a typed error saying
/// what to do instead, not a silent deadlock.
#[test]
fn a_blocking_call_on_the_nodes_own_thread_fails_instead_of_deadlocking() {
    let server = listening_node();
    let node = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(sitenet::Runtime::dedicated("blocking-handler"))
        .start()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let target = addr(&server);
    node.handle(move |ctx, _: WhoAreYou| {
        let site = ctx.node().site(&target).unwrap();
        let sent = site.send(&Numbered { stream: 0, seq: 0 }).blocking();
        let asked = site
            .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
                &sitenet::services::Echo { seq: 1 },
            )
            .timeout(Duration::from_secs(5))
            .blocking();
        // The node-wide blocking calls behave alike (an error, not a
        // panic).
        let waited = ctx
            .node()
            .wait_until_blocking(|_| true, Duration::from_secs(5));
        let shut = ctx
            .node()
            .shutdown_blocking(Duration::from_secs(5))
            .map(|_| ());
        let _ = tx.send((sent, asked.map(|_| ()), waited, shut));
    })
    .unwrap();
    let client = Node::builder().start().unwrap();
    client
        .site(addr(&node))
        .unwrap()
        .send(&WhoAreYou)
        .blocking()
        .unwrap();
    let (sent, asked, waited, shut) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the handler returned: no deadlock");
    assert_eq!(sent, Err(sitenet::SendError::WouldDeadlock));
    assert_eq!(waited, Err(sitenet::WouldDeadlock));
    assert_eq!(shut, Err(sitenet::WouldDeadlock));
    // Refused, not done: the node still runs its handlers.
    client
        .site(addr(&node))
        .unwrap()
        .send(&WhoAreYou)
        .blocking()
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_secs(20)).is_ok());
    assert_eq!(
        asked,
        Err(sitenet::RequestError::Send(
            sitenet::SendError::WouldDeadlock
        ))
    );
}

/// A node started on a borrowed actix arbiter whose system has ended fails
/// sends and requests with a typed error, instead of keeping
/// working-looking handles whose request timers are never armed.
#[test]
fn a_node_whose_borrowed_runtime_stopped_fails_sends_and_requests() {
    let server = listening_node();
    let target = addr(&server);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let sys = actix_rt::System::new();
        let node = sys.block_on(async move {
            Node::builder()
                .runtime(sitenet::Runtime::from_arbiter(actix_rt::Arbiter::current()))
                .start()
                .unwrap()
        });
        // The system ends here, without running again.
        drop(sys);
        tx.send(node).unwrap();
    });
    let node = rx.recv_timeout(PATIENCE).unwrap();
    let site = node.site(&target).unwrap();
    let sent = site.send(&Numbered { stream: 0, seq: 0 }).blocking();
    assert_eq!(sent, Err(sitenet::SendError::RuntimeStopped));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = site
            .request::<sitenet::services::Echo, sitenet::services::EchoReply>(
                &sitenet::services::Echo { seq: 1 },
            )
            .timeout(Duration::from_secs(1))
            .blocking();
        let _ = tx.send(r.map(|_| ()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the request returned");
    assert!(r.is_err(), "{r:?}");
}

/// The accept loop never misses the stop signal, even when it arrives
/// while the loop is busy with an accept (a one-shot notification would be
/// lost then, leaving the listener open and `shutdown` waiting). Here
/// connections pour in while each node shuts down: every shutdown returns,
/// and the port refuses connections afterwards.
#[test]
fn shutdown_closes_the_listener_even_while_it_accepts() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    for _ in 0..8 {
        let node = listening_node();
        let hostport = addr(&node).strip_prefix("tcp:").unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let connects = Arc::new(AtomicU64::new(0));
        let hammer = {
            let (stop, connects, hostport) = (stop.clone(), connects.clone(), hostport.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(s) = TcpStream::connect(&hostport) {
                        held.push(s);
                        connects.fetch_add(1, Ordering::Relaxed);
                    }
                    if held.len() > 64 {
                        held.clear();
                    }
                }
            })
        };
        // The loop is busy accepting when the stop arrives.
        while connects.load(Ordering::Relaxed) < 10 {
            std::thread::yield_now();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let n = node.clone();
        std::thread::spawn(move || {
            let _ = tx.send(n.shutdown_blocking(Duration::from_secs(1)).unwrap());
        });
        rx.recv_timeout(PATIENCE)
            .expect("shutdown returned while connections poured in");
        stop.store(true, Ordering::Relaxed);
        hammer.join().unwrap();
        drop(node);
        // The listener is gone: a connect is refused (retried briefly, as
        // the socket closes when the loop's task ends).
        let refused = (0..200).any(|_| {
            let r = TcpStream::connect(&hostport).is_err();
            if !r {
                std::thread::sleep(Duration::from_millis(10));
            }
            r
        });
        assert!(
            refused,
            "the listener at {hostport} still accepts after shutdown"
        );
    }
}
