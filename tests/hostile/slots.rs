//! What one source address may hold of a node's channel slots and of its
//! waiting line: a swarm of raw peers from 127.0.0.1, a fresh site id per
//! connection, holds every slot and every place in line and takes each one
//! back as soon as the node frees it; an honest site from 127.0.0.2 still
//! gets in and is answered — under both admission policies, and with
//! everyone a member of one cookie.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::hostile::Level;
use crate::common::*;
use crate::slot_hogs::{ping_from, Hogs};
use sitenet::Node;
use sitenet_protocols::slots::{Admission, DefaultPolicy, SlotConfig};
use sitenet_protocols::Cookie;
use sitenet_transport::TransController;

const HARD: usize = 6;
const LINE: usize = 6;
/// More hogs than slots and places together: some always wait to retake
/// whatever frees.
const HOGS: usize = HARD + LINE + 6;
const PINGS: usize = 4;

const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const HONEST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A listening node at `level` whose channels take slots of a table of
/// `HARD` slots and `LINE` places under `admission`.
fn server(level: &Level, admission: Admission) -> (Node, TransController) {
    let mut cfg = SlotConfig::new(HARD - 1, HARD).unwrap();
    cfg.line = LINE;
    cfg.admission = admission;
    let slots = TransController::new(cfg, Box::new(DefaultPolicy::default()));
    let level = level.clone();
    let ctrl = slots.clone();
    let node = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(move |c| {
            services(c);
            level.configure(c);
            c.trans_controller = Some(ctrl.clone());
            // A preempted hog never answers CLOSE_HARD: its slot comes back
            // after this.
            c.close_timeout = Duration::from_millis(300);
        })
        .start()
        .expect("node starts");
    (node, slots)
}

/// The attack at `level` under `admission`: the swarm fills every slot and
/// every place, then the honest site pings `PINGS` times; each must be
/// answered.
async fn one_source_cannot_hold_every_slot_and_place(level: Level, admission: Admission) {
    let (node, slots) = server(&level, admission);
    let target = addr(&node);
    let hogs = Hogs::start(HOGS, ATTACKER, &target, level.keys());
    assert!(
        eventually(|| {
            let s = slots.stats();
            s.in_use == HARD && s.in_line == LINE
        })
        .await,
        "{admission}: the swarm never filled the table: {:?}",
        slots.stats()
    );
    let mut answered = 0;
    let mut failures = Vec::new();
    for _ in 0..PINGS {
        let ping = ping_from(HONEST, &target, level.keys());
        match tokio::time::timeout(Duration::from_secs(10), ping).await {
            Ok(Ok(_)) => answered += 1,
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("no answer within 10 s".into()),
        }
    }
    let hogged = (
        hogs.counts.slots.load(Ordering::Relaxed),
        hogs.counts.places.load(Ordering::Relaxed),
        hogs.counts.refused.load(Ordering::Relaxed),
    );
    drop(hogs);
    assert_eq!(
        answered,
        PINGS,
        "{admission}: honest pings answered {answered} of {PINGS} ({failures:?}); \
         hogs' slots, places, refusals: {hogged:?}; table: {:?}",
        slots.stats()
    );
    node.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_cannot_hold_every_slot_and_place_under_share() {
    one_source_cannot_hold_every_slot_and_place(Level::open(), Admission::Share).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_cannot_hold_every_slot_and_place_under_fifo() {
    one_source_cannot_hold_every_slot_and_place(Level::open(), Admission::Fifo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_source_cannot_hold_every_slot_and_place() {
    let level = Level::cookie(Cookie::new(rand::random()));
    one_source_cannot_hold_every_slot_and_place(level, Admission::Share).await;
}
