//! `sitenet demo`: two nodes in this process greet each other and add
//! numbers by request and reply, the API at a glance.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

use crate::failure;

#[derive(Debug, Serialize, Deserialize)]
struct Greeting {
    text: String,
}
impl Message for Greeting {
    const ID: u32 = 1;
}

#[derive(Debug, Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}
impl Message for Add {
    const ID: u32 = 2;
}

#[derive(Debug, Serialize, Deserialize)]
struct Sum {
    sum: i64,
}
impl Message for Sum {
    const ID: u32 = 3;
}

pub(crate) fn run(json: bool) -> ExitCode {
    const MESSAGES: u64 = 1000;
    const REQUESTS: i64 = 100;
    let result = (|| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        let alice = Node::builder().listen("tcp:127.0.0.1:0").start()?;
        let bob = Node::builder().listen("tcp:127.0.0.1:0").start()?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        bob.handle(move |_ctx, g: Greeting| {
            let _ = tx.send(g.text);
        })?;
        bob.handle(|ctx, q: Add| {
            let _ = ctx.reply(&Sum { sum: q.a + q.b });
        })?;
        let to_bob = alice.site(&bob.listen_addresses()[0])?;
        let t = Instant::now();
        for i in 0..MESSAGES {
            to_bob
                .send(&Greeting {
                    text: format!("hello #{i}"),
                })
                .blocking()?;
        }
        let mut received = Vec::new();
        while (received.len() as u64) < MESSAGES {
            received.push(rx.recv_timeout(Duration::from_secs(10))?);
        }
        let in_order = received
            .iter()
            .enumerate()
            .all(|(i, t)| *t == format!("hello #{i}"));
        let send_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        for i in 0..REQUESTS {
            let r = to_bob
                .request::<Add, Sum>(&Add { a: i, b: i * 2 })
                .timeout(Duration::from_secs(10))
                .blocking()?;
            if r.msg.sum != i * 3 {
                return Err(format!("request {i}: expected {}, got {}", i * 3, r.msg.sum).into());
            }
        }
        let req_ms = t.elapsed().as_secs_f64() * 1e3;
        let report = alice
            .shutdown_blocking(Duration::from_secs(5))
            .unwrap_or_default();
        let m = bob.metrics();
        bob.shutdown_blocking(Duration::from_secs(1))
            .unwrap_or_default();
        Ok(serde_json::json!({
            "alice": alice.id().to_string(),
            "bob": bob.id().to_string(),
            "messages_sent": MESSAGES,
            "messages_received": received.len(),
            "in_order": in_order,
            "send_ms": send_ms,
            "requests": REQUESTS,
            "requests_ms": req_ms,
            "bob_delivered": m.messages_delivered,
            "unacknowledged_at_shutdown": report.unacknowledged_bytes,
        }))
    })();
    match result {
        Ok(v) => {
            if json {
                println!("{v}");
            } else {
                println!("sitenet demo: two nodes in one process");
                println!(
                    "  alice {} -> bob {}",
                    v["alice"].as_str().unwrap_or(""),
                    v["bob"].as_str().unwrap_or("")
                );
                println!(
                    "  {} one-way messages sent, {} received, in order: {} ({:.1} ms)",
                    v["messages_sent"],
                    v["messages_received"],
                    v["in_order"],
                    v["send_ms"].as_f64().unwrap_or(0.0)
                );
                println!(
                    "  {} request/replies answered correctly ({:.1} ms)",
                    v["requests"],
                    v["requests_ms"].as_f64().unwrap_or(0.0)
                );
                println!(
                    "  unacknowledged bytes at shutdown: {}",
                    v["unacknowledged_at_shutdown"]
                );
            }
            if v["in_order"] == serde_json::Value::Bool(true) {
                ExitCode::SUCCESS
            } else {
                failure("messages arrived out of order")
            }
        }
        Err(e) => failure(e),
    }
}
