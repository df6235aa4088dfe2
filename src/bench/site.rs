//! The sitenet side of `sitenet bench`: the same workloads as the raw
//! baseline, through the public API, with a server node serving sitenet's
//! built-in echo and sink services.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;

use crate::services::{Echo, EchoReply, SinkData, SinkQuery, SinkVerdict};
use crate::{Node, Priority, RequestError, SiteRef};

use super::BenchError;

/// Runs `work` on the client node's own runtime thread (as `sitenet ping`
/// does: a round trip then costs what the network layer costs, not a
/// hand-off between threads) and waits for its result.
fn on_node<T: Send + 'static>(
    node: &Node,
    work: impl std::future::Future<Output = Result<T, BenchError>> + Send + 'static,
) -> Result<T, BenchError> {
    let (tx, rx) = std::sync::mpsc::channel();
    node.runtime().spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv()
        .map_err(|_| BenchError::Failed("the client node's runtime stopped".into()))?
}

fn failed(what: &str) -> impl Fn(String) -> BenchError + '_ {
    move |e| BenchError::Failed(format!("{what}: {e}"))
}

/// `count` echo round trips of `size`-byte bodies to `site`'s echo
/// service, one outstanding at a time, after one untimed warm-up round trip
/// (which also opens the channel); their times in nanoseconds. The loop
/// runs on the client node's own runtime thread. `sitenet ping` and
/// `sitenet bench` both measure with it.
pub fn echo_round_trips(
    node: &Node,
    site: &SiteRef,
    count: u64,
    size: usize,
    timeout: Duration,
) -> Result<Histogram<u64>, BenchError> {
    let site = site.clone();
    let body = Bytes::from(vec![0xA5u8; size]);
    on_node(node, async move {
        let mut hist = Histogram::<u64>::new(3).expect("histogram");
        for seq in 0..=count {
            let t = Instant::now();
            let r = site
                .request::<Echo, EchoReply>(&Echo { seq })
                .body(body.clone())
                .timeout(timeout)
                .await
                .map_err(|e| match e {
                    RequestError::Timeout(_) if seq == 0 => {
                        BenchError::Failed(format!("unreachable: no answer within {timeout:?}"))
                    }
                    e => failed("echo")(e.to_string()),
                })?;
            let elapsed = t.elapsed();
            if r.msg.seq != seq || r.body.len() != size {
                return Err(BenchError::Failed(format!(
                    "echo mismatch: sent seq {seq} size {size}, got seq {} size {}",
                    r.msg.seq,
                    r.body.len()
                )));
            }
            if seq > 0 {
                hist.record(elapsed.as_nanos() as u64).expect("in range");
            }
        }
        Ok(hist)
    })
}

/// Streams `count` messages with `size`-byte bodies to the sink, one way,
/// until every one is acknowledged; then the sink must have them all.
/// Returns the time from the first send to the last acknowledgement.
pub(super) fn stream(
    node: &Node,
    site: &SiteRef,
    count: u64,
    size: usize,
    timeout: Duration,
) -> Result<Duration, BenchError> {
    let site = site.clone();
    let body = Bytes::from(vec![0x5Au8; size]);
    let stream: u64 = rand::random();
    on_node(node, async move {
        let t = Instant::now();
        for seq in 0..count {
            site.send(&SinkData { stream, seq })
                .body(body.clone())
                .await
                .map_err(|e| failed("send")(e.to_string()))?;
        }
        site.flush(timeout)
            .await
            .map_err(|e| failed("flush")(e.to_string()))?;
        let elapsed = t.elapsed();
        let v = site
            .request::<SinkQuery, SinkVerdict>(&SinkQuery {
                stream,
                expected: count,
            })
            .timeout(timeout)
            .await
            .map_err(|e| failed("sink verdict")(e.to_string()))?;
        if v.msg.delivered != count || v.msg.missing != 0 || v.msg.duplicates != 0 {
            return Err(BenchError::Failed(format!(
                "the sink saw {} of {count} messages ({} missing, {} duplicated)",
                v.msg.delivered, v.msg.missing, v.msg.duplicates
            )));
        }
        Ok(elapsed)
    })
}

/// Queues a `big`-byte message at priority 2 and, right after it, a
/// `small`-byte echo request at priority 4; returns how long after the
/// small one was queued its reply came back. The levels are separate
/// lanes: the small message need not wait for the big one. An untimed
/// echo first makes sure the channel is open, as the raw baseline
/// connects before its clock starts.
pub(super) fn head_of_line(
    node: &Node,
    site: &SiteRef,
    big: usize,
    small: usize,
    timeout: Duration,
) -> Result<Duration, BenchError> {
    let site = site.clone();
    let big_body = Bytes::from(vec![0x11u8; big]);
    let small_body = Bytes::from(vec![0x22u8; small]);
    let stream: u64 = rand::random();
    on_node(node, async move {
        site.request::<Echo, EchoReply>(&Echo { seq: 0 })
            .timeout(timeout)
            .await
            .map_err(|e| failed("echo")(e.to_string()))?;
        site.send(&SinkData { stream, seq: 0 })
            .priority(Priority::Low)
            .body(big_body)
            .await
            .map_err(|e| failed("send")(e.to_string()))?;
        let t = Instant::now();
        site.request::<Echo, EchoReply>(&Echo { seq: 1 })
            .priority(Priority::High)
            .body(small_body)
            .timeout(timeout)
            .await
            .map_err(|e| failed("echo")(e.to_string()))?;
        let delay = t.elapsed();
        site.flush(timeout)
            .await
            .map_err(|e| failed("flush")(e.to_string()))?;
        Ok(delay)
    })
}
