//! # scatter_gather — one question to N sites, the answers gathered
//!
//! A cooperation (Paradis-Net): one receive descriptor per site ("a
//! `Total` from this site, at most 64 body bytes"), one request to each;
//! `wait` returns when every descriptor is filled — or, at the timeout,
//! the answers that came. One site here is slow on purpose, so a short
//! timeout shows the partial result, and its late answer is discarded and
//! counted.
//!
//! ```text
//! cargo run --release --example scatter_gather [-- --sites 4]
//! ```

use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{CoopError, Expect, Message, Node, Runtime, SendOptions};

#[derive(Parser)]
#[command(about = "Scatter a question to N sites and gather their answers")]
struct Cli {
    /// Sites asked.
    #[arg(long, default_value_t = 4)]
    sites: u64,
}

#[derive(Serialize, Deserialize)]
struct Count {
    slow_ms: u64,
}
impl Message for Count {
    const ID: u32 = 1;
}

#[derive(Serialize, Deserialize)]
struct Total(u64);
impl Message for Total {
    const ID: u32 = 2;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let servers: Vec<Node> = (0..cli.sites)
        .map(|i| {
            let n = Node::builder()
                .listen("tcp:127.0.0.1:0")
                .runtime(Runtime::dedicated(&format!("site-{i}")))
                .start()?;
            n.handle(move |ctx, c: Count| {
                std::thread::sleep(Duration::from_millis(c.slow_ms)); // a slow site
                let body = Bytes::from(vec![b'x'; 100 * (i as usize + 1)]);
                let _ = ctx.reply_with(&Total(10 * (i + 1)), SendOptions::new().body(body));
            })?;
            Ok(n)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let client = Node::builder().start()?;
    let sites: Vec<_> = servers
        .iter()
        .map(|s| client.site(&s.listen_addresses()[0]))
        .collect::<Result<_, _>>()?;

    // Every descriptor first, then the requests: a cooperation completes
    // once every descriptor declared so far is filled.
    let coop = client.cooperation();
    for s in &sites {
        coop.expect(Expect::from_site(s).of::<Total>().max_body(64));
    }
    for s in &sites {
        coop.request(s, &Count { slow_ms: 0 }).await?;
    }
    let answers = coop.wait(Duration::from_secs(10)).await?;
    let sum: u64 = answers
        .iter()
        .map(|a| a.decode::<Total>().map_or(0, |t| t.0))
        .sum();
    println!("gathered {} answers, sum {sum}", answers.len());
    for a in &answers {
        println!(
            "  {:?}: body {} of {} bytes{}",
            a.from.id().map(|i| i.to_string()),
            a.body.len(),
            a.size,
            if a.truncated() { " (truncated)" } else { "" }
        );
    }

    // Again, with the last site slow and a short timeout.
    let coop = client.cooperation();
    for s in &sites {
        coop.expect(Expect::from_site(s));
    }
    for (i, s) in sites.iter().enumerate() {
        let slow_ms = if i + 1 == sites.len() { 1500 } else { 0 };
        coop.request(s, &Count { slow_ms }).await?;
    }
    match coop.wait(Duration::from_millis(700)).await {
        Err(CoopError::TimedOut { answers, missing }) => {
            let came = answers.iter().filter(|a| a.is_some()).count();
            println!("timed out: {came} answers came, {missing} missing");
        }
        other => println!("unexpected: {other:?}"),
    }
    let before = client.metrics().replies_discarded;
    client
        .wait_until(|m| m.replies_discarded > before, Duration::from_secs(10))
        .await;
    println!(
        "late answers discarded: {}",
        client.metrics().replies_discarded
    );
    Ok(())
}
