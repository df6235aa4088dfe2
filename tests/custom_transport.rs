//! A transport plugged in from outside sitenet, end to
//! end: `pipe:NAME` over `tokio::io::duplex` pairs, written only against
//! the public API. Messages, requests and replies, a large message in
//! fragments, channel cuts with nothing lost, the slot limit, the
//! handshake caps and silence deadline for accepted plugged channels, the
//! address book's ranking, and the errors a user meets.

mod common;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{AddressError, Message, Node, NodeConfig, NodeError, NodeEvent, SiteDescriptor};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_transport::fault::FaultInjector;
use sitenet_transport::plug::{
    BoxFuture, RegisterError, StreamChannel, Transport, TransportChannel, TransportListener,
};
use sitenet_transport::TransController;
use tokio::io::{AsyncReadExt, DuplexStream};
use tokio::sync::mpsc;

type Names = Arc<Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>>;

/// `pipe:NAME`: named listeners of this process, a duplex pair per
/// connection. Each test makes its own, so names never collide.
#[derive(Default)]
struct Pipes {
    names: Names,
}

struct PipeListener {
    name: String,
    queue: tokio::sync::Mutex<mpsc::Receiver<DuplexStream>>,
    names: Names,
    clients: AtomicU64,
}

/// Small pipes: a large message crosses them in many writes and reads.
const PIPE_CAPACITY: usize = 16 * 1024;

impl Pipes {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A raw connection to the listener at `name`, speaking no sitenet:
    /// what a hostile or broken peer holds.
    async fn raw(&self, name: &str) -> io::Result<DuplexStream> {
        let q = self.names.lock().unwrap().get(name).cloned();
        let q = q.ok_or(io::ErrorKind::ConnectionRefused)?;
        let (ours, theirs) = tokio::io::duplex(PIPE_CAPACITY);
        q.send(theirs)
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        Ok(ours)
    }
}

impl Transport for Pipes {
    fn connect<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            let s = self.raw(name).await?;
            Ok(Box::new(StreamChannel::new(s, name)) as Box<dyn TransportChannel>)
        })
    }

    fn bind(&self, name: &str) -> io::Result<Box<dyn TransportListener>> {
        let mut names = self.names.lock().unwrap();
        if names.contains_key(name) {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        let (tx, rx) = mpsc::channel(64);
        names.insert(name.to_string(), tx);
        Ok(Box::new(PipeListener {
            name: name.to_string(),
            queue: tokio::sync::Mutex::new(rx),
            names: self.names.clone(),
            clients: AtomicU64::new(1),
        }))
    }
}

impl TransportListener for PipeListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            let s = self.queue.lock().await.recv().await;
            let s = s.ok_or(io::ErrorKind::ConnectionAborted)?;
            let n = self.clients.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(StreamChannel::new(s, format!("(client {n})")))
                as Box<dyn TransportChannel>)
        })
    }

    fn local_address(&self) -> io::Result<String> {
        Ok(self.name.clone())
    }
}

impl Drop for PipeListener {
    fn drop(&mut self) {
        self.names.lock().unwrap().remove(&self.name);
    }
}

fn quick(c: &mut NodeConfig) {
    c.reconnect_min = Duration::from_millis(5);
    c.reconnect_max = Duration::from_millis(50);
    c.reopen_after_peer_hard_close = Duration::from_millis(20);
}

/// A node serving echo and listening at `pipe:NAME`.
fn server(pipes: &Arc<Pipes>, name: &str, f: impl FnOnce(&mut NodeConfig)) -> Node {
    Node::builder()
        .transport("pipe", pipes.clone())
        .listen(format!("pipe:{name}"))
        .configure(|c| {
            services(c);
            quick(c);
            f(c);
        })
        .start()
        .expect("server starts")
}

fn client(pipes: &Arc<Pipes>, f: impl FnOnce(&mut NodeConfig)) -> Node {
    Node::builder()
        .transport("pipe", pipes.clone())
        .configure(|c| {
            quick(c);
            f(c);
        })
        .start()
        .expect("client starts")
}

/// The peer's end of `client`'s working channel to `server`.
fn channel_to(client: &Node, server: &Node) -> Option<String> {
    let id = server.id().to_string();
    client
        .stats()
        .per_site
        .into_iter()
        .find(|s| s.site.as_deref() == Some(id.as_str()))
        .and_then(|s| s.channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_requests_cross_a_plugged_transport() {
    const N: u64 = 2_000;
    let pipes = Pipes::new();
    let server = server(&pipes, "server", |_| {});
    assert_eq!(server.listen_addresses(), ["pipe:server"]);
    let sink = Sink::install(&server, N, None);
    let client = client(&pipes, |_| {});
    let mut events = client.events();
    let site = client.site("pipe:server").unwrap();
    for seq in 0..N {
        site.send(&Numbered { stream: 1, seq }).await.unwrap();
    }
    for seq in 0..50 {
        echo(&site, seq).await;
    }
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    assert_eq!(site.id(), Some(server.id()));
    assert_eq!(channel_to(&client, &server).as_deref(), Some("pipe:server"));
    let mut up = None;
    while let Some(ev) = events.try_next() {
        if let NodeEvent::SiteUp { transport, .. } = ev {
            up = Some(transport);
        }
    }
    assert_eq!(up, Some("pipe"));
    // The server's end names the peer as the transport's listener does.
    let back = server.site_by_id(client.id());
    assert!(back.is_some());
    let peer = channel_to(&server, &client).unwrap_or_default();
    assert!(peer.starts_with("pipe:(client "), "{peer}");
    client.shutdown(PATIENCE).await;
    server.shutdown(PATIENCE).await;
}

/// Checks a large body's contents.
#[derive(Serialize, Deserialize)]
struct Big {
    len: u64,
}
impl Message for Big {
    const ID: u32 = 200;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_message_crosses_in_fragments_and_arrives_whole() {
    const LEN: usize = 6 << 20;
    let pipes = Pipes::new();
    let server = server(&pipes, "big", |_| {});
    let (tx, mut rx) = mpsc::unbounded_channel();
    server
        .handle(move |ctx, b: Big| {
            let body = ctx.body();
            let ok = body.len() as u64 == b.len
                && body.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8);
            let _ = tx.send(ok);
        })
        .unwrap();
    let client = client(&pipes, |c| c.buffer_size = 16 * 1024);
    let site = client.site("pipe:big").unwrap();
    let body: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    site.send(&Big { len: LEN as u64 })
        .body(Bytes::from(body))
        .await
        .unwrap();
    // A small one after it, on the same channel.
    echo(&site, 1).await;
    let ok = tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap();
    assert_eq!(ok, Some(true), "the body arrived whole and unchanged");
    let m = client.metrics();
    assert!(m.writes > 100, "many writes through 16 KiB pipes: {m:?}");
}

#[test]
fn cut_channels_reconnect_and_lose_nothing() {
    const N: u64 = 20_000;
    const CUTS: u64 = 10;
    let faults = FaultInjector::from_env_or_random(sitenet_transport::fault::SEED_ENV);
    let _report = faults.report_on_panic();
    let pipes = Pipes::new();
    let server = server(&pipes, "cuts", |_| {});
    let sink = Sink::install(&server, N, None);
    let client = client(&pipes, |c| c.fault_injector = Some(faults.clone()));
    let site = client.site("pipe:cuts").unwrap();
    faults.random_cuts(40_000);
    let body = Bytes::from(vec![0x5A; 300]);
    for seq in 0..N {
        site.send(&Numbered {
            stream: (seq % 3) as u32,
            seq: seq / 3,
        })
        .body(body.clone())
        .blocking()
        .unwrap();
    }
    let server_handle = server.clone();
    client
        .wait_until_blocking(
            move |m| m.channels_closed >= CUTS || server_handle.metrics().messages_delivered >= N,
            PATIENCE,
        )
        .unwrap();
    faults.stop_random_cuts();
    site.flush(PATIENCE).blocking().unwrap();
    sink.wait_blocking();
    let cuts = faults.cuts();
    eprintln!("{}: {cuts} cuts", faults.seed_report());
    assert!(cuts >= 1, "the fault injector cut plugged channels");
    assert_eq!(sink.total.load(Ordering::Acquire), N, "every message once");
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0, "in order");
    assert_eq!(server.metrics().duplicates, 0);
    assert!(client.metrics().channels_opened > 1, "it reconnected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_plugged_channels_take_the_nodes_slots() {
    const CLIENTS: u32 = 8;
    const PER_CLIENT: u64 = 100;
    let slots = TransController::new(
        SlotConfig::new(1, 2).unwrap(),
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(20),
        }),
    );
    let pipes = Pipes::new();
    let server = server(&pipes, "slots", |c| {
        c.trans_controller = Some(slots.clone())
    });
    let sink = Sink::install(&server, CLIENTS as u64 * PER_CLIENT, None);
    let clients: Vec<Node> = (0..CLIENTS).map(|_| client(&pipes, |_| {})).collect();
    let sends = clients.iter().enumerate().map(|(stream, c)| {
        let site = c.site("pipe:slots").unwrap();
        async move {
            for seq in 0..PER_CLIENT {
                site.send(&Numbered {
                    stream: stream as u32,
                    seq,
                })
                .await
                .unwrap();
            }
        }
    });
    futures::future::join_all(sends).await;
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    let s = slots.stats();
    assert!(s.peak_in_use <= 2, "hard limit exceeded: {s:?}");
    assert!(
        s.total_preemptions() + s.accepts_refused > 0,
        "8 clients on 2 slots without a preemption or a refusal: {s:?}"
    );
    assert_eq!(server.metrics().accepts_refused, s.accepts_refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_plugged_peers_meet_the_handshake_caps_and_deadline() {
    let pipes = Pipes::new();
    let server = server(&pipes, "hostile", |c| {
        c.max_pending_handshakes = 2;
        c.handshake_silence = Duration::from_millis(200);
    });
    // Three raw connections that never speak: the cap closes the oldest
    // at once, the silence deadline the others.
    let mut raws = Vec::new();
    for _ in 0..3 {
        raws.push(pipes.raw("hostile").await.unwrap());
    }
    for mut r in raws {
        let mut sink = Vec::new();
        let read = tokio::time::timeout(PATIENCE, r.read_to_end(&mut sink)).await;
        assert!(read.is_ok(), "the node closed the silent channel");
    }
    let m = server.metrics();
    assert!(m.handshakes_refused >= 1, "{m:?}");
    assert!(m.handshakes_silent >= 1, "{m:?}");
    assert_eq!(m.channels_opened, 0);
    assert_eq!(server.site_count(), 0);
    // A real peer still gets in.
    let client = client(&pipes, |_| {});
    echo(&client.site("pipe:hostile").unwrap(), 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugged_addresses_rank_after_tcp_and_need_the_transport() {
    let pipes = Pipes::new();
    let server = Node::builder()
        .transport("pipe", pipes.clone())
        .listen("pipe:both")
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .start()
        .unwrap();
    let d = server.descriptor();
    // With the transport: both addresses, tcp first.
    let a = client(&pipes, |_| {});
    let site = a.site_from_descriptor(&d).unwrap();
    echo(&site, 1).await;
    assert!(
        channel_to(&a, &server).unwrap().starts_with("tcp:"),
        "{:?}",
        channel_to(&a, &server)
    );
    let addresses = a.stats().per_site[0].addresses.clone();
    assert_eq!(addresses.len(), 2, "{addresses:?}");
    assert!(addresses[0].starts_with("tcp:") && addresses[1] == "pipe:both");
    // Without it: the user's descriptor naming it is refused, clearly...
    let b = Node::builder().configure(quick).start().unwrap();
    let e = b.site_from_descriptor(&d).unwrap_err();
    assert!(
        matches!(&e, NodeError::Address(AddressError::Unregistered { scheme, .. }) if scheme == "pipe"),
        "{e}"
    );
    // ...while the peer's listen list naming it is skipped.
    let tcp = d.addresses.iter().find(|a| a.starts_with("tcp:")).unwrap();
    let site = b.site(tcp).unwrap();
    echo(&site, 2).await;
    let learned = b.stats().per_site[0].addresses.clone();
    assert_eq!(learned, std::slice::from_ref(tcp), "no pipe: address kept");
    // A descriptor of only the plugged address uses it.
    let only_pipe = SiteDescriptor {
        id: d.id,
        addresses: vec!["pipe:both".into()],
    };
    let c = client(&pipes, |_| {});
    echo(&c.site_from_descriptor(&only_pipe).unwrap(), 3).await;
    assert_eq!(channel_to(&c, &server).as_deref(), Some("pipe:both"));
}

#[test]
fn a_user_meets_typed_errors() {
    let pipes = Pipes::new();
    // No such scheme plugged in.
    let plain = Node::builder().start().unwrap();
    let e = plain.site("pipe:x").unwrap_err();
    assert!(
        matches!(&e, NodeError::Address(AddressError::Unregistered { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("no transport is registered"), "{e}");
    let e = Node::builder().listen("pipe:x").start().unwrap_err();
    assert!(
        matches!(&e, NodeError::Address(AddressError::Unregistered { .. })),
        "{e}"
    );
    // Built-in names, bad names and a scheme twice.
    for (scheme, want) in [
        ("tcp", RegisterError::BuiltIn("tcp".into())),
        ("Pipe", RegisterError::Name("Pipe".into())),
    ] {
        let e = Node::builder()
            .transport(scheme, pipes.clone())
            .start()
            .unwrap_err();
        assert!(matches!(&e, NodeError::Transport(r) if *r == want), "{e}");
    }
    let mut cfg = NodeConfig::default();
    cfg.transports.register("pipe", pipes.clone()).unwrap();
    let e = Node::builder()
        .transport("pipe", pipes.clone())
        .config(cfg.clone())
        .start()
        .unwrap_err();
    assert!(
        matches!(&e, NodeError::Transport(RegisterError::Taken(_))),
        "{e}"
    );
    // Through the configuration alone, and an address the transport has.
    let n = Node::builder()
        .config(cfg)
        .listen("pipe:taken")
        .start()
        .unwrap();
    assert_eq!(n.listen_addresses(), ["pipe:taken"]);
    let e = client(&pipes, |_| {});
    let err = Node::builder()
        .transport("pipe", pipes.clone())
        .listen("pipe:taken")
        .start()
        .unwrap_err();
    assert!(matches!(&err, NodeError::Bind { .. }), "{err}");
    // Empty after the scheme.
    let err = e.site("pipe:").unwrap_err();
    assert!(
        matches!(&err, NodeError::Address(AddressError::Invalid { .. })),
        "{err}"
    );
}
