//! What a layer above sitenet keeps with a node: one extension per type,
//! made at most once however many threads ask, found from any handle of
//! the node, and dropped when the node stops (so an extension holding its
//! node does not keep it for ever); and a `WeakNode`, which refers to a
//! node without keeping it running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sitenet::{Node, WeakNode};

/// An extension that holds its node, counting its drops.
struct Holder {
    _node: Node,
    drops: Arc<AtomicUsize>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn holder(node: &Node, drops: &Arc<AtomicUsize>) -> Arc<Holder> {
    node.extension_or_init(|n| Holder {
        _node: n.clone(),
        drops: drops.clone(),
    })
}

#[test]
fn an_extension_is_made_at_most_once_when_two_threads_ask_at_once() {
    let node = Node::builder().start().unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(2));
    let askers: Vec<_> = (0..2)
        .map(|_| {
            let (node, made, start) = (node.clone(), made.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                node.extension_or_init(|_| {
                    made.fetch_add(1, Ordering::SeqCst);
                    // A slow init: the other thread asks meanwhile.
                    std::thread::sleep(Duration::from_millis(50));
                    String::from("state")
                })
            })
        })
        .collect();
    let got: Vec<Arc<String>> = askers.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(made.load(Ordering::SeqCst), 1);
    assert!(Arc::ptr_eq(&got[0], &got[1]));
    assert!(Arc::ptr_eq(&node.extension::<String>().unwrap(), &got[0]));
    assert!(node.extension::<u64>().is_none());
}

#[test]
fn an_extension_holding_its_node_is_dropped_when_the_node_shuts_down() {
    let node = Node::builder().start().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    drop(holder(&node, &drops));
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    node.shutdown_blocking(Duration::from_secs(30)).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert!(node.extension::<Holder>().is_none());
    // Made after the node stopped: returned, not kept.
    drop(holder(&node, &drops));
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[test]
fn an_extension_holding_its_node_is_dropped_with_the_last_handle() {
    let node = Node::builder().start().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    drop(holder(&node, &drops));
    drop(node);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_weak_node_upgrades_while_a_handle_lives_and_not_after() {
    let node = Node::builder().start().unwrap();
    let weak: WeakNode = node.downgrade();
    assert_eq!(weak.id(), node.id());
    let again = weak.upgrade().expect("the node runs");
    assert_eq!(again.id(), node.id());
    drop(node);
    // The upgraded handle keeps the node running.
    assert!(weak.clone().upgrade().is_some());
    drop(again);
    assert!(weak.upgrade().is_none());
    assert!(format!("{weak:?}").contains("running: false"));
}

#[test]
fn a_weak_node_does_not_upgrade_once_the_node_shut_down() {
    let node = Node::builder().start().unwrap();
    let weak = node.downgrade();
    node.shutdown_blocking(Duration::from_secs(30)).unwrap();
    assert!(weak.upgrade().is_none());
}

#[test]
fn a_handlers_node_downgrades_to_the_running_node() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Hi;
    impl sitenet::Message for Hi {
        const ID: u32 = 910;
    }
    let node = Node::builder().start().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    node.handle(move |ctx, _: Hi| {
        let _ = tx.lock().unwrap().send(ctx.node().downgrade());
    })
    .unwrap();
    node.local_site().send(&Hi).try_now().unwrap();
    let weak = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(weak.upgrade().map(|n| n.id()), Some(node.id()));
    drop(node);
    assert!(weak.upgrade().is_none());
}
