//! # batch — many operations to many sites at once, one site dead
//!
//! IBP's operation lists: a batch of sends (done when acknowledged) and
//! requests (done with their reply) to several sites, all in flight
//! together. `wait_any` shows them complete one by one; a callback counts
//! them; one site dies with a request of the batch on it, and the batch
//! retries it (`max_retry`) on the site restarted at the same address.
//!
//! ```text
//! cargo run --release --example batch [-- --ops 300]
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, Responder};

#[derive(Parser)]
#[command(about = "A batch of sends and requests to several sites, one of them restarted")]
struct Cli {
    /// Operations in the first batch.
    #[arg(long, default_value_t = 300)]
    ops: u64,
}

#[derive(Serialize, Deserialize)]
struct Put(u64);
impl Message for Put {
    const ID: u32 = 1;
}

#[derive(Serialize, Deserialize)]
struct Get(u64);
impl Message for Get {
    const ID: u32 = 2;
}

#[derive(Serialize, Deserialize)]
struct Got(u64);
impl Message for Got {
    const ID: u32 = 3;
}

/// Requests a store holds unanswered: their responders, kept (one dropped
/// would answer "no reply" at once).
type Unanswered = Arc<Mutex<Vec<Responder>>>;

/// A store at `listen`; `answer` false keeps requests unanswered (their
/// responders in the returned list).
fn store(listen: &str, answer: bool) -> Result<(Node, Unanswered), Box<dyn std::error::Error>> {
    let n = Node::builder().listen(listen).start()?;
    n.handle(|_ctx, _p: Put| {})?;
    let kept = Unanswered::default();
    let k = kept.clone();
    n.handle(move |ctx, g: Get| {
        if answer {
            let _ = ctx.reply(&Got(g.0 * 2));
        } else {
            k.lock().unwrap().extend(ctx.responder());
        }
    })?;
    Ok((n, kept))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let stores = (0..3)
        .map(|_| store("tcp:127.0.0.1:0", true).map(|(n, _)| n))
        .collect::<Result<Vec<_>, _>>()?;
    let client = Node::builder().start()?;
    let sites: Vec<_> = stores
        .iter()
        .map(|s| client.site(&s.listen_addresses()[0]))
        .collect::<Result<_, _>>()?;

    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let mut b = client.batch().on_complete(move |_, _| {
        d.fetch_add(1, Ordering::Relaxed);
    });
    for i in 0..cli.ops {
        let s = &sites[i as usize % sites.len()];
        if i % 2 == 0 {
            b.send(s, &Put(i))?;
        } else {
            b.request(s, &Get(i), Duration::from_secs(10))?;
        }
    }
    let mut running = b.submit();
    let mut order = Vec::new();
    while let Some((i, r)) = running.wait_any(Duration::from_secs(10)).await {
        r?;
        if order.len() < 5 {
            order.push(i);
        }
    }
    println!(
        "{} operations done ({} callbacks); the first to complete: {order:?}",
        cli.ops,
        done.load(Ordering::Relaxed)
    );

    // A site dies holding a request of the batch; it restarts at its address.
    let (first, _unanswered) = store("tcp:127.0.0.1:0", false)?;
    let at = first.listen_addresses()[0].clone();
    let site = client.site(&at)?;
    let mut b = client.batch().max_retry(1);
    b.request(&site, &Get(21), Duration::from_secs(10))?;
    let running = b.submit();
    first
        .wait_until(|m| m.messages_delivered >= 1, Duration::from_secs(10))
        .await;
    first.shutdown(Duration::from_millis(10)).await;
    drop(first);
    let _restarted = store(&at, true)?;
    let report = running.wait_all(Duration::from_secs(30)).await;
    match &report.results[0] {
        Some(Ok(d)) => println!(
            "the dead site's request was retried on the restarted site: {}",
            d.decode::<Got>().map_or(0, |g| g.0)
        ),
        other => println!("not retried: {other:?}"),
    }
    println!("failures: {}", report.failures().len());
    Ok(())
}
