//! 100,000 idle remote sites in one process, over the mem transport
//!: 1,000 clients each exchange messages with 100 servers and
//! go quiet; the servers keep an entry for every client that talked to
//! them (their linger time is long), parked. What the process holds for
//! them is measured with the counting allocator, and its resident memory
//! reported. `SITENET_IDLE_SITES` runs another count (a multiple of 100).
//!
//! Measured: 69.9 MB held, 699 bytes per site, 92 MiB resident (62 s in
//! a debug build on a 2-core machine); before parking, 275.9 MB (2,758
//! bytes per site), 305 MiB resident.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::counting::{Counting, LIVE};
use common::PATIENCE;
use sitenet::services::{Echo, EchoReply};
use sitenet::Node;

#[global_allocator]
static A: Counting = Counting;

/// Servers each client talks to.
const SERVERS: usize = 100;

/// A slot controller of its own, large enough that no channel waits: the
/// measure is of idle sites, not of the slot line.
fn slots() -> sitenet_transport::TransController {
    use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
    sitenet_transport::TransController::new(
        SlotConfig::new(1 << 20, (1 << 20) + 1).unwrap(),
        Box::new(DefaultPolicy::default()),
    )
}

#[test]
fn a_hundred_thousand_idle_sites_in_one_process() {
    let sites: usize = std::env::var("SITENET_IDLE_SITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let clients = sites.div_ceil(SERVERS);
    let t0 = Instant::now();
    let servers: Vec<Node> = (0..SERVERS)
        .map(|_| {
            let slots = slots();
            Node::builder()
                .listen(sitenet::Address::unique_mem("idle-100k").to_string())
                .configure(move |c| {
                    c.builtin_services = true;
                    c.linger = Duration::from_secs(3600);
                    c.trans_controller = Some(slots);
                })
                .start()
                .unwrap()
        })
        .collect();
    let addresses: Vec<String> = servers
        .iter()
        .map(|s| s.listen_addresses()[0].clone())
        .collect();
    let client_slots = slots();
    let live_before = LIVE.load(Ordering::Relaxed);
    let rss_before = common::proc_status_bytes("VmRSS");
    common::block_on(async {
        for i in 0..clients {
            let slots = client_slots.clone();
            let client = Node::builder()
                .configure(move |c| {
                    c.linger = Duration::from_millis(10);
                    c.trans_controller = Some(slots);
                })
                .start()
                .unwrap();
            let talks = addresses.iter().map(|a| {
                let site = client.site(a).unwrap();
                async move {
                    site.request::<Echo, EchoReply>(&Echo { seq: i as u64 })
                        .timeout(PATIENCE)
                        .await
                        .unwrap();
                }
            });
            futures::future::join_all(talks).await;
            // Every site dropped: each channel closes weakly after the
            // linger time; the client goes once they all did.
            assert!(
                client
                    .wait_until(|m| m.channels_closed >= SERVERS as u64, PATIENCE)
                    .await
            );
            client.shutdown(PATIENCE).await;
        }
    });
    for s in &servers {
        assert!(s
            .wait_until_blocking(
                |m| m.channels_closed >= m.channels_opened && m.parks >= m.channels_opened,
                PATIENCE
            )
            .unwrap());
    }
    let took = t0.elapsed();
    let (mut live, mut parked) = (0, 0);
    for s in &servers {
        let st = s.stats();
        live += st.sites_live;
        parked += st.sites_parked;
    }
    assert_eq!(live, clients * SERVERS);
    assert_eq!(parked, live, "every idle site is parked");
    let held = LIVE.load(Ordering::Relaxed) - live_before;
    let rss = common::proc_status_bytes("VmRSS");
    eprintln!(
        "{live} idle remote sites (parked: {parked}) on {SERVERS} servers, after {clients} \
         clients talked and went, in {:.1} s: {} bytes held for them ({} per site); \
         resident memory {} MiB ({} MiB more than before the clients)",
        took.as_secs_f64(),
        held,
        held / live as i64,
        rss >> 20,
        rss.saturating_sub(rss_before) >> 20,
    );
    assert!(
        held / (live as i64) <= 1024,
        "{} bytes per idle site",
        held / live as i64
    );
}
