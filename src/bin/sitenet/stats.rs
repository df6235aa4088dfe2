//! `sitenet stats ADDR`: asks a running node for its resources (the
//! built-in stats service) and prints them, or the node's JSON with
//! `--json`.

use std::process::ExitCode;

pub(crate) fn run(addr: &str, json: bool, timeout: f64, auth: crate::auth::Members) -> ExitCode {
    use sitenet::services::{StatsQuery, StatsReply};
    if let Err(e) = crate::check_target(addr) {
        return crate::usage(e);
    }
    let timeout = match crate::seconds("timeout", timeout) {
        Ok(t) => t,
        Err(e) => return crate::usage(e),
    };
    let security = match auth.load("stats") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let (_node, site) = match crate::client(addr, |c| {
        c.connect_timeout = timeout;
        security.clone().apply(c);
    }) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let reply = site
        .request::<StatsQuery, StatsReply>(&StatsQuery)
        .priority(sitenet::Priority::High)
        .timeout(timeout)
        .blocking();
    let json_text = match reply {
        Ok(r) => r.msg.json,
        Err(_) if crate::auth::refused_for_authentication(&site) => {
            return crate::failure(security.refused_by(addr))
        }
        Err(e) => return crate::failure(format!("{addr} did not answer: {e}")),
    };
    if json {
        println!("{json_text}");
        return ExitCode::SUCCESS;
    }
    let v: serde_json::Value = match serde_json::from_str(&json_text) {
        Ok(v) => v,
        Err(e) => return crate::failure(format!("{addr} answered with malformed stats: {e}")),
    };
    let s = &v["slots"];
    println!(
        "slots: {} in use of {} (weak {}), {} waiting, peak {}; policy {}; {} accepts refused",
        s["in_use"],
        s["hard"],
        s["weak"],
        s["waiting"],
        s["peak_in_use"],
        s["policy"],
        s["accepts_refused"]
    );
    println!(
        "line: {} waiting of {} (peak {}), admission {}; {} told to wait, {} let in, {} expired, {} left",
        s["in_line"],
        s["line_limit"],
        s["peak_line"],
        s["admission"].as_str().unwrap_or("?"),
        s["line_waits"],
        s["grants"],
        s["line_expired"],
        s["line_left"]
    );
    println!(
        "transport: {} bytes of buffers (peak {}), bound {}",
        v["transport_bytes"], v["transport_bytes_peak"], v["transport_bytes_bound"]
    );
    println!(
        "sites: {} live, {} idle, {} reclaimed",
        v["sites_live"], v["sites_idle"], v["sites_reclaimed"]
    );
    println!(
        "handshakes: {} pending (peak {}), bound {}; {} refused as not members",
        v["handshakes_pending"],
        v["handshakes_pending_peak"],
        v["handshakes_pending_bound"],
        v["auth_refused"]
    );
    for site in v["per_site"].as_array().into_iter().flatten() {
        println!(
            "  {} {}: sent {} msgs ({} bytes) by level 1-4, received {}, retransmitted {}, reconnects {}, preemptions {}, queue {}",
            site["site"].as_str().unwrap_or("?"),
            if site["connected"] == true { "connected" } else { "idle" },
            site["messages_sent"],
            site["bytes_sent"],
            site["messages_received"],
            site["retransmitted"],
            site["reconnects"],
            site["preemptions"],
            site["queue_depth"],
        );
    }
    ExitCode::SUCCESS
}
