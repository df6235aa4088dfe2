//! A node that gave a site up for good (here it killed it) refuses every
//! channel that site opens, as `Closing`, for as long as it keeps the
//! failed entry (its application holds a reference to it). The site fails
//! that node in turn and hands back what it held for it, instead of
//! calling again after each backoff with its messages queued for ever.

mod common;

use common::{addr, echo, eventually, listening_node, Numbered, PATIENCE};
use sitenet::{DeliveryError, Node, SiteFailure};
use sitenet_protocols::RefuseReason;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_refused_as_closing_fails_the_refusing_node_and_hands_back_what_it_held() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    echo(&site, 1).await;
    // The server gives its client up, and keeps the failed entry.
    let held = server
        .site_by_id(client.id())
        .expect("the server knows the site that called it");
    server.kill(&held);
    assert!(eventually(|| held.failure().is_some()).await);
    // The client's next message needs a channel, which the server refuses.
    let pending = site
        .send(&Numbered { stream: 0, seq: 1 })
        .tracked()
        .await
        .unwrap();
    let e = tokio::time::timeout(PATIENCE, pending)
        .await
        .expect("handed back, not held for ever")
        .unwrap_err();
    assert!(
        matches!(
            e,
            DeliveryError::NotSent { .. } | DeliveryError::MaybeDelivered { .. }
        ),
        "{e}"
    );
    let (reason, _) = site.failure().expect("the client failed the server");
    assert_eq!(reason, SiteFailure::Refused(RefuseReason::Closing));
    assert!(held.failure().is_some(), "held until here");
}
