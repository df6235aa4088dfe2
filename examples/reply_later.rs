//! # reply_later — a lock server that answers when the lock is free
//!
//! A handler may not wait, yet some answers are not ready when the request
//! arrives: here, `Acquire` can only be answered once the lock's holder
//! releases it. The handler takes the request's `Responder` and keeps it in
//! a queue; the `Release` handler answers the next one in line. Every
//! client gets exactly one answer, and a responder dropped unanswered (the
//! server shutting down, say) would tell its client "no reply" at once.
//!
//! ```text
//! cargo run --release --example reply_later [-- --clients 8]
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node, Responder};

#[derive(Parser)]
#[command(about = "Clients take a lock in turn; the server answers each Acquire when it is free")]
struct Cli {
    /// Clients competing for the lock.
    #[arg(long, default_value_t = 8)]
    clients: u32,
}

/// Asks for the lock (a request: answered when the lock is granted).
#[derive(Serialize, Deserialize)]
struct Acquire {
    client: u32,
}
impl Message for Acquire {
    const ID: u32 = 1;
}

/// The lock is yours; `turn` counts the grants.
#[derive(Serialize, Deserialize)]
struct Granted {
    turn: u32,
}
impl Message for Granted {
    const ID: u32 = 2;
}

/// Gives the lock back (one-way).
#[derive(Serialize, Deserialize)]
struct Release;
impl Message for Release {
    const ID: u32 = 3;
}

/// The server's state: who holds the lock, and who waits for it.
#[derive(Default)]
struct Lock {
    held: bool,
    turns: u32,
    waiting: VecDeque<Responder>,
}

impl Lock {
    /// Grants the lock to `r` (it is free).
    fn grant(&mut self, r: Responder) {
        self.held = true;
        self.turns += 1;
        let _ = r.reply(&Granted { turn: self.turns });
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    let lock = Arc::new(Mutex::new(Lock::default()));
    let l = lock.clone();
    server.handle(move |ctx, _: Acquire| {
        let Some(responder) = ctx.responder() else {
            return; // sent one-way: nothing to answer
        };
        let mut lock = l.lock().unwrap();
        if lock.held {
            lock.waiting.push_back(responder); // answered by a later Release
        } else {
            lock.grant(responder);
        }
    })?;
    let l = lock.clone();
    server.handle(move |_ctx, _: Release| {
        let mut lock = l.lock().unwrap();
        lock.held = false;
        if let Some(next) = lock.waiting.pop_front() {
            lock.grant(next);
        }
    })?;

    let address = server.listen_addresses()[0].clone();
    // Each client holds the lock briefly; `inside` counts the holders at
    // once, which must never pass 1.
    let inside = Arc::new(Mutex::new((0u32, 0u32))); // (now, most at once)
    let clients: Vec<_> = (0..cli.clients)
        .map(|client| {
            let (address, inside) = (address.clone(), inside.clone());
            std::thread::spawn(move || -> Result<u32, String> {
                let node = Node::builder().start().map_err(|e| e.to_string())?;
                let site = node.site(&address).map_err(|e| e.to_string())?;
                let granted = site
                    .request::<Acquire, Granted>(&Acquire { client })
                    .timeout(Duration::from_secs(60))
                    .blocking()
                    .map_err(|e| e.to_string())?;
                {
                    let mut i = inside.lock().unwrap();
                    i.0 += 1;
                    i.1 = i.1.max(i.0);
                }
                std::thread::sleep(Duration::from_millis(5));
                inside.lock().unwrap().0 -= 1;
                site.send(&Release).blocking().map_err(|e| e.to_string())?;
                let _ = node.shutdown_blocking(Duration::from_secs(5));
                Ok(granted.msg.turn)
            })
        })
        .collect();
    let mut turns = Vec::new();
    for c in clients {
        turns.push(c.join().expect("client thread")?);
    }
    turns.sort_unstable();
    let most = inside.lock().unwrap().1;
    println!(
        "{} clients held the lock in turns {:?}; at most {most} at once",
        cli.clients, turns
    );
    assert_eq!(turns, (1..=cli.clients).collect::<Vec<_>>());
    assert_eq!(most, 1, "the lock was held by two clients at once");
    Ok(())
}
