//! The waiting line over real sockets: a server whose channel
//! slots are full tells a client that completed its handshake to wait and
//! lets it in when a slot frees, instead of refusing it into a reconnect
//! storm. More clients than slots are all served, nothing is lost and,
//! with a line long enough, no accept is refused.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig};
use sitenet_protocols::slots::{Admission, DefaultPolicy, SlotConfig};
use sitenet_protocols::{Capabilities, Speaks};
use sitenet_transport::TransController;

fn controller(weak: usize, hard: usize, f: impl FnOnce(&mut SlotConfig)) -> TransController {
    let mut cfg = SlotConfig::new(weak, hard).unwrap();
    cfg.preempt_interval = Duration::from_millis(5);
    cfg.turn = Duration::from_millis(50);
    cfg.turn_idle = Duration::from_millis(10);
    f(&mut cfg);
    TransController::new(
        cfg,
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(20),
        }),
    )
}

/// One slot to connect and one to accept, `Fifo`, and a policy that never
/// preempts within a test: holders keep their slots until they go.
fn never_preempting() -> TransController {
    TransController::new(
        {
            let mut c = SlotConfig::new(1, 2).unwrap();
            c.admission = Admission::Fifo;
            c
        },
        Box::new(DefaultPolicy {
            min_hold: Duration::from_secs(3600),
        }),
    )
}

fn quick(c: &mut NodeConfig) {
    c.reconnect_min = Duration::from_millis(5);
    c.reconnect_max = Duration::from_millis(100);
    c.reopen_after_peer_hard_close = Duration::from_millis(20);
}

fn server_on(slots: &TransController) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            quick(c);
            c.trans_controller = Some(slots.clone());
        })
        .start()
        .unwrap()
}

/// Two client nodes that each send one message to `server`, see it
/// acknowledged and keep their sites: their channels stay, and so do the
/// slots they hold. The nodes, and the sites they hold.
async fn hold_two_slots(server: &Node) -> (Vec<Node>, Vec<sitenet::SiteRef>) {
    let holders: Vec<Node> = (0..2)
        .map(|_| Node::builder().configure(quick).start().unwrap())
        .collect();
    let mut held = Vec::new();
    for (stream, h) in holders.iter().enumerate() {
        let site = h.site(addr(server)).unwrap();
        site.send(&Numbered {
            stream: stream as u32,
            seq: 0,
        })
        .await
        .unwrap();
        site.flush(PATIENCE).await.unwrap();
        held.push(site);
    }
    (holders, held)
}

/// `clients` clients each stream `per_client` numbered messages to the
/// server, then ask it one request; returns the client nodes.
async fn serve(server: &Node, clients: u32, per_client: u64, client: impl Fn() -> Node) {
    let sink = Sink::install(server, clients as u64 * per_client, None);
    let nodes: Vec<Node> = (0..clients).map(|_| client()).collect();
    let sites: Vec<_> = nodes
        .iter()
        .map(|n| n.site(addr(server)).unwrap())
        .collect();
    let work = sites.iter().zip(0..).map(|(site, stream)| async move {
        for seq in 0..per_client {
            site.send(&Numbered { stream, seq }).await.unwrap();
        }
        site.flush(PATIENCE).await.unwrap();
    });
    futures::future::join_all(work).await;
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    assert_eq!(
        sink.total.load(Ordering::Relaxed),
        clients as u64 * per_client
    );
    let waited: u64 = nodes.iter().map(|n| n.metrics().line_waits).sum();
    assert!(waited > 0, "no client was told to wait");
    for n in nodes {
        n.shutdown(Duration::from_secs(5)).await;
    }
}

/// The waiting line's rule: 24 clients on 3 slots, each served in turn from the
/// line, under both admission policies: everything arrives in order, no
/// accept is refused (the line holds them all), slots are granted from
/// the line, and the hard limit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_clients_than_slots_are_all_served_from_the_line_and_none_is_refused() {
    for admission in Admission::ALL {
        let slots = controller(2, 3, |c| {
            c.line = 64;
            c.admission = admission;
        });
        let server = server_on(&slots);
        serve(&server, 24, 200, || {
            Node::builder().configure(quick).start().unwrap()
        })
        .await;
        let s = slots.stats();
        assert_eq!(s.accepts_refused, 0, "{admission}: {s:?}");
        assert!(
            s.grants > 0,
            "{admission}: nobody let in from the line: {s:?}"
        );
        assert!(s.peak_line > 0, "{admission}: {s:?}");
        assert!(
            s.peak_in_use <= 3,
            "{admission}: hard limit exceeded: {s:?}"
        );
        assert_eq!(s.admission, admission.name());
        let m = server.metrics();
        assert!(
            m.line_told_to_wait > 0 && m.line_granted > 0,
            "{admission}: {m:?}"
        );
        assert_eq!(m.accepts_refused, 0, "{admission}");
        assert_eq!(m.duplicates, 0, "{admission}");
        server.shutdown(Duration::from_secs(5)).await;
    }
}

/// A client of a build without the line is refused at the hard limit as
/// before, and still gets everything through by retrying; so does every
/// client once the line is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_wait_and_a_full_line_are_refused_as_before_losing_nothing() {
    let old = Speaks {
        caps: Capabilities::ALL.without(Capabilities::LINE),
        ..Speaks::CURRENT
    };
    let slots = controller(1, 2, |c| c.line = 64);
    let server = server_on(&slots);
    serve(&server, 8, 50, || {
        // Half of them of the older build.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let b = Node::builder().configure(quick);
        let b = if N.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
            b.speak_for_tests(old)
        } else {
            b
        };
        b.start().unwrap()
    })
    .await;
    assert!(slots.stats().accepts_refused > 0, "{:?}", slots.stats());
    server.shutdown(Duration::from_secs(5)).await;
    // A line of one: the rest are refused, and retry.
    let slots = controller(1, 2, |c| c.line = 1);
    let server = server_on(&slots);
    serve(&server, 8, 50, || {
        Node::builder().configure(quick).start().unwrap()
    })
    .await;
    let s = slots.stats();
    assert!(s.accepts_refused > 0 && s.grants > 0, "{s:?}");
    assert!(s.peak_line <= 1, "{s:?}");
    server.shutdown(Duration::from_secs(5)).await;
}

/// A client that waits longer than its give-up time leaves the line (its
/// connection closed, the server's entry reclaimed), retries after its
/// backoff — one entry per site however often it comes back — and is let
/// in once a slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_leaves_the_line_and_comes_back_in_turn() {
    // The two holders keep their slots until they go.
    let slots = never_preempting();
    let server = server_on(&slots);
    let sink = Sink::install(&server, 3, None);
    // Held on to: their channels stay, and so do their slots.
    let (holders, held) = hold_two_slots(&server).await;
    let patient = Node::builder()
        .configure(|c| {
            quick(c);
            c.line_give_up = Duration::from_millis(200);
        })
        .start()
        .unwrap();
    let site = patient.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 9, seq: 0 }).await.unwrap();
    assert!(
        eventually(|| patient.metrics().line_give_ups >= 2).await,
        "{:?}",
        patient.metrics()
    );
    assert!(
        eventually(|| slots.stats().line_left >= 1).await,
        "the server never saw the client leave: {:?}",
        slots.stats()
    );
    let s = slots.stats();
    assert!(s.peak_line <= 1, "one entry per site: {s:?}");
    assert_eq!(s.accepts_refused, 0);
    // A holder goes: its slot frees, and the patient client gets in.
    drop(held);
    holders[0].shutdown(Duration::from_secs(5)).await;
    sink.wait().await;
    site.flush(PATIENCE).await.unwrap();
    patient.shutdown(Duration::from_secs(5)).await;
    holders[1].shutdown(Duration::from_secs(5)).await;
    server.shutdown(Duration::from_secs(5)).await;
}

/// A site the server knows is not forgotten while it waits in the
/// server's line, however long: its entry is counted as on its way and
/// its ComObject told, so the session (and its numbering) is there when
/// its turn comes. Before, a wait longer than the linger time let the
/// reclaim rule forget the site, and the client found a fresh session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_waiting_in_line_longer_than_the_linger_is_not_forgotten() {
    let slots = never_preempting();
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            quick(c);
            c.trans_controller = Some(slots.clone());
            c.linger = Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let sink = Sink::install(&server, 4, None);
    let client = Node::builder().configure(quick).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 9, seq: 0 }).await.unwrap();
    site.flush(PATIENCE).await.unwrap();
    // The client closes its channel (orderly); the server keeps the site's
    // session, nothing pending, for its linger time.
    client.close_hard(&site);
    assert!(eventually(|| slots.stats().in_use == 0).await);
    // Two holders take both slots and keep them.
    let (holders, held) = hold_two_slots(&server).await;
    // The client comes back: it waits in line, three linger times.
    site.send(&Numbered { stream: 9, seq: 1 }).await.unwrap();
    assert!(eventually(|| slots.stats().in_line == 1).await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        server.metrics().sites_reclaimed,
        0,
        "forgotten while waiting"
    );
    // Its turn: the same session goes on.
    drop(held);
    holders[0].shutdown(Duration::from_secs(5)).await;
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    assert_eq!(client.metrics().peers_forgot, 0);
    client.shutdown(Duration::from_secs(5)).await;
    holders[1].shutdown(Duration::from_secs(5)).await;
    server.shutdown(Duration::from_secs(5)).await;
}

/// A client let in from the line that is done — its last `SiteRef` gone,
/// nothing pending — closes its channel at once, so the next in line gets
/// the slot without waiting for the client's next timer (its delayed ack,
/// 20 ms by default: 7 s in all for a drain of 10,000 clients); here every
/// timer of both sides is a minute away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_let_in_from_the_line_and_done_gives_its_slot_back_at_once() {
    // Over the weak limit the preemption policy never takes a slot back
    // (min_hold): only a quiet holder giving way to the line does.
    let mut cfg = SlotConfig::new(1, 2).unwrap();
    cfg.preempt_interval = Duration::from_millis(5);
    cfg.turn = Duration::from_secs(600);
    cfg.turn_idle = Duration::from_millis(10);
    let slots = TransController::new(
        cfg,
        Box::new(DefaultPolicy {
            min_hold: Duration::from_secs(3600),
        }),
    );
    // No heartbeat wakes the client, and its own ack waits a minute.
    let quiet = |c: &mut NodeConfig| {
        quick(c);
        c.heartbeat_interval = Duration::from_secs(60);
        c.silence_timeout = Duration::from_secs(300);
    };
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            quiet(c);
            c.trans_controller = Some(slots.clone());
        })
        .start()
        .unwrap();
    let sink = Sink::install(&server, 3, None);
    // Two holders take both slots, then go quiet (and keep their sites).
    let (holders, held) = hold_two_slots(&server).await;
    // The client waits in line; a quiet holder gives way; it is served.
    let client = Node::builder()
        .configure(|c| {
            quiet(c);
            c.ack_delay = Duration::from_secs(60);
        })
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    site.send(&Numbered { stream: 9, seq: 0 }).await.unwrap();
    site.flush(PATIENCE).await.unwrap();
    sink.wait().await;
    let m = client.metrics();
    assert_eq!(m.line_waits, 1, "it came in from the line: {m:?}");
    // Done: its channel closes now, not at a timer a minute away.
    drop(site);
    assert!(
        client
            .wait_until(|m| m.weak_closes_started >= 1, Duration::from_secs(20))
            .await,
        "the client let in from the line kept its slot after its work"
    );
    assert!(eventually(|| slots.stats().in_use == 1).await);
    drop(held);
    for n in holders.into_iter().chain([client, server]) {
        n.shutdown(Duration::from_secs(5)).await;
    }
}

/// A client whose one slot to connect is held by its open attempt waiting
/// in a full server's line gives that slot to a site waiting at the client
/// (`SlotConfig::line_yield`, `PreemptReason::LineWait`): its message to
/// a second server goes at once, not after the wait's give-up deadline
/// (an hour here). The attempt leaves the line and asks again, and its
/// message is delivered once the server has room. Before, the attempt was
/// no candidate for preemption; nodes whose slots all waited in each
/// other's lines stalled together (the simulator's
/// `attempts_waiting_in_each_others_lines_do_not_stall_their_nodes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_waiting_in_a_peers_line_gives_its_slot_to_a_site_waiting_here() {
    // The full server keeps its holders.
    let full_slots = never_preempting();
    let full = server_on(&full_slots);
    let full_sink = Sink::install(&full, 3, None);
    let (holders, held) = hold_two_slots(&full).await;
    let free = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(quick)
        .start()
        .unwrap();
    let free_sink = Sink::install(&free, 1, None);
    let client_slots = controller(1, 2, |c| {
        c.admission = Admission::Fifo;
        c.line_yield = Duration::from_millis(100);
    });
    let client = Node::builder()
        .configure(|c| {
            quick(c);
            c.line_give_up = Duration::from_secs(3600);
            c.trans_controller = Some(client_slots.clone());
        })
        .start()
        .unwrap();
    let waiting = client.site(addr(&full)).unwrap();
    waiting.send(&Numbered { stream: 9, seq: 0 }).await.unwrap();
    assert!(eventually(|| full_slots.stats().in_line == 1).await);
    assert_eq!(client_slots.stats().in_use, 1, "the attempt holds the slot");
    let other = client.site(addr(&free)).unwrap();
    other.send(&Numbered { stream: 1, seq: 0 }).await.unwrap();
    free_sink.wait().await;
    other.flush(PATIENCE).await.unwrap();
    let m = client.metrics();
    assert!(m.line_yields >= 1, "{m:?}");
    assert_eq!(m.line_give_ups, 0, "{m:?}");
    let s = client_slots.stats();
    assert!(
        s.preemptions
            .iter()
            .any(|&(r, n)| r == "line_wait" && n >= 1),
        "{s:?}"
    );
    // The server gets room: the message that waited is delivered, once.
    drop(held);
    holders[0].shutdown(Duration::from_secs(5)).await;
    full_sink.wait().await;
    waiting.flush(PATIENCE).await.unwrap();
    assert_eq!(full_sink.out_of_order.load(Ordering::Relaxed), 0);
    client.shutdown(Duration::from_secs(5)).await;
    free.shutdown(Duration::from_secs(5)).await;
    holders[1].shutdown(Duration::from_secs(5)).await;
    full.shutdown(Duration::from_secs(5)).await;
}
