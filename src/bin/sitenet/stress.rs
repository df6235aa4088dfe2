//! `sitenet stress`: the options, a progress bar while it runs, and the
//! report (text, or one JSON object with `--json`).

use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use sitenet::stress::{self, StressConfig, StressReport};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Client sites (each a node of its own in this process; 1 to 1,000,000).
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// The server's hard limit of channel slots (its weak limit is four
    /// fifths of it): the Mozart paper's server had 30.
    #[arg(long, default_value_t = 30)]
    slots: usize,
    /// The byte channels used: TCP loopback, TLS over TCP loopback (a CA
    /// made for the run, a certificate per node), a Unix socket, or
    /// in-process mem channels (no descriptors).
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "tls", "unix", "mem"])]
    transport: String,
    /// The server's preemption policy.
    #[arg(long, default_value = "default", value_parser = ["naive", "default"])]
    policy: String,
    /// Who gives a slot up while clients wait in the server's line, and so
    /// who is served next: `share` (short turns in rotation) or `fifo`
    /// (first come stays until preempted).
    #[arg(long, default_value = "share", value_parser = ["share", "fifo"])]
    admission: String,
    /// Threads the nodes' sites run on (default: one per core; 1 puts the
    /// whole run on one thread).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Seconds the clients send.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Channels cut per second, on average (0: none).
    #[arg(long, default_value_t = 2.0)]
    cut_rate: f64,
    /// Seed of the workload and the cuts (random if not given; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Each client stops after this many bursts of 8 messages and a probe
    /// (a fixed amount of work); the run ends when all are done or at
    /// --duration. --sweep uses 20 unless given.
    #[arg(long)]
    rounds: Option<u64>,
    /// Print the report as one JSON object (with --sweep: {"sweep": [...]}).
    #[arg(long)]
    json: bool,
    /// Draw the run as an SVG, each panel's key beside it: round trip over
    /// time (p50 and p99 per 100 ms, and the p99 of the probes on an open
    /// channel, log scale), messages delivered per client (the fairness,
    /// its largest step marked, the clients' means by the threads they
    /// ran on), slots in use against the hard limit, preemptions; the
    /// drain marked in each (with --sweep: mean, p50 and p99 round trip,
    /// the steady mean and the mean first-contact wait, and total time,
    /// against the number of clients).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Run once per number of clients in this list (e.g. 10,50,200,1000),
    /// each client doing the same work, and report them together.
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    sweep: Vec<usize>,
    #[command(flatten)]
    auth: crate::auth::Auth,
}

pub(crate) fn run(a: Args) -> ExitCode {
    let duration = match crate::seconds("duration", a.duration) {
        Ok(d) => d,
        Err(e) => return crate::usage(e),
    };
    if !(a.cut_rate.is_finite() && a.cut_rate >= 0.0) {
        return crate::usage(format!(
            "--cut-rate must be a number of cuts per second >= 0, got {}",
            a.cut_rate
        ));
    }
    if a.auth.has_tls() {
        return crate::usage(
            "stress runs every node in this process, each a site of its own: \
             use --transport tls, which makes a CA for the run and a certificate per node",
        );
    }
    // Every count is checked before anything runs (a sweep's too).
    for &n in a
        .sweep
        .iter()
        .chain(a.sweep.is_empty().then_some(&a.clients))
    {
        if let Err(e) = stress::check_clients(n) {
            return crate::usage(e);
        }
    }
    let cookies = match a.auth.load() {
        Ok(s) => s.cookies,
        Err(code) => return code,
    };
    let cfg = StressConfig {
        clients: a.clients,
        slots: a.slots,
        policy: a.policy,
        admission: sitenet_protocols::slots::Admission::by_name(&a.admission)
            .expect("clap checked the name"),
        duration,
        cut_rate: a.cut_rate,
        seed: a.seed.unwrap_or_else(rand::random),
        transport: a.transport.clone(),
        rounds: a.rounds,
        cookies,
        threads: a.threads.map(usize::from),
    };
    if !a.sweep.is_empty() {
        return run_sweep(cfg, &a.sweep, a.json, a.plot.as_deref());
    }
    eprintln!(
        "sitenet stress: {} clients, server slot limit {}, policy {}, admission {}, {} s over {}, {} cuts/s, seed {}, {} threads",
        cfg.clients, cfg.slots, cfg.policy, cfg.admission, a.duration, a.transport, cfg.cut_rate, cfg.seed,
        cfg.threads.unwrap_or_else(sitenet::default_threads)
    );
    let r = run_with_bar(&cfg);
    let report = match r {
        Ok(r) => r,
        Err(stress::StressError::Config(e)) => return crate::usage(e),
        Err(e) => return crate::failure(e),
    };
    if let Some(path) = &a.plot {
        if let Err(e) = crate::plot::run(&report, path) {
            return crate::failure(e);
        }
        eprintln!("sitenet stress: plot written to {}", path.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
    } else {
        print_report(&report);
    }
    let failures = report.failures();
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        crate::failure(format!("stress failed: {}", failures.join("; ")))
    }
}

/// One run with a progress bar (shown on a terminal only).
fn run_with_bar(cfg: &StressConfig) -> Result<StressReport, stress::StressError> {
    let bar = ProgressBar::new(cfg.duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let r = stress::run(cfg, |p| {
        bar.set_position(p.elapsed.as_millis().min(p.duration.as_millis()) as u64);
        bar.set_message(format!(
            "{}delivered {}/{}, slots {}, preemptions {}",
            if p.draining { "draining: " } else { "" },
            p.delivered,
            p.sent,
            p.slots_in_use,
            p.preemptions
        ));
    });
    bar.finish_and_clear();
    r
}

fn run_sweep(
    mut cfg: StressConfig,
    clients: &[usize],
    json: bool,
    plot: Option<&std::path::Path>,
) -> ExitCode {
    cfg.rounds = cfg.rounds.or(Some(20));
    let mut reports = Vec::new();
    for &n in clients {
        cfg.clients = n;
        eprintln!("sitenet stress: sweep, {n} clients");
        match run_with_bar(&cfg) {
            Ok(r) => reports.push(r),
            Err(stress::StressError::Config(e)) => return crate::usage(e),
            Err(e) => return crate::failure(e),
        }
    }
    if let Some(path) = plot {
        if let Err(e) = crate::plot::sweep(&reports, path) {
            return crate::failure(e);
        }
        eprintln!("sitenet stress: plot written to {}", path.display());
    }
    if json {
        let v = serde_json::json!({ "sweep": reports });
        println!("{v}");
    } else {
        println!(
            "clients  rtt_mean_ms  rtt_p50_ms  rtt_p99_ms  total_s  sent  lost  preemptions  jain  \
             steady_mean_ms  steady_p99_ms  first_contact_mean_ms  first_contact_p99_ms"
        );
        for r in &reports {
            println!(
                "{:>7}  {:>11.2}  {:>10.2}  {:>10.2}  {:>7.2}  {:>4}  {:>4}  {:>11}  {:.3}  \
                 {:>14.2}  {:>13.2}  {:>21.2}  {:>20.2}",
                r.clients,
                r.rtt_mean_us / 1000.0,
                r.rtt_p50_us as f64 / 1000.0,
                r.rtt_p99_us as f64 / 1000.0,
                r.elapsed_s,
                r.sent,
                r.lost,
                r.preemptions,
                r.fairness_jain,
                r.steady_rtt.mean_us / 1000.0,
                r.steady_rtt.p99_us as f64 / 1000.0,
                r.first_contact.mean_us / 1000.0,
                r.first_contact.p99_us as f64 / 1000.0,
            );
        }
    }
    let failures: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.failures()
                .into_iter()
                .map(move |f| format!("{} clients: {f}", r.clients))
        })
        .collect();
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        crate::failure(format!("stress failed: {}", failures.join("; ")))
    }
}

/// Milliseconds from µs, to two decimals.
fn ms2(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

fn print_report(r: &StressReport) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "{} clients over {}, {:.1} s sending ({:.1} s in all), policy {}, admission {}, seed {}, {} threads",
        r.clients, r.transport, r.duration_s, r.elapsed_s, r.policy, r.admission, r.seed, r.threads
    );
    println!(
        "messages: sent {}, delivered {}, lost {}, duplicated {}, reordered {} ({:.1} MiB of bodies)",
        r.sent,
        r.delivered,
        r.lost,
        r.duplicated,
        r.reordered,
        mib(r.bytes)
    );
    println!(
        "round trip, every probe: mean {} ms, p50 {} ms, p99 {} ms, max {} ms over {} probes",
        ms2(r.rtt_mean_us),
        ms2(r.rtt_p50_us as f64),
        ms2(r.rtt_p99_us as f64),
        ms2(r.rtt_max_us as f64),
        r.round_trips
    );
    let spread = |name: &str, s: &stress::Spread, of: &str| {
        println!(
            "  {name}: mean {} ms, p50 {} ms, p99 {} ms, max {} ms over {} {of}",
            ms2(s.mean_us),
            ms2(s.p50_us as f64),
            ms2(s.p99_us as f64),
            ms2(s.max_us as f64),
            s.count
        );
    };
    spread(
        "steady state (channel open throughout)",
        &r.steady_rtt,
        "probes",
    );
    spread(
        "after a reconnect (waited for a slot again)",
        &r.reconnect_rtt,
        "probes",
    );
    spread(
        "first contact (start to first reply: the wait in the server's line)",
        &r.first_contact,
        "clients",
    );
    let reasons: Vec<String> = r
        .preemptions_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "slots: peak {} of {}; preemptions {} ({}); accepts refused {}",
        r.peak_slots,
        r.slot_limit,
        r.preemptions,
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join(", ")
        },
        r.accepts_refused
    );
    println!(
        "line: {} let in from the line (peak {} waiting); fairness (Jain, messages per client) {:.3}",
        r.grants, r.peak_line, r.fairness_jain
    );
    println!(
        "channels: {} cuts, {} reconnects, {} messages retransmitted",
        r.cuts, r.reconnects, r.retransmitted
    );
    println!(
        "memory: transport buffers peak {:.1} MiB of a {:.1} MiB bound; an idle site costs {} bytes ({} if never used)",
        mib(r.peak_transport_bytes),
        mib(r.transport_bytes_bound),
        r.idle_site_bytes,
        r.unused_site_bytes
    );
}
