//! # echo_clients — one server, many clients, few descriptors
//!
//! The round-trip test of the Mozart network layer paper: one server, N
//! clients each doing round trips to it, and a server allowed only a few
//! file descriptors. The server's channels take slots of a controller of
//! its own (`NodeConfig::trans_controller`) with a hard limit far below
//! the number of clients, so clients take turns for the server's channels
//! (a channel over the limit is not accepted; the client calls again, and
//! an idle channel may be preempted for a waiting one), and no message is
//! lost or duplicated — every round trip completes.
//!
//! It prints the round trips done, their median, the server's peak number
//! of channels against its limit, and the preemptions.
//!
//! ```text
//! cargo run --release --example echo_clients [-- --clients 40 --fds 8 --rounds 50]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_transport::TransController;

#[derive(Parser)]
#[command(about = "One server with few descriptors, many clients doing round trips")]
struct Cli {
    /// Clients (each a node with its own channel to the server).
    #[arg(long, default_value_t = 40)]
    clients: usize,
    /// The server's hard limit of descriptors (channels).
    #[arg(long, default_value_t = 8)]
    fds: usize,
    /// Round trips per client.
    #[arg(long, default_value_t = 50)]
    rounds: u64,
}

#[derive(Serialize, Deserialize)]
struct Ping(u64);
impl Message for Ping {
    const ID: u32 = 1;
}

#[derive(Serialize, Deserialize)]
struct Pong(u64);
impl Message for Pong {
    const ID: u32 = 2;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let slots = TransController::new(
        SlotConfig::new(cli.fds.saturating_sub(1).max(1), cli.fds)?,
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(5),
        }),
    );
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.trans_controller = Some(slots.clone()))
        .start()?;
    server.handle(|ctx, p: Ping| {
        let _ = ctx.reply(&Pong(p.0));
    })?;
    let at = server.listen_addresses()[0].clone();

    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..cli.clients {
        let client = Node::builder()
            .configure(|c| c.reconnect_min = Duration::from_millis(5))
            .start()?;
        let site = client.site(&at)?;
        let rounds = cli.rounds;
        tasks.push(tokio::spawn(async move {
            let mut rtts = Vec::new();
            for i in 0..rounds {
                let s = Instant::now();
                let r = site
                    .request::<Ping, Pong>(&Ping(i))
                    .timeout(Duration::from_secs(60))
                    .await?;
                assert_eq!(r.msg.0, i);
                rtts.push(s.elapsed());
            }
            drop(client);
            Ok::<_, sitenet::RequestError>(rtts)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let took = t.elapsed();
    all.sort();
    let snap = slots.stats();
    println!(
        "{} clients x {} round trips = {} done in {:.2} s; median {:?}",
        cli.clients,
        cli.rounds,
        all.len(),
        took.as_secs_f64(),
        all[all.len() / 2]
    );
    println!(
        "server channels: at most {} at once (hard limit {}); at most {} clients waiting for one; preemptions {}",
        snap.peak_in_use,
        snap.hard,
        snap.peak_waiting,
        server.metrics().preemptions
    );
    Ok(())
}
