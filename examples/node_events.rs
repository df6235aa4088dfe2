//! # node_events — what a node learns about other sites, as it happens
//!
//! A runtime that places work on sites needs to know when one comes up,
//! stops answering for a while, or is gone for good — Erlang's
//! `net_kernel:monitor_nodes`. Here a client subscribes to its node's
//! events, talks to a few servers, then one server shuts down gracefully,
//! one is killed on purpose and one address never answers; a fourth server
//! that demands a cookie refuses a client without one, and says so in its
//! own events.
//!
//! ```text
//! cargo run --release --example node_events
//! ```

use std::time::Duration;

use futures::StreamExt;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, NodeEvent, NodeEvents};
use sitenet_protocols::Cookie;

const PATIENCE: Duration = Duration::from_secs(60);

fn server(cookie: Option<Cookie>) -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(move |c| {
            c.builtin_services = true;
            c.cookies = cookie.into_iter().collect();
        })
        .start()
        .expect("a server starts")
}

/// Prints events until one for which `until` holds.
async fn show_until(events: &mut NodeEvents, until: impl Fn(&NodeEvent) -> bool) {
    loop {
        let ev = tokio::time::timeout(PATIENCE, events.next())
            .await
            .expect("an event in time")
            .expect("the node lives");
        match &ev {
            NodeEvent::SiteUp {
                site, transport, ..
            } => println!("up:          {site} over {transport}"),
            NodeEvent::SiteUnreachable { address, cause, .. } => {
                println!(
                    "unreachable: {} ({cause})",
                    address.as_deref().unwrap_or("?")
                )
            }
            NodeEvent::SiteDown {
                site,
                address,
                reason,
            } => println!(
                "down:        {} ({reason})",
                site.map(|s| s.to_string())
                    .or(address.clone())
                    .unwrap_or_default()
            ),
            NodeEvent::PeerRefused { address, reason } => {
                println!("refused:     {address} ({reason:?})")
            }
            other => println!("{other:?}"),
        }
        if until(&ev) {
            return;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Node::builder().start()?;
    let mut events = client.events();

    // Two servers come up as the client first talks to them.
    let (a, b) = (server(None), server(None));
    for s in [&a, &b] {
        let site = client.site(&s.listen_addresses()[0])?;
        site.request::<Echo, EchoReply>(&Echo { seq: 1 })
            .timeout(PATIENCE)
            .await?;
    }
    show_until(
        &mut events,
        |e| matches!(e, NodeEvent::SiteUp { site, .. } if *site == b.id()),
    )
    .await;

    // A shuts down: it says it is leaving, and the client hears it at once.
    a.shutdown(Duration::from_secs(5)).await;
    show_until(&mut events, |e| matches!(e, NodeEvent::SiteDown { .. })).await;

    // B is killed on purpose by the client.
    client.kill(&client.site(&b.listen_addresses()[0])?);
    show_until(&mut events, |e| matches!(e, NodeEvent::SiteDown { .. })).await;

    // Nothing listens at this address: unreachable (retried with backoff).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let nowhere = client.site(format!("tcp:127.0.0.1:{port}"))?;
    nowhere.send(&Echo { seq: 2 }).try_now()?;
    show_until(&mut events, |e| {
        matches!(e, NodeEvent::SiteUnreachable { .. })
    })
    .await;
    client.kill(&nowhere);

    // A server that demands a cookie refuses the client, and says so.
    let guarded = server(Some(Cookie::new([7; 32])));
    let mut guarded_events = guarded.events();
    let site = client.site(&guarded.listen_addresses()[0])?;
    site.send(&Echo { seq: 3 }).try_now()?;
    println!("-- the guarded server's events:");
    show_until(&mut guarded_events, |e| {
        matches!(e, NodeEvent::PeerRefused { .. })
    })
    .await;
    Ok(())
}
