//! Site references inside messages: a `SiteRef` serialises as its site's
//! descriptor; the receiver gets a usable `SiteRef` from its own site
//! table, the same one as any other reference to that site, and can talk
//! to that third site; a `SiteRef` decoded outside a delivered message is
//! an error, not a panic. `==` and the hash of a `SiteRef` never change
//! (a reference keys a map); `same_site` follows the table's merges.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use common::{addr, Numbered, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, SiteRef};
use tokio::sync::mpsc;

/// "Talk to this site": carries a reference to a third one.
#[derive(Debug, Serialize, Deserialize)]
struct Introduce {
    peer: SiteRef,
}
impl Message for Introduce {
    const ID: u32 = 700;
}

fn listening() -> Node {
    Node::builder().listen("tcp:127.0.0.1:0").start().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_passed_along_is_usable_and_is_the_same_site() {
    let c = common::listening_node();
    let sink = common::Sink::install(&c, 1, None);
    let b = listening();
    // B learns of C only through the message; it sends C a message.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    b.handle(move |_ctx, i: Introduce| {
        i.peer
            .send(&Numbered { stream: 0, seq: 0 })
            .try_now()
            .unwrap();
        let _ = tx.lock().unwrap().send(i.peer);
    })
    .unwrap();
    let a = Node::builder().start().unwrap();
    let to_c = a.site(addr(&c)).unwrap();
    common::echo(&to_c, 1).await; // A knows C's id now
    let to_b = a.site(addr(&b)).unwrap();
    to_b.send(&Introduce { peer: to_c.clone() }).await.unwrap();
    sink.wait().await;
    let got = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.id(), Some(c.id()));
    // Sent again, it resolves to the same entry at B: one site, one queue.
    let sites_before = b.site_count();
    to_b.send(&Introduce { peer: to_c.clone() }).await.unwrap();
    let again = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.id(), got.id());
    assert_eq!(again, got, "the same SiteRef");
    assert_eq!(b.site_count(), sites_before, "no second entry for C");
    // And a reference B makes itself by C's address is that site too, once
    // its handshake proved who answers there (its messages follow it to the
    // one entry, in order).
    let by_address = b.site(addr(&c)).unwrap();
    common::echo(&by_address, 2).await;
    assert_eq!(by_address.id(), Some(c.id()));
    assert!(by_address.same_site(&got), "one site, one queue");
    // A reference made after the merge is the entry that stays: equal to
    // the one passed along, and the same key in a map.
    let after = b.site(addr(&c)).unwrap();
    assert!(after == got || after == by_address, "{after:?}");
    #[allow(clippy::mutable_key_type)] // the hash is the entry's address only
    let mut seen = std::collections::HashMap::new();
    seen.insert(got.clone(), "got");
    seen.insert(by_address.clone(), "by address");
    assert_eq!(seen.len(), 2, "references made apart stay apart as keys");
    assert!(seen.contains_key(&after));
}

/// A site the receiver already talked to by address is known by id: a
/// reference to it arriving later is that same `SiteRef` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_to_a_site_known_by_address_is_that_site() {
    let c = common::listening_node();
    let b = listening();
    let by_address = b.site(addr(&c)).unwrap();
    common::echo(&by_address, 1).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    b.handle(move |_ctx, i: Introduce| {
        let _ = tx.lock().unwrap().send(i.peer);
    })
    .unwrap();
    let sites_before = b.site_count();
    let a = Node::builder().start().unwrap();
    let to_c = a.site(addr(&c)).unwrap();
    common::echo(&to_c, 1).await;
    let to_b = a.site(addr(&b)).unwrap();
    to_b.send(&Introduce { peer: to_c }).await.unwrap();
    let got = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, by_address, "the same site, the same queues");
    assert_eq!(b.site_count(), sites_before + 1, "only A is new at B");
}

/// A reference that arrives for a site the receiver knows only by an
/// address it never reached is not bound to that address on the sender's
/// word (it may be stale, or a lie): it gets an entry of its own until a
/// handshake proves who answers at the address; from then on the two
/// references are one site, one queue, and what each queued is delivered
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_to_a_site_known_only_by_an_unproven_address_joins_it_once_proven() {
    let c = common::listening_node();
    let sink = common::Sink::install(&c, 200, None);
    let b = listening();
    let by_address = b.site(addr(&c)).unwrap(); // never used yet
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    b.handle(move |_ctx, i: Introduce| {
        let _ = tx.lock().unwrap().send(i.peer);
    })
    .unwrap();
    let a = Node::builder().start().unwrap();
    let to_c = a.site(addr(&c)).unwrap();
    common::echo(&to_c, 1).await;
    a.site(addr(&b))
        .unwrap()
        .send(&Introduce { peer: to_c })
        .await
        .unwrap();
    let by_reference = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    // Both queue at once; each stream arrives whole and in order.
    for seq in 0..100 {
        by_address.send(&Numbered { stream: 1, seq }).await.unwrap();
        by_reference
            .send(&Numbered { stream: 2, seq })
            .await
            .unwrap();
    }
    sink.wait().await;
    assert_eq!(sink.out_of_order.load(Ordering::Relaxed), 0);
    assert!(common::eventually(|| by_address.same_site(&by_reference)).await);
    assert_eq!(by_address.id(), Some(c.id()));
}

/// `SiteRef` keys a `HashMap`: equal references hash alike, clones equal
/// their original, and a reference's key does not move when the table
/// learns that two entries are one site (regression: `==` used to follow
/// merges, so `SiteRef` could not be `Hash`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_refs_key_a_map_across_a_merge() {
    let c = common::listening_node();
    let b = listening();
    let by_address = b.site(addr(&c)).unwrap(); // an entry by address only
    #[allow(clippy::mutable_key_type)] // the hash is the entry's address only
    let mut load = std::collections::HashMap::new();
    load.insert(by_address.clone(), 1u32);
    // C's id, learnt from a descriptor: a second entry until proven.
    let by_id = b
        .site_from_descriptor(&sitenet::SiteDescriptor {
            id: c.id(),
            addresses: vec![addr(&c)],
        })
        .unwrap();
    *load.entry(by_id.clone()).or_default() += 10;
    common::echo(&by_address, 1).await; // proves the id: the entries merge
    assert!(common::eventually(|| by_address.same_site(&by_id)).await);
    // Both keys are where they were put, whatever the merge did.
    assert_eq!(load.get(&by_address), Some(&1));
    assert_eq!(load.get(&by_address.clone()), Some(&1));
    assert_eq!(load[&by_id], 10);
    // References handed out now are one entry, one key.
    let (x, y) = (b.site(addr(&c)).unwrap(), b.site_by_id(c.id()).unwrap());
    assert_eq!(x, y);
    #[allow(clippy::mutable_key_type)] // the hash is the entry's address only
    let mut now = std::collections::HashSet::new();
    now.insert(x);
    assert!(now.contains(&y));
}

#[test]
fn a_site_ref_decoded_outside_a_delivered_message_is_an_error() {
    let a = Node::builder().start().unwrap();
    let d = format!("{}@tcp:127.0.0.1:9", a.id());
    let bytes = rmp_serde::to_vec(&d).unwrap();
    let r = rmp_serde::from_slice::<SiteRef>(&bytes);
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("only in a message sitenet delivers"));
}

#[test]
fn a_site_ref_whose_id_is_unknown_cannot_be_sent() {
    let a = Node::builder().start().unwrap();
    let never = a.site("tcp:127.0.0.1:9").unwrap();
    assert!(never.descriptor().is_none());
    let e = rmp_serde::to_vec(&Introduce { peer: never }).unwrap_err();
    assert!(e.to_string().contains("not known yet"), "{e}");
}
