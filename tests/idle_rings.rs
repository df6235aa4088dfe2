//! An idle channel gives its ring memory back and takes it again when
//! traffic resumes: transport memory follows the traffic, not the number of
//! channels ever opened.

mod common;

use std::time::Duration;

use common::*;
use sitenet::{Node, NodeConfig, SendOptions};

fn quick_idle(c: &mut NodeConfig) {
    c.ring_idle = Duration::from_millis(50);
    c.heartbeat_interval = Duration::from_millis(20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_channel_shrinks_its_rings_and_grows_them_for_traffic() {
    const MIN: u64 = 4 * 1024;
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| {
            services(c);
            quick_idle(c);
        })
        .start()
        .unwrap();
    let sink = Sink::install(&server, 3, Some(1 << 20));
    let client = Node::builder().configure(quick_idle).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let big = || SendOptions::default().body(vec![7u8; 1 << 20]);
    site.send(&Numbered { stream: 0, seq: 0 })
        .options(big())
        .await
        .unwrap();
    site.flush(PATIENCE).await.unwrap();
    let full = 2 * 64 * 1024;
    assert!(client.stats().transport_bytes_peak >= full);
    // Idle: both sides shrink to two minimum rings.
    assert!(
        eventually(|| client.stats().transport_bytes == 2 * MIN).await,
        "client kept {} bytes of rings",
        client.stats().transport_bytes
    );
    assert!(eventually(|| server.stats().transport_bytes == 2 * MIN).await);
    // Traffic again, in both directions: a 1 MiB message crosses rings of
    // 4 KiB, which grow back, and a reply comes back.
    for seq in 1..3 {
        site.send(&Numbered { stream: 0, seq })
            .options(big())
            .await
            .unwrap();
    }
    echo(&site, 9).await;
    sink.wait().await;
    assert_eq!(
        sink.out_of_order.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        client.metrics().channels_opened,
        1,
        "same channel throughout"
    );
    let s = client.stats();
    assert!(s.transport_bytes <= s.transport_bytes_bound);
}
