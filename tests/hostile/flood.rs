//! A peer flooding cheap junk pays for its own input: while one raw peer
//! writes undecodable packed requests as fast as the node takes them, on
//! a node confined to one thread, honest sites still get their handshakes
//! and their echoes, and what the flood makes the node hold stays bounded.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::raw::{self, RawPeer};
use crate::common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Message, Node, Runtime};
use sitenet_protocols::{FrameKind, HEADER_LEN};

/// A packed frame on lane 3 holding `count` echo requests numbered from
/// `first`, each with a header that does not decode (`0xc1` is never valid
/// MessagePack) and no body.
fn undecodable_packed_requests(first: u64, count: u64) -> Vec<u8> {
    let mut payload = Vec::with_capacity(count as usize * 18);
    for i in 0..count {
        payload.push(1); // request
        payload.extend_from_slice(&Echo::ID.to_le_bytes());
        payload.extend_from_slice(&1u16.to_le_bytes()); // header_len
        payload.extend_from_slice(&0u16.to_le_bytes()); // body_len
        payload.extend_from_slice(&(first + i).to_le_bytes()); // corr
        payload.push(0xc1);
    }
    let mut f = raw::frame_header(FrameKind::Packed, 3, 0x03, payload.len() as u32, first).to_vec();
    f.extend_from_slice(&payload);
    debug_assert!(f.len() > HEADER_LEN);
    f
}

/// One raw peer that floods undecodable packed requests until `stop`
/// (reading and discarding what the node answers, so that its output
/// never holds the flood back), reconnecting as a fresh site whenever the
/// node closes it. Counts the bytes it wrote.
fn flood(
    target: String,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        const PER_FRAME: u64 = 3_000;
        while !stop.load(Ordering::Acquire) {
            let Ok(mut p) = std::panic::catch_unwind(|| RawPeer::connect(&target)).map_err(|_| ())
            else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            p.socket
                .set_write_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            let mut drain = p.socket.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while matches!(drain.read(&mut buf), Ok(n) if n > 0) {}
            });
            let mut next = 1u64;
            while !stop.load(Ordering::Acquire) {
                let f = undecodable_packed_requests(next, PER_FRAME);
                next += PER_FRAME;
                match p.socket.write_all(&f) {
                    Ok(()) => {}
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut =>
                    {
                        continue
                    }
                    Err(_) => break,
                }
                sent.fetch_add(f.len() as u64, Ordering::Relaxed);
            }
        }
    })
}

/// A fresh client node's handshake with `target` and one echo, each bounded
/// by `limit`; the time it took, or what failed.
async fn honest_ping(target: &str, seq: u64, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let client = Node::builder()
        .configure(|c| c.handshake_timeout = limit)
        .start()
        .map_err(|e| e.to_string())?;
    let site = client.site(target).map_err(|e| e.to_string())?;
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq })
        .timeout(limit)
        .await
        .map_err(|e| e.to_string())?;
    if r.msg.seq != seq {
        return Err(format!("echo {seq} answered {}", r.msg.seq));
    }
    Ok(start.elapsed())
}

#[test]
fn a_peer_flooding_undecodable_requests_pays_for_its_input_not_honest_sites() {
    block_on(async {
        // The whole node on one thread: the flood and the accept path
        // share it.
        let server = Node::builder()
            .listen("tcp:127.0.0.1:0")
            .runtime(Runtime::dedicated("flooded"))
            .configure(services)
            .start()
            .expect("node starts");
        let target = addr(&server);
        let rss_before = proc_status_bytes("VmRSS");
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let flooders: Vec<_> = (0..2)
            .map(|_| flood(target.clone(), stop.clone(), sent.clone()))
            .collect();
        // The flood is under way (the node has refused more than a
        // channel's burst) before the first honest site comes.
        assert!(
            eventually(|| server.metrics().unhandled > 5_000).await,
            "the flood never got going"
        );
        let mut failed = Vec::new();
        let mut took = Vec::new();
        for seq in 0..12 {
            match honest_ping(&target, seq, Duration::from_secs(10)).await {
                Ok(t) => took.push(t),
                Err(e) => failed.push((seq, e)),
            }
        }
        let flooded = sent.load(Ordering::Relaxed);
        let rss_peak = proc_status_bytes("VmRSS");
        let output = server.stats().output_bytes;
        stop.store(true, Ordering::Release);
        for f in flooders {
            f.join().unwrap();
        }
        eprintln!(
            "flood: {} MiB sent; honest pings {} of 12, slowest {:?}; RSS {} -> {} MiB; output held {output}",
            flooded >> 20,
            took.len(),
            took.iter().max(),
            rss_before >> 20,
            rss_peak >> 20
        );
        assert!(failed.is_empty(), "honest pings failed: {failed:?}");
        // What the node owes the flooders (error replies) is not what
        // their input could make it, up to the output bound.
        assert!(
            output < 64 << 20,
            "{output} bytes of output held for the flood"
        );
        assert!(
            rss_peak < rss_before + (256 << 20),
            "RSS grew from {} to {} MiB under the flood",
            rss_before >> 20,
            rss_peak >> 20
        );
    });
}
