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
        .request::<Echo, EchoReply>(&Echo { seq: 2 })
        .timeout(PATIENCE)
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

/// A site given up on is reported with what kept it away: the node's
/// fault report (and log line) for the permanent failure names the refused
/// connection, not only the give-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_given_up_on_is_reported_with_what_kept_it_away() {
    let client = Node::builder()
        .configure(|c| c.give_up_after = Some(Duration::from_millis(500)))
        .start()
        .unwrap();
    let site = client.site(closed_port_address()).unwrap();
    let mut mon = client.monitor(&site);
    site.send(&Numbered { stream: 0, seq: 0 }).await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while let Some(e) = mon.next().await {
            if e.state == sitenet::FaultState::PermFailed {
                return;
            }
        }
    })
    .await
    .expect("given up in time");
    let reports = client.faults();
    let report = reports
        .iter()
        .rfind(|f| f.permanent)
        .expect("a permanent fault report");
    assert!(
        report.reason.contains("give-up") && report.reason.contains("refused"),
        "{}",
        report.reason
    );
}
