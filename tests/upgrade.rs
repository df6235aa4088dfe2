//! Upgrades node by node: nodes of different builds
//! agree on the highest version both speak and use only the capabilities
//! both have; nodes with no version in common refuse each other for good.
//! The older and newer builds are played by current nodes told to offer
//! other versions and capabilities (`NodeBuilder::speak_for_tests`).

mod common;

use common::*;
use sitenet::{Node, NodeEvent, SiteFailure};
use sitenet_protocols::{Capabilities, OpenError, Speaks, VersionRange, PROTOCOL_VERSION};

/// A build one version behind in features: the current version, none of
/// the optional features (no packed frames, no LEAVING).
fn older() -> Speaks {
    Speaks {
        versions: VersionRange::exactly(PROTOCOL_VERSION),
        caps: Capabilities::NONE,
    }
}

/// A build one version ahead: it also speaks the next version and has a
/// feature this build has never heard of.
fn newer() -> Speaks {
    Speaks {
        versions: VersionRange::new(PROTOCOL_VERSION, PROTOCOL_VERSION + 1),
        caps: Capabilities::ALL.union(Capabilities::from_bits(1 << 40)),
    }
}

fn node_speaking(speaks: Speaks) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(services)
        .speak_for_tests(speaks)
        .start()
        .expect("node starts")
}

/// Bursts of small messages both ways between a current node and an
/// older and a newer one: everything arrives in order, and no side ever
/// reads a frame it did not agree to (the older node would close the
/// channel as a protocol error on a PACKED frame: a burst of small
/// messages is packed wherever both sides agreed to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_and_a_newer_node_interoperate_with_the_current_one() {
    const BURST: u64 = 2_000;
    let current = listening_node();
    let (old, new) = (node_speaking(older()), node_speaking(newer()));
    let old_id = old.id();
    for peer in [old, new] {
        let at_peer = Sink::install(&peer, BURST, None);
        let at_current = Sink::install(&current, BURST, None);
        let to_peer = current.site(addr(&peer)).unwrap();
        let to_current = peer.site(addr(&current)).unwrap();
        echo(&to_peer, 1).await;
        echo(&to_current, 2).await;
        for seq in 0..BURST {
            to_peer
                .send(&Numbered { stream: 1, seq })
                .try_now()
                .unwrap();
            to_current
                .send(&Numbered { stream: 2, seq })
                .try_now()
                .unwrap();
        }
        at_peer.wait().await;
        at_current.wait().await;
        for n in [&current, &peer] {
            let m = n.metrics();
            assert_eq!(m.protocol_errors, 0, "{m:?}");
        }
        assert_eq!(
            at_peer
                .out_of_order
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(
            at_current
                .out_of_order
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // An operator sees what each channel agreed: nothing with the
        // older build, this build's features with the newer (its unknown
        // one dropped).
        let agreed = if peer.id() == old_id {
            "none"
        } else {
            "packed,leaving,line"
        };
        let peer_id = peer.id().to_string();
        let shows = || {
            current.stats().per_site.iter().any(|s| {
                s.site.as_deref() == Some(peer_id.as_str())
                    && s.capabilities.as_deref() == Some(agreed)
            })
        };
        assert!(eventually(shows).await, "{:?}", current.stats().per_site);
        current.remove_handler::<Numbered>();
    }
}

/// LEAVING is a capability: a node that shuts down announces it only to
/// peers that agreed to it. The newer node hears the current one leave
/// (down, shut down); the older one sees its channel close as after a
/// crash (unreachable, then retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_peer_that_agreed_to_leaving_hears_a_graceful_shutdown() {
    let current = listening_node();
    let (old, new) = (node_speaking(older()), node_speaking(newer()));
    let (mut old_events, mut new_events) = (old.events(), new.events());
    echo(&old.site(addr(&current)).unwrap(), 1).await;
    echo(&new.site(addr(&current)).unwrap(), 1).await;
    current.shutdown(PATIENCE).await;
    let ev = next_matching(&mut new_events, |e| {
        matches!(
            e,
            NodeEvent::SiteDown { .. } | NodeEvent::SiteUnreachable { .. }
        )
    })
    .await;
    assert!(
        matches!(
            ev,
            NodeEvent::SiteDown {
                reason: SiteFailure::ShutDown,
                ..
            }
        ),
        "{ev:?}"
    );
    let ev = next_matching(&mut old_events, |e| {
        matches!(
            e,
            NodeEvent::SiteDown { .. } | NodeEvent::SiteUnreachable { .. }
        )
    })
    .await;
    assert!(matches!(ev, NodeEvent::SiteUnreachable { .. }), "{ev:?}");
    // It was not sent a LEAVING it could not read.
    assert_eq!(old.metrics().protocol_errors, 0);
}

/// Nodes with no version in common fail each other permanently, whichever
/// calls, and say which versions each speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_no_common_version_refuse_each_other_for_good() {
    let far = node_speaking(Speaks {
        versions: VersionRange::exactly(PROTOCOL_VERSION + 2),
        caps: Capabilities::ALL,
    });
    let current = listening_node();
    let expected =
        |local, peer| SiteFailure::Open(OpenError::VersionMismatch { local, peer }).to_string();
    let far_range = VersionRange::exactly(PROTOCOL_VERSION + 2);
    let ours = Speaks::CURRENT.versions;
    let why = failure_reaching(&current, &far).await;
    assert_eq!(why, expected(ours, far_range));
    assert!(why.contains("upgrade the older node"), "{why}");
    let why = failure_reaching(&far, &current).await;
    assert_eq!(why, expected(far_range, ours));
}

/// Two versions of one message type, as two builds of an application
/// would have them (same id; the newer adds a field at the end).
mod put {
    use serde::{Deserialize, Serialize};

    pub mod v1 {
        use super::*;
        #[derive(Debug, Serialize, Deserialize)]
        pub struct Put {
            pub key: String,
        }
        impl sitenet::Message for Put {
            const ID: u32 = 4_000;
        }
    }

    /// v2 as an application that followed docs/evolving-messages.md.
    pub mod v2 {
        use super::*;
        #[derive(Debug, Serialize, Deserialize)]
        pub struct Put {
            pub key: String,
            #[serde(default)]
            pub ttl_s: Option<u32>,
        }
        impl sitenet::Message for Put {
            const ID: u32 = 4_000;
            const NAMED_FIELDS: bool = true;
        }
    }

    /// v2 without named fields: what the rule prevents.
    pub mod v2_positional {
        use super::*;
        #[derive(Debug, Serialize, Deserialize)]
        pub struct Put {
            pub key: String,
            #[serde(default)]
            pub ttl_s: Option<u32>,
        }
        impl sitenet::Message for Put {
            const ID: u32 = 4_000;
        }
    }
}

/// docs/evolving-messages.md: a field added at the end with a default is
/// read by both versions when the type has named fields — the older node
/// skips it, the newer defaults it; without names the older node cannot
/// decode the longer message (it reaches `on_unhandled`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_type_gains_a_field_without_breaking_older_nodes() {
    use std::sync::mpsc;
    let (old, new) = (listening_node(), listening_node());
    let (old_tx, old_rx) = mpsc::channel();
    let old_tx = std::sync::Mutex::new(old_tx);
    old.handle(move |_ctx, m: put::v1::Put| {
        let _ = old_tx.lock().unwrap().send(m.key);
    })
    .unwrap();
    let (bad_tx, bad_rx) = mpsc::channel();
    let bad_tx = std::sync::Mutex::new(bad_tx);
    old.on_unhandled(move |u| {
        let _ = bad_tx.lock().unwrap().send(u.type_id);
    });
    let (new_tx, new_rx) = mpsc::channel();
    let new_tx = std::sync::Mutex::new(new_tx);
    new.handle(move |_ctx, m: put::v2::Put| {
        let _ = new_tx.lock().unwrap().send((m.key, m.ttl_s));
    })
    .unwrap();
    let to_old = new.site(addr(&old)).unwrap();
    let to_new = old.site(addr(&new)).unwrap();
    // Newer to older: the added field is skipped.
    to_old
        .send(&put::v2::Put {
            key: "a".into(),
            ttl_s: Some(30),
        })
        .await
        .unwrap();
    assert_eq!(old_rx.recv_timeout(PATIENCE).unwrap(), "a");
    // Older to newer: the added field takes its default.
    to_new
        .send(&put::v1::Put { key: "b".into() })
        .await
        .unwrap();
    assert_eq!(
        new_rx.recv_timeout(PATIENCE).unwrap(),
        ("b".to_string(), None)
    );
    // Without named fields the older node cannot read the longer message.
    to_old
        .send(&put::v2_positional::Put {
            key: "c".into(),
            ttl_s: Some(30),
        })
        .await
        .unwrap();
    assert_eq!(bad_rx.recv_timeout(PATIENCE).unwrap(), 4_000);
    assert!(old_rx.try_recv().is_err());
}
