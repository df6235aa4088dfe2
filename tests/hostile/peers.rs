//! The hostile-peer suite: what a peer that breaks the rules —
//! on purpose or by bug — may cost a node. Each test states its bound; a
//! legitimate site keeps working beside the attack.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::common;
use crate::common::hostile::{self, trap, Level, Peers};
use crate::common::*;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

/// Counts WARN-level events written anywhere in this process (each test
/// runs in a process of its own under nextest).
struct CountWarnings(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn count_warnings() -> Arc<AtomicU64> {
    use tracing_subscriber::layer::SubscriberExt;
    let n = Arc::new(AtomicU64::new(0));
    let subscriber = tracing_subscriber::registry().with(CountWarnings(n.clone()));
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
    n
}

/// What the server handles under id 700.
#[derive(Serialize, Deserialize)]
struct Expected {
    n: u64,
}
impl Message for Expected {
    const ID: u32 = 700;
}

/// What the bad peer sends under the same id: a header that does not
/// decode as `Expected`.
#[derive(Serialize, Deserialize)]
struct Malformed(String, String, String);
impl Message for Malformed {
    const ID: u32 = 700;
}

/// Malformed messages do not buy a warning line each (unlimited, 53 MiB
/// received would make 534 MiB of stderr): a peer gets a few lines per
/// window; the rest are counted and summarised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_do_not_flood_the_log() {
    let warnings = count_warnings();
    let server = listening_node();
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    server
        .handle(move |_ctx, _m: Expected| {
            h.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    let bad = Node::builder().start().unwrap();
    let site = bad.site(&server.listen_addresses()[0]).unwrap();
    const N: u64 = 2_000;
    for _ in 0..N {
        site.send(&Malformed("a".into(), "b".into(), "c".into()))
            .await
            .unwrap();
    }
    // A good message after them: once it is handled, every bad one was seen.
    site.send(&Expected { n: 1 }).await.unwrap();
    assert!(eventually(|| handled.load(Ordering::Relaxed) == 1).await);
    let m = server.metrics();
    assert_eq!(m.unhandled, N, "each malformed message is counted");
    let written = warnings.load(Ordering::Relaxed);
    assert!(
        written <= 20,
        "{written} warnings for {N} malformed messages from one peer"
    );
    assert!(m.logs_suppressed >= N - written, "{m:?}");
}

/// An accept loop out of file descriptors wrote a warning every 10 ms,
/// for as long as it lasted (a hundred lines a second, unlimited): the
/// errors are counted (`accept_errors`) and their lines limited as a
/// peer's are. The connection waiting meanwhile is accepted once
/// descriptors are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_errors_do_not_flood_the_log() {
    const NOFILE: rlimit::Resource = rlimit::Resource::NOFILE;
    use tokio::io::AsyncReadExt;
    let warnings = count_warnings();
    let server = listening_node();
    let to: std::net::SocketAddr = addr(&server).strip_prefix("tcp:").unwrap().parse().unwrap();
    // The client's descriptor first; then none left in this process (each
    // test runs in a process of its own under nextest).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    let (soft, hard) = rlimit::getrlimit(NOFILE).unwrap();
    let held = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    rlimit::setrlimit(NOFILE, held, hard).unwrap();
    let mut filler = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        filler.push(f);
    }
    let mut stream = socket.connect(to).await.unwrap();
    assert!(eventually(|| server.metrics().accept_errors >= 100).await);
    let m = server.metrics();
    let written = warnings.load(Ordering::Relaxed);
    assert!(
        written <= 10,
        "{written} warnings for {} failed accepts",
        m.accept_errors
    );
    assert!(m.logs_suppressed >= m.accept_errors - written, "{m:?}");
    // Descriptors back: the waiting connection is accepted, and the node
    // speaks first in the open protocol.
    drop(filler);
    rlimit::setrlimit(NOFILE, soft, hard).unwrap();
    let mut first = [0u8; 1];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut first))
        .await
        .expect("the node answers once it can accept")
        .unwrap();
}

/// An accepted channel whose NEGOTIATE breaks the protocol (here: it
/// claims to have received messages this node never sent) writes only the
/// rate-limited fault line, so a peer reconnecting in a loop cannot write
/// one line per handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_negotiates_do_not_flood_the_log() {
    use sitenet_protocols::{ByteBuffer, Initiator, LocalInfo, SiteId};
    use std::io::{Read, Write};
    let warnings = count_warnings();
    let server = listening_node();
    let target = addr(&server);
    const N: u64 = 200;
    let id = SiteId(rand::random::<u128>());
    let peer = std::thread::spawn(move || {
        // The generation and session it claims: 1 and the pair's first at
        // first, then the ones the node's (fresh) answer gave, as an honest
        // initiator would — the node answers fresh until the peer names the
        // session its answer started.
        let mut generation = 1;
        let mut session = 0;
        for _ in 0..N {
            let mut s = std::net::TcpStream::connect(target.strip_prefix("tcp:").unwrap()).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let local = LocalInfo {
                site: id,
                listen: Vec::new(),
                buffer_size: 65_536,
                max_message: 1 << 20,
                speaks: sitenet_protocols::Speaks::CURRENT,
            };
            // Received 5 messages: never sent by the node.
            let mut hs =
                Initiator::new(local, None, 5, generation, rand::random()).with_session(session);
            let (mut inb, mut outb) = (ByteBuffer::new(65_536), ByteBuffer::new(65_536));
            let mut buf = [0u8; 4096];
            // Until the node closes the channel.
            while let Ok(n @ 1..) = s.read(&mut buf) {
                inb.push(&buf[..n]);
                match hs.handle_input(&mut inb, &mut outb) {
                    Err(_) => break,
                    Ok(Some(opened)) => (generation, session) = (opened.generation, opened.session),
                    Ok(None) => {}
                }
                let (a, b) = outb.chunks();
                let _ = s.write_all(&[a, b].concat());
                outb.clear();
            }
        }
    });
    // The first makes the site and is accepted (the node is fresh to it,
    // so the peer's numbering starts again); each later one is refused.
    assert!(
        eventually(|| server.metrics().protocol_errors >= N - 1).await,
        "{:?}",
        server.metrics()
    );
    peer.join().unwrap();
    let written = warnings.load(Ordering::Relaxed);
    assert!(
        written <= 20,
        "{written} warnings for {N} bad handshakes from one peer"
    );
    echo(&server.local_site(), 1).await;
}

/// Sites that handshake, send echo requests with large bodies, never read
/// and then vanish cannot make the node hold their replies without bound
/// or after they have gone: the node's output is bounded across sites with
/// a fair share (a site that reads still gets room), and what is owed to a
/// site that cannot be called back is released after
/// `unreachable_give_up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_owed_to_vanished_readers_are_bounded_and_released() {
    hostile::replies_owed_to_vanished_readers_are_bounded_and_released(&Level::open()).await;
}

/// A short honest run (`sitenet ping`) leaves the server holding no
/// unacknowledged reply: `shutdown` returns only once the site actors have
/// written their final acknowledgement, so a process exiting right after
/// it owes nothing. (The server is
/// given no unreachable give-up here, so only the acknowledgement can free
/// the reply.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_honest_run_leaves_nothing_owed() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.unreachable_give_up = std::time::Duration::from_secs(3600);
        })
        .start()
        .unwrap();
    for round in 0..10 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sitenet"))
            .args(["ping", &addr(&server), "--count", "3", "--json", "--open"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        // The replies were acknowledged before the process exited: the
        // server frees them as soon as it reads that (milliseconds).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while server.stats().output_bytes != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "run {round}: the server still holds {} bytes owed to a client that left",
                server.stats().output_bytes
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// `shutdown` refuses new sends during its wait, as its documentation
/// says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_sends_while_it_waits() {
    // A site nobody answers at: what is queued for it is never
    // acknowledged, so shutdown waits its whole deadline.
    let client = Node::builder().start().unwrap();
    let site = client.site(closed_port_address()).unwrap();
    site.send(&Expected { n: 0 }).try_now().unwrap();
    let c = client.clone();
    let shutting = tokio::spawn(async move { c.shutdown(std::time::Duration::from_secs(3)).await });
    let mut refused = false;
    while !shutting.is_finished() {
        match site.send(&Expected { n: 1 }).try_now() {
            Err(sitenet::SendError::Shutdown) => {
                refused = true;
                break;
            }
            Ok(()) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused,
        "sends were accepted for the whole of shutdown's wait"
    );
    let report = shutting.await.unwrap();
    assert!(report.unacknowledged_bytes > 0);
}

/// Every message accepted for a site that is then given up is in its
/// failure's `not_sent`, including messages still in the outbox at the
/// give-up (not in `take_refused`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_as_a_site_is_given_up_are_in_not_sent() {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Node::builder()
            .configure(|c| c.give_up_after = Some(std::time::Duration::from_millis(100)))
            .start()
            .unwrap();
        let site = client.site(format!("tcp:127.0.0.1:{port}")).unwrap();
        let sender = site.clone();
        let accepted = std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                match sender.send(&Expected { n }).try_now() {
                    Ok(()) => n += 1,
                    Err(sitenet::SendError::QueueFull { .. }) => std::thread::yield_now(),
                    Err(sitenet::SendError::SiteFailed { .. }) => return n,
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .join()
        .unwrap();
        // Sends that raced with the failure are handed back by the actor's
        // next turn: once nothing is held, everything is accounted for.
        assert!(eventually(|| site.pending_bytes() == 0).await);
        let (_, back) = site.failure().expect("given up");
        let refused = site.take_refused();
        assert!(refused.is_empty(), "{} in take_refused", refused.len());
        assert_eq!(
            (back.not_sent.len() + back.maybe_delivered.len()) as u64,
            accepted
        );
    }
}

/// Tracked deliveries fail once the last `Node` handle drops, as they do
/// at `shutdown`: a message sent and not yet acknowledged does not stay in
/// a stopped actor's ledger with its future never resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_node_fails_its_tracked_deliveries() {
    // A server (on a thread of its own) whose handler holds the message,
    // so it is delivered but not acknowledged.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let (got_tx, got_rx) = std::sync::mpsc::channel::<()>();
    let got_tx = std::sync::Mutex::new(got_tx);
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(sitenet::Runtime::dedicated("held-server"))
        .start()
        .unwrap();
    server
        .handle(move |_ctx, _m: Expected| {
            let _ = got_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv_timeout(PATIENCE);
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let delivery = site.send(&Expected { n: 0 }).tracked().try_now().unwrap();
    tokio::task::spawn_blocking(move || got_rx.recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the server holds the message");
    // The last `Node` handle goes; a `SiteRef` (which keeps the node's
    // state, not the node) is still held, as a user's data structure would.
    drop(client);
    let r = tokio::time::timeout(PATIENCE, delivery)
        .await
        .expect("the delivery ends when the node is dropped");
    assert!(matches!(r, Err(sitenet::DeliveryError::Shutdown)), "{r:?}");
    let _ = release_tx.send(());
    drop(site);
}

/// Open descriptors of this process (Linux: entries of /proc/self/fd).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Connects from `source` (any 127.0.0.0/8 address is loopback on Linux:
/// distinct sources without leaving the host) to the node at `target`.
async fn connect_from(
    source: std::net::IpAddr,
    target: std::net::SocketAddr,
) -> std::net::TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(std::net::SocketAddr::new(source, 0)).unwrap();
    let s = s
        .connect(target)
        .await
        .expect("connect")
        .into_std()
        .unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// Idle sockets never cut a node off: an accepted connection holds no
/// channel slot before its handshake and is no slot pressure, so sockets
/// that never speak cannot refuse every inbound peer, block every outbound
/// open or make the default policy preempt working channels.
///
/// Here a server whose slots are those of a 1,024-descriptor process is
/// sent 1,000 connections that never send a byte — 900 from 45 other
/// loopback addresses, 100 from the honest sites' own — and 50 that send
/// half a NEGOTIATE and stall, while a site already connected keeps
/// exchanging echoes, a new one connects and the server opens a channel
/// of its own. Bounds checked: the pending
/// handshakes never exceed the node's cap (120, what a 1,024-descriptor
/// process keeps for them), idle sockets take no channel slot (at most 5 in
/// use: the three honest channels'), the process's descriptors stay within the
/// attack's own plus the cap (+16), and no working channel is preempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_never_cut_a_node_off() {
    use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
    use sitenet_protocols::{ByteBuffer, Initiator, LocalInfo, SiteId};
    use std::io::{Read, Write};
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    const SOURCES: u8 = 45;
    const CAP: usize = 120;
    assert_eq!(
        sitenet_protocols::slots::admission::handshake_fds(1024),
        CAP
    );
    // Both ends of every socket are in this process: the attack is scaled
    // down if the descriptor limit is below what it needs (2 × 1,050 + 512).
    let fds = sitenet_transport::controller::fd_limit() as usize;
    let attack = 1050.min(fds.saturating_sub(512) / 2);
    assert!(
        attack > 2 * CAP,
        "descriptor limit {fds} too low for the test"
    );
    let idle_elsewhere = attack * 900 / 1050;
    let idle_here = attack * 100 / 1050;
    let stalled = attack - idle_elsewhere - idle_here;
    let slots = sitenet_transport::TransController::new(
        SlotConfig::from_fd_limit(1024),
        Box::new(DefaultPolicy::default()),
    );
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.trans_controller = Some(slots.clone());
            // The cap of a 1,024-descriptor process, like its slots.
            c.max_pending_handshakes = CAP;
            // Long: the caps, not the clock, must keep the node open.
            c.handshake_timeout = Duration::from_secs(60);
            c.handshake_silence = Duration::from_secs(60);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let sock: std::net::SocketAddr = target.strip_prefix("tcp:").unwrap().parse().unwrap();

    // An honest site, connected before the attack, keeps echoing through it.
    let first = Node::builder().start().unwrap();
    let working = first.site(&target).unwrap();
    echo(&working, 0).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let echoes = {
        let (working, stop) = (working.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 1;
            while !stop.load(Ordering::Relaxed) {
                echo(&working, n).await;
                n += 1;
            }
            n
        })
    };

    let baseline = open_fds();
    let here = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut held = Vec::with_capacity(attack);
    for i in 0..idle_elsewhere {
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES as usize) as u8));
        held.push(connect_from(source, sock).await);
    }
    for _ in 0..idle_here {
        held.push(connect_from(here, sock).await);
    }
    // Half a NEGOTIATE each, then nothing.
    for _ in 0..stalled {
        let mut s = connect_from(here, sock).await;
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let local = LocalInfo {
            site: SiteId(rand::random::<u128>()),
            listen: Vec::new(),
            buffer_size: 65_536,
            max_message: 1 << 20,
            speaks: sitenet_protocols::Speaks::CURRENT,
        };
        let mut hs = Initiator::new(local, None, 0, 0, rand::random());
        let (mut inb, mut outb) = (ByteBuffer::new(65_536), ByteBuffer::new(65_536));
        let mut buf = [0u8; 4096];
        while outb.is_empty() {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break; // closed before PRESENT (counted by the node)
            }
            inb.push(&buf[..n]);
            hs.handle_input(&mut inb, &mut outb).unwrap();
        }
        let (a, b) = outb.chunks();
        let negotiate = [a, b].concat();
        let _ = s.write_all(&negotiate[..negotiate.len() / 2]);
        held.push(s);
    }

    // A new honest site connects from the attacked address, while every
    // attacking socket is still open.
    let second = Node::builder().start().unwrap();
    let newcomer = second.site(&target).unwrap();
    let joined = tokio::time::timeout(Duration::from_secs(30), echo(&newcomer, 1)).await;
    // And the attacked node still opens channels of its own.
    let other = listening_node();
    let outbound = server.site(addr(&other)).unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(30), echo(&outbound, 1)).await;
    let during = open_fds();
    let s = slots.stats();
    let m = server.metrics();
    assert!(
        joined.is_ok(),
        "a new site could not connect beside {attack} idle sockets: {s:?} {m:?}"
    );
    assert!(
        opened.is_ok(),
        "the node could not open a channel beside {attack} idle sockets: {s:?}"
    );
    // Some more echoes of the working site, still beside the attack.
    stop.store(true, Ordering::Relaxed);
    let echoed = echoes.await.unwrap();
    let s = slots.stats();
    let m = server.metrics();
    assert_eq!(s.total_preemptions(), 0, "{s:?}");
    assert_eq!(m.preemptions, 0, "{m:?}");
    assert!(
        s.in_use <= 5,
        "idle sockets hold channel slots: {} in use: {s:?}",
        s.in_use
    );
    // Both ends of the attack are ours; the server holds at most the cap
    // of them, plus the new honest channel's two ends.
    assert!(
        m.handshakes_pending_peak <= CAP as u64,
        "{} pending handshakes, cap {CAP}",
        m.handshakes_pending_peak
    );
    assert!(m.handshakes_refused > 0, "{m:?}");
    assert!(
        during <= baseline + attack + CAP + 16,
        "{during} descriptors open, {baseline} before {attack} attacking sockets"
    );
    eprintln!(
        "{attack} attacking sockets: {echoed} echoes of the working site; fds {baseline} -> {during}; {s:?}; {m:?}"
    );
    drop(held);
}

/// A kind-3 frame's origin block cannot make the node dial whatever it
/// names for ever and keep an entry per name: entries made on a
/// forwarder's word are claims it holds:
/// at most `forward_claims_per_peer` at once, each making one bounded
/// attempt, reclaimed like any other; the rest are refused and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_naming_fresh_sites_are_bounded_and_reclaimed() {
    hostile::forwards_naming_fresh_sites_are_bounded_and_reclaimed(&Level::open()).await;
}

/// A message holding a long `Vec<SiteRef>` cannot leave an actor per
/// reference: a reference to a site the node does not know makes an
/// entry without an actor (even when the rest of the header fails to
/// decode), forgotten as soon
/// as the reference goes, and the entries one peer's messages keep alive
/// at once are bounded (`site_ref_claims_per_peer`, 1,024): a message
/// naming more, or naming any while the handler keeps that many, does not
/// decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_site_refs_are_bounded_and_reclaimed() {
    hostile::floods_of_site_refs_are_bounded_and_reclaimed(&Level::open()).await;
}

/// A descriptor naming a known id adds no address to that site's book, so
/// a peer that cannot be called back cannot name itself at an address of
/// its choosing for the node to dial when its channel goes. Only what the
/// node learns by connecting itself adds addresses to a known site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_cannot_add_addresses_to_a_known_site() {
    use sitenet::services::Echo;
    use sitenet_protocols::{MessageKind, SiteId};
    let server = giving_up_server();
    server.handle(|_ctx, _p: Peers| {}).unwrap();
    let (trap_at, dials) = trap();
    let id = SiteId(rand::random::<u128>());
    let mut p = raw::RawPeer::connect_as(&addr(&server), id, Vec::new());
    let poison = rmp_serde::to_vec(&vec![format!("{id}@{trap_at}")]).unwrap();
    p.send(Peers::ID, MessageKind::OneWay, 0, &poison, b"");
    // An echo after it: its reply, which the peer never acknowledges, is
    // what the node then owes the peer.
    let header = rmp_serde::to_vec(&Echo { seq: 1 }).unwrap();
    p.send(Echo::ID, MessageKind::Request, 1, &header, b"");
    p.read_until_data();
    drop(p);
    never_dialed(
        &server,
        &dials,
        "the node dialed an address a peer's descriptor added to its own entry",
    )
    .await;
}

/// A later NEGOTIATE naming a known id adds no address to that site's
/// book, so a second connection claiming a site that listens nowhere
/// cannot name a trap for the node to dial when the channels go. Only the
/// NEGOTIATE that makes an entry gives it addresses (the node adds what it
/// finds by connecting itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_handshake_cannot_add_addresses_to_a_known_site() {
    use sitenet::services::Echo;
    use sitenet_protocols::{MessageKind, SiteId};
    let server = giving_up_server();
    let (trap_at, dials) = trap();
    let id = SiteId(rand::random::<u128>());
    let first = raw::RawPeer::connect_as(&addr(&server), id, Vec::new());
    drop(first);
    assert!(eventually(|| server.metrics().temp_failures >= 1).await);
    let mut second = raw::RawPeer::connect_as(&addr(&server), id, vec![trap_at]);
    // A reply the node then owes the site, never acknowledged.
    let header = rmp_serde::to_vec(&Echo { seq: 1 }).unwrap();
    second.send(Echo::ID, MessageKind::Request, 1, &header, b"");
    second.read_until_data();
    drop(second);
    never_dialed(
        &server,
        &dials,
        "the node dialed an address a later handshake added to a known site",
    )
    .await;
}

/// A server that gives up a site it cannot call back after 1 s: the
/// address-book attacks end when it does, or when it dials their trap.
fn giving_up_server() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.unreachable_give_up = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap()
}

/// Waits until `server` gave a site up (it failed permanently) or dialed
/// the trap, then checks the trap was never dialed (`what` says why that
/// would be wrong).
async fn never_dialed(server: &Node, dials: &AtomicU64, what: &str) {
    assert!(
        eventually(|| server.metrics().perm_failures >= 1 || dials.load(Ordering::SeqCst) > 0)
            .await
    );
    assert_eq!(dials.load(Ordering::SeqCst), 0, "{what}");
}

/// What a busy server handles: one small message, 1 ms of work.
#[derive(Serialize, Deserialize)]
struct Work {
    n: u64,
}
impl Message for Work {
    const ID: u32 = 701;
}

/// A busy node does not look dead: a server whose handler takes 1 ms per
/// message still sends acknowledgements and heartbeats between handler
/// calls, by the ack policy (100 messages / 20 ms), and a turn's handler
/// work has a time budget, so a client sending thousands of tracked
/// messages gets acknowledgements as they are handled and never declares
/// the live server failed after its silence timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_handler_never_makes_a_live_node_look_dead() {
    const N: u64 = 8_000;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(sitenet::Runtime::dedicated("busy-server"))
        .start()
        .unwrap();
    server
        .handle(|_ctx, _m: Work| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(1) {
                std::hint::spin_loop();
            }
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    // The channel first (one tracked message), so the clock below measures
    // the busy server, not the connection.
    site.send(&Work { n: 0 })
        .tracked()
        .await
        .unwrap()
        .await
        .unwrap();
    let start = std::time::Instant::now();
    let mut deliveries = Vec::new();
    for n in 1..=N {
        deliveries.push(site.send(&Work { n }).tracked().await.unwrap());
    }
    let mut first = None;
    for (i, d) in deliveries.into_iter().enumerate() {
        tokio::time::timeout(PATIENCE, d)
            .await
            .expect("every delivery completes")
            .expect("delivered");
        if i == 0 {
            first = Some(start.elapsed());
        }
    }
    let (first, all) = (first.unwrap(), start.elapsed());
    let m = client.metrics();
    let s = server.metrics();
    eprintln!(
        "busy handler, {N} tracked sends: first acknowledgement after {first:?}, all after \
         {all:?}; client: temp_failures {}, channels_opened {}, resent {}; server: \
         delivered {}, duplicates {}, ack frames {}",
        m.temp_failures,
        m.channels_opened,
        m.messages_retransmitted,
        s.messages_delivered,
        s.duplicates,
        s.ack_frames_sent,
    );
    assert_eq!(
        (m.temp_failures, m.channels_opened, m.messages_retransmitted),
        (0, 1, 0),
        "the live server was declared failed (temp failures, channels, resends)"
    );
    assert_eq!(s.duplicates, 0);
    // The ack policy says 100 messages or 20 ms: the first acknowledgement
    // comes after about 100 handler calls (0.1 s). Generous: a shared
    // machine may be slow, but a tenth of the silence timeout is far below
    // what holding every ack to the end of the turn cost (seconds).
    assert!(
        first < std::time::Duration::from_millis(500),
        "first acknowledgement after {first:?}"
    );
}

/// A large message for the reassembly budget test.
#[derive(Serialize, Deserialize)]
struct Blob(Vec<u8>);
impl Message for Blob {
    const ID: u32 = 702;
}

/// One peer cannot keep the whole reassembly budget with a trickle (progress
/// means bytes, and the oldest holder keeps its place only at the minimum
/// rate), so other peers' multi-frame messages do not wait for ever. A raw
/// peer takes nearly all of a
/// 1 MiB budget and then trickles one byte every 200 ms; an honest
/// client's 300 KiB message waits for budget. The trickler, below the
/// minimum rate while another waits, gives way; the honest message is
/// delivered, and the honest client is never taken for dead meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_peer_cannot_keep_the_reassembly_budget() {
    use sitenet_protocols::wire::frame::FLAG_FIRST;
    use std::io::Write;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            c.reassembly_budget = 1 << 20;
            c.reassembly_idle = std::time::Duration::from_secs(2);
        })
        .start()
        .unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    server
        .handle(move |_ctx, b: Blob| {
            g.fetch_add(b.0.len() as u64, Ordering::Relaxed);
        })
        .unwrap();
    // The trickler: a message announced at 4 MiB, of which it sends all
    // but ~20 KiB of the budget's worth, then a byte at a time.
    let mut raw = common::raw::RawPeer::connect(&addr(&server));
    let announced = 4u64 << 20;
    let frame = |flags: u8, offset: u64, payload: &[u8]| fragment_frame(flags, offset, 0, payload);
    let prelude = sitenet_protocols::Prelude {
        type_id: 702,
        kind: sitenet_protocols::MessageKind::OneWay,
        header_len: (announced - sitenet_protocols::PRELUDE_LEN as u64) as u32,
        body_len: 0,
        corr: 0,
    }
    .encode();
    let chunk = 60 * 1024;
    let mut first = prelude.to_vec();
    first.extend_from_slice(&vec![0u8; chunk - first.len()]);
    raw.socket.write_all(&frame(FLAG_FIRST, 0, &first)).unwrap();
    let mut offset = chunk as u64;
    while offset + (chunk as u64) < (1 << 20) - 20 * 1024 {
        raw.socket
            .write_all(&frame(0, offset, &vec![0u8; chunk]))
            .unwrap();
        offset += chunk as u64;
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let mut socket = raw.socket.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let mut sent = 0u64;
        while !s.load(Ordering::Relaxed) {
            if socket.write_all(&frame(0, offset, &[0u8])).is_err() {
                return (sent, true);
            }
            offset += 1;
            sent += 1;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        (sent, false)
    });
    // The budget is held (the server reads the trickler first).
    assert!(eventually(|| server.metrics().reads > 0).await);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let start = std::time::Instant::now();
    let delivery = site
        .send(&Blob(vec![1u8; 300 * 1024]))
        .tracked()
        .await
        .unwrap();
    let r = tokio::time::timeout(std::time::Duration::from_secs(30), delivery).await;
    stop.store(true, Ordering::Relaxed);
    let (trickled, cut) = trickler.join().unwrap();
    eprintln!(
        "trickler: {trickled} bytes trickled, cut off: {cut}; honest message after {:?}: {r:?}; \
         client temp_failures {}",
        start.elapsed(),
        client.metrics().temp_failures
    );
    r.expect("the honest message waited 30 s behind a trickle")
        .expect("delivered");
    assert_eq!(got.load(Ordering::Relaxed), 300 * 1024);
    assert_eq!(client.metrics().temp_failures, 0);
}

/// One DATA frame of a message fragment on lane 2, as a raw peer sends it.
fn fragment_frame(flags: u8, offset: u64, number: u64, payload: &[u8]) -> Vec<u8> {
    use sitenet_protocols::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
    let h = FrameHeader {
        kind: FrameKind::Data,
        lane: 2,
        flags,
        payload_len: payload.len() as u32,
        ack: 0,
        msg_number: number,
        frag_offset: offset,
    };
    let mut hb = [0u8; HEADER_LEN];
    h.encode(&mut hb);
    [&hb[..], payload].concat()
}

/// The wire bytes of a one-way `Blob`-typed message whose header is
/// `header_len` zero bytes (MessagePack would not decode them: the
/// handler is not the point, the reassembly is).
fn blob_wire(header_len: usize) -> Vec<u8> {
    let mut w = sitenet_protocols::Prelude {
        type_id: 702,
        kind: sitenet_protocols::MessageKind::OneWay,
        header_len: header_len as u32,
        body_len: 0,
        corr: 0,
    }
    .encode()
    .to_vec();
    w.resize(w.len() + header_len, 0);
    w
}

/// A channel paused for lack of reassembly memory is paused, not silent:
/// it is not declared dead after the silence timeout, so two bulk
/// transfers that together exceed the budget do not livelock (both paused,
/// both "silent", both closed, to start over). Two raw peers each send most of a 700 KiB
/// message into a 1 MiB budget, until both are paused; the server's
/// silence timeout (1 s) is shorter than the time the younger holder waits
/// before giving way (2 s). The younger gives way (not a fault) and the
/// oldest's message is received; no paused channel is taken for dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transfers_over_the_budget_do_not_livelock() {
    use sitenet_protocols::wire::frame::{FLAG_FIRST, FLAG_LAST};
    use std::io::Write;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            c.reassembly_budget = 1 << 20;
            c.reassembly_idle = std::time::Duration::from_secs(2);
            c.heartbeat_interval = std::time::Duration::from_millis(200);
            c.silence_timeout = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let wire = blob_wire(700 * 1024);
    let chunk = 60 * 1024;
    let frames: Vec<Vec<u8>> = wire
        .chunks(chunk)
        .enumerate()
        .map(|(i, part)| {
            let last = (i + 1) * chunk >= wire.len();
            let flags = if i == 0 { FLAG_FIRST } else { 0 } | if last { FLAG_LAST } else { 0 };
            fragment_frame(flags, (i * chunk) as u64, if last { 1 } else { 0 }, part)
        })
        .collect();
    let n = frames.len();
    // The oldest: all but its last two fragments.
    let mut oldest = common::raw::RawPeer::connect(&addr(&server));
    for f in &frames[..n - 2] {
        oldest.socket.write_all(f).unwrap();
    }
    assert!(eventually(|| server.stats().per_site.len() == 1).await);
    // The younger: as much as it can, until the budget is exhausted (its
    // writes end up in the socket buffers).
    let mut younger = common::raw::RawPeer::connect(&addr(&server));
    for f in &frames[..n - 2] {
        younger.socket.write_all(f).unwrap();
    }
    assert!(eventually(|| server.metrics().budget_pauses > 0).await);
    let paused = std::time::Instant::now();
    // The oldest's rest: it needs budget the younger holds.
    for f in &frames[n - 2..] {
        oldest.socket.write_all(f).unwrap();
    }
    // The oldest's message arrives (its type's handler is not registered:
    // it counts as unhandled once received whole).
    let delivered = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while server.metrics().unhandled == 0 && server.metrics().messages_delivered == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    let m = server.metrics();
    eprintln!(
        "two transfers over the budget: oldest received: {} after {:?}; budget pauses {}, \
         channels closed {}, protocol errors {}",
        delivered.is_ok(),
        paused.elapsed(),
        m.budget_pauses,
        m.channels_closed,
        m.protocol_errors,
    );
    assert!(delivered.is_ok(), "the oldest's message never arrived");
    assert_eq!(m.protocol_errors, 0);
    drop(younger);
}

/// A forged claim on a site's id breaks nothing: a stranger that read a
/// client's id claims it (as a site that never worked with the server)
/// while the client is cut off, hoping the server resets the pair's
/// numbering and sends it the client's reply. The claim must prove the
/// pair's continuity; refused, it changes nothing, and the client, back,
/// gets every reply once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_claim_on_a_client_in_backoff_breaks_nothing() {
    hostile::a_forged_claim_on_a_client_in_backoff_breaks_nothing(&Level::open()).await;
}

/// A forwarded request is not handled as if its named origin had sent it:
/// a stranger forwarding `SinkData` that names a connected victim cannot
/// fill the victim's sink quota and get its next stream refused. The sink
/// keys streams by the site that delivered a message and
/// refuses forwarded data; the victim's streams are its own. (Seen failing
/// with the forwarded-data refusal taken out: "stream 1 of the victim
/// refused".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_fill_a_victims_sink_quota_by_forwarding() {
    use sitenet::services::{SinkData, SinkQuery, SinkVerdict};
    use sitenet_protocols::MessageKind;
    const CAP: usize = 4;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.sink_streams_per_sender = CAP;
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let victim = Node::builder().start().unwrap();
    let site = victim.site(&target).unwrap();
    let verdict = |stream: u64| {
        let site = site.clone();
        async move {
            site.request::<SinkQuery, SinkVerdict>(&SinkQuery {
                stream,
                expected: 1,
            })
            .timeout(PATIENCE)
            .await
            .unwrap()
            .msg
        }
    };
    site.send(&SinkData { stream: 0, seq: 0 }).await.unwrap();
    assert_eq!(verdict(0).await.delivered, 1);
    // A stranger forwards data "from" the victim on streams 100..110.
    let delivered = server.metrics().messages_delivered;
    let mut x = raw::RawPeer::connect(&target);
    let origin = format!("{}@mem:victim-claimed", victim.id());
    let mut wire = Vec::new();
    for stream in 100..110u64 {
        let header = rmp_serde::to_vec(&SinkData { stream, seq: 0 }).unwrap();
        let block = raw::origin_block(&origin, &header);
        x.message(
            &mut wire,
            SinkData::ID,
            MessageKind::Forward,
            stream,
            &block,
            b"",
        );
    }
    std::io::Write::write_all(&mut x.socket, &wire).unwrap();
    assert!(eventually(|| server.metrics().messages_delivered >= delivered + 10).await);
    // The victim's own new streams, up to its quota, are all taken.
    for stream in 1..CAP as u64 {
        site.send(&SinkData { stream, seq: 0 }).await.unwrap();
        let v = verdict(stream).await;
        assert!(!v.refused, "stream {stream} of the victim refused: {v:?}");
        assert_eq!(v.delivered, 1);
    }
    assert!(
        server.metrics().sink_refused >= 10,
        "{:?}",
        server.metrics()
    );
}
