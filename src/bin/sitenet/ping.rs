//! `sitenet ping`: round trips to a node's echo service.

use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::target::{check_target, client};
use crate::{auth, body_size, failure, seconds, usage};

/// The result of `sitenet ping` (JSON keys are a stable contract).
#[derive(Debug, Serialize, Deserialize)]
struct PingResult {
    count: u64,
    size: usize,
    min_us: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
    site_id: String,
}

pub(crate) fn run_ping(
    addr: &str,
    count: u64,
    size: usize,
    json: bool,
    timeout: f64,
    auth: auth::Members,
) -> ExitCode {
    if let Err(e) = check_target(addr).and(body_size(size)) {
        return usage(e);
    }
    let timeout = match seconds("timeout", timeout) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    let security = match auth.load("ping") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let (node, site) = match client(addr, |c| {
        c.connect_timeout = timeout;
        security.clone().apply(c);
    }) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let hist = match sitenet::bench::echo_round_trips(&node, &site, count, size, timeout) {
        Ok(h) => h,
        Err(_) if auth::refused_for_authentication(&site) => {
            return failure(security.refused_by(addr))
        }
        Err(e) => return failure(format!("ping {addr}: {e}")),
    };
    let us = |ns: u64| ns as f64 / 1000.0;
    let r = PingResult {
        count,
        size,
        min_us: us(hist.min()),
        p50_us: us(hist.value_at_quantile(0.5)),
        p99_us: us(hist.value_at_quantile(0.99)),
        max_us: us(hist.max()),
        mean_us: hist.mean() / 1000.0,
        site_id: site.id().map(|i| i.to_string()).unwrap_or_default(),
    };
    if json {
        println!("{}", serde_json::to_string(&r).expect("serialisable"));
    } else {
        println!(
            "{} round trips of {} bytes to {addr}: min {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            r.count, r.size, r.min_us, r.p50_us, r.p99_us, r.max_us
        );
    }
    ExitCode::SUCCESS
}
