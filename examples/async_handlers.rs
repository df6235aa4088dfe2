//! # async_handlers — a front end that answers after asking the owner
//!
//! Two shards each own half of a small table; a front end answers every
//! lookup by asking the shard that owns the key. Its handler is async
//! (`Node::handle_async`): the future awaits the shard and its output is
//! the answer — a value, or the application's own error type, which the
//! client matches (`SiteRef::request_result`). The shards are slow on
//! purpose (an awaited delay), so many lookups are in flight at once; the
//! front runs at most `--cap` of them (`NodeConfig::max_async_handlers`)
//! and refuses the rest at once as busy (`RequestError::Busy`), rather
//! than hold a future for every request a client sends.
//!
//! ```text
//! cargo run --release --example async_handlers [-- --burst 100 --cap 64 --delay-ms 300]
//! ```

use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{AsyncCtx, Message, Node, RequestError};

#[derive(Parser)]
#[command(about = "A front end answers lookups after asking the shard that owns the key")]
struct Cli {
    /// Lookups the client sends at once.
    #[arg(long, default_value_t = 100)]
    burst: usize,
    /// Async handlers the front end runs at once.
    #[arg(long, default_value_t = 64)]
    cap: usize,
    /// How long a shard takes to answer, in milliseconds.
    #[arg(long, default_value_t = 300)]
    delay_ms: u64,
}

/// Asks for the value of `key`.
#[derive(Serialize, Deserialize)]
struct Get {
    key: String,
}
impl Message for Get {
    const ID: u32 = 1;
}

/// A key's value.
#[derive(Debug, Serialize, Deserialize)]
struct Value(u64);
impl Message for Value {
    const ID: u32 = 2;
}

/// Why a lookup failed: the application's own type, matched by the client.
#[derive(Debug, Serialize, Deserialize)]
enum LookupError {
    /// No shard holds the key.
    NotFound { key: String, shard: usize },
    /// The shard could not be asked.
    Unavailable(String),
}

/// The shard that owns `key`.
fn shard_of(key: &str) -> usize {
    key.bytes().map(usize::from).sum::<usize>() % 2
}

/// A shard holding the keys it owns, answering after `delay`.
fn shard(index: usize, delay: Duration) -> Result<Node, Box<dyn std::error::Error>> {
    let node = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let table: Vec<(String, u64)> = ["apple", "banana", "cherry", "damson", "elder"]
        .iter()
        .enumerate()
        .filter(|(_, k)| shard_of(k) == index)
        .map(|(v, k)| (k.to_string(), v as u64 + 1))
        .collect();
    node.handle_async(move |ctx: AsyncCtx, Get { key }: Get| {
        let found = table.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        async move {
            ctx.node().runtime().delay(delay).await; // a slow store
            found
                .map(Value)
                .ok_or(LookupError::NotFound { key, shard: index })
        }
    })?;
    Ok(node)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let delay = Duration::from_millis(cli.delay_ms);
    let shards = [shard(0, delay)?, shard(1, delay)?];

    let front = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_async_handlers = cli.cap)
        .start()?;
    let to_shards = [
        front.site(&shards[0].listen_addresses()[0])?,
        front.site(&shards[1].listen_addresses()[0])?,
    ];
    front.handle_async(move |_ctx: AsyncCtx, get: Get| {
        let shard = to_shards[shard_of(&get.key)].clone();
        async move {
            // The shard's own error comes back as the type it is, and goes
            // on to the client as it came.
            shard
                .request::<Get, Value>(&get)
                .timeout(Duration::from_secs(30))
                .or_error::<LookupError>()
                .await
                .map_err(|e| LookupError::Unavailable(e.to_string()))?
                .map(|r| r.msg)
        }
    })?;

    let client = Node::builder().start()?;
    let site = client.site(&front.listen_addresses()[0])?;
    let get = |key: &str| {
        site.request::<Get, Value>(&Get { key: key.into() })
            .timeout(Duration::from_secs(30))
            .or_error::<LookupError>()
    };
    for key in ["apple", "elder", "fig"] {
        match futures::executor::block_on(get(key))? {
            Ok(v) => println!("{key} => {}", v.msg.0),
            Err(LookupError::NotFound { key, shard }) => {
                println!("{key} => not found (shard {shard} owns it)")
            }
            Err(LookupError::Unavailable(why)) => println!("{key} => unavailable: {why}"),
        }
    }

    // A burst: the front holds at most `cap` lookups at once.
    let burst: Vec<_> = (0..cli.burst)
        .map(|i| get(["apple", "cherry"][i % 2]))
        .collect();
    let (mut answered, mut busy) = (0, 0);
    for r in futures::executor::block_on(futures::future::join_all(burst)) {
        match r {
            Ok(Ok(_)) => answered += 1,
            Err(RequestError::Busy { .. }) => busy += 1,
            other => return Err(format!("unexpected outcome: {other:?}").into()),
        }
    }
    println!(
        "burst of {}: {answered} answered, {busy} refused busy (the front runs at most {} at once)",
        cli.burst, cli.cap
    );
    assert_eq!(answered + busy, cli.burst);
    assert!(
        answered >= cli.cap.min(cli.burst),
        "fewer answered than the cap"
    );
    assert!(cli.burst <= cli.cap || busy > 0, "the cap refused nothing");
    Ok(())
}
