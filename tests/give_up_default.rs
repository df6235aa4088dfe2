//! A site that stays unreachable is given up on: after 60 s by default
//! (`NodeConfig::give_up_after`), so a peer whose process was killed
//! becomes `SiteDown` and what waited on it fails, rather than the site
//! being retried for ever.

mod common;

use std::time::Duration;

use common::cli::{cookie, start_node_with};
use common::*;
use futures::StreamExt;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, NodeConfig, NodeEvent, RequestError, SiteFailure};

#[test]
fn a_node_gives_up_on_an_unreachable_site_after_sixty_seconds_by_default() {
    assert_eq!(
        NodeConfig::default().give_up_after,
        Some(Duration::from_secs(60))
    );
    let node = Node::builder().start().unwrap();
    assert_eq!(
        node.config().give_up_after,
        Some(Duration::from_secs(60)),
        "the default reaches the started node"
    );
}

/// A `sitenet node` killed with SIGKILL (no leave, no close): its site is
/// temporarily failed, then, after the give-up, down; a request waiting on
/// it fails with the give-up then, not at its own (much longer) timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peer_is_declared_down_after_the_give_up() {
    let (mut peer, v) = start_node_with(&["--listen", "tcp:127.0.0.1:0"]);
    let address = v["listen"][0].as_str().unwrap().to_string();
    let give_up = Duration::from_secs(1);
    let client = Node::builder()
        .configure(|c| {
            c.cookies = vec![cookie()];
            c.give_up_after = Some(give_up);
        })
        .start()
        .unwrap();
    let mut events = client.events();
    let site = client.site(&address).unwrap();
    echo(&site, 1).await;

    peer.0.kill().expect("SIGKILL the peer");
    peer.0.wait().unwrap();
    let e = site
        .request::<Echo, EchoReply>(&Echo { seq: 2 }, PATIENCE)
        .await
        .unwrap_err();
    assert_eq!(e, RequestError::SiteFailed(SiteFailure::GaveUp(give_up)));
    let down = tokio::time::timeout(PATIENCE, async {
        while let Some(ev) = events.next().await {
            if let NodeEvent::SiteDown { reason, .. } = ev {
                return reason;
            }
        }
        panic!("events ended");
    })
    .await
    .expect("SiteDown in time");
    assert_eq!(down, SiteFailure::GaveUp(give_up));
}
