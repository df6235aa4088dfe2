//! Every byte of output the node holds for sites that vanish is released
//! once they are given up: its output accounting returns to zero, and the
//! sites are forgotten.
//!
//! Readers that connect, ask for megabytes of replies and never read
//! leave the node holding the replies. Neither side holds a reference to
//! the other, so the node may begin to close a reader's idle channel
//! weakly before its requests are read; the replies then wait for a next
//! channel that only the reader could open, and its vanishing ends the
//! close in order, not as a failure. Whichever way a reader goes, what is
//! owed to it is handed back after the unreachable give-up: a byte left
//! charged to the node's output is room no later site ever gets, and a
//! site holding bytes is never forgotten.

use std::time::{Duration, Instant};

use crate::common::raw::RawPeer;
use crate::common::*;
use sitenet::Node;
use sitenet_protocols::Keyring;

/// Readers that never read, and then vanish (with fewer, a reader whose
/// channel is closing when its requests arrive is rarer).
const HOGS: usize = 32;

/// Waves of such readers, one after the other, on one node.
const ROUNDS: usize = 3;

/// How long the node may take to give a wave up (its give-up and linger
/// are a second each): generous, never a speed target.
const RELEASE_PATIENCE: Duration = Duration::from_secs(60);

/// Waits (bounded by [`RELEASE_PATIENCE`]) until `f` holds.
async fn within(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + RELEASE_PATIENCE;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

/// What the node still holds, site by site, for a failure message.
fn holders(server: &Node) -> String {
    let stats = server.stats();
    let mut s = format!(
        "output_bytes {} ({} sites live, {} idle, {} parked, {} reclaimed)",
        stats.output_bytes,
        stats.sites_live,
        stats.sites_idle,
        stats.sites_parked,
        stats.sites_reclaimed
    );
    s.push_str(&format!("\n  {:?}", server.metrics()));
    for site in stats
        .per_site
        .iter()
        .filter(|s| s.queue_depth > 0 || !s.connected)
    {
        s.push_str(&format!(
            "\n  {:?} connected {} queue_depth {} sent {:?} preemptions {} reconnects {}",
            site.site,
            site.connected,
            site.queue_depth,
            site.messages_sent,
            site.preemptions,
            site.reconnects
        ));
    }
    s
}

#[test]
fn output_held_for_vanished_readers_is_released_to_zero() {
    block_on(async {
        let server = quick_give_up_node();
        let target = addr(&server);
        let client = Node::builder().start().unwrap();
        echo(&client.site(&target).unwrap(), 0).await;

        for round in 0..ROUNDS {
            let hogs = RawPeer::echo_hogs(&target, HOGS, Keyring::default());
            // The node holds what it owes them.
            assert!(
                eventually(|| server.stats().output_bytes > (HOGS as u64) << 20).await,
                "round {round}: held {}",
                server.stats().output_bytes
            );
            let held = server.stats().output_bytes;

            drop(hogs);
            let started = Instant::now();
            assert!(
                within(|| server.stats().output_bytes == 0).await,
                "round {round}: {held} bytes held while the readers were there; \
                 after they went: {}",
                holders(&server)
            );
            assert!(
                within(|| server.site_count() <= 1).await,
                "round {round}: {} sites left: {}",
                server.site_count(),
                holders(&server)
            );
            eprintln!(
                "round {round}: {HOGS} vanished readers, {} MiB held, released in {:?}",
                held >> 20,
                started.elapsed()
            );
            // The node still answers.
            echo(&client.site(&target).unwrap(), round as u64 + 1).await;
        }
    });
}
