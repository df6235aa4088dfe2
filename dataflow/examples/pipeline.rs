//! # pipeline: a stream through three sites
//!
//! A producer site sends N numbers to the filter's port; the filter reads
//! its stream, doubles each number and sends it to its own port; the
//! consumer reads that port's stream (on another site: each cell is
//! pushed to it as it is bound) and sums it. With `--processes`, each site
//! is its own OS process over TCP loopback; with `--kill filter`, the
//! filter dies mid-stream and the consumer's wait ends with `PermFail`
//! within the give-up time.
//!
//! ```text
//! cargo run --release -p sitenet-dataflow --example pipeline -- --items 100000 --json
//! cargo run --release -p sitenet-dataflow --example pipeline -- --processes --kill filter --json
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use sitenet_dataflow::{Dataflow, DataflowError, Port, Stream, Ticket};

#[path = "common/procs.rs"]
mod procs;

#[derive(Parser)]
#[command(about = "A producer, a filter and a consumer connected by ports and streams")]
struct Cli {
    /// Numbers the producer sends.
    #[arg(long, default_value_t = 100_000)]
    items: u64,
    /// Each site its own OS process over TCP loopback.
    #[arg(long)]
    processes: bool,
    /// Kill a site mid-stream (`filter`).
    #[arg(long)]
    kill: Option<String>,
    /// Seconds before an unreachable site counts as failed for good.
    #[arg(long, default_value_t = 3.0)]
    give_up: f64,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// (internal) the role of a child process.
    #[arg(long, hide = true)]
    role: Option<String>,
    /// (internal) the ticket of the filter's input port.
    #[arg(long, hide = true)]
    inbox: Option<String>,
}

type Item = Option<u64>;

/// The filter: reads its input stream, doubles, sends to `out`; with
/// `die_after`, calls `die` after that many (the kill comes mid-stream,
/// whatever the speeds of the sites).
fn filter(mut input: Stream<Item>, out: Port<Item>, die_after: Option<u64>, die: impl FnOnce()) {
    let mut n = 0;
    loop {
        match input.next_blocking() {
            Ok(Some(x)) => {
                if out.send(Some(2 * x)).is_err() {
                    return;
                }
                n += 1;
                if Some(n) == die_after {
                    return die();
                }
            }
            Ok(None) => {
                let _ = out.send(None);
                return;
            }
            Err(_) => return,
        }
    }
}

/// The producer: 1..=n, then the end.
fn produce(inbox: &Port<Item>, n: u64) -> Result<(), DataflowError> {
    for x in 1..=n {
        inbox.send(Some(x))?;
    }
    futures::executor::block_on(inbox.send_acked(None))
}

/// A filter site: its input port and its output stream, offered.
fn filter_site(
    df: &Dataflow,
    die_after: Option<u64>,
    die: impl FnOnce() + Send + 'static,
) -> (Ticket, Ticket, std::thread::JoinHandle<()>) {
    let (inbox, input) = Port::<Item>::new(df);
    let (out, output) = Port::<Item>::new(df);
    let tickets = (df.offer(&inbox), df.offer(&output));
    drop((inbox, output));
    let t = std::thread::spawn(move || filter(input, out, die_after, die));
    (tickets.0, tickets.1, t)
}

struct Outcome {
    received: u64,
    sum: u64,
    fault: Option<DataflowError>,
}

/// The consumer: sums the stream until its end, or a failure.
fn consume(mut s: Stream<Item>) -> Outcome {
    let mut o = Outcome {
        received: 0,
        sum: 0,
        fault: None,
    };
    loop {
        match s.next_blocking() {
            Ok(Some(x)) => {
                o.received += 1;
                o.sum += x;
            }
            Ok(None) => return o,
            Err(e) => {
                o.fault = Some(e);
                return o;
            }
        }
    }
}

fn child(cli: &Cli) {
    let give_up = Duration::from_secs_f64(cli.give_up);
    let node = procs::node(give_up);
    let df = Dataflow::on(&node);
    match cli.role.as_deref() {
        Some("filter") => {
            // Killed mid-stream: the process ends at once, saying goodbye
            // to no one (as a kill does).
            let die_after = cli.kill.as_ref().map(|_| (cli.items / 2).max(1));
            let (inbox, output, t) = filter_site(&df, die_after, || std::process::exit(137));
            procs::tell(&format!("{inbox} {output}"));
            t.join().expect("the filter");
            procs::wait_for_parent();
        }
        Some("producer") => {
            let t: Ticket = cli
                .inbox
                .as_deref()
                .expect("--inbox")
                .parse()
                .expect("a ticket");
            let inbox: Port<Item> = df.take(&t).expect("the filter's port");
            let r = produce(&inbox, cli.items);
            procs::tell(&format!("{}", r.is_ok()));
            procs::wait_for_parent();
        }
        other => panic!("unknown role {other:?}"),
    }
    let _ = node.shutdown_blocking(Duration::from_secs(5));
}

fn main() {
    let cli = Cli::parse();
    if cli.role.is_some() {
        return child(&cli);
    }
    let give_up = Duration::from_secs_f64(cli.give_up);
    let kill_filter = cli.kill.as_deref() == Some("filter");
    if let Some(k) = cli.kill.as_deref() {
        assert_eq!(k, "filter", "only the filter can be killed");
    }
    let consumer = procs::node(give_up);
    let dc = Dataflow::on(&consumer);
    let start = Instant::now();
    let outcome = if cli.processes {
        let mut filter_args: Vec<String> = vec![
            "--role".into(),
            "filter".into(),
            "--give-up".into(),
            cli.give_up.to_string(),
            "--items".into(),
            cli.items.to_string(),
        ];
        if kill_filter {
            filter_args.extend(["--kill".into(), "filter".into()]);
        }
        let mut f = procs::Site::spawn(&filter_args);
        let line = f.line();
        let (inbox, output) = line.split_once(' ').expect("two tickets");
        let mut p = procs::Site::spawn(&[
            "--role".into(),
            "producer".into(),
            "--inbox".into(),
            inbox.into(),
            "--items".into(),
            cli.items.to_string(),
            "--give-up".into(),
            cli.give_up.to_string(),
        ]);
        let stream: Stream<Item> = dc
            .take(&output.parse().expect("a ticket"))
            .expect("the stream");
        let outcome = consume(stream);
        f.finish();
        let _ = p.line();
        p.finish();
        outcome
    } else {
        let (filter_node, producer_node) = (procs::node(give_up), procs::node(give_up));
        let (df, dp) = (Dataflow::on(&filter_node), Dataflow::on(&producer_node));
        let die_after = kill_filter.then_some((cli.items / 2).max(1));
        let dying = filter_node.clone();
        let (inbox, output, filter_thread) = filter_site(&df, die_after, move || {
            let _ = dying.shutdown_blocking(Duration::from_secs(5));
        });
        let port: Port<Item> = dp.take(&inbox).expect("the filter's port");
        let n = cli.items;
        let producer = std::thread::spawn(move || produce(&port, n));
        let stream: Stream<Item> = dc.take(&output).expect("the stream");
        let outcome = consume(stream);
        let _ = producer.join();
        let _ = filter_thread.join();
        let _ = producer_node.shutdown_blocking(Duration::from_secs(5));
        let _ = filter_node.shutdown_blocking(Duration::from_secs(5));
        outcome
    };
    let elapsed = start.elapsed().as_secs_f64();
    let expected = cli.items * (cli.items + 1);
    let sum_ok =
        outcome.fault.is_none() && outcome.received == cli.items && outcome.sum == expected;
    let fault = outcome.fault.as_ref().map(|e| format!("{e:?}"));
    if cli.json {
        println!(
            "{}",
            serde_json::json!({
                "items": cli.items,
                "received": outcome.received,
                "sum_ok": sum_ok,
                "elapsed_s": elapsed,
                "items_per_s": outcome.received as f64 / elapsed,
                "fault": fault,
                "processes": cli.processes,
            })
        );
    } else {
        println!(
            "{} of {} items in {elapsed:.3} s ({:.0} items/s), sum {}{}",
            outcome.received,
            cli.items,
            outcome.received as f64 / elapsed,
            if sum_ok { "ok" } else { "NOT ok" },
            fault.map(|f| format!(", ended by {f}")).unwrap_or_default(),
        );
    }
    let _ = consumer.shutdown_blocking(Duration::from_secs(5));
    let failed = outcome.fault.is_some() != kill_filter || (!kill_filter && !sum_ok);
    if failed {
        std::process::exit(1);
    }
}
