//! The context a user type inside a message sees (`sitenet::context`), as
//! a `SiteRef` does: while sitenet encodes a typed header, the sending
//! node and the site it goes to — the site sent to (also in a batch or a
//! cooperation), the requester for a reply (however the handler answers),
//! the site forwarded to; while it decodes one, the receiving node (and,
//! through it, its extensions) and the site whose word the message is.
//! Outside sitenet's encode and decode, neither is there.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{addr, listening_node, PATIENCE};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sitenet::{context, Message, Node, SiteRef};
use tokio::sync::mpsc;

/// What a user type saw of the context: as encoded ("NODE to SITE") on
/// the sending side, and as decoded ("NODE from SITE") on the receiving
/// one.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Seen {
    encoded: String,
    decoded: String,
}

/// A user type that records the context: it sends only what its encoder
/// sees, and adds what its decoder sees.
#[derive(Debug, Default, Clone, PartialEq)]
struct Probe(Seen);

fn id_of(site: Option<&SiteRef>) -> String {
    match site {
        None => "no site".into(),
        Some(s) => s.id().map_or("an unknown site".into(), |id| id.to_string()),
    }
}

impl Serialize for Probe {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let seen = match context::encoding() {
            None => "outside".to_string(),
            Some(e) => format!("{} to {}", e.node.id(), id_of(e.to.as_ref())),
        };
        s.serialize_str(&seen)
    }
}

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let encoded = String::deserialize(d)?;
        let decoded = match context::decoding() {
            None => "outside".to_string(),
            Some(c) => format!("{} from {}", c.node.id(), id_of(Some(&c.from))),
        };
        Ok(Probe(Seen { encoded, decoded }))
    }
}

#[derive(Serialize, Deserialize)]
struct Carry(Probe);
impl Message for Carry {
    const ID: u32 = 900;
}

/// A request whose reply carries the request's probe as received, and a
/// fresh one.
#[derive(Serialize, Deserialize)]
struct Ask(Probe);
impl Message for Ask {
    const ID: u32 = 901;
}

#[derive(Serialize, Deserialize)]
struct Answer {
    /// The request's probe as the server decoded it.
    request: Seen,
    reply: Probe,
}
impl Message for Answer {
    const ID: u32 = 902;
}

fn answer(asked: Probe) -> Answer {
    Answer {
        request: asked.0,
        reply: Probe::default(),
    }
}

/// What a probe says when `from` sent it to `to` through sitenet.
fn seen(from: &Node, to: &Node) -> Seen {
    Seen {
        encoded: format!("{} to {}", from.id(), to.id()),
        decoded: format!("{} from {}", to.id(), from.id()),
    }
}

/// Two listening nodes that have talked both ways (each knows the
/// other's id, so a probe can name it).
async fn pair() -> (Node, Node, SiteRef) {
    let server = listening_node();
    let client = listening_node();
    let site = client.site(addr(&server)).unwrap();
    common::echo(&site, 1).await;
    common::echo(&server.site(addr(&client)).unwrap(), 2).await;
    (client, server, site)
}

async fn ask(site: &SiteRef) -> Answer {
    site.request::<Ask, Answer>(&Ask(Probe::default()))
        .timeout(PATIENCE)
        .await
        .unwrap()
        .msg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_message_is_encoded_for_its_site_and_decoded_from_its_sender() {
    let (client, server, site) = pair().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    server
        .handle(move |_ctx, Carry(p): Carry| {
            let _ = tx.lock().unwrap().send(p);
        })
        .unwrap();
    site.send(&Carry(Probe::default())).await.unwrap();
    let got = tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap();
    assert_eq!(got.map(|p| p.0), Some(seen(&client, &server)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_encoded_for_the_requester_however_the_handler_answers() {
    let (client, server, site) = pair().await;
    // A reply from the handler's context.
    server
        .handle(|ctx, Ask(p): Ask| {
            ctx.reply(&answer(p)).unwrap();
        })
        .unwrap();
    let a = ask(&site).await;
    assert_eq!(a.request, seen(&client, &server));
    assert_eq!(a.reply.0, seen(&server, &client));
    // The handler's output.
    server
        .replace_handler_result(|_ctx, Ask(p): Ask| answer(p))
        .unwrap();
    assert_eq!(ask(&site).await.reply.0, seen(&server, &client));
    // An async handler's output.
    server
        .replace_handler_async(|_ctx, Ask(p): Ask| async move { answer(p) })
        .unwrap();
    assert_eq!(ask(&site).await.reply.0, seen(&server, &client));
    // A responder answered later, from another thread.
    server
        .replace_handler(|ctx, Ask(p): Ask| {
            let r = ctx.responder().unwrap();
            std::thread::spawn(move || r.reply(&answer(p)).unwrap());
        })
        .unwrap();
    assert_eq!(ask(&site).await.reply.0, seen(&server, &client));
    // A responder answered with a handler's output.
    server
        .replace_handler(|ctx, Ask(p): Ask| {
            ctx.responder().unwrap().answer(answer(p)).unwrap();
        })
        .unwrap();
    assert_eq!(ask(&site).await.reply.0, seen(&server, &client));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_is_encoded_for_the_site_forwarded_to() {
    let (client, relay, to_relay) = pair().await;
    let server = listening_node();
    let relay_to_server = relay.site(addr(&server)).unwrap();
    common::echo(&relay_to_server, 3).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    relay
        .handle(move |ctx, Ask(p): Ask| {
            let _ = tx.lock().unwrap().send(p);
            ctx.forward(&relay_to_server, &Ask(Probe::default()))
                .unwrap();
        })
        .unwrap();
    server
        .handle(|ctx, Ask(p): Ask| {
            ctx.reply(&answer(p)).unwrap();
        })
        .unwrap();
    let a = ask(&to_relay).await;
    let at_relay = tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap();
    assert_eq!(at_relay.map(|p| p.0), Some(seen(&client, &relay)));
    // Re-encoded at the relay for the server; decoded there from the site
    // that delivered it (the relay). Answered to the origin directly, and
    // decoded there as the answer of the site it asked (the relay).
    assert_eq!(a.request, seen(&relay, &server));
    assert_eq!(
        a.reply.0,
        Seen {
            encoded: format!("{} to {}", server.id(), client.id()),
            decoded: format!("{} from {}", client.id(), relay.id()),
        }
    );
}

#[test]
fn outside_sitenet_there_is_no_context() {
    assert!(context::encoding().is_none());
    assert!(context::decoding().is_none());
    let bytes = rmp_serde::to_vec(&Probe::default()).unwrap();
    let p: Probe = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(
        p.0,
        Seen {
            encoded: "outside".into(),
            decoded: "outside".into()
        }
    );
    // And after sitenet encoded and decoded on this thread, none is left.
    let node = Node::builder().start().unwrap();
    node.handle(|_ctx, _: Carry| {}).unwrap();
    node.local_site()
        .send(&Carry(Probe::default()))
        .try_now()
        .unwrap();
    assert!(node
        .wait_until_blocking(|m| m.messages_delivered >= 1, Duration::from_secs(60))
        .unwrap());
    assert!(context::encoding().is_none());
    assert!(context::decoding().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_cooperations_encode_for_each_site_and_decode_from_it() {
    let (client, server, site) = pair().await;
    server
        .handle(|ctx, Ask(p): Ask| {
            ctx.reply(&answer(p)).unwrap();
        })
        .unwrap();
    let mut b = client.batch();
    let i = b.request(&site, &Ask(Probe::default()), PATIENCE).unwrap();
    let report = b.submit().wait_all(PATIENCE).await;
    let done = report.results[i].as_ref().unwrap().as_ref().unwrap();
    let a = done.decode::<Answer>().unwrap();
    assert_eq!(a.request, seen(&client, &server));
    assert_eq!(a.reply.0, seen(&server, &client));

    let coop = client.cooperation();
    coop.expect(sitenet::Expect::from_site(&site).of::<Answer>());
    coop.request(&site, &Ask(Probe::default())).await.unwrap();
    let answers = coop.wait(PATIENCE).await.unwrap();
    let a = answers[0].decode::<Answer>().unwrap();
    assert_eq!(a.request, seen(&client, &server));
    assert_eq!(a.reply.0, seen(&server, &client));
}

/// A user type that finds the receiving node's extension (a layer's
/// state) from the decoding context.
struct Lookup(Option<String>);

impl Serialize for Lookup {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for Lookup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <()>::deserialize(d)?;
        let state = context::decoding().and_then(|c| c.node.extension::<String>());
        Ok(Lookup(state.map(|s| (*s).clone())))
    }
}

#[derive(Serialize, Deserialize)]
struct Look(Lookup);
impl Message for Look {
    const ID: u32 = 903;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_type_finds_the_receiving_nodes_extension_while_it_decodes() {
    let (_client, server, site) = pair().await;
    server.extension_or_init(|_| String::from("the server's state"));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    server
        .handle(move |_ctx, Look(l): Look| {
            let _ = tx.lock().unwrap().send(l.0);
        })
        .unwrap();
    site.send(&Look(Lookup(None))).await.unwrap();
    let got = tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap();
    assert_eq!(got, Some(Some("the server's state".to_string())));
}
