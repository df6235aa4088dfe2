//! # delegation — a request handed on, answered by the site that owns it
//!
//! Paradis-Net's forward: a client asks a directory for a key; the
//! directory does not hold keys, it knows which store does, and hands the
//! request on with `ctx.forward`. The store's handler sees the *client* as
//! the sender and answers it directly. Three messages — request, forward,
//! reply — where a directory that asked the store itself and relayed the
//! answer would need four.
//!
//! ```text
//! cargo run --release --example delegation [-- --keys 5]
//! ```

use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

#[derive(Parser)]
#[command(about = "A directory forwards lookups to the store that owns the key")]
struct Cli {
    /// Keys to look up.
    #[arg(long, default_value_t = 5)]
    keys: u32,
}

#[derive(Serialize, Deserialize)]
struct Lookup {
    key: u32,
}
impl Message for Lookup {
    const ID: u32 = 1;
}

#[derive(Serialize, Deserialize)]
struct Value {
    key: u32,
    value: String,
    /// Whom the store saw as the asker.
    answered_to: String,
}
impl Message for Value {
    const ID: u32 = 2;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    // Two stores, each owning half of the keys.
    let stores: Vec<Node> = (0..2)
        .map(|i| {
            let n = Node::builder().listen("tcp:127.0.0.1:0").start()?;
            n.handle(move |ctx, l: Lookup| {
                let asker = ctx.sender_id().map_or("?".into(), |id| id.to_string());
                let _ = ctx.reply(&Value {
                    key: l.key,
                    value: format!("store {i} holds {}", l.key),
                    answered_to: asker,
                });
            })?;
            Ok(n)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let directory = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let owners: Vec<_> = stores
        .iter()
        .map(|s| directory.site(&s.listen_addresses()[0]))
        .collect::<Result<_, _>>()?;
    directory.handle(move |ctx, l: Lookup| {
        let owner = &owners[l.key as usize % owners.len()];
        if let Err(e) = ctx.forward(owner, &l) {
            eprintln!("directory: cannot forward key {}: {e}", l.key);
        }
    })?;
    // The client listens too: the store answers it directly.
    let client = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let dir = client.site(&directory.listen_addresses()[0])?;
    for key in 0..cli.keys {
        let r = dir
            .request::<Lookup, Value>(&Lookup { key })
            .timeout(Duration::from_secs(10))
            .blocking()?;
        let direct = r.msg.answered_to == client.id().to_string();
        println!(
            "key {}: {} (answered the client directly: {direct})",
            r.msg.key, r.msg.value
        );
    }
    // A store counts its reply sent once its thread has written it, which
    // may be just after the client read it (the nodes' sites run on
    // several threads): wait until each has counted a reply per lookup.
    for s in &stores {
        s.wait_until_blocking(
            |m| m.messages_sent >= m.messages_delivered,
            Duration::from_secs(10),
        )?;
    }
    let sent = |n: &Node| n.metrics().messages_sent;
    println!(
        "messages: client {}, directory {}, stores {} — {} per lookup",
        sent(&client),
        sent(&directory),
        stores.iter().map(sent).sum::<u64>(),
        (sent(&client) + sent(&directory) + stores.iter().map(sent).sum::<u64>())
            / cli.keys.max(1) as u64
    );
    Ok(())
}
