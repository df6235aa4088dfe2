//! Idle sites parked: a site with no channel and nothing
//! pending has no actor; what its ComObject must remember stays in its
//! entry, and the next message, accepted channel or deadline starts it
//! again. Nothing may be lost or reordered across a park: numbering and
//! session, counters, monitors, failures, reclaim, shutdown.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{addr, Numbered, Sink, PATIENCE};
use sitenet::{FaultState, Node, NodeEvent};

fn mem_server(name: &str, configure: impl FnOnce(&mut sitenet::NodeConfig)) -> Node {
    Node::builder()
        .listen(sitenet::Address::unique_mem(name).to_string())
        .configure(|c| {
            common::services(c);
            configure(c);
        })
        .start()
        .unwrap()
}

/// Waits until `node` counts `parks` parks at least.
fn parked(node: &Node, parks: u64) {
    assert!(
        node.wait_until_blocking(|m| m.parks >= parks, PATIENCE)
            .unwrap(),
        "parked {} times, not {parks}",
        node.metrics().parks
    );
}

/// A site parks when its channel goes with nothing pending, keeps its
/// numbering, its session and its counters, and the next send starts it
/// again: the messages after the park follow those before it, in order,
/// once each, in the same session (neither side numbers afresh).
#[test]
fn a_site_parks_without_a_channel_and_its_next_message_goes_on_where_it_stopped() {
    let server = mem_server("park-server", |_| {});
    let sink = Sink::install(&server, 20, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for seq in 0..10 {
        site.send(&Numbered { stream: 1, seq }).blocking().unwrap();
    }
    site.flush(PATIENCE).blocking().unwrap();
    let before = client.stats().per_site[0].clone();
    assert_eq!(before.messages_sent.iter().sum::<u64>(), 10);
    // The channel goes (as a preemption closes it): nothing is pending,
    // so the site parks.
    client.close_hard(&site);
    parked(&client, 1);
    let stats = client.stats();
    assert_eq!(stats.sites_parked, 1);
    assert_eq!(client.metrics().unparks, 0);
    let kept = &stats.per_site[0];
    assert!(!kept.connected);
    assert_eq!(kept.site, before.site);
    assert_eq!(kept.messages_sent, before.messages_sent);
    assert_eq!(kept.bytes_sent, before.bytes_sent);
    assert_eq!(kept.messages_received, before.messages_received);
    // The same entry: references before and after are equal.
    let again = client.site(addr(&server)).unwrap();
    assert_eq!(again, site);
    assert_eq!(site.fault_state(), FaultState::Ok);
    // The next message starts it again, and the numbering goes on.
    for seq in 10..20 {
        site.send(&Numbered { stream: 1, seq }).blocking().unwrap();
    }
    sink.wait_blocking();
    site.flush(PATIENCE).blocking().unwrap();
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(sink.total.load(std::sync::atomic::Ordering::Relaxed), 20);
    let (c, s) = (client.metrics(), server.metrics());
    assert!(c.unparks >= 1, "{c:?}");
    assert_eq!(s.duplicates, 0);
    assert_eq!(
        (c.peers_forgot, s.peers_forgot),
        (0, 0),
        "the session went on"
    );
    let after = &client.stats().per_site[0];
    assert_eq!(after.messages_sent.iter().sum::<u64>(), 20);
    assert!(after.reconnects >= 1);
}

/// Senders on many threads racing with a site that parks: each round
/// the site is parked first, then four threads send at once (the first
/// of them to wake it starts it again, the others find it running) while
/// its channel is closed again and again (it parks whenever it is idle
/// between their messages). Every message arrives, once, in order per
/// sender.
#[test]
fn messages_racing_a_park_are_neither_lost_nor_reordered() {
    const THREADS: u32 = 4;
    const ROUNDS: u64 = 20;
    const EACH: u64 = 10;
    let server = mem_server("park-race", |_| {});
    let sink = Sink::install(&server, u64::from(THREADS) * ROUNDS * EACH, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(common::echo(&site, 0));
    for round in 0..ROUNDS {
        client.close_hard(&site);
        parked(&client, round + 1);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let closer = {
            let (client, site, stop) = (client.clone(), site.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    client.close_hard(&site);
                    std::thread::yield_now();
                }
            })
        };
        let start = Arc::new(std::sync::Barrier::new(THREADS as usize));
        let senders: Vec<_> = (0..THREADS)
            .map(|stream| {
                let (site, start) = (site.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..EACH {
                        let seq = round * EACH + i;
                        site.send(&Numbered { stream, seq }).blocking().unwrap();
                        if i % 2 == 1 {
                            // Idle now and then: room for a park.
                            site.flush(PATIENCE).blocking().unwrap();
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        closer.join().unwrap();
        site.flush(PATIENCE).blocking().unwrap();
    }
    sink.wait_blocking();
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        sink.total.load(std::sync::atomic::Ordering::Relaxed),
        u64::from(THREADS) * ROUNDS * EACH
    );
    let m = client.metrics();
    assert!(m.parks >= ROUNDS && m.unparks >= ROUNDS, "{m:?}");
    assert_eq!(server.metrics().duplicates, 0);
    eprintln!("{} parks, {} unparks", m.parks, m.unparks);
}

/// The reclaim rule's deadline of a parked site is kept by the node (no
/// actor): an unreferenced site that talked and went quiet is forgotten
/// after the linger time.
#[test]
fn a_parked_site_is_reclaimed_at_its_deadline() {
    let quick = |c: &mut sitenet::NodeConfig| c.linger = Duration::from_millis(100);
    let server = mem_server("park-reclaim", quick);
    let client = Node::builder().configure(quick).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(common::echo(&site, 1));
    drop(site);
    // Linger, a weak close, the site parks with its reclaim deadline, and
    // the node's one timer starts it again to forget it.
    assert!(client
        .wait_until_blocking(|m| m.sites_reclaimed >= 1, PATIENCE)
        .unwrap());
    assert_eq!(client.site_count(), 0);
    let m = client.metrics();
    assert!(m.parks >= 1 && m.unparks >= 1, "{m:?}");
    // The server's entry went the same way.
    assert!(server
        .wait_until_blocking(|m| m.sites_reclaimed >= 1, PATIENCE)
        .unwrap());
}

/// A parked site that cannot be called back and lost its peer is given up
/// at its deadline, by the node's timer: monitors hear of it.
#[test]
fn a_parked_site_is_given_up_at_its_deadline() {
    let server = mem_server("park-give-up", |c| {
        c.unreachable_give_up = Duration::from_millis(300);
        c.linger = Duration::from_secs(3600);
    });
    let mut events = server.events();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(common::echo(&site, 1));
    // The client dies without a word: the server's entry loses its
    // channel, cannot call the client back, and parks until its give-up.
    client.crash_on_shutdown();
    client.shutdown_blocking(PATIENCE).unwrap();
    common::block_on(common::next_matching(
        &mut events,
        |e| matches!(e, NodeEvent::SiteDown { site, .. } if *site == Some(client.id())),
    ));
    let m = server.metrics();
    assert!(m.parks >= 1 && m.unparks >= 1, "{m:?}");
    let down = server.site_by_id(client.id()).unwrap();
    assert_eq!(down.fault_state(), FaultState::PermFailed);
}

/// Killing a parked site fails it at once: its monitors hear it, and it
/// hands back nothing (it held nothing).
#[test]
fn a_parked_site_can_be_killed_and_monitored() {
    let server = mem_server("park-kill", |_| {});
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(common::echo(&site, 1));
    client.close_hard(&site);
    parked(&client, 1);
    let mut monitor = client.monitor(&site);
    client.kill(&site);
    common::block_on(async {
        use futures::StreamExt;
        loop {
            let ev = tokio::time::timeout(PATIENCE, monitor.next())
                .await
                .unwrap()
                .unwrap();
            if ev.state == FaultState::PermFailed {
                break;
            }
        }
    });
    let (reason, back) = site.failure().unwrap();
    assert_eq!(reason, sitenet::SiteFailure::Killed);
    assert!(back.not_sent.is_empty() && back.maybe_delivered.is_empty());
    assert!(site
        .send(&Numbered { stream: 0, seq: 0 })
        .blocking()
        .is_err());
    // Failed, it parks again (its reclaim deadline waits there).
    parked(&client, 2);
}

/// A node with parked sites shuts down at once, with nothing pending,
/// and starts none of them again (not even when their last references
/// go).
#[test]
fn a_node_with_parked_sites_shuts_down_and_starts_none_again() {
    let servers: Vec<Node> = (0..3)
        .map(|_| mem_server("park-shutdown", |_| {}))
        .collect();
    let client = Node::builder().start().unwrap();
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(addr(s)).unwrap())
        .collect();
    for s in &sites {
        common::block_on(common::echo(s, 1));
        client.close_hard(s);
    }
    parked(&client, 3);
    let report = client.shutdown_blocking(PATIENCE).unwrap();
    assert_eq!(report, sitenet::ShutdownReport::default());
    let unparks = client.metrics().unparks;
    // The last references go: a running site would be poked (its reclaim
    // rule); a parked one of a stopped node is not started for it.
    drop(sites);
    assert_eq!(client.metrics().unparks, unparks);
    assert_eq!(client.stats().sites_parked, 3);
}

/// A request whose reply is awaited keeps its site from parking: the
/// channel comes back for the reply, which arrives.
#[test]
fn a_site_awaiting_a_reply_does_not_park() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Slow;
    impl sitenet::Message for Slow {
        const ID: u32 = 7001;
    }
    let server = mem_server("park-request", |_| {});
    let (tx, rx) = std::sync::mpsc::channel::<sitenet::Responder>();
    let tx = std::sync::Mutex::new(tx);
    server
        .handle(move |ctx, _: Slow| {
            tx.lock().unwrap().send(ctx.responder().unwrap()).unwrap();
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let asked = {
        let site = site.clone();
        std::thread::spawn(move || {
            site.request::<Slow, Slow>(&Slow)
                .timeout(PATIENCE)
                .blocking()
        })
    };
    let responder = rx.recv_timeout(PATIENCE).unwrap();
    client.close_hard(&site);
    // The reply goes once the client is back (it reconnects for it).
    responder.reply(&Slow).unwrap();
    asked.join().unwrap().unwrap();
}

/// A tracked message completes before its site may park (the
/// acknowledgement is taken first), and one sent to a parked site
/// completes too.
#[test]
fn tracked_messages_complete_across_a_park() {
    let server = mem_server("park-tracked", |_| {});
    let _sink = Sink::install(&server, 2, None);
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(async {
        let d = site
            .send(&Numbered { stream: 0, seq: 0 })
            .tracked()
            .await
            .unwrap();
        tokio::time::timeout(PATIENCE, d).await.unwrap().unwrap();
    });
    client.close_hard(&site);
    parked(&client, 1);
    common::block_on(async {
        let d = site
            .send(&Numbered { stream: 0, seq: 1 })
            .tracked()
            .await
            .unwrap();
        tokio::time::timeout(PATIENCE, d).await.unwrap().unwrap();
    });
    assert!(client.metrics().unparks >= 1);
}

/// Addresses a descriptor teaches a parked site reach what it keeps: the
/// site starts again to learn them, parks again, and its book (in
/// `Node::stats`) lists them.
#[test]
fn a_parked_site_learns_the_addresses_a_descriptor_names() {
    let server = Node::builder()
        .listen(sitenet::Address::unique_mem("park-learn").to_string())
        .listen("tcp:127.0.0.1:0")
        .configure(common::services)
        .start()
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    common::block_on(common::echo(&site, 1));
    client.close_hard(&site);
    parked(&client, 1);
    let known = client.stats().per_site[0].addresses.clone();
    // A descriptor naming the server at an address it did not list.
    let mut d = server.descriptor();
    d.addresses.push("tcp:127.0.0.1:9".into());
    let same = client.site_from_descriptor(&d).unwrap();
    assert!(same.same_site(&site));
    parked(&client, 2);
    let learnt = client.stats().per_site[0].addresses.clone();
    assert!(learnt.len() > known.len(), "{known:?} then {learnt:?}");
    assert!(learnt.iter().any(|a| a == "tcp:127.0.0.1:9"));
}
