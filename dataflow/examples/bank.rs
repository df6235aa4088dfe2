//! # bank: transfers between accounts held in shared cells
//!
//! Each account is a [`Cell`] holding a dataflow variable, as in Oz: a
//! transfer step takes the old variable out with one atomic `exchange`,
//! puts a fresh one in, and binds the fresh one to the old balance plus
//! the change once the old is known. Other sites' exchanges never wait for
//! the arithmetic: they get the fresh variable and wait on it. S sites run
//! transfers at once; the sum of the balances must stay what it was, and
//! every exchange is recorded (the variable taken out, the one put in):
//! the histories of all sites must chain, per account, into one sequence
//! from the initial content — the exchanges were linearizable.
//!
//! `--mode mobile` moves each account's content to the site exchanging
//! it; `--mode stationary` runs every exchange at the accounts' home.
//!
//! ```text
//! cargo run --release -p sitenet-dataflow --example bank -- --sites 4 --ops 2000 --json
//! cargo run --release -p sitenet-dataflow --example bank -- --sites 4 --ops 2000 --processes --mode stationary --json
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng};
use sitenet_dataflow::{Cell, CellMode, Dataflow, DataflowError, Ticket, Var};

#[path = "common/procs.rs"]
mod procs;

#[derive(Parser)]
#[command(about = "Transfers between accounts held in mobile or stationary cells")]
struct Cli {
    /// Sites making transfers.
    #[arg(long, default_value_t = 4)]
    sites: usize,
    /// Transfers in all, shared between the sites.
    #[arg(long, default_value_t = 2_000)]
    ops: u64,
    /// Accounts (cells, made on the first site).
    #[arg(long, default_value_t = 4)]
    accounts: usize,
    /// `mobile` or `stationary`.
    #[arg(long, default_value = "mobile")]
    mode: String,
    /// Each site its own OS process over TCP loopback.
    #[arg(long)]
    processes: bool,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// (internal) a child's site number.
    #[arg(long, hide = true)]
    index: Option<u64>,
    /// (internal) the accounts' tickets, comma-separated.
    #[arg(long, hide = true)]
    tickets: Option<String>,
}

const OPENING: i64 = 1_000;

type Account = Cell<Var<i64>>;

/// One exchange: the account, the variable taken out, the one put in.
type Step = (usize, String, String);

fn name(v: &Var<i64>) -> String {
    let id = v.id();
    format!("{}:{}", id.home, id.serial)
}

/// Adds `delta` to an account: exchange, then bind the new variable.
fn add(df: &Dataflow, account: &Account, k: usize, delta: i64) -> Result<Step, DataflowError> {
    let new: Var<i64> = Var::new(df);
    let old = account.exchange_blocking(new.clone())?;
    let balance = old.wait_blocking()?;
    new.bind_blocking(balance + delta)?;
    Ok((k, name(&old), name(&new)))
}

/// A site's share of the transfers.
fn work(
    df: &Dataflow,
    accounts: &[Account],
    seed: u64,
    ops: u64,
) -> Result<Vec<Step>, DataflowError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    for _ in 0..ops {
        let from = rng.gen_range(0..accounts.len());
        let to = (from + rng.gen_range(1..accounts.len().max(2))) % accounts.len();
        let amount = rng.gen_range(1..10);
        steps.push(add(df, &accounts[from], from, -amount)?);
        steps.push(add(df, &accounts[to], to, amount)?);
    }
    Ok(steps)
}

/// Whether each account's steps chain into one sequence from its first
/// content: no variable taken out twice, none put in twice, and every
/// step on the chain.
fn linearizable(initial: &[String], steps: &[Step]) -> bool {
    let mut next: Vec<BTreeMap<&str, &str>> = vec![BTreeMap::new(); initial.len()];
    let mut put_in: BTreeSet<&str> = BTreeSet::new();
    for (k, old, new) in steps {
        if next[*k].insert(old, new).is_some() || !put_in.insert(new) {
            return false;
        }
    }
    next.iter().zip(initial).all(|(chain, first)| {
        let mut at = first.as_str();
        let mut n = 0;
        while let Some(&to) = chain.get(at) {
            at = to;
            n += 1;
            if n > chain.len() {
                return false;
            }
        }
        n == chain.len()
    })
}

fn child(cli: &Cli) {
    let node = procs::node(Duration::from_secs(10));
    let df = Dataflow::on(&node);
    let accounts: Vec<Account> = cli
        .tickets
        .as_deref()
        .expect("--tickets")
        .split(',')
        .map(|t| {
            df.take(&t.parse::<Ticket>().expect("a ticket"))
                .expect("an account")
        })
        .collect();
    let index = cli.index.expect("--index");
    // Every site starts at once.
    procs::tell("ready");
    if procs::hear().as_deref() != Some("go") {
        return;
    }
    let steps = work(&df, &accounts, index, cli.ops).expect("the transfers");
    procs::tell(&serde_json::json!({ "steps": steps, "moves": df.stats().moves }).to_string());
    procs::wait_for_parent();
    let _ = node.shutdown_blocking(Duration::from_secs(5));
}

fn main() {
    let cli = Cli::parse();
    if cli.index.is_some() {
        return child(&cli);
    }
    let mode = match cli.mode.as_str() {
        "mobile" => CellMode::Mobile,
        "stationary" => CellMode::Stationary,
        other => {
            eprintln!("--mode {other}: use mobile or stationary");
            std::process::exit(2);
        }
    };
    let sites = cli.sites.max(1);
    let accounts_n = cli.accounts.max(2);
    let home = procs::node(Duration::from_secs(10));
    let dh = Dataflow::on(&home);
    let mut initial = Vec::new();
    let accounts: Vec<Account> = (0..accounts_n)
        .map(|_| {
            let v: Var<i64> = Var::new(&dh);
            v.bind_blocking(OPENING).expect("an opening balance");
            initial.push(name(&v));
            Cell::new(&dh, mode, v).expect("an account")
        })
        .collect();
    let tickets: Vec<Ticket> = accounts.iter().map(|a| dh.offer(a)).collect();
    let per_site = cli.ops / sites as u64;
    let mut start = Instant::now();
    let mut steps: Vec<Step> = Vec::new();
    let mut moves = 0u64;
    let mut children = Vec::new();
    let mut nodes = Vec::new();
    if cli.processes {
        let list = tickets
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",");
        for i in 1..sites {
            children.push(procs::Site::spawn(&[
                "--index".into(),
                i.to_string(),
                "--tickets".into(),
                list.clone(),
                "--ops".into(),
                per_site.to_string(),
            ]));
        }
        for c in &mut children {
            assert_eq!(c.line(), "ready");
        }
        start = Instant::now();
        for c in &mut children {
            c.say("go");
        }
        let mine = work(&dh, &accounts, 0, per_site).expect("the transfers");
        steps.extend(mine);
        for c in &mut children {
            let line = c.line();
            let v: serde_json::Value = serde_json::from_str(&line).expect("a child's report");
            let theirs: Vec<Step> = serde_json::from_value(v["steps"].clone()).expect("steps");
            steps.extend(theirs);
            moves += v["moves"].as_u64().unwrap_or(0);
        }
    } else {
        let workers: Vec<_> = (1..sites)
            .map(|i| {
                let node = procs::node(Duration::from_secs(10));
                let df = Dataflow::on(&node);
                let mine: Vec<Account> = tickets
                    .iter()
                    .map(|t| df.take(t).expect("an account"))
                    .collect();
                nodes.push(node);
                std::thread::spawn(move || {
                    let steps = work(&df, &mine, i as u64, per_site).expect("the transfers");
                    (steps, df)
                })
            })
            .collect();
        steps.extend(work(&dh, &accounts, 0, per_site).expect("the transfers"));
        for w in workers {
            let (theirs, df) = w.join().expect("a site");
            steps.extend(theirs);
            moves += df.stats().moves;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let exchanges = steps.len() as u64;
    // The final balances: one more step per account (add nothing).
    let mut total = 0i64;
    for (k, a) in accounts.iter().enumerate() {
        let v: Var<i64> = Var::new(&dh);
        let old = a.exchange_blocking(v.clone()).expect("a final read");
        let balance = old.wait_blocking().expect("a final read");
        v.bind_blocking(balance).expect("a final read");
        steps.push((k, name(&old), name(&v)));
        total += balance;
    }
    moves += dh.stats().moves;
    let expected = OPENING * accounts_n as i64;
    let lin = linearizable(&initial, &steps);
    for c in children {
        c.finish();
    }
    if cli.json {
        println!(
            "{}",
            serde_json::json!({
                "final": total,
                "expected": expected,
                "linearizable": lin,
                "exchanges": exchanges,
                "exchanges_per_s": exchanges as f64 / elapsed,
                "moves": moves,
                "mode": cli.mode,
                "sites": sites,
                "processes": cli.processes,
            })
        );
    } else {
        println!(
            "{exchanges} exchanges on {accounts_n} {} accounts from {sites} sites in {elapsed:.3} s ({:.0}/s, {moves} moves): total {total} of {expected}, {}",
            cli.mode,
            exchanges as f64 / elapsed,
            if lin { "linearizable" } else { "NOT linearizable" }
        );
    }
    for n in nodes {
        let _ = n.shutdown_blocking(Duration::from_secs(5));
    }
    let _ = home.shutdown_blocking(Duration::from_secs(5));
    if total != expected || !lin {
        std::process::exit(1);
    }
}
