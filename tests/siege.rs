//! The hostile-peer suite's siege (issue 17): one node under every attack
//! at once — sockets that never speak, garbage, oversized and truncated
//! frames, wrong versions, malformed messages, readers that never read,
//! partial messages that stall, forwarded requests naming fresh origins,
//! floods of references to unknown sites, strangers claiming the
//! legitimate site's id — while a legitimate site streams numbered
//! messages and request/replies through it. Nothing of the legitimate
//! site's is lost, reordered or delayed into a failure, its channel is never
//! closed, the process's resident memory stays under the bound stated
//! below, and once the attackers go everything they cost is returned.
//!
//! The single attacks, each with its own bound, are in tests/hostile.rs
//! and tests/bad_input.rs; this test is about them together.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sitenet::protocols::frame::{FLAG_FIRST, FLAG_LAST};
use sitenet::protocols::{FrameKind, MessageKind, HEADER_LEN, PROTOCOL_VERSION};

const WHOLE: u8 = FLAG_FIRST | FLAG_LAST;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Message, Node, Runtime, SendOptions};

/// The legitimate site's stream.
const MESSAGES: u64 = 20_000;
/// Sockets that connect and never send a byte, held for the whole siege.
const IDLE_SOCKETS: usize = 100;
/// Readers that ask for echoes with large bodies and never read.
const HOGS: usize = 4;

/// The node's memory settings for the siege: what the attackers can make
/// it hold is bounded by these (plus a ring pair per channel).
const NODE_OUTPUT_BOUND: u64 = 16 << 20;
const REASSEMBLY_BUDGET: u64 = 16 << 20;
/// The stated bound on the process's peak resident memory (the test's own
/// client and attackers included): the two bounds above, rings for a few
/// hundred channels, and the program itself, with room to spare.
const RSS_BOUND: u64 = 96 << 20;

fn tcp(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr.strip_prefix("tcp:").unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Reads until the node closes the connection (or the read times out).
fn until_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            return;
        }
    }
}

/// A frame header on lane 3 for data, 5 for the rest (`flags`:
/// FLAG_FIRST | FLAG_LAST for a whole message).
fn frame_header(kind: FrameKind, flags: u8, payload_len: u32, msg_number: u64) -> [u8; HEADER_LEN] {
    let lane = if kind == FrameKind::Data { 3 } else { 5 };
    raw::frame_header(kind, lane, flags, payload_len, msg_number)
}

/// Runs `attack` in a loop on a thread of its own until `stop` is set.
fn attacker(
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
    attack: impl Fn() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let (stop, rounds) = (stop.clone(), rounds.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            attack();
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// A message carrying site references (a peer's may name sites nobody
/// knows).
#[derive(serde::Serialize, serde::Deserialize)]
struct Peers(Vec<sitenet::SiteRef>);
impl Message for Peers {
    const ID: u32 = 731;
}

#[test]
fn a_node_under_every_attack_at_once_serves_its_legitimate_site() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("siege-server"))
        .configure(|c| {
            services(c);
            c.max_message_size = 1 << 20;
            c.output_bound = 2 << 20;
            c.node_output_bound = NODE_OUTPUT_BOUND;
            c.reassembly_budget = REASSEMBLY_BUDGET;
            c.reassembly_idle = Duration::from_secs(1);
            c.unreachable_give_up = Duration::from_secs(1);
            c.linger = Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let sink = Sink::install(&server, MESSAGES, None);
    server.handle(|_ctx, _refs: Peers| {}).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();

    // Sockets that never speak.
    let idle: Vec<TcpStream> = (0..IDLE_SOCKETS).map(|_| tcp(&target)).collect();
    // Garbage instead of a handshake.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut s = tcp(&t);
        let garbage: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
        let _ = s.write_all(&garbage);
        until_closed(&mut s);
    }));
    // A wrong version, an oversized handshake frame, a truncated one.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut h = frame_header(FrameKind::Negotiate, WHOLE, 0, 0);
        h[0] = PROTOCOL_VERSION.wrapping_add(1);
        let mut s = tcp(&t);
        let _ = s.write_all(&h);
        until_closed(&mut s);
        let mut s = tcp(&t);
        let _ = s.write_all(&frame_header(FrameKind::Negotiate, WHOLE, u32::MAX, 0));
        until_closed(&mut s);
        let mut s = tcp(&t);
        let _ = s.write_all(&frame_header(FrameKind::Negotiate, WHOLE, 10, 0)[..20]);
        drop(s);
    }));
    // After a valid handshake: an oversized frame, a continuation with no
    // first fragment.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = raw::RawPeer::connect(&t);
        let _ = p
            .socket
            .write_all(&frame_header(FrameKind::Data, WHOLE, 1 << 30, 1));
        until_closed(&mut p.socket);
        let mut p = raw::RawPeer::connect(&t);
        let mut f = frame_header(FrameKind::Data, FLAG_LAST, 4, 1).to_vec();
        f.extend_from_slice(&[1, 2, 3, 4]);
        let _ = p.socket.write_all(&f);
        until_closed(&mut p.socket);
    }));
    // Malformed messages (a header that is not a `Numbered`), hundreds per
    // connection.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = raw::RawPeer::connect(&t);
        let mut v = Vec::new();
        for _ in 0..500 {
            p.message(
                &mut v,
                Numbered::ID,
                MessageKind::OneWay,
                0,
                b"\xc1\xc1",
                &[],
            );
        }
        let _ = p.socket.write_all(&v);
    }));
    // Partial messages that stall: the first 60 KiB of a 1 MiB message,
    // then nothing (each holds reassembly budget until it is abandoned).
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = raw::RawPeer::connect(&t);
        let prelude = sitenet::protocols::Prelude {
            type_id: Numbered::ID,
            kind: MessageKind::OneWay,
            header_len: 0,
            body_len: 1 << 20,
            corr: 0,
        }
        .encode();
        let payload = 60 * 1024;
        let mut f = frame_header(FrameKind::Data, FLAG_FIRST, payload as u32, 0).to_vec();
        f.extend_from_slice(&prelude);
        f.resize(HEADER_LEN + payload, 0);
        let _ = p.socket.write_all(&f);
        until_closed(&mut p.socket);
    }));
    // Forwarded requests naming fresh origins, at addresses where nothing
    // answers: each forwarder holds at most a few such claims, each tried
    // once.
    let nowhere = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("tcp:{}", l.local_addr().unwrap())
    }; // (closed again: connections there are refused at once)
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = raw::RawPeer::connect(&t);
        let mut v = Vec::new();
        for seq in 0..200u64 {
            let origin = format!(
                "{}@mem:siege-nowhere-{seq},{nowhere}",
                sitenet::protocols::SiteId(rand::random::<u128>())
            );
            let header = rmp_serde::to_vec(&Echo { seq }).unwrap();
            let block = raw::origin_block(&origin, &header);
            p.message(&mut v, Echo::ID, MessageKind::Forward, seq + 1, &block, &[]);
        }
        let _ = p.socket.write_all(&v);
    }));
    // Messages carrying floods of references to sites nobody knows.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = raw::RawPeer::connect(&t);
        let refs: Vec<String> = (0..500)
            .map(|i| {
                format!(
                    "{}@mem:siege-ref-{i}",
                    sitenet::protocols::SiteId(rand::random::<u128>())
                )
            })
            .collect();
        let header = rmp_serde::to_vec(&refs).unwrap();
        p.send(Peers::ID, MessageKind::OneWay, 0, &header, &[]);
    }));
    // Readers that never read, asking for echoes with large bodies.
    let hogs: Vec<_> = (0..HOGS)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || raw::RawPeer::echo_hog(&t))
        })
        .collect();

    // The legitimate site: a numbered stream, with a round trip every 100
    // messages.
    let client = Node::builder()
        .runtime(Runtime::dedicated("siege-client"))
        .start()
        .unwrap();
    let site = client.site(&target).unwrap();
    let forgeries_refused = Arc::new(AtomicU64::new(0));
    let forgeries_accepted = Arc::new(AtomicU64::new(0));
    for seq in 0..MESSAGES {
        site.send_blocking(&Numbered { stream: 0, seq }, SendOptions::default())
            .unwrap();
        if seq % 100 == 0 {
            let r = site
                .request_blocking::<Echo, EchoReply>(
                    &Echo { seq },
                    SendOptions::default(),
                    PATIENCE,
                )
                .expect("the legitimate site is answered");
            assert_eq!(r.msg.seq, seq);
        }
        if seq == 0 {
            // Once the legitimate site has talked: strangers claiming its
            // id, again and again (its id is no secret). Each is refused;
            // none may touch its session.
            let (t, id) = (target.clone(), client.id());
            let (refused, accepted) = (forgeries_refused.clone(), forgeries_accepted.clone());
            attackers.push(attacker(
                &stop,
                &rounds,
                move || match raw::RawPeer::try_connect_as(&t, id, Vec::new()) {
                    Err(sitenet::protocols::OpenError::Refused(_)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                    Ok(_) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                },
            ));
        }
    }
    sink.wait_blocking();
    let attacks = rounds.load(Ordering::Relaxed);
    stop.store(true, Ordering::Release);
    for a in attackers {
        a.join().unwrap();
    }
    let hogs: Vec<_> = hogs.into_iter().map(|h| h.join().unwrap()).collect();

    assert_eq!(sink.total.load(Ordering::Acquire), MESSAGES);
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    let m = client.metrics();
    assert_eq!(
        m.channels_closed, 0,
        "the legitimate channel was never disturbed: {m:?}"
    );
    assert!(attacks > 0, "the attackers ran");
    let forged = forgeries_refused.load(Ordering::Relaxed);
    assert!(forged > 0, "no forged claim was refused");
    assert_eq!(
        forgeries_accepted.load(Ordering::Relaxed),
        0,
        "a stranger was taken for the legitimate site"
    );
    let peak = proc_status_bytes("VmHWM");
    eprintln!(
        "siege: {attacks} attack rounds ({forged} forged claims refused), {IDLE_SOCKETS} idle sockets, {HOGS} hogs; peak RSS {} MiB; server {:?}",
        peak >> 20,
        server.metrics()
    );
    assert!(
        peak <= RSS_BOUND,
        "peak resident memory {} MiB over the stated {} MiB",
        peak >> 20,
        RSS_BOUND >> 20
    );

    // The attackers go: what they cost is returned.
    drop(idle);
    drop(hogs);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(
            eventually(|| server.stats().output_bytes == 0).await,
            "still held for the attackers: {} bytes",
            server.stats().output_bytes
        );
        assert!(
            eventually(|| server.site_count() <= 1).await,
            "{} sites left",
            server.site_count()
        );
    });
    // And the legitimate site is still served.
    let r = site
        .request_blocking::<Echo, EchoReply>(&Echo { seq: 1 }, SendOptions::default(), PATIENCE)
        .unwrap();
    assert_eq!(r.msg.seq, 1);
}
