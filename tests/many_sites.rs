//! Ten thousand sites in one process: the scale `mem:` channels exist for.
//! Each site is a node of its own (its own id, site table and ComObjects),
//! all on one runtime thread (`threads = 1`), talking over in-process
//! channels that take no file descriptor. One thread on purpose: ten
//! thousand nodes each sending one request are all hand-offs between
//! sites, and spread over two threads every hand-off crosses threads
//! (three times the CPU on the 2-core test machine; see
//! docs/architecture.md, "Threads").

mod common;

use common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Address, Node, NodeConfig};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_transport::TransController;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_sites_on_mem_exchange_messages_in_one_process() {
    const N: usize = 10_000;
    // mem channels use no descriptor: the slots bound memory here, and are
    // plenty for every channel at once (the stress shows preemption).
    let slots = TransController::new(
        SlotConfig::new(3 * N, 3 * N).unwrap(),
        Box::new(DefaultPolicy::default()),
    );
    let configure = |c: &mut NodeConfig| {
        c.trans_controller = Some(slots.clone());
        c.buffer_size = 4096;
        // Every channel is still open when the stats are read below: on a
        // loaded machine this test can outlast the default linger (10 s),
        // after which idle channels close by design.
        c.linger = std::time::Duration::from_secs(600);
        c.threads = Some(1);
        // Ten thousand handshakes on one thread: on a machine loaded by
        // other tests a handshake may wait its turn for long (a CI run
        // beside other heavy work failed one at the default 10 s). The
        // test is about scale, not speed.
        c.handshake_timeout = PATIENCE / 2;
        c.connect_timeout = PATIENCE / 2;
        c.handshake_silence = PATIENCE / 2;
    };
    let server = Node::builder()
        .listen(Address::unique_mem("ten-thousand").to_string())
        .configure(|c| {
            configure(c);
            services(c);
        })
        .start()
        .unwrap();
    let addr = addr(&server);
    let clients: Vec<Node> = (0..N)
        .map(|_| Node::builder().configure(configure).start().unwrap())
        .collect();
    // Every client asks at once, and each reply must come back to the site
    // that asked.
    let asks = clients.iter().enumerate().map(|(i, c)| {
        let site = c.site(&addr).unwrap();
        async move {
            let r = site
                .request::<Echo, EchoReply>(&Echo { seq: i as u64 })
                .timeout(PATIENCE)
                .await
                .unwrap_or_else(|e| panic!("client {i}: {e}"));
            assert_eq!(r.msg.seq, i as u64);
        }
    });
    futures::future::join_all(asks).await;
    assert_eq!(server.site_count(), N, "one entry per client site");
    let m = server.metrics();
    assert_eq!(m.messages_delivered, N as u64);
    assert_eq!(m.perm_failures, 0);
    // Each client got its reply, and nothing else.
    for c in &clients {
        assert_eq!(c.metrics().messages_delivered, 1);
    }
    let stats = server.stats();
    assert!(stats.transport_bytes_peak <= stats.transport_bytes_bound);
    let idle: Vec<_> = stats.per_site.iter().filter(|s| !s.connected).collect();
    assert_eq!(
        (stats.sites_live, stats.sites_idle),
        (N, 0),
        "sites without a channel: {idle:?}, server metrics {m:?}"
    );
}
