//! # custom_transport — a transport plugged in from outside sitenet
//!
//! sitenet's built-in transports are tcp, tls, unix and mem. A runtime with
//! a carrier of its own (a QUIC stack, a vendor interconnect, pipes to a
//! parent process) plugs it in as a [`Transport`] registered under a scheme
//! of its own, and then names sites at `SCHEME:ADDRESS` like any other.
//!
//! This program is written only against sitenet's public API, as an outside
//! crate would be. Its transport, `pipe:NAME`, connects nodes of one
//! process through `tokio::io::duplex` pairs: a shared table of named
//! listeners ([`Pipes`]), a connect handing the far end of a fresh pair to
//! the listener of that name. [`StreamChannel`] turns each end into a
//! channel, so the transport itself is under a hundred lines.
//!
//! Two nodes plug it in; the server listens at `pipe:server`; the client
//! sends it greetings (one-way) and asks it to add numbers (request and
//! reply), then prints the transport its channel runs.
//!
//! ```text
//! cargo run --release --example custom_transport [-- --adds 100]
//! ```

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, NodeEvent};
use sitenet_transport::plug::{
    BoxFuture, StreamChannel, Transport, TransportChannel, TransportListener,
};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;

#[derive(Parser)]
#[command(about = "Two nodes talking over a transport plugged in from outside sitenet")]
struct Cli {
    /// Add requests the client makes.
    #[arg(long, default_value_t = 100)]
    adds: u64,
}

/// Bytes a pipe holds in each direction before the writer waits.
const PIPE_CAPACITY: usize = 256 * 1024;

/// Connections a listener queues before connects wait.
const BACKLOG: usize = 64;

/// The `pipe:` transport: named listeners of this process. Cheap to share
/// (nodes hold it in an `Arc`).
#[derive(Default)]
struct Pipes {
    listeners: Arc<Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>>,
}

/// A listener at `pipe:NAME`: the queue connects hand their far ends to.
/// Dropping it frees the name.
struct PipeListener {
    name: String,
    queue: tokio::sync::Mutex<mpsc::Receiver<DuplexStream>>,
    listeners: Arc<Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>>,
    /// Numbers accepted channels for their peer's name in logs.
    clients: AtomicU64,
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionRefused, why)
}

impl Transport for Pipes {
    /// Names are plain words: refused at parse time otherwise.
    fn check(&self, name: &str) -> Result<(), String> {
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            Ok(())
        } else {
            Err("a pipe name is letters, digits and '-'".into())
        }
    }

    fn connect<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            let queue = self.listeners.lock().unwrap().get(name).cloned();
            let queue = queue.ok_or_else(|| refused(format!("no listener at pipe:{name}")))?;
            let (ours, theirs) = tokio::io::duplex(PIPE_CAPACITY);
            queue
                .send(theirs)
                .await
                .map_err(|_| refused(format!("pipe:{name} closed")))?;
            Ok(Box::new(StreamChannel::new(ours, name)) as Box<dyn TransportChannel>)
        })
    }

    fn bind(&self, name: &str) -> io::Result<Box<dyn TransportListener>> {
        let mut listeners = self.listeners.lock().unwrap();
        if listeners.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("pipe:{name} is taken"),
            ));
        }
        let (tx, rx) = mpsc::channel(BACKLOG);
        listeners.insert(name.to_string(), tx);
        Ok(Box::new(PipeListener {
            name: name.to_string(),
            queue: tokio::sync::Mutex::new(rx),
            listeners: self.listeners.clone(),
            clients: AtomicU64::new(1),
        }))
    }
}

impl TransportListener for PipeListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            // `recv` is cancel-safe: a node that stops loses no connection.
            let s = self.queue.lock().await.recv().await;
            let s = s.ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionAborted))?;
            let n = self.clients.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(StreamChannel::new(s, format!("(client {n})")))
                as Box<dyn TransportChannel>)
        })
    }

    fn local_address(&self) -> io::Result<String> {
        Ok(self.name.clone())
    }
}

impl Drop for PipeListener {
    fn drop(&mut self) {
        self.listeners.lock().unwrap().remove(&self.name);
    }
}

/// A one-way greeting.
#[derive(Serialize, Deserialize)]
struct Greeting(String);
impl Message for Greeting {
    const ID: u32 = 1;
}

/// Request: the sum of two numbers.
#[derive(Serialize, Deserialize)]
struct Add(u64, u64);
impl Message for Add {
    const ID: u32 = 2;
}

#[derive(Serialize, Deserialize)]
struct Sum(u64);
impl Message for Sum {
    const ID: u32 = 3;
}

const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let pipes = Arc::new(Pipes::default());

    let server = Node::builder()
        .transport("pipe", pipes.clone())
        .listen("pipe:server")
        .start()?;
    println!("server listens at {:?}", server.listen_addresses());
    let (greeted_tx, mut greeted) = mpsc::unbounded_channel();
    server.handle(move |_ctx, g: Greeting| {
        let _ = greeted_tx.send(g.0);
    })?;
    server.handle(|ctx, Add(a, b)| {
        let _ = ctx.reply(&Sum(a + b));
    })?;

    let client = Node::builder().transport("pipe", pipes.clone()).start()?;
    let mut events = client.events();
    // An address of a scheme no transport is plugged in for is refused.
    if let Err(e) = client.site("carrier-pigeon:coop") {
        println!("refused: {e}");
    }
    let site = client.site("pipe:server")?;

    site.send(&Greeting("hello over a pipe".into())).await?;
    println!("server got: {}", greeted.recv().await.unwrap_or_default());

    let mut total = 0;
    for i in 0..cli.adds {
        let r = site
            .request::<Add, Sum>(&Add(i, 1))
            .timeout(PATIENCE)
            .await?;
        total += r.msg.0;
    }
    let expected: u64 = (1..=cli.adds).sum();
    println!(
        "{} additions answered over pipe:server: total {total} (expected {expected})",
        cli.adds
    );

    // The transport the channel runs, as the node reported it when the
    // channel came up (before the first reply arrived).
    let mut up = None;
    while let Some(ev) = events.try_next() {
        if let NodeEvent::SiteUp { transport, .. } = ev {
            up = Some(transport);
        }
    }
    println!("channel transport: {}", up.unwrap_or("unknown"));

    client.shutdown(PATIENCE).await;
    server.shutdown(PATIENCE).await;
    Ok(())
}
