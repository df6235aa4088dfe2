//! # counter — a small piece of a distributed runtime on sitenet
//!
//! A sharded counter service, the kind of thing a language runtime builds
//! on its network layer (a distributed dictionary, an actor registry):
//!
//! * **shards** own the counters of the keys that hash to them;
//! * a **front** site is the only address clients know, and holds shard 0
//!   itself: its list of shards starts with its own local site
//!   (`Node::local_site`), so one piece of code routes to every shard,
//!   near or far. It answers `Layout` with the shards — `SiteRef`s inside
//!   a message, which the client uses as its own (shard 0 resolves to the
//!   client's reference to the front: one site, one queue) — and delegates
//!   `Read`s to the owning shard (`ctx.forward`, to itself included), which
//!   answers the client directly;
//! * the **client** applies thousands of increments as one batch of
//!   acknowledged sends to the shards (all in flight at once), reads one
//!   counter through the front, and sums every shard with a cooperation
//!   (scatter/gather) to check that no increment was lost or applied twice.
//!
//! ```text
//! cargo run --release --example counter [-- --adds 10000 --shards 4]
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Expect, Message, Node, SiteRef};

#[derive(Parser)]
#[command(about = "A sharded counter: batch, delegation, site references, scatter/gather")]
struct Cli {
    /// Increments applied.
    #[arg(long, default_value_t = 10_000)]
    adds: u64,
    /// Shard sites.
    #[arg(long, default_value_t = 4)]
    shards: usize,
}

/// Increment `key` by `by` (one-way).
#[derive(Serialize, Deserialize)]
struct Add {
    key: u64,
    by: u64,
}
impl Message for Add {
    const ID: u32 = 1;
}

/// Request: a counter's value.
#[derive(Serialize, Deserialize)]
struct Read {
    key: u64,
}
impl Message for Read {
    const ID: u32 = 2;
}

#[derive(Serialize, Deserialize)]
struct Value {
    key: u64,
    value: u64,
    shard: usize,
}
impl Message for Value {
    const ID: u32 = 3;
}

/// Request to the front: a counter's value, wherever it lives.
#[derive(Serialize, Deserialize)]
struct Lookup {
    key: u64,
}
impl Message for Lookup {
    const ID: u32 = 8;
}

/// Request: the sum of every counter of a shard.
#[derive(Serialize, Deserialize)]
struct Sum;
impl Message for Sum {
    const ID: u32 = 4;
}

#[derive(Serialize, Deserialize)]
struct Partial(u64);
impl Message for Partial {
    const ID: u32 = 5;
}

/// Request: where the shards are.
#[derive(Serialize, Deserialize)]
struct Layout;
impl Message for Layout {
    const ID: u32 = 6;
}

/// The shards, as references the receiver can use.
#[derive(Serialize, Deserialize)]
struct Shards(Vec<SiteRef>);
impl Message for Shards {
    const ID: u32 = 7;
}

/// Makes `n` shard `i`: it keeps counters and answers `Read` and `Sum`.
fn serve_shard(n: &Node, i: usize) -> Result<(), Box<dyn std::error::Error>> {
    let counters: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let c = counters.clone();
    n.handle(move |_ctx, a: Add| {
        let counters = &c;
        *counters.lock().unwrap().entry(a.key).or_default() += a.by;
    })?;
    let c = counters.clone();
    n.handle(move |ctx, r: Read| {
        let counters = &c;
        let value = counters.lock().unwrap().get(&r.key).copied().unwrap_or(0);
        let _ = ctx.reply(&Value {
            key: r.key,
            value,
            shard: i,
        });
    })?;
    n.handle(move |ctx, _s: Sum| {
        let _ = ctx.reply(&Partial(counters.lock().unwrap().values().sum()));
    })?;
    Ok(())
}

fn listening() -> Result<Node, Box<dyn std::error::Error>> {
    Ok(Node::builder().listen("tcp:127.0.0.1:0").start()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let front = listening()?;
    serve_shard(&front, 0)?;
    let mut routes: Vec<SiteRef> = vec![front.local_site()];
    let mut shards = Vec::new();
    for i in 1..cli.shards.max(1) {
        let n = listening()?;
        serve_shard(&n, i)?;
        routes.push(front.site(&n.listen_addresses()[0])?);
        shards.push(n);
    }
    // The front talks to each shard once, so it knows their ids and can
    // hand references to them out.
    for r in &routes {
        r.request::<Sum, Partial>(&Sum)
            .timeout(Duration::from_secs(10))
            .await?;
    }
    let for_layout = routes.clone();
    front.handle(move |ctx, _l: Layout| {
        let _ = ctx.reply(&Shards(for_layout.clone()));
    })?;
    // Delegated as a `Read` to the owner, which may be the front itself.
    front.handle(move |ctx, l: Lookup| {
        let owner = &routes[(l.key % routes.len() as u64) as usize];
        let _ = ctx.forward(owner, &Read { key: l.key });
    })?;

    // The client knows only the front, and listens (a shard answers it
    // directly when the front delegates a read).
    let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let front_ref = client.site(&front.listen_addresses()[0])?;
    let layout = front_ref
        .request::<Layout, Shards>(&Layout)
        .timeout(Duration::from_secs(10))
        .await?;
    let shards_here = layout.msg.0;
    println!(
        "client: {} shards, learned from the front (shard 0 is the front itself: {})",
        shards_here.len(),
        if shards_here[0] == front_ref {
            "the same SiteRef"
        } else {
            "a SECOND reference"
        }
    );

    let mut batch = client.batch();
    for i in 0..cli.adds {
        let key = i % 100;
        let owner = &shards_here[(key % shards_here.len() as u64) as usize];
        batch.send(owner, &Add { key, by: 1 })?;
    }
    let report = batch.submit().wait_all(Duration::from_secs(60)).await;
    println!(
        "client: {} increments acknowledged, {} failed",
        report
            .results
            .iter()
            .filter(|r| matches!(r, Some(Ok(_))))
            .count(),
        report.failures().len()
    );

    for key in [0, 7] {
        let v = front_ref
            .request::<Lookup, Value>(&Lookup { key })
            .timeout(Duration::from_secs(10))
            .await?;
        println!(
            "client: key {} = {} (read through the front, answered by shard {})",
            v.msg.key, v.msg.value, v.msg.shard
        );
    }

    let coop = client.cooperation();
    for s in &shards_here {
        coop.expect(Expect::from_site(s).of::<Partial>());
    }
    for s in &shards_here {
        coop.request(s, &Sum).await?;
    }
    let parts = coop.wait(Duration::from_secs(10)).await?;
    let total: u64 = parts
        .iter()
        .map(|p| p.decode::<Partial>().map_or(0, |p| p.0))
        .sum();
    println!(
        "client: total over {} shards = {total} ({})",
        parts.len(),
        if total == cli.adds {
            "every increment applied exactly once"
        } else {
            "MISMATCH"
        }
    );
    Ok(())
}
