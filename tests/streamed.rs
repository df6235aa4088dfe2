//! Streaming handlers end to end (`Node::handle_stream`, Madeleine's
//! deferred receive): the header first and the body in chunks as it
//! arrives, a reply from the sink's end, a body interrupted by a lost
//! channel and received again from offset 0, and a 1 GiB message received
//! with bounded memory.

mod common;

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use common::counting::{self, Counting};
use common::{addr, PATIENCE};
use serde::{Deserialize, Serialize};
use sitenet::{BodySink, Ctx, Message, Node, Priority, StreamAbort};
use sitenet_transport::fault::{FaultInjector, SEED_ENV};
use tokio::sync::mpsc;

#[global_allocator]
static A: Counting = Counting;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Upload {
    name: String,
}
impl Message for Upload {
    const ID: u32 = 300;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Received {
    bytes: u64,
}
impl Message for Received {
    const ID: u32 = 301;
}

/// What a recording sink saw.
#[derive(Debug)]
enum Seen {
    Start(String),
    Chunk(u64, Bytes),
    End,
    Abort(StreamAbort),
}

/// Sends everything it sees to the test.
struct Recording(mpsc::UnboundedSender<Seen>);

impl BodySink for Recording {
    fn chunk(&mut self, offset: u64, data: Bytes) {
        let _ = self.0.send(Seen::Chunk(offset, data));
    }
    fn end(self: Box<Self>, _ctx: &mut Ctx<'_>) {
        let _ = self.0.send(Seen::End);
    }
    fn abort(self: Box<Self>, why: StreamAbort) {
        let _ = self.0.send(Seen::Abort(why));
    }
}

fn recording_server(
    cfg: impl FnOnce(&mut sitenet::NodeConfig),
) -> (Node, mpsc::UnboundedReceiver<Seen>) {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(cfg)
        .start()
        .unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    server
        .handle_stream(move |_ctx: &mut Ctx<'_>, u: Upload| -> Box<dyn BodySink> {
            let _ = tx.send(Seen::Start(u.name));
            Box::new(Recording(tx.clone()))
        })
        .unwrap();
    (server, rx)
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 31 % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Reads one stream: its start, chunks (checked contiguous from 0) and
/// how it ended.
async fn one_stream(rx: &mut mpsc::UnboundedReceiver<Seen>) -> (String, BytesMut, Seen, usize) {
    async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
        tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("the stream goes on")
            .expect("the server is up")
    }
    let Seen::Start(name) = next(rx).await else {
        panic!("the header comes first");
    };
    let mut body = BytesMut::new();
    let mut chunks = 0;
    loop {
        match next(rx).await {
            Seen::Chunk(offset, data) => {
                assert_eq!(offset, body.len() as u64, "chunks are contiguous from 0");
                body.extend_from_slice(&data);
                chunks += 1;
            }
            Seen::Start(_) => panic!("a start inside a stream"),
            end => return (name, body, end, chunks),
        }
    }
}

/// Sends one small upload and waits for its acknowledgement: the channel
/// is then live.
async fn warm_up(site: &sitenet::SiteRef) {
    site.send(&Upload {
        name: "warm".into(),
    })
    .await
    .unwrap();
    site.flush(PATIENCE).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_handler_sees_the_header_first_and_the_body_in_chunks() {
    let (server, mut rx) = recording_server(|_| {});
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let body = pattern(4 << 20);
    site.send(&Upload { name: "big".into() })
        .body(body.clone())
        .await
        .unwrap();
    // A small one of the same type: handed over the same way, at once.
    site.send(&Upload {
        name: "small".into(),
    })
    .body(Bytes::from_static(b"tiny"))
    .await
    .unwrap();
    let (name, got, end, chunks) = one_stream(&mut rx).await;
    assert_eq!(name, "big");
    assert_eq!(got, body);
    assert!(matches!(end, Seen::End), "{end:?}");
    assert!(chunks > 1, "a 4 MiB body in {chunks} chunk(s)");
    let (name, got, end, chunks) = one_stream(&mut rx).await;
    assert_eq!(
        (name.as_str(), &got[..], chunks),
        ("small", &b"tiny"[..], 1)
    );
    assert!(matches!(end, Seen::End));
    site.flush(PATIENCE).await.unwrap();
    assert_eq!(server.metrics().messages_delivered, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_is_answered_from_the_sinks_end() {
    struct Counter(u64);
    impl BodySink for Counter {
        fn chunk(&mut self, _offset: u64, data: Bytes) {
            self.0 += data.len() as u64;
        }
        fn end(self: Box<Self>, ctx: &mut Ctx<'_>) {
            ctx.reply(&Received { bytes: self.0 }).unwrap();
        }
    }
    let server = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    server
        .handle_stream(|_ctx: &mut Ctx<'_>, _u: Upload| -> Box<dyn BodySink> {
            Box::new(Counter(0))
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let r = site
        .request::<Upload, Received>(&Upload { name: "q".into() })
        .body(pattern(3 << 20))
        .timeout(PATIENCE)
        .await
        .unwrap();
    assert_eq!(r.msg.bytes, 3 << 20);
}

#[test]
fn a_type_has_one_handler_whole_or_streamed() {
    let node = Node::builder().start().unwrap();
    node.handle(|_ctx: &mut Ctx<'_>, _m: Received| {}).unwrap();
    let e = node
        .handle_stream(|_ctx: &mut Ctx<'_>, _m: Received| -> Box<dyn BodySink> { unreachable!() })
        .unwrap_err();
    assert!(
        e.to_string().contains("301") || e.to_string().contains("0x12d"),
        "{e}"
    );
    node.handle_stream(|_ctx: &mut Ctx<'_>, _m: Upload| -> Box<dyn BodySink> { unreachable!() })
        .unwrap();
    assert!(node.handle(|_ctx: &mut Ctx<'_>, _m: Upload| {}).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_a_lost_channel_is_aborted_and_comes_again_from_offset_0() {
    let faults = FaultInjector::from_env_or_random(SEED_ENV);
    let _report = faults.report_on_panic();
    let (server, mut rx) = recording_server(|_| {});
    let client = Node::builder()
        .configure(|c| {
            c.fault_injector = Some(faults.clone());
        })
        .start()
        .unwrap();
    let site = client.site(addr(&server)).unwrap();
    warm_up(&site).await;
    assert_eq!(one_stream(&mut rx).await.0, "warm");
    // Cut the channel (now live) 1 MiB into the 4 MiB message.
    faults.cut_after(1 << 20);
    let body = pattern(4 << 20);
    site.send(&Upload { name: "cut".into() })
        .priority(Priority::Low)
        .body(body.clone())
        .await
        .unwrap();
    let (name, first, end, _) = one_stream(&mut rx).await;
    assert_eq!(name, "cut");
    let Seen::Abort(StreamAbort::ChannelLost { received }) = end else {
        panic!("the stream is told its channel was lost: {end:?}");
    };
    assert_eq!(received, first.len() as u64);
    assert!(received > 0 && received < 1 << 20, "{received}");
    assert_eq!(&first[..], &body[..first.len()]);
    let (name, again, end, _) = one_stream(&mut rx).await;
    assert_eq!(name, "cut");
    assert_eq!(again, body, "the whole body, from offset 0");
    assert!(matches!(end, Seen::End), "{end:?}");
    site.flush(PATIENCE).await.unwrap();
    assert_eq!(server.metrics().messages_delivered, 2, "delivered once");
}

/// A 1 GiB message received with bounded memory by a
/// streaming handler. The sender's body is 1,024 references to one 1 MiB
/// buffer (sent without a copy); the receiver's sink counts and checks the
/// bytes and keeps none. Memory is counted by the allocator of this test
/// binary, both nodes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_message_is_received_with_bounded_memory_by_a_streaming_handler() {
    const GIB: u64 = 1 << 30;
    const PART: usize = 1 << 20;
    struct Check {
        part: Bytes,
        received: Arc<Mutex<Option<u64>>>,
        seen: u64,
    }
    impl BodySink for Check {
        fn chunk(&mut self, offset: u64, data: Bytes) {
            assert_eq!(offset, self.seen);
            let at = (offset % PART as u64) as usize;
            let n = data.len().min(PART - at);
            assert_eq!(&data[..n], &self.part[at..at + n], "body at {offset}");
            self.seen += data.len() as u64;
        }
        fn end(self: Box<Self>, _ctx: &mut Ctx<'_>) {
            *self.received.lock().unwrap() = Some(self.seen);
        }
    }
    let big = |c: &mut sitenet::NodeConfig| {
        c.max_message_size = 2 * GIB;
        c.output_bound = 4 * GIB;
    };
    let part = pattern(PART);
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(big)
        .start()
        .unwrap();
    let received = Arc::new(Mutex::new(None));
    let (r, p) = (received.clone(), part.clone());
    server
        .handle_stream(move |_ctx: &mut Ctx<'_>, _u: Upload| -> Box<dyn BodySink> {
            Box::new(Check {
                part: p.clone(),
                received: r.clone(),
                seen: 0,
            })
        })
        .unwrap();
    let client = Node::builder().configure(big).start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    warm_up(&site).await;
    *received.lock().unwrap() = None;

    counting::reset_peak();
    let base = counting::LIVE.load(std::sync::atomic::Ordering::Relaxed);
    site.send(&Upload {
        name: "1 GiB".into(),
    })
    .parts(std::iter::repeat_n(
        part.clone(),
        (GIB / PART as u64) as usize,
    ))
    .await
    .unwrap();
    site.flush(PATIENCE).await.unwrap();
    assert_eq!(*received.lock().unwrap(), Some(GIB), "the whole body");
    let peak = counting::PEAK.load(std::sync::atomic::Ordering::Relaxed) - base;
    eprintln!(
        "1 GiB streamed; peak memory above the start: {} KiB",
        peak / 1024
    );
    assert!(
        peak < 32 << 20,
        "peak {} MiB while streaming 1 GiB: not bounded",
        peak >> 20
    );
}
