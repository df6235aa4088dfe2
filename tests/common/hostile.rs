//! Bodies of tests/hostile/peers.rs's tests run at a security
//! level: the open level there, and in tests/hostile/cookie.rs with the
//! attacked node, its clients and the attackers all members of one cookie
//! — a member's attacks must stay within the same bounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, NodeConfig};
use sitenet_protocols::{Cookie, Keyring};

use super::raw::{self, RawPeer};
use super::*;

/// Who may connect to the nodes a test starts: the cookies every node,
/// client and raw peer of the test holds (none: the open level).
#[derive(Clone, Default)]
pub struct Level {
    pub cookies: Vec<Cookie>,
}

impl Level {
    /// The open level: no cookie anywhere.
    pub fn open() -> Self {
        Self::default()
    }

    /// Everyone a member of `cookie`.
    pub fn cookie(cookie: Cookie) -> Self {
        Self {
            cookies: vec![cookie],
        }
    }

    /// Gives a node's configuration this level's cookies.
    pub fn configure(&self, c: &mut NodeConfig) {
        c.cookies = self.cookies.clone();
    }

    /// The cookies a raw peer proves.
    pub fn keys(&self) -> Keyring {
        Keyring::new(self.cookies.clone())
    }

    /// A node that does not listen, at this level.
    pub fn node(&self) -> Node {
        let level = self.clone();
        Node::builder()
            .configure(move |c| level.configure(c))
            .start()
            .unwrap()
    }

    /// [`listening_node`] at this level.
    pub fn listening_node(&self) -> Node {
        let level = self.clone();
        Node::builder()
            .listen("tcp:127.0.0.1:0")
            .configure(move |c| {
                services(c);
                level.configure(c);
            })
            .start()
            .expect("node starts")
    }

    /// A raw peer (a fresh site that listens nowhere) after its handshake
    /// with `target`, at this level.
    pub fn raw(&self, target: &str) -> RawPeer {
        RawPeer::connect_keyed(target, self.keys())
    }
}

/// The body of tests/hostile/peers.rs's `replies_owed_to_vanished_readers_are_bounded_and_released` at `level`.
pub async fn replies_owed_to_vanished_readers_are_bounded_and_released(level: &Level) {
    use sitenet::services::{Echo, EchoReply};
    const NODE_BOUND: u64 = 8 << 20;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            level.configure(c);
            c.max_message_size = 1 << 20;
            c.output_bound = 2 << 20;
            c.node_output_bound = NODE_BOUND;
            c.unreachable_give_up = std::time::Duration::from_secs(1);
            c.linger = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    // Six peers that never read, each asking for 6.4 MB of echoes.
    let hogs = raw::RawPeer::echo_hogs(&target, 6, level.keys());
    // A client that reads is still answered while they hold their share.
    let client = level.node();
    let site = client.site(&target).unwrap();
    for seq in 0..50 {
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .await
            .expect("a reading client is answered beside the hogs");
        assert_eq!(r.msg.seq, seq);
    }
    let held = server.stats().output_bytes;
    assert!(held > 0 && held <= NODE_BOUND, "held {held}");
    assert_eq!(server.stats().output_bytes_bound, NODE_BOUND);
    // They vanish: everything owed to them is returned, and their entries go.
    drop(hogs);
    assert!(
        eventually(|| server.stats().output_bytes == 0).await,
        "still held: {}",
        server.stats().output_bytes
    );
    assert!(
        eventually(|| server.site_count() <= 1).await,
        "{} sites left",
        server.site_count()
    );
    assert!(server.metrics().perm_failures >= 6);
}

/// A listener that counts the connections made to it and never speaks:
/// a node dialing it waits its whole handshake timeout.
pub fn trap() -> (String, Arc<AtomicU64>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = format!("tcp:{}", l.local_addr().unwrap());
    let dials = Arc::new(AtomicU64::new(0));
    let d = dials.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            d.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    (at, dials)
}

/// A listener like [`trap`] that also counts the connections open at once:
/// each is read until the dialing node closes it. Returns the address,
/// the count of connections made and the most open at once.
pub fn trap_counting_open() -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = format!("tcp:{}", l.local_addr().unwrap());
    let (dials, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let open = Arc::new(AtomicU64::new(0));
    let (d, p) = (dials.clone(), peak.clone());
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            d.fetch_add(1, Ordering::SeqCst);
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            let open = open.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (at, dials, peak)
}

/// The body of tests/hostile/peers.rs's `forwards_naming_fresh_sites_are_bounded_and_reclaimed` at `level`.
pub async fn forwards_naming_fresh_sites_are_bounded_and_reclaimed(level: &Level) {
    use sitenet::services::{Echo, EchoReply};
    use sitenet_protocols::{MessageKind, SiteId};
    const N: u64 = 3_000;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            level.configure(c);
            c.handshake_timeout = std::time::Duration::from_secs(1);
            c.linger = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let (trap_at, dials, open_at_once) = trap_counting_open();
    let delivered_before = server.metrics().messages_delivered;
    let rss_before = proc_status_bytes("VmRSS");
    let mut p = level.raw(&target);
    let mut wire = Vec::new();
    for i in 0..N {
        let origin = format!(
            "{}@mem:nowhere-{i},{trap_at}",
            SiteId(rand::random::<u128>())
        );
        let header = rmp_serde::to_vec(&Echo { seq: i }).unwrap();
        let block = raw::origin_block(&origin, &header);
        p.message(
            &mut wire,
            Echo::ID,
            MessageKind::Forward,
            i + 1,
            &block,
            b"",
        );
    }
    // And one naming an origin with no handler for its type: no entry at all.
    let block = raw::origin_block(&format!("{}@{trap_at}", SiteId(7)), b"\x90");
    p.message(&mut wire, 0x7777, MessageKind::Forward, N + 1, &block, b"");
    std::io::Write::write_all(&mut p.socket, &wire).unwrap();
    // A legitimate client keeps being answered.
    let client = level.node();
    let site = client.site(&target).unwrap();
    for seq in 0..20 {
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .await
            .expect("the legitimate client is answered");
        assert_eq!(r.msg.seq, seq);
    }
    // N + 1 forwards and the client's 20 echoes, each counted as delivered
    // before it is handled; every forward either refused (the peer held
    // its bound of claims) or made a claim whose origin was then not
    // reached (a permanent failure): the last one's part is awaited too.
    // Claims end as their origins fail, so over the run the forwarder may
    // make more than 16, never more than 16 at once.
    assert!(
        eventually(|| {
            let m = server.metrics();
            m.messages_delivered >= delivered_before + N + 1 + 20
                && m.claims_refused + m.perm_failures >= N
        })
        .await,
        "{:?}",
        server.metrics()
    );
    // The raw peer, the client, and at most the claims' bound.
    let sites = server.site_count();
    let grown = proc_status_bytes("VmRSS").saturating_sub(rss_before);
    assert!(sites <= 2 + 16, "{sites} site entries after {N} forwards");
    let m = server.metrics();
    assert!(
        m.unhandled > m.claims_refused,
        "refused and handler-less forwards: {m:?}"
    );
    // Everything the forwards made goes once the forwarder has gone.
    drop(p);
    assert!(
        eventually(|| server.site_count() <= 1).await,
        "{} sites left",
        server.site_count()
    );
    // Claims end as their origins fail, and a later forward may then make
    // a new one: the bound is on the dials open at once, not on the run.
    let d = dials.load(Ordering::SeqCst);
    let at_once = open_at_once.load(Ordering::SeqCst);
    assert!(
        at_once <= 16,
        "{at_once} dials at once to addresses the forwarder named ({d} in all)"
    );
    eprintln!(
        "{N} forwards: at most {sites} entries, {d} dials ({at_once} at once), {} refused, {} reclaimed, \
         resident memory +{} KiB",
        server.metrics().claims_refused,
        server.metrics().sites_reclaimed,
        grown >> 10
    );
    // (Before the bound, 3,000 forwards kept +73 MiB in a release build.)
    assert!(grown < 32 << 20, "resident memory grew by {grown} bytes");
    for seq in 0..5 {
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .await
            .unwrap();
        assert_eq!(r.msg.seq, seq);
    }
}

/// A message carrying site references.
#[derive(Serialize, Deserialize)]
pub struct Peers(pub Vec<sitenet::SiteRef>);
impl Message for Peers {
    const ID: u32 = 701;
}

/// The body of tests/hostile/peers.rs's `floods_of_site_refs_are_bounded_and_reclaimed` at `level`.
pub async fn floods_of_site_refs_are_bounded_and_reclaimed(level: &Level) {
    use sitenet_protocols::{MessageKind, SiteId};
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Item {
        Text(String),
        Number(u8),
    }
    fn fresh(n: usize, addresses: &str) -> Vec<Item> {
        (0..n)
            .map(|_| Item::Text(format!("{}@{addresses}", SiteId(rand::random::<u128>()))))
            .collect()
    }
    const MESSAGES: u64 = 100;
    const PER_MESSAGE: usize = 500;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            level.configure(c);
            c.linger = std::time::Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let handled = Arc::new(AtomicU64::new(0));
    let keep = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (h, k, kv) = (handled.clone(), keep.clone(), kept.clone());
    server
        .handle(move |_ctx, p: Peers| {
            h.fetch_add(p.0.len() as u64, Ordering::Relaxed);
            if k.load(Ordering::Relaxed) {
                kv.lock().unwrap().extend(p.0);
            }
        })
        .unwrap();
    let target = addr(&server);
    let delivered = || server.metrics().messages_delivered;
    let before = delivered();
    let rss_before = proc_status_bytes("VmRSS");
    let mut p = level.raw(&target);
    let client = level.node();
    let site = client.site(&target).unwrap();
    // 50,000 references, every other message breaking after them: each
    // message's entries go with it.
    for m in 0..MESSAGES {
        let mut items = fresh(PER_MESSAGE, "tcp:127.0.0.1:1");
        if m % 2 == 1 {
            items.push(Item::Number(5));
        }
        let header = rmp_serde::to_vec(&items).unwrap();
        p.send(Peers::ID, MessageKind::OneWay, 0, &header, b"");
    }
    for seq in 0..10 {
        echo(&site, seq).await;
    }
    // The client's ten echoes count as delivered too, and a message counts
    // before its handler runs: what the last ones did is awaited.
    assert!(
        eventually(|| {
            delivered() >= before + MESSAGES + 10
                && handled.load(Ordering::Relaxed) >= 50 * PER_MESSAGE as u64
                && server.metrics().sites_reclaimed >= MESSAGES * PER_MESSAGE as u64
        })
        .await
    );
    let m = server.metrics();
    assert_eq!(handled.load(Ordering::Relaxed), 50 * PER_MESSAGE as u64);
    assert_eq!(m.claims_refused, 0, "{m:?}");
    assert!(m.sites_reclaimed >= MESSAGES * PER_MESSAGE as u64, "{m:?}");
    let after_flood = server.site_count();
    assert!(after_flood <= 2, "{after_flood} entries after the flood");
    // One message naming more than the bound does not decode.
    let header = rmp_serde::to_vec(&fresh(1_100, "")).unwrap();
    p.send(Peers::ID, MessageKind::OneWay, 0, &header, b"");
    // A handler keeping what it is given: the bound holds across messages.
    keep.store(true, Ordering::Relaxed);
    for _ in 0..3 {
        let header = rmp_serde::to_vec(&fresh(PER_MESSAGE, "tcp:127.0.0.1:1")).unwrap();
        p.send(Peers::ID, MessageKind::OneWay, 0, &header, b"");
    }
    for seq in 0..10 {
        echo(&site, seq).await;
    }
    // Twenty echoes by now; the last message is the second refused.
    assert!(
        eventually(|| {
            delivered() >= before + MESSAGES + 4 + 20 && server.metrics().claims_refused >= 2
        })
        .await
    );
    let m = server.metrics();
    assert_eq!(m.claims_refused, 2, "{m:?}");
    assert_eq!(kept.lock().unwrap().len(), 2 * PER_MESSAGE);
    let sites = server.site_count();
    assert!(sites <= 2 + 1024, "{sites} site entries");
    let grown = proc_status_bytes("VmRSS").saturating_sub(rss_before);
    eprintln!(
        "{} references: {after_flood} entries after the flood, {} handed to the handler, \
         {sites} entries with {} kept, {} messages refused, resident memory +{} KiB",
        MESSAGES as usize * PER_MESSAGE + 1_100 + 3 * PER_MESSAGE,
        handled.load(Ordering::Relaxed),
        2 * PER_MESSAGE,
        m.claims_refused,
        grown >> 10
    );
    assert!(grown < 32 << 20, "resident memory grew by {grown} bytes");
    // Everything goes once the references and the peer go.
    kept.lock().unwrap().clear();
    drop(p);
    assert!(
        eventually(|| server.site_count() <= 1).await,
        "{} sites left",
        server.site_count()
    );
    echo(&site, 99).await;
}

/// A request the forgery test's server answers.
#[derive(Serialize, Deserialize)]
struct Ask {
    seq: u64,
}
impl Message for Ask {
    const ID: u32 = 710;
}

/// Its reply.
#[derive(Serialize, Deserialize)]
struct Answer {
    seq: u64,
}
impl Message for Answer {
    const ID: u32 = 711;
}

/// The body of tests/hostile/peers.rs's `a_forged_claim_on_a_client_in_backoff_breaks_nothing` at `level`.
pub async fn a_forged_claim_on_a_client_in_backoff_breaks_nothing(level: &Level) {
    use std::time::Duration;
    let server = level.listening_node();
    // Counts every request handled (a resend delivered twice would show).
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    server
        .handle(move |ctx, a: Ask| {
            h.fetch_add(1, Ordering::SeqCst);
            let _ = ctx.reply(&Answer { seq: a.seq });
        })
        .unwrap();
    let relay = raw::Relay::to(&addr(&server));
    // A client that does not listen (only it can restore the channel),
    // reaching the server through the relay. Its handshakes wait as long as
    // the relay holds them: it does not try the server's own address
    // before the relay is released.
    let client = Node::builder()
        .configure(|c| {
            level.configure(c);
            c.handshake_timeout = Duration::from_secs(60);
        })
        .start()
        .unwrap();
    let site = client.site(&relay.address).unwrap();
    let ask = |seq: u64| {
        let site = site.clone();
        async move {
            site.request::<Ask, Answer>(&Ask { seq })
                .timeout(Duration::from_secs(30))
                .await
                .map(|r| r.msg.seq)
        }
    };
    assert_eq!(ask(0).await.unwrap(), 0);
    // Request 1 is answered, and the answer lost on the way: the server
    // holds it, unacknowledged, when the client is cut off.
    relay.lose_from_target();
    let sent = server.metrics().messages_sent;
    let pending = tokio::spawn(ask(1));
    assert!(eventually(|| server.metrics().messages_sent > sent).await);
    let closed = server.metrics().channels_closed;
    relay.cut_and_hold();
    assert!(eventually(|| server.metrics().channels_closed > closed).await);
    // A stranger claims the client's id, as a site that never worked with
    // the server, and keeps its channel if it gets one.
    let target = addr(&server);
    let (victim, keys) = (client.id(), level.keys());
    let forger = tokio::task::spawn_blocking(move || {
        raw::RawPeer::try_connect_keyed(&target, victim, Vec::new(), keys)
    })
    .await
    .unwrap();
    relay.release();
    let reply = pending.await.unwrap();
    assert_eq!(
        reply.as_ref().ok(),
        Some(&1),
        "request 1: {reply:?}; the forger got {:?}",
        forger.as_ref().map(|_| "a channel")
    );
    assert_eq!(ask(2).await.unwrap(), 2);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        3,
        "a request was handled twice"
    );
    assert!(
        matches!(forger, Err(sitenet_protocols::OpenError::Refused(_))),
        "the forged claim was accepted"
    );
    assert_eq!(server.metrics().unproven_claims_refused, 1);
}
