//! Dials on a peer's word: what forwarded requests naming fresh origins at
//! a third party's addresses make the node do to that third party. Every
//! dial to an address only a peer named is bounded node-wide
//! (`NodeConfig::peer_word_dials`), per source of the peers asking
//! (`peer_word_dials_per_source`) and per destination host
//! (`peer_word_dials_per_host`), and a forwarded origin's dial is abandoned
//! when the peer that forwarded it goes: the node is no amplifier against
//! a host nobody here asked for.
//!
//! The third host is a trap: listeners on loopback addresses of their own
//! (127.0.0.x) that accept every connection and never speak, so a node
//! dialing there holds the connection for its whole handshake timeout.
//! The trap counts what it holds, per host and in all, now, at peak and in
//! total.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::raw::{self, Wire};
use crate::common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Message, Node};
use sitenet_protocols::{ByteBuffer, Keyring, MessageKind, SiteId};

/// Connections held by one host of the trap (or by all of it).
#[derive(Default)]
struct Held {
    now: AtomicU64,
    peak: AtomicU64,
    total: AtomicU64,
}

impl Held {
    fn opened(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        self.total.fetch_add(1, Ordering::SeqCst);
    }

    fn closed(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }
}

/// The third party: `hosts` loopback addresses, each listening on `ports`
/// ports, accepting and holding every connection until the dialer closes
/// it.
struct Trap {
    addresses: Vec<String>,
    hosts: Vec<(IpAddr, Arc<Held>)>,
    all: Arc<Held>,
}

impl Trap {
    async fn start(hosts: &[IpAddr], ports: usize) -> Self {
        let all = Arc::new(Held::default());
        let mut addresses = Vec::new();
        let mut held = Vec::new();
        for &ip in hosts {
            let host = Arc::new(Held::default());
            for _ in 0..ports {
                let l = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
                    .await
                    .expect("a loopback address of 127.0.0.0/8 binds");
                addresses.push(format!("tcp:{}", l.local_addr().unwrap()));
                let (host, all) = (host.clone(), all.clone());
                tokio::spawn(async move {
                    while let Ok((mut s, _)) = l.accept().await {
                        host.opened();
                        all.opened();
                        let (host, all) = (host.clone(), all.clone());
                        tokio::spawn(async move {
                            let mut buf = [0u8; 1024];
                            // Never answers; ends when the dialer closes.
                            while let Ok(n) = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await
                            {
                                if n == 0 {
                                    break;
                                }
                            }
                            host.closed();
                            all.closed();
                        });
                    }
                });
            }
            held.push((ip, host));
        }
        Self {
            addresses,
            hosts: held,
            all,
        }
    }

    /// The most connections any one host held at once.
    fn host_peak(&self) -> u64 {
        self.hosts.iter().map(|(_, h)| h.peak()).max().unwrap_or(0)
    }

    fn report(&self) -> String {
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|(ip, h)| format!("{ip}: peak {} total {}", h.peak(), h.total()))
            .collect();
        format!(
            "held now {}, peak {}, total {} ({})",
            self.all.now(),
            self.all.peak(),
            self.all.total(),
            hosts.join("; ")
        )
    }
}

/// The loopback address 127.0.0.`last`.
fn lo(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A raw peer (a fresh site listening nowhere) connected to `target` from
/// source address `source`, after its handshake: the socket it writes its
/// forwards on.
async fn attacker_from(source: IpAddr, target: &str) -> std::net::TcpStream {
    let to: SocketAddr = target.strip_prefix("tcp:").unwrap().parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(source, 0)).unwrap();
    let s = sock.connect(to).await.expect("connect");
    let mut s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let id = SiteId(rand::random::<u128>());
    let mut hs = raw::initiator(id, Vec::new(), Keyring::default());
    let (mut inb, mut outb) = (ByteBuffer::new(65_536), ByteBuffer::new(65_536));
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("the node answers the handshake");
        assert!(n > 0, "the node closed the channel during the handshake");
        inb.push(&buf[..n]);
        let done = hs.handle_input(&mut inb, &mut outb).expect("let in");
        let (a, b) = outb.chunks();
        let out = [a, b].concat();
        outb.clear();
        s.write_all(&out).unwrap();
        if done.is_some() {
            return s;
        }
    }
}

/// `n` forwarded echo requests, each naming a fresh origin at sixteen of
/// `addresses` (a different rotation for each): what one attacker writes.
fn forwards(n: u64, addresses: &[String], rotate: usize) -> Wire {
    let mut w = Wire::default();
    for i in 0..n {
        let start = rotate + i as usize;
        let listed: Vec<&str> = (0..addresses.len().min(16))
            .map(|k| addresses[(start + k) % addresses.len()].as_str())
            .collect();
        let origin = format!("{}@{}", SiteId(rand::random::<u128>()), listed.join(","));
        let header = rmp_serde::to_vec(&Echo { seq: i }).unwrap();
        let block = raw::origin_block(&origin, &header);
        w.message(Echo::ID, MessageKind::Forward, i + 1, &block, b"");
    }
    w
}

/// The node under attack: echo served, a long handshake timeout (a dial
/// to the trap holds its connection that long, so a dial the node does
/// not abandon outlives the test's patience for its release), and a
/// raw peer that goes given up and forgotten at once.
fn server() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.handshake_timeout = Duration::from_secs(20);
            c.unreachable_give_up = Duration::from_secs(1);
            c.linger = Duration::from_secs(1);
        })
        .start()
        .unwrap()
}

/// Runs the attack: attackers from each of `sources` (`per_source` of
/// them), each forwarding `FORWARDS` requests naming fresh origins at the
/// trap's addresses, while an honest client is answered. Returns once
/// every origin the node accepted was dialed or refused (or a bound was
/// already broken), with the attackers' sockets.
const FORWARDS: u64 = 16;

async fn attack(
    server: &Node,
    trap: &Trap,
    sources: &[IpAddr],
    per_source: usize,
    bound: u64,
) -> Vec<std::net::TcpStream> {
    let target = addr(server);
    let before = server.metrics();
    let mut attackers = Vec::new();
    for (k, &source) in sources.iter().enumerate() {
        for j in 0..per_source {
            let mut s = attacker_from(source, &target).await;
            let w = forwards(FORWARDS, &trap.addresses, k * per_source + j);
            s.write_all(&w.bytes).unwrap();
            attackers.push(s);
        }
    }
    let origins = (sources.len() * per_source) as u64 * FORWARDS;
    // An honest client is answered beside the attack.
    let client = Node::builder().start().unwrap();
    let site = client.site(&target).unwrap();
    for seq in 0..10 {
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .await
            .expect("the honest client is answered");
        assert_eq!(r.msg.seq, seq);
    }
    // Every forward handled; then every origin beyond the bound refused
    // its dial (it fails, not reached), unless the trap already holds
    // more than the bound.
    assert!(
        eventually(|| server.metrics().messages_delivered >= before.messages_delivered + origins)
            .await,
        "{:?}",
        server.metrics()
    );
    eventually(|| {
        server.metrics().perm_failures >= before.perm_failures + origins - bound
            || trap.all.peak() > bound
    })
    .await;
    attackers
}

/// Forty raw peers from one address (127.0.0.1), sixteen forwards each,
/// every forward naming a fresh origin at sixteen addresses of a third
/// party: four hosts (127.0.0.11–14), four ports each. The dials on their
/// word are one source's: at most `peer_word_dials_per_source` (16) at
/// once, at most `peer_word_dials_per_host` (4) to any one host; the
/// others are refused at once (the origin fails, not reached). When the
/// peers go, the dials still held on their word are abandoned and the
/// trap holds nothing, long before a dial's handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dials_on_one_sources_word_are_bounded_per_source_and_host_and_end_when_it_goes() {
    let server = server();
    let trap = Trap::start(&[lo(11), lo(12), lo(13), lo(14)], 4).await;
    let attackers = attack(&server, &trap, &[lo(1)], 40, 16).await;
    eprintln!("one source, 640 origins: {}", trap.report());
    assert!(trap.host_peak() <= 4, "{}", trap.report());
    assert!(trap.all.peak() <= 16, "{}", trap.report());
    assert!(trap.all.total() <= 16, "{}", trap.report());
    // The peers go: what was dialed on their word is abandoned.
    released_when_gone(&server, &trap, attackers, 16).await;
}

/// The same from eight addresses (127.0.0.2–9, five peers each), naming
/// addresses of twenty hosts (127.0.0.31–50): at most `peer_word_dials`
/// (64) dials on peers' words at once node-wide, at most four to a host;
/// released when the peers go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dials_on_many_sources_words_are_bounded_per_node_and_host_and_end_when_they_go() {
    let server = server();
    let hosts: Vec<IpAddr> = (31..51).map(lo).collect();
    let trap = Trap::start(&hosts, 1).await;
    let sources: Vec<IpAddr> = (2..10).map(lo).collect();
    let attackers = attack(&server, &trap, &sources, 5, 64).await;
    eprintln!("eight sources, 640 origins: {}", trap.report());
    assert!(trap.host_peak() <= 4, "{}", trap.report());
    assert!(trap.all.peak() <= 64, "{}", trap.report());
    assert!(trap.all.total() <= 64, "{}", trap.report());
    released_when_gone(&server, &trap, attackers, 64).await;
}

/// Drops the attacking peers, then checks that every dial made on their
/// word is abandoned (the trap holds nothing) well within a dial's
/// handshake timeout, that no more than `bound` dials were made in all,
/// and that the sites their forwards named are forgotten.
async fn released_when_gone<A>(server: &Node, trap: &Trap, attackers: A, bound: u64) {
    drop(attackers);
    let left = std::time::Instant::now();
    let released = tokio::time::timeout(Duration::from_secs(40), async {
        while trap.all.now() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    eprintln!(
        "{:?} after the peers went: {}",
        left.elapsed(),
        trap.report()
    );
    assert!(released.is_ok(), "still held: {}", trap.report());
    assert!(trap.all.total() <= bound, "{}", trap.report());
    assert!(
        eventually(|| server.site_count() <= 1).await,
        "{} sites left",
        server.site_count()
    );
}

/// A question a relay forwards and its owner answers.
#[derive(serde::Serialize, serde::Deserialize)]
struct Question(u64);
impl Message for Question {
    const ID: u32 = 910;
}

/// The owner's answer, sent to the asker directly.
#[derive(serde::Serialize, serde::Deserialize)]
struct Answer(u64);
impl Message for Answer {
    const ID: u32 = 911;
}

/// The bounds at their extremes: zero is raised to one (a node that could
/// dial nothing on a peer's word could never answer a delegated request),
/// so a request forwarded to a node with every bound at zero is still
/// answered at its origin; the largest values are taken as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dial_bounds_at_zero_are_one_and_a_delegated_reply_still_dials_its_origin() {
    let owner = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.peer_word_dials = 0;
            c.peer_word_dials_per_source = 0;
            c.peer_word_dials_per_host = 0;
        })
        .start()
        .unwrap();
    let c = owner.config();
    assert_eq!(
        (
            c.peer_word_dials,
            c.peer_word_dials_per_source,
            c.peer_word_dials_per_host
        ),
        (1, 1, 1)
    );
    // A relay forwards the question to the owner, which answers the
    // asker by dialing it at the address the relay named.
    owner
        .handle(|ctx, q: Question| {
            let _ = ctx.reply(&Answer(q.0 + 1));
        })
        .unwrap();
    let relay = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    let to = relay.site(addr(&owner)).unwrap();
    relay
        .handle(move |ctx, q: Question| {
            ctx.forward(&to, &q).unwrap();
        })
        .unwrap();
    let asker = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    for n in 0..3 {
        let r = asker
            .site(addr(&relay))
            .unwrap()
            .request::<Question, Answer>(&Question(n))
            .timeout(PATIENCE)
            .await
            .expect("the owner answers the asker directly");
        assert_eq!(r.msg.0, n + 1);
    }
    assert_eq!(owner.metrics().claims_refused, 0);
    let largest = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            c.peer_word_dials = u32::MAX;
            c.peer_word_dials_per_source = u32::MAX;
            c.peer_word_dials_per_host = u32::MAX;
        })
        .start()
        .unwrap();
    assert_eq!(largest.config().peer_word_dials_per_host, u32::MAX);
    let client = Node::builder().start().unwrap();
    let r = client
        .site(addr(&largest))
        .unwrap()
        .request::<Echo, EchoReply>(&Echo { seq: 7 })
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.seq, 7);
}
