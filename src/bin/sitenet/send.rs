//! `sitenet send`: a numbered stream to a node's sink, and the sink's
//! verdict.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sitenet::SendOptions;

use crate::target::{check_target, client};
use crate::{auth, body_size, failure, seconds, usage};

/// The result of `sitenet send` (JSON keys are a stable contract).
#[derive(Debug, Serialize, Deserialize)]
struct SendResult {
    sent: u64,
    delivered: u64,
    duplicates: u64,
    out_of_order: u64,
    missing: u64,
    reconnects: u64,
    retransmitted: u64,
    msgs_per_sec: f64,
    elapsed_s: f64,
    size: usize,
    priority: u8,
    site_id: String,
}

// One argument per `send` option.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_send(
    addr: &str,
    count: u64,
    size: usize,
    priority: u8,
    json: bool,
    timeout: f64,
    give_up: f64,
    auth: auth::Members,
) -> ExitCode {
    use sitenet::services::{SinkData, SinkQuery, SinkVerdict};
    if let Err(e) = check_target(addr).and(body_size(size)) {
        return usage(e);
    }
    let (timeout, give_up) = match (seconds("timeout", timeout), seconds("give-up", give_up)) {
        (Ok(t), Ok(g)) => (t, g),
        (Err(e), _) | (_, Err(e)) => return usage(e),
    };
    let prio = sitenet::Priority::from_lane(priority).expect("validated by clap");
    let security = match auth.load("send") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let (node, site) = match client(addr, |c| {
        c.connect_timeout = timeout;
        c.give_up_after = Some(give_up);
        security.clone().apply(c);
    }) {
        Ok(x) => x,
        Err(code) => return code,
    };
    // What kept the site away, if it was: the error below names it.
    let mut faults = node.monitor(&site);
    let stream: u64 = rand::random();
    let body = Bytes::from(vec![0x5Au8; size]);
    let (tx, rx) = std::sync::mpsc::channel();
    let s = site.clone();
    let target = addr.to_string();
    node.runtime().spawn(async move {
        let addr = target;
        let r: Result<(Duration, SinkVerdict), String> = async {
            // The first message waits for the node, bounded by --timeout.
            let t0 = Instant::now();
            let opts = || SendOptions::new().priority(prio).body(body.clone());
            s.send(&SinkData { stream, seq: 0 })
                .options(opts())
                .await
                .map_err(|e| e.to_string())?;
            if let Err(e) = s.flush(timeout).await {
                return Err(format!("{addr} unreachable: {e}"));
            }
            for seq in 1..count {
                if let Err(e) = s.send(&SinkData { stream, seq }).options(opts()).await {
                    return Err(e.to_string());
                }
            }
            // Every message acknowledged: retried while the node is only
            // temporarily failed, up to --give-up.
            loop {
                match s.flush(give_up).await {
                    Ok(()) => break,
                    Err(sitenet::FlushError::Timeout { .. }) => continue,
                    Err(e) => return Err(e.to_string()),
                }
            }
            let elapsed = t0.elapsed();
            let v = s
                .request::<SinkQuery, SinkVerdict>(&SinkQuery {
                    stream,
                    expected: count,
                })
                .priority(prio)
                .timeout(give_up)
                .await
                .map_err(|e| format!("asking the sink for its verdict: {e}"))?;
            Ok((elapsed, v.msg))
        }
        .await;
        let _ = tx.send(r);
    });
    let r = rx.recv().expect("send task reports");
    let m = node.metrics();
    let (elapsed, v) = match r {
        Ok(x) => x,
        Err(_) if auth::refused_for_authentication(&site) => {
            return failure(security.refused_by(addr))
        }
        Err(e) => {
            let cause = last_cause(&mut faults)
                .map(|c| format!("; last: {c}"))
                .unwrap_or_default();
            if let Some((reason, back)) = site.failure() {
                return failure(format!(
                    "site {addr} failed permanently ({reason}{cause}): not_sent {}, maybe_delivered {}",
                    back.not_sent.len(),
                    back.maybe_delivered.len()
                ));
            }
            return failure(format!("{e}{cause}"));
        }
    };
    let r = SendResult {
        sent: count,
        delivered: v.delivered,
        duplicates: v.duplicates,
        out_of_order: v.out_of_order,
        missing: v.missing,
        reconnects: m.channels_opened.saturating_sub(1),
        retransmitted: m.messages_retransmitted,
        msgs_per_sec: count as f64 / elapsed.as_secs_f64(),
        elapsed_s: elapsed.as_secs_f64(),
        size,
        priority,
        site_id: site.id().map(|i| i.to_string()).unwrap_or_default(),
    };
    if json {
        println!("{}", serde_json::to_string(&r).expect("serialisable"));
    } else {
        println!(
            "{} messages of {} bytes at priority {} to {addr}: delivered {}, duplicates {}, out of order {}, missing {}; \
             {} reconnects, {} retransmitted; {:.0} msg/s",
            r.sent, r.size, r.priority, r.delivered, r.duplicates, r.out_of_order, r.missing, r.reconnects,
            r.retransmitted, r.msgs_per_sec
        );
    }
    let clean = r.delivered == count && r.duplicates == 0 && r.out_of_order == 0 && r.missing == 0;
    if clean {
        ExitCode::SUCCESS
    } else {
        failure("the sink saw loss, duplicates or reordering")
    }
}

/// Why the site was last temporarily failed (a refused connection, a lost
/// channel), from its fault monitor: what a permanent failure or a timeout
/// alone does not say.
fn last_cause(
    faults: &mut futures::channel::mpsc::UnboundedReceiver<sitenet::FaultEvent>,
) -> Option<String> {
    let mut cause = None;
    while let Ok(e) = faults.try_recv() {
        if e.state == sitenet::FaultState::TempFailed {
            cause = Some(e.reason);
        }
    }
    cause
}
