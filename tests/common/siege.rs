//! The siege of tests/hostile/siege.rs, at a security level: run at
//! the open level there, and in tests/hostile/cookie.rs with the node, its
//! legitimate site and every attacker that handshakes holding one cookie
//! (a member's attacks stay within the same bounds).

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, Runtime};
use sitenet_protocols::Keyring;

use super::attacks::{self, attacker, tcp, until_closed, Peers};
use super::hostile::Level;
use super::raw::{RawPeer, Wire};
use super::*;

/// The legitimate site's stream.
const MESSAGES: u64 = 20_000;
/// Sockets that connect and never send a byte, held for the whole siege.
const IDLE_SOCKETS: usize = 100;
/// Readers that ask for echoes with large bodies and never read.
const HOGS: usize = 4;

/// The node's memory settings for the siege: what the attackers can make
/// it hold is bounded by these (plus a ring pair per channel).
const NODE_OUTPUT_BOUND: u64 = 16 << 20;
const REASSEMBLY_BUDGET: u64 = 16 << 20;
/// The stated bound on the process's peak resident memory (the test's own
/// client and attackers included): the two bounds above, rings for a few
/// hundred channels, and the program itself, with room to spare.
const RSS_BOUND: u64 = 96 << 20;

/// A fresh raw peer's handshake with `target`, then what `build` writes.
fn after_handshake(target: &str, keys: Keyring, build: impl FnOnce(&mut Wire)) -> RawPeer {
    let mut p = RawPeer::connect_keyed(target, keys);
    let mut w = Wire::default();
    build(&mut w);
    let _ = p.socket.write_all(&w.bytes);
    p
}

/// The siege at `level`: the node, the legitimate site and every attacker
/// that handshakes hold its cookies.
pub fn siege(level: &Level) {
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("siege-server"))
        .configure(|c| {
            services(c);
            level.configure(c);
            c.max_message_size = 1 << 20;
            c.output_bound = 2 << 20;
            c.node_output_bound = NODE_OUTPUT_BOUND;
            c.reassembly_budget = REASSEMBLY_BUDGET;
            c.reassembly_idle = Duration::from_secs(1);
            c.unreachable_give_up = Duration::from_secs(1);
            c.linger = Duration::from_secs(1);
        })
        .start()
        .unwrap();
    let target = addr(&server);
    let sink = Sink::install(&server, MESSAGES, None);
    server.handle(|_ctx, _refs: Peers| {}).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();

    // Sockets that never speak.
    let idle: Vec<TcpStream> = (0..IDLE_SOCKETS).map(|_| tcp(&target)).collect();
    // Garbage instead of a handshake.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || attacks::garbage(&t)));
    // A wrong version, an oversized handshake frame, a truncated one.
    let t = target.clone();
    attackers.push(attacker(&stop, &rounds, move || {
        attacks::bad_handshake_frames(&t)
    }));
    // After a valid handshake: an oversized frame, a continuation with no
    // first fragment.
    let (t, k) = (target.clone(), level.keys());
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = after_handshake(&t, k.clone(), attacks::oversized_frame);
        until_closed(&mut p.socket);
        let mut p = after_handshake(&t, k.clone(), attacks::orphan_continuation);
        until_closed(&mut p.socket);
    }));
    // Malformed messages (a header that is not a `Numbered`), hundreds per
    // connection.
    let (t, k) = (target.clone(), level.keys());
    attackers.push(attacker(&stop, &rounds, move || {
        after_handshake(&t, k.clone(), attacks::malformed_messages);
    }));
    // Partial messages that stall: the first 60 KiB of a 1 MiB message,
    // then nothing (each holds reassembly budget until it is abandoned).
    let (t, k) = (target.clone(), level.keys());
    attackers.push(attacker(&stop, &rounds, move || {
        let mut p = after_handshake(&t, k.clone(), attacks::stalled_partial_message);
        until_closed(&mut p.socket);
    }));
    // Forwarded requests naming fresh origins, at addresses where nothing
    // answers: each forwarder holds at most a few such claims, each tried
    // once.
    let nowhere = attacks::nowhere();
    let (t, k) = (target.clone(), level.keys());
    attackers.push(attacker(&stop, &rounds, move || {
        after_handshake(&t, k.clone(), |w| {
            attacks::forwards_from_fresh_origins(w, &nowhere)
        });
    }));
    // Messages carrying floods of references to sites nobody knows.
    let (t, k) = (target.clone(), level.keys());
    attackers.push(attacker(&stop, &rounds, move || {
        after_handshake(&t, k.clone(), attacks::site_ref_flood);
    }));
    // Readers that never read, asking for echoes with large bodies.
    let hogs: Vec<_> = (0..HOGS)
        .map(|_| {
            let (t, k) = (target.clone(), level.keys());
            std::thread::spawn(move || RawPeer::echo_hog_keyed(&t, k))
        })
        .collect();

    // The legitimate site: a numbered stream, with a round trip every 100
    // messages.
    let client = Node::builder()
        .runtime(Runtime::dedicated("siege-client"))
        .configure(|c| level.configure(c))
        .start()
        .unwrap();
    let site = client.site(&target).unwrap();
    let forgeries_refused = Arc::new(AtomicU64::new(0));
    let forgeries_accepted = Arc::new(AtomicU64::new(0));
    for seq in 0..MESSAGES {
        site.send(&Numbered { stream: 0, seq }).blocking().unwrap();
        if seq % 100 == 0 {
            let r = site
                .request::<Echo, EchoReply>(&Echo { seq })
                .timeout(PATIENCE)
                .blocking()
                .expect("the legitimate site is answered");
            assert_eq!(r.msg.seq, seq);
        }
        if seq == 0 {
            // Once the legitimate site has talked: strangers claiming its
            // id, again and again (its id is no secret). Each is refused;
            // none may touch its session.
            let (t, id, k) = (target.clone(), client.id(), level.keys());
            let (refused, accepted) = (forgeries_refused.clone(), forgeries_accepted.clone());
            attackers.push(attacker(
                &stop,
                &rounds,
                move || match RawPeer::try_connect_keyed(&t, id, Vec::new(), k.clone()) {
                    Err(sitenet_protocols::OpenError::Refused(_)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                    Ok(_) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                },
            ));
        }
    }
    sink.wait_blocking();
    let attacks = rounds.load(Ordering::Relaxed);
    stop.store(true, Ordering::Release);
    for a in attackers {
        a.join().unwrap();
    }
    let hogs: Vec<_> = hogs.into_iter().map(|h| h.join().unwrap()).collect();

    assert_eq!(sink.total.load(Ordering::Acquire), MESSAGES);
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    let m = client.metrics();
    assert_eq!(
        m.channels_closed, 0,
        "the legitimate channel was never disturbed: {m:?}"
    );
    assert!(attacks > 0, "the attackers ran");
    let forged = forgeries_refused.load(Ordering::Relaxed);
    assert!(forged > 0, "no forged claim was refused");
    assert_eq!(
        forgeries_accepted.load(Ordering::Relaxed),
        0,
        "a stranger was taken for the legitimate site"
    );
    let peak = proc_status_bytes("VmHWM");
    eprintln!(
        "siege: {attacks} attack rounds ({forged} forged claims refused), {IDLE_SOCKETS} idle sockets, {HOGS} hogs; peak RSS {} MiB; server {:?}",
        peak >> 20,
        server.metrics()
    );
    assert!(
        peak <= RSS_BOUND,
        "peak resident memory {} MiB over the stated {} MiB",
        peak >> 20,
        RSS_BOUND >> 20
    );

    // The attackers go: what they cost is returned.
    drop(idle);
    drop(hogs);
    block_on(async {
        assert!(
            eventually(|| server.stats().output_bytes == 0).await,
            "still held for the attackers: {} bytes",
            server.stats().output_bytes
        );
        assert!(
            eventually(|| server.site_count() <= 1).await,
            "{} sites left",
            server.site_count()
        );
    });
    // And the legitimate site is still served.
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 1 })
        .timeout(PATIENCE)
        .blocking()
        .unwrap();
    assert_eq!(r.msg.seq, 1);
}
