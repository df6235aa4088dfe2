//! Delegation (`Ctx::forward`, docs/protocol.md §2.6): the site a request
//! was sent to hands it on; the final handler sees the original sender and
//! answers it directly — three messages, not four or six; a forwarded
//! request forwarded again keeps its origin; request ids are unguessable,
//! which is what keeps a third site from forging the answer.

mod common;

use std::sync::{Arc, Mutex};

use common::{addr, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

#[derive(Debug, Serialize, Deserialize)]
struct Lookup {
    key: String,
}
impl Message for Lookup {
    const ID: u32 = 600;
}

#[derive(Debug, Serialize, Deserialize)]
struct Found {
    value: String,
    /// Who the final handler saw as the sender.
    asker: Option<String>,
    /// Who it saw forward the request (`Ctx::forwarded_by`).
    via: Option<String>,
}
impl Message for Found {
    const ID: u32 = 601;
}

fn node() -> Node {
    Node::builder().listen("tcp:127.0.0.1:0").start().unwrap()
}

/// A site that forwards every `Lookup` to `next`.
fn relay(next: &Node) -> Node {
    let n = node();
    let to = n.site(addr(next)).unwrap();
    n.handle(move |ctx, l: Lookup| {
        ctx.forward(&to, &l).unwrap();
    })
    .unwrap();
    n
}

/// The site that owns the keys: answers whoever it sees as the sender.
fn owner() -> Node {
    let n = node();
    n.handle(|ctx, l: Lookup| {
        let _ = ctx.reply(&Found {
            value: format!("value of {}", l.key),
            asker: ctx.sender_id().map(|id| id.to_string()),
            via: ctx
                .forwarded_by()
                .and_then(|s| s.id())
                .map(|id| id.to_string()),
        });
    })
    .unwrap();
    n
}

fn sent(nodes: &[&Node]) -> u64 {
    nodes.iter().map(|n| n.metrics().messages_sent).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_handler_answers_the_origin_directly_in_three_messages() {
    let c = owner();
    let b = relay(&c);
    let a = node();
    let site = a.site(addr(&b)).unwrap();
    let r = site
        .request::<Lookup, Found>(&Lookup { key: "k".into() })
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.value, "value of k");
    assert_eq!(
        r.msg.asker,
        Some(a.id().to_string()),
        "C saw A as the sender"
    );
    assert_eq!(r.msg.via, Some(b.id().to_string()), "and B forwarded it");
    // Request, forward, reply: three messages in all (acks aside).
    assert!(
        a.wait_until(|_| sent(&[&a, &b, &c]) >= 3, PATIENCE).await,
        "{}",
        sent(&[&a, &b, &c])
    );
    assert_eq!(sent(&[&a, &b, &c]), 3);
    assert_eq!(b.metrics().messages_sent, 1, "B only forwarded");
    assert_eq!(c.metrics().messages_sent, 1, "C answered A, not B");
    // On the wire: three frames that carry messages, one per hop.
    let frames: u64 = [&a, &b, &c]
        .iter()
        .map(|n| n.metrics().data_frames_sent)
        .sum();
    assert_eq!(frames, 3, "data frames");
    let direct = a
        .site(addr(&c))
        .unwrap()
        .request::<Lookup, Found>(&Lookup { key: "k".into() })
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(direct.msg.via, None, "asked directly: no forwarder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_forwarded_again_keeps_its_origin() {
    let d = owner();
    let c = relay(&d);
    let b = relay(&c);
    let a = node();
    let site = a.site(addr(&b)).unwrap();
    let r = site
        .request::<Lookup, Found>(&Lookup { key: "x".into() })
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.asker, Some(a.id().to_string()));
    // The origin is what the forwarders claim; the owner also sees who
    // actually delivered the request: the last forwarder.
    assert_eq!(r.msg.via, Some(c.id().to_string()));
    // D counts its reply once its own thread has written it, which may be
    // just after A read it (sites run on several threads).
    assert!(d.wait_until(|m| m.messages_sent >= 1, PATIENCE).await);
    assert_eq!(d.metrics().messages_sent, 1);
}

/// A request B makes of itself (`Node::local_site`), forwarded by B's own
/// handler: its origin is B's descriptor, by which C answers B directly.
/// Two messages cross the network: the forward and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_the_local_site_forwarded_is_answered_by_the_final_site() {
    let c = owner();
    let b = relay(&c);
    let r = b
        .local_site()
        .request::<Lookup, Found>(&Lookup { key: "own".into() })
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.value, "value of own");
    assert_eq!(
        r.msg.asker,
        Some(b.id().to_string()),
        "C saw B as the sender"
    );
    assert_eq!(b.metrics().messages_sent, 1, "B sent only the forward");
    // C counts its reply once its own thread has written it, which may be
    // just after B read it (sites run on several threads).
    assert!(c.wait_until(|m| m.messages_sent >= 1, PATIENCE).await);
    assert_eq!(c.metrics().messages_sent, 1, "C answered B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_unguessable() {
    let server = node();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let s = seen.clone();
    server
        .handle(move |ctx, l: Lookup| {
            s.lock().unwrap().push(ctx.correlation_id());
            let _ = ctx.reply(&Found {
                value: l.key,
                asker: None,
                via: None,
            });
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    for i in 0..200 {
        site.request::<Lookup, Found>(&Lookup { key: i.to_string() })
            .timeout(PATIENCE)
            .await
            .unwrap();
    }
    let mut ids = seen.lock().unwrap().clone();
    assert_eq!(ids.len(), 200);
    // No id follows from the one before (a counter would), and none repeats.
    assert!(ids
        .windows(2)
        .all(|w| w[1].wrapping_sub(w[0]) > 1 << 20 || w[0].wrapping_sub(w[1]) > 1 << 20));
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 200);
}

/// Options with no priority set keep the request's own: a request sent at
/// high priority is forwarded with a body (`forward_with`) and answered
/// with one (`reply_with`), and both hops and the answer stay high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_with_and_reply_with_keep_the_requests_priority_when_unset() {
    use sitenet::{Priority, SendOptions};
    let c = node();
    c.handle(|ctx, l: Lookup| {
        let seen = format!("{:?} {}", ctx.priority(), ctx.body().len());
        let _ = ctx.reply_with(
            &Found {
                value: format!("{} {}", l.key, seen),
                asker: None,
                via: None,
            },
            SendOptions::new().body(&b"answer"[..]),
        );
    })
    .unwrap();
    let b = node();
    let to = b.site(addr(&c)).unwrap();
    b.handle(move |ctx, l: Lookup| {
        let seen = format!("{:?}", ctx.priority());
        let key = format!("{} {seen}", l.key);
        ctx.forward_with(&to, &Lookup { key }, SendOptions::new().body(&b"xyz"[..]))
            .unwrap();
    })
    .unwrap();
    let a = node();
    let r = a
        .site(addr(&b))
        .unwrap()
        .request::<Lookup, Found>(&Lookup { key: "k".into() })
        .priority(Priority::High)
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.value, "k High High 3");
    assert_eq!(&r.body[..], b"answer");
}
