//! The idle spin of sitenet's runtime threads: a conversation of short
//! gaps keeps its threads polling instead of sleeping, and a process that
//! falls idle stops polling and gives its cores back.

mod common;

use std::time::Duration;

use common::*;
use sitenet::idle_spin::{self, SpinConfig};
use sitenet::services::{Echo, EchoReply};
use sitenet::Node;

const PATIENCE: Duration = Duration::from_secs(30);

/// User plus system CPU time of this process, from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // The clock tick is 100 Hz on every Linux this project runs on.
    Duration::from_millis(ticks * 10)
}

/// `n` echo round trips from a client node to a server node of this
/// process, one at a time.
fn converse(n: u64) -> (Node, Node) {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for seq in 0..n {
            let r = site
                .request::<Echo, EchoReply>(&Echo { seq })
                .timeout(PATIENCE)
                .await
                .expect("echo");
            assert_eq!(r.msg.seq, seq);
        }
    });
    (server, client)
}

#[test]
fn a_conversation_of_short_gaps_is_caught_by_the_spin() {
    // A window long enough that a busy test machine's gaps fit in it.
    assert!(idle_spin::set_idle_spin(SpinConfig::with_max(
        Duration::from_millis(5)
    )));
    let before = idle_spin::stats();
    let _nodes = converse(2_000);
    let after = idle_spin::stats();
    assert!(after.polls > before.polls, "{before:?} -> {after:?}");
    assert!(
        after.caught > before.caught,
        "no reply arrived while a thread polled: {before:?} -> {after:?}"
    );
}

#[test]
fn an_idle_process_stops_spinning() {
    let _nodes = converse(2_000);
    // Every window is spent within its maximum (100 µs) of the last I/O;
    // what follows is heartbeats at most.
    std::thread::sleep(Duration::from_millis(500));
    let (cpu0, spin0) = (cpu_time(), idle_spin::stats());
    std::thread::sleep(Duration::from_secs(2));
    let (cpu1, spin1) = (cpu_time(), idle_spin::stats());
    let used = cpu1.saturating_sub(cpu0);
    assert!(
        used < Duration::from_millis(400),
        "an idle process used {used:?} of CPU in 2 s ({spin0:?} -> {spin1:?})"
    );
    assert!(
        spin1.polls - spin0.polls < 20_000,
        "idle threads kept polling: {spin0:?} -> {spin1:?}"
    );
}

#[test]
fn spinning_off_never_polls() {
    assert!(idle_spin::set_idle_spin(SpinConfig::OFF));
    let _nodes = converse(500);
    assert_eq!(idle_spin::stats().polls, 0);
    // The setting is fixed once threads run.
    assert!(!idle_spin::set_idle_spin(SpinConfig::default()));
}
