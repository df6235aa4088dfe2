//! `sitenet stress`: the options, a progress bar while it runs, and the
//! report (text, or one JSON object with `--json`).

use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use sitenet::stress::{self, StressConfig, StressReport};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Client sites (each a node of its own in this process).
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// The server's hard limit of channel slots (its weak limit is four
    /// fifths of it): the Mozart paper's server had 30.
    #[arg(long, default_value_t = 30)]
    slots: usize,
    /// The byte channels used.
    #[arg(long, default_value = "tcp", value_parser = ["tcp"])]
    transport: String,
    /// The server's preemption policy.
    #[arg(long, default_value = "default", value_parser = ["naive", "default"])]
    policy: String,
    /// Seconds the clients send.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Channels cut per second, on average (0: none).
    #[arg(long, default_value_t = 2.0)]
    cut_rate: f64,
    /// Seed of the workload and the cuts (random if not given; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> ExitCode {
    if !(a.duration.is_finite() && a.duration > 0.0) {
        return crate::usage(format!(
            "--duration must be a positive number of seconds, got {}",
            a.duration
        ));
    }
    if !(a.cut_rate.is_finite() && a.cut_rate >= 0.0) {
        return crate::usage(format!(
            "--cut-rate must be a number of cuts per second >= 0, got {}",
            a.cut_rate
        ));
    }
    let cfg = StressConfig {
        clients: a.clients,
        slots: a.slots,
        policy: a.policy,
        duration: Duration::from_secs_f64(a.duration),
        cut_rate: a.cut_rate,
        seed: a.seed.unwrap_or_else(rand::random),
    };
    eprintln!(
        "sitenet stress: {} clients, server slot limit {}, policy {}, {} s over {}, {} cuts/s, seed {}",
        cfg.clients, cfg.slots, cfg.policy, a.duration, a.transport, cfg.cut_rate, cfg.seed
    );
    let bar = ProgressBar::new(cfg.duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let r = stress::run(&cfg, |p| {
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
    let report = match r {
        Ok(r) => r,
        Err(stress::StressError::Config(e)) => return crate::usage(e),
        Err(e) => return crate::failure(e),
    };
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

fn print_report(r: &StressReport) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "{} clients, {:.1} s sending ({:.1} s in all), policy {}, seed {}",
        r.clients, r.duration_s, r.elapsed_s, r.policy, r.seed
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
        "round trip: p50 {:.2} ms, p99 {:.2} ms over {} probes",
        r.rtt_p50_us as f64 / 1000.0,
        r.rtt_p99_us as f64 / 1000.0,
        r.round_trips
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
        "channels: {} cuts, {} reconnects, {} messages retransmitted",
        r.cuts, r.reconnects, r.retransmitted
    );
    println!(
        "memory: transport buffers peak {:.1} MiB of a {:.1} MiB bound; an idle site costs {} bytes",
        mib(r.peak_transport_bytes),
        mib(r.transport_bytes_bound),
        r.idle_site_bytes
    );
}
