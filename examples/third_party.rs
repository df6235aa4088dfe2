//! # third_party — a site reference passed along and used
//!
//! A `SiteRef` inside a message travels as its site's descriptor (id and
//! addresses). Here a matchmaker tells a worker, in a message, which
//! storage site to use; the worker, who never heard of it before, sends it
//! its results directly — the reference it received is a working
//! `SiteRef` in its own site table.
//!
//! ```text
//! cargo run --release --example third_party
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, SiteRef};

/// "Store your results there."
#[derive(Serialize, Deserialize)]
struct Assign {
    storage: SiteRef,
    job: u32,
}
impl Message for Assign {
    const ID: u32 = 1;
}

#[derive(Debug, Serialize, Deserialize)]
struct Result_ {
    job: u32,
    value: u64,
}
impl Message for Result_ {
    const ID: u32 = 2;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let storage = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    storage.handle(move |ctx, r: Result_| {
        println!(
            "storage: job {} = {} from site {:?}",
            r.job,
            r.value,
            ctx.sender_id().map(|i| i.to_string())
        );
        let _ = tx.lock().unwrap().send(());
    })?;
    let worker = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    worker.handle(|_ctx, a: Assign| {
        println!(
            "worker: job {} assigned, results go to {:?} (known only from the message)",
            a.job,
            a.storage.id().map(|i| i.to_string())
        );
        let _ = a
            .storage
            .send(&Result_ {
                job: a.job,
                value: u64::from(a.job) * 1000,
            })
            .try_now();
    })?;
    // The matchmaker knows both. It has talked to the storage site (a
    // first result, job 0), so it knows its id and can pass it on.
    let matchmaker = Node::builder().start()?;
    let to_storage = matchmaker.site(&storage.listen_addresses()[0])?;
    to_storage.send(&Result_ { job: 0, value: 0 }).blocking()?;
    to_storage.flush(Duration::from_secs(5)).blocking()?;
    rx.recv_timeout(Duration::from_secs(5))?;
    let to_worker = matchmaker.site(&worker.listen_addresses()[0])?;
    for job in 1..=3 {
        let assign = Assign {
            storage: to_storage.clone(),
            job,
        };
        to_worker.send(&assign).blocking()?;
    }
    for _ in 1..=3 {
        rx.recv_timeout(Duration::from_secs(10))?;
    }
    println!("storage got the 3 results straight from the worker");
    Ok(())
}
