//! Bad input: a peer that sends garbage, an oversized length, a wrong
//! version, or closes mid-handshake gets its channel closed with a logged
//! reason and a fault report; a flood of connections is refused beyond the
//! pending-handshake bound; a healthy peer keeps exchanging during and after.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, Runtime};
use sitenet_protocols::connection::handshake::{read_frame, MAX_HANDSHAKE_PAYLOAD};
use sitenet_protocols::{ByteBuffer, FrameKind, PROTOCOL_VERSION};

fn tcp(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr.strip_prefix("tcp:").unwrap()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Reads until the node closes the connection (EOF or reset).
fn until_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("node did not close the channel: {e}"),
        }
    }
}

/// Completes a real handshake as initiator over a blocking socket (see
/// `common::raw`).
fn handshaken(addr: &str) -> TcpStream {
    raw::RawPeer::connect(addr).socket
}

fn fault_count(n: &Node) -> usize {
    n.faults().len()
}

fn last_fault(n: &Node) -> String {
    n.faults()
        .last()
        .map(|f| f.reason.clone())
        .unwrap_or_default()
}

/// Waits until the node closes `s`, then checks that its last fault report
/// names `what`.
fn closed_with_fault(server: &Node, s: &mut TcpStream, what: &str) {
    until_closed(s);
    let reason = last_fault(server);
    assert!(
        reason.contains(what),
        "expected a fault about {what:?}: {reason}"
    );
}

#[test]
fn bad_peers_are_closed_and_reported_while_a_healthy_peer_keeps_working() {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("bad-server"))
        .configure(|c| {
            c.max_pending_handshakes = 32;
            services(c);
        })
        .start()
        .unwrap();
    let a = addr(&server);

    // A healthy peer exchanging request/replies throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let healthy = {
        let (a, stop, ok) = (a.clone(), stop.clone(), ok.clone());
        std::thread::spawn(move || {
            let client = Node::builder()
                .runtime(Runtime::dedicated("bad-client"))
                .start()
                .unwrap();
            let site = client.site(&a).unwrap();
            let mut seq = 0;
            while !stop.load(Ordering::Acquire) || seq < 50 {
                let r = site
                    .request::<Echo, EchoReply>(&Echo { seq })
                    .body(vec![9u8; 100])
                    .timeout(PATIENCE)
                    .blocking()
                    .expect("healthy peer keeps working");
                assert_eq!(r.msg.seq, seq);
                ok.fetch_add(1, Ordering::Relaxed);
                if seq == 0 {
                    first_tx.send(()).unwrap();
                }
                seq += 1;
            }
            assert_eq!(
                client.metrics().channels_closed,
                0,
                "the healthy channel was never disturbed"
            );
        })
    };

    // The bad peers start once the healthy one is exchanging.
    first_rx
        .recv_timeout(PATIENCE)
        .expect("healthy peer connects");

    // 1. Garbage instead of a handshake.
    let before = fault_count(&server);
    let mut s = tcp(&a);
    s.write_all(&[0xde; 200]).unwrap();
    closed_with_fault(&server, &mut s, "version");
    assert_eq!(fault_count(&server), before + 1);

    // 2. A NEGOTIATE from another protocol version.
    let mut s = tcp(&a);
    let mut h = raw::frame_header(FrameKind::Negotiate, 5, 3, 0, 0);
    h[0] = PROTOCOL_VERSION + 1;
    s.write_all(&h).unwrap();
    closed_with_fault(&server, &mut s, "version");

    // 3. An oversized handshake frame: refused from its header alone.
    let mut s = tcp(&a);
    s.write_all(&raw::frame_header(FrameKind::Negotiate, 5, 3, u32::MAX, 0))
        .unwrap();
    closed_with_fault(&server, &mut s, "exceeds");

    // 4. Closing in the middle of the handshake.
    let before = fault_count(&server);
    {
        let mut s = tcp(&a);
        let mut inb = ByteBuffer::new(8192);
        let n = s.read(inb.spare_mut()).unwrap();
        inb.commit(n);
        let (h, _) = read_frame(&mut inb, MAX_HANDSHAKE_PAYLOAD)
            .unwrap()
            .expect("PRESENT arrives whole");
        assert_eq!(h.kind, FrameKind::Present);
        s.write_all(&raw::frame_header(FrameKind::Negotiate, 5, 3, 10, 0)[..20])
            .unwrap();
    }
    // The fault is recorded when the node notices the close. Each probe's
    // close is awaited; the node's thread handles the earlier close within a
    // few of them.
    // Each probe adds a fault of its own; the history holds 256, so fewer
    // than 200 probes keep `before` a valid index into it.
    let closed_since = |before: usize| {
        server
            .faults()
            .iter()
            .skip(before)
            .any(|f| f.reason.contains("closed"))
    };
    for _ in 0..150 {
        if closed_since(before) {
            break;
        }
        let mut s = tcp(&a);
        s.write_all(&[0u8; 64]).unwrap();
        until_closed(&mut s);
    }
    assert!(closed_since(before), "{:?}", server.faults());

    // 5. After a valid handshake: an oversized frame.
    let mut s = handshaken(&a);
    s.write_all(&raw::frame_header(FrameKind::Data, 3, 3, 1 << 30, 1))
        .unwrap();
    closed_with_fault(&server, &mut s, "exceeds");

    // 6. After a valid handshake: a continuation with no first fragment, then
    //    garbage flooding in.
    let mut s = handshaken(&a);
    let mut frame = raw::frame_header(FrameKind::Data, 2, 2, 4, 1).to_vec();
    frame.extend_from_slice(&[1, 2, 3, 4]);
    s.write_all(&frame).unwrap();
    let _ = s.write_all(&vec![0x55u8; 1 << 20]);
    closed_with_fault(&server, &mut s, "fragment");

    // 7. A message announcing more than the maximum message size.
    let mut s = handshaken(&a);
    let mut frame = raw::frame_header(FrameKind::Data, 3, 1, 28, 0).to_vec();
    let prelude = sitenet_protocols::Prelude {
        type_id: 1,
        kind: sitenet_protocols::MessageKind::OneWay,
        header_len: 0,
        body_len: 1 << 40,
        corr: 0,
    };
    frame.extend_from_slice(&prelude.encode());
    s.write_all(&frame).unwrap();
    closed_with_fault(&server, &mut s, "maximum message size");

    // 8. A flood of connections that never speak: beyond the pending
    //    handshake bounds the oldest silent ones are closed to make room.
    let idle: Vec<TcpStream> = (0..200).map(|_| tcp(&a)).collect();
    let mut probe = tcp(&a);
    probe.write_all(&[0xffu8; 64]).unwrap();
    // The probe is accepted after the idle ones; once it is handled, the
    // refusals are counted.
    until_closed(&mut probe);
    assert!(
        server.metrics().handshakes_refused > 0,
        "{:?}",
        server.metrics()
    );
    drop(idle);

    // While the healthy peer still runs, its channel is the only working one,
    // with its two fixed rings: no flood made any buffer grow.
    assert_eq!(
        server.metrics().channel_buffer_bytes,
        128 * 1024,
        "{:?}",
        server.metrics()
    );
    stop.store(true, Ordering::Release);
    healthy.join().unwrap();
    assert!(ok.load(Ordering::Relaxed) >= 50);
    let m = server.metrics();
    assert!(m.protocol_errors >= 6, "{m:?}");
}
