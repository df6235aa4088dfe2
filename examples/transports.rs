//! # transports — one site, three transports, the best one picked
//!
//! A node may listen on `mem:` (in-process, no descriptor), `unix:` (same
//! host) and `tcp:` at once. Its [`SiteDescriptor`] carries its id and all
//! of them; a site given the descriptor tries them in the order mem, unix,
//! tcp and talks over the first that connects — so a peer in the same
//! process never touches the kernel, one on the same host skips the TCP
//! stack, and a failed or foreign address is skipped at once.
//!
//! The program starts a server listening on all three and three clients in
//! this process, each handed a different view of the server:
//!
//! 1. the whole descriptor: it talks over `mem:`;
//! 2. the descriptor without the mem address (as another process on this
//!    host would see it — mem names mean nothing there): `unix:`;
//! 3. only the tcp address, then the same client again after its channel
//!    was preempted (it shares one descriptor slot, which another tcp site
//!    took): the first handshake listed every address, so the reopened
//!    channel is `mem:`, which takes no slot.
//!
//! For each it prints the transport of the channel and the median of a few
//! hundred echo round trips.
//!
//! ```text
//! cargo run --release --example transports [-- --rounds 500]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Address, Node, SiteDescriptor, SiteRef};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_transport::TransController;

#[derive(Parser)]
#[command(about = "Talks to one site over mem, unix and tcp, as its descriptor allows")]
struct Cli {
    /// Echo round trips per client.
    #[arg(long, default_value_t = 300)]
    rounds: u32,
}

const PATIENCE: Duration = Duration::from_secs(30);

/// The transport of `client`'s channel to `server`, from its statistics
/// (published within milliseconds of the channel coming up).
fn channel(client: &Node, server: &Node) -> String {
    let id = server.id().to_string();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = client
            .stats()
            .per_site
            .into_iter()
            .find(|s| s.site.as_deref() == Some(id.as_str()))
            .and_then(|s| s.channel);
        match found {
            Some(c) => return c,
            None if Instant::now() > deadline => return "none".into(),
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Median echo round trip in µs.
fn median_rtt(site: &SiteRef, rounds: u32) -> Result<f64, String> {
    let mut rtts = Vec::with_capacity(rounds as usize);
    for seq in 0..u64::from(rounds) {
        let t = Instant::now();
        site.request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .blocking()
            .map_err(|e| format!("echo {seq} failed: {e}"))?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    rtts.sort_by(f64::total_cmp);
    Ok(rtts[rtts.len() / 2])
}

fn report(
    what: &str,
    client: &Node,
    server: &Node,
    site: &SiteRef,
    rounds: u32,
) -> Result<(), String> {
    let rtt = median_rtt(site, rounds)?;
    println!(
        "{what:<44} channel {:<40} median round trip {rtt:>7.1} µs",
        channel(client, server)
    );
    Ok(())
}

fn run(cli: &Cli) -> Result<(), String> {
    let sock = std::env::temp_dir().join(format!("sitenet-transports-{}.sock", std::process::id()));
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .listen(format!("unix:{}", sock.display()))
        .listen(Address::unique_mem("transports").to_string())
        .configure(|c| c.builtin_services = true)
        .start()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let d = server.descriptor();
    println!("server descriptor: {d}");
    let client = || {
        Node::builder()
            .start()
            .map_err(|e| format!("cannot start a client: {e}"))
    };

    // 1. The whole descriptor, in the same process.
    let a = client()?;
    let site = a.site_from_descriptor(&d).map_err(|e| e.to_string())?;
    report(
        "whole descriptor (same process)",
        &a,
        &server,
        &site,
        cli.rounds,
    )?;

    // 2. What another process on this host could use.
    let b = client()?;
    let host_view = SiteDescriptor {
        id: d.id,
        addresses: d
            .addresses
            .iter()
            .filter(|a| !a.starts_with("mem:"))
            .cloned()
            .collect(),
    };
    let site = b
        .site_from_descriptor(&host_view)
        .map_err(|e| e.to_string())?;
    report("without mem (same host)", &b, &server, &site, cli.rounds)?;

    // 3. Only the tcp address; the handshake teaches the rest. This client
    //    shares one descriptor slot (a weak limit of 1): its channel to the
    //    server is preempted as soon as it talks to another site over tcp.
    let slots = TransController::new(
        SlotConfig::new(1, 2).map_err(|e| e.to_string())?,
        Box::new(DefaultPolicy {
            min_hold: Duration::from_millis(1),
        }),
    );
    let c = Node::builder()
        .configure(|cfg| cfg.trans_controller = Some(slots.clone()))
        .start()
        .map_err(|e| format!("cannot start a client: {e}"))?;
    let tcp = d
        .addresses
        .iter()
        .find(|a| a.starts_with("tcp:"))
        .expect("listens on tcp");
    let site = c.site(tcp).map_err(|e| e.to_string())?;
    report("tcp address only", &c, &server, &site, cli.rounds)?;
    let other = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|cfg| cfg.builtin_services = true)
        .start()
        .map_err(|e| format!("cannot start the other site: {e}"))?;
    let closed = c.metrics().channels_closed;
    let to_other = c
        .site(&other.listen_addresses()[0])
        .map_err(|e| e.to_string())?;
    median_rtt(&to_other, 1)?;
    if !c
        .wait_until_blocking(|m| m.channels_closed > closed, PATIENCE)
        .map_err(|e| e.to_string())?
    {
        return Err("the channel to the server was not preempted".into());
    }
    println!(
        "{:<44} {} preemption(s)",
        "the slot went to another tcp site",
        slots.stats().total_preemptions()
    );
    report(
        "same client, channel reopened",
        &c,
        &server,
        &site,
        cli.rounds,
    )?;

    for n in [a, b, c, other, server] {
        n.shutdown_blocking(PATIENCE).map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_file(&sock);
    Ok(())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transports: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
