//! The hostile-peer suite run again against nodes that hold a
//! cookie.
//!
//! Non-members (no cookie, or a wrong one) make the siege's attacks while a
//! member streams through the node: whatever they send before, with or
//! after their NEGOTIATE, they are refused in the acceptor's handshake and
//! nothing is allocated for them — no site entry, no slot, no ComObject, no
//! full-size ring, no reassembly budget, no output.
//!
//! Members (holding the cookie) get past the handshake: their attacks are
//! the tests of tests/hostile/peers.rs, run here with every node, client
//! and raw peer holding the cookie, and the open level's bounds still hold.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::attacks::{self, attacker, tcp, Peers};
use crate::common::hostile::{self, trap, Level};
use crate::common::raw::{self, RawPeer, Wire};
use crate::common::*;
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, Runtime};
use sitenet_protocols::slots::{DefaultPolicy, SlotConfig};
use sitenet_protocols::{AuthFailure, Cookie, Initiator, Keyring, LocalInfo, OpenError, SiteId};

fn cookie(b: u8) -> Cookie {
    Cookie::new([b; 32])
}

/// The member's stream through the siege: at least this many messages,
/// and on until every attacker has made [`ROUNDS`] rounds.
const MESSAGES: u64 = 10_000;
const ROUNDS: u64 = 30;
/// Sockets that connect and never send a byte, held for the whole siege.
const IDLE_SOCKETS: usize = 100;

/// How the NEGOTIATEs of the strangers ended.
#[derive(Default)]
struct Tally {
    /// NEGOTIATEs written (the node answered PRESENT).
    negotiates: AtomicU64,
    /// Refused for authentication, and the refusal read.
    refused: AtomicU64,
    /// Closed or reset before the answer was read (bytes sent after
    /// NEGOTIATE may make the node's close a reset that loses it).
    cut: AtomicU64,
    /// Let in: a stranger got a channel.
    let_in: AtomicU64,
    /// Any other end of the open, with its error.
    other: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, r: Result<RawPeer, Option<OpenError>>) {
        self.negotiates.fetch_add(1, Ordering::Relaxed);
        match r {
            Err(Some(OpenError::AuthenticationFailed(AuthFailure::Refused))) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(None) => {
                self.cut.fetch_add(1, Ordering::Relaxed);
            }
            Err(Some(e)) => self.other.lock().unwrap().push(e.to_string()),
            Ok(_) => {
                self.let_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The keys of the two kinds of stranger: none, and a cookie the node
/// does not hold.
fn stranger_keys() -> [Keyring; 2] {
    [Keyring::default(), Keyring::new(vec![cookie(9)])]
}

/// Both kinds of stranger, as site `id`, send their NEGOTIATE (`hs`
/// makes the machine) with `after` in the same write.
fn strangers(
    target: &str,
    id: SiteId,
    hs: impl Fn(Keyring) -> Initiator,
    after: &[u8],
    tally: &Tally,
) {
    for keys in stranger_keys() {
        tally.record(RawPeer::open(target, id, hs(keys), after));
    }
}

/// Both kinds of stranger, fresh sites, send their NEGOTIATE followed by
/// what `build` writes: the attack a member could make once in, sent in
/// the hope that the node reads it anyway.
fn strangers_then(target: &str, tally: &Tally, build: impl Fn(&mut Wire)) {
    let mut w = Wire::default();
    build(&mut w);
    let id = SiteId(rand::random::<u128>());
    strangers(
        target,
        id,
        |keys| raw::initiator(id, Vec::new(), keys),
        &w.bytes,
        tally,
    );
}

/// A NEGOTIATE of site `id` that breaks the protocol: it claims to have
/// received 5 messages in generation 1 (never sent by the node) and lists
/// `listen` (addresses it does not own).
fn claiming_history(id: SiteId, listen: Vec<String>, keys: Keyring) -> Initiator {
    let local = LocalInfo {
        site: id,
        listen,
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    };
    Initiator::new(local, None, 5, 1, rand::random()).with_keys(keys)
}

#[test]
fn under_a_cookie_strangers_get_nothing_allocated_during_a_siege() {
    let slots = sitenet_transport::TransController::new(
        SlotConfig::from_fd_limit(1024),
        Box::new(DefaultPolicy::default()),
    );
    let (mut buffer_size, mut pending_cap) = (0u64, 0u64);
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .runtime(Runtime::dedicated("cookie-siege-server"))
        .configure(|c| {
            services(c);
            c.cookies = vec![cookie(1)];
            c.trans_controller = Some(slots.clone());
            // The siege's bounds (tests/hostile/siege.rs): nothing of them may be
            // spent on a stranger.
            c.max_message_size = 1 << 20;
            c.output_bound = 2 << 20;
            c.node_output_bound = 16 << 20;
            c.reassembly_budget = 16 << 20;
            c.reassembly_idle = Duration::from_secs(1);
            c.unreachable_give_up = Duration::from_secs(1);
            c.linger = Duration::from_secs(1);
            buffer_size = c.buffer_size as u64;
            pending_cap = c.max_pending_handshakes as u64;
        })
        .start()
        .unwrap();
    let target = addr(&server);
    // Counted as they arrive (how many the member sends depends on the
    // attackers' pace).
    let sink = Sink::install(&server, u64::MAX, None);
    server.handle(|_ctx, _refs: Peers| {}).unwrap();

    // The member, connected before the siege.
    let member = Node::builder()
        .runtime(Runtime::dedicated("cookie-siege-member"))
        .configure(|c| c.cookies = vec![cookie(1)])
        .start()
        .unwrap();
    let site = member.site(&target).unwrap();
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 0 })
        .timeout(PATIENCE)
        .blocking()
        .expect("the member is answered");
    assert_eq!(r.msg.seq, 0);
    // One channel's two rings at full size: what the member's channel may
    // hold, and all the node's channels may ever hold during the siege.
    let one_channel = 2 * buffer_size;
    let peak = server.metrics().channel_buffer_bytes_peak;
    assert!(peak > 0 && peak <= one_channel, "{peak}");

    let stop = Arc::new(AtomicBool::new(false));
    // Each attacker's rounds.
    let mut rounds: Vec<(&str, Arc<AtomicU64>)> = Vec::new();
    let mut counter = |name| {
        let r = Arc::new(AtomicU64::new(0));
        rounds.push((name, r.clone()));
        r
    };
    let tally = Arc::new(Tally::default());
    let mut attackers = Vec::new();
    let (trap_at, dials) = trap();

    // Before any NEGOTIATE: sockets that never speak, garbage, a wrong
    // version, an oversized handshake frame, a truncated one.
    let idle: Vec<TcpStream> = (0..IDLE_SOCKETS).map(|_| tcp(&target)).collect();
    let t = target.clone();
    attackers.push(attacker(&stop, &counter("garbage"), move || {
        attacks::garbage(&t)
    }));
    let t = target.clone();
    attackers.push(attacker(
        &stop,
        &counter("bad handshake frames"),
        move || attacks::bad_handshake_frames(&t),
    ));
    // NEGOTIATEs that break the protocol (a history the node never
    // made, addresses the peer does not own).
    let (t, ty, at) = (target.clone(), tally.clone(), trap_at.clone());
    attackers.push(attacker(&stop, &counter("bad NEGOTIATEs"), move || {
        let id = SiteId(rand::random::<u128>());
        strangers(
            &t,
            id,
            |keys| claiming_history(id, vec![at.clone()], keys),
            &[],
            &ty,
        );
    }));
    // What a member could send once in, sent behind the stranger's
    // NEGOTIATE: an oversized frame, a continuation with no first
    // fragment, malformed messages, a partial message that stalls,
    // forwarded requests naming fresh origins, a flood of references to
    // sites nobody knows, and echo requests for 6.4 MB of replies that are
    // never read.
    let nowhere = attacks::nowhere();
    type Build = Box<dyn Fn(&mut Wire) + Send>;
    let builds: Vec<(&str, Build)> = vec![
        (
            "bad frames after NEGOTIATE",
            Box::new(|w: &mut Wire| {
                attacks::oversized_frame(w);
                attacks::orphan_continuation(w);
            }),
        ),
        ("malformed messages", Box::new(attacks::malformed_messages)),
        (
            "a stalled partial message",
            Box::new(attacks::stalled_partial_message),
        ),
        (
            "forwards from fresh origins",
            Box::new(move |w: &mut Wire| attacks::forwards_from_fresh_origins(w, &nowhere)),
        ),
        ("a site-ref flood", Box::new(attacks::site_ref_flood)),
        ("echo requests never read", Box::new(raw::echo_hog_requests)),
    ];
    for (name, build) in builds {
        let (t, ty) = (target.clone(), tally.clone());
        attackers.push(attacker(&stop, &counter(name), move || {
            strangers_then(&t, &ty, &build)
        }));
    }
    // Strangers claiming the member's id (it has talked; its id is no
    // secret), plainly and with a forged history.
    let (t, id, ty) = (target.clone(), member.id(), tally.clone());
    attackers.push(attacker(
        &stop,
        &counter("claims on the member's id"),
        move || {
            strangers(
                &t,
                id,
                |keys| raw::initiator(id, Vec::new(), keys),
                &[],
                &ty,
            );
            strangers(
                &t,
                id,
                |keys| claiming_history(id, Vec::new(), keys),
                &[],
                &ty,
            );
        },
    ));
    let rounds = rounds;

    // Watches the site table and the slots through the siege.
    let most_sites = Arc::new(AtomicU64::new(0));
    let most_slots = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, server, slots) = (stop.clone(), server.clone(), slots.clone());
        let (most_sites, most_slots) = (most_sites.clone(), most_slots.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                most_sites.fetch_max(server.site_count() as u64, Ordering::Relaxed);
                most_slots.fetch_max(slots.stats().in_use as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    // The member: a numbered stream, with a round trip every 100
    // messages, until every attacker has made its rounds.
    let started = std::time::Instant::now();
    let mut sent = 0u64;
    let mut echoes = 1u64;
    while sent < MESSAGES
        || rounds
            .iter()
            .any(|(_, r)| r.load(Ordering::Relaxed) < ROUNDS)
    {
        assert!(
            started.elapsed() < PATIENCE,
            "the attackers stalled: {:?}",
            rounds
                .iter()
                .map(|(n, r)| (*n, r.load(Ordering::Relaxed)))
                .collect::<Vec<_>>()
        );
        for _ in 0..100 {
            site.send(&Numbered {
                stream: 0,
                seq: sent,
            })
            .blocking()
            .unwrap();
            sent += 1;
        }
        let r = site
            .request::<Echo, EchoReply>(&Echo { seq: sent })
            .timeout(PATIENCE)
            .blocking()
            .expect("the member is answered");
        assert_eq!(r.msg.seq, sent);
        echoes += 1;
    }
    let attack_rounds: u64 = rounds.iter().map(|(_, r)| r.load(Ordering::Relaxed)).sum();
    stop.store(true, Ordering::Release);
    for a in attackers {
        a.join().unwrap();
    }
    watcher.join().unwrap();
    block_on(async {
        assert!(
            eventually(|| sink.total.load(Ordering::Acquire) >= sent).await,
            "only {} of {sent} messages arrived",
            sink.total.load(Ordering::Acquire)
        );
    });

    // The member's traffic: complete, in order, on its one channel.
    assert_eq!(sink.total.load(Ordering::Acquire), sent);
    assert_eq!(sink.out_of_order.load(Ordering::Acquire), 0);
    let c = member.metrics();
    assert_eq!(
        (c.channels_opened, c.channels_closed),
        (1, 0),
        "the member's channel was disturbed: {c:?}"
    );
    let m = server.metrics();
    let s = slots.stats();
    let st = server.stats();
    eprintln!(
        "cookie siege: {sent} messages, {echoes} echoes; {attack_rounds} attack rounds; strangers' NEGOTIATEs {}, refused (seen) {}, \
         cut {}; server {m:?}; slots {s:?}; transport bytes peak {}",
        tally.negotiates.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        tally.cut.load(Ordering::Relaxed),
        st.transport_bytes_peak,
    );
    assert!(attack_rounds > 0, "the attackers ran");
    // No stranger got in, and none failed otherwise than by its cookie.
    assert_eq!(tally.let_in.load(Ordering::Relaxed), 0, "a stranger got in");
    let other = tally.other.lock().unwrap();
    assert!(
        other.is_empty(),
        "{} strangers' opens ended otherwise, first: {:?}",
        other.len(),
        &other[..other.len().min(3)]
    );
    drop(other);
    // Every refusal the strangers read was counted by the node, and the
    // node counted no more than the NEGOTIATEs they wrote.
    let seen = tally.refused.load(Ordering::Relaxed);
    assert!(seen > 0, "no stranger's refusal was read");
    assert!(
        seen <= m.auth_refused && m.auth_refused <= tally.negotiates.load(Ordering::Relaxed),
        "{seen} refusals read, {} counted, {} NEGOTIATEs",
        m.auth_refused,
        tally.negotiates.load(Ordering::Relaxed)
    );
    // Nothing was allocated for a stranger: the site table and the slots
    // held the member only, the only channel that ever worked is the
    // member's (no stranger's ring, no stranger reaching a ComObject),
    // and nothing a stranger sent after its NEGOTIATE was read as a
    // message.
    assert_eq!(most_sites.load(Ordering::Relaxed), 1, "site entries");
    assert_eq!(most_slots.load(Ordering::Relaxed), 1, "slots in use");
    assert_eq!(s.peak_in_use, 1, "only the member's slot: {s:?}");
    assert_eq!(s.total_preemptions(), 0, "{s:?}");
    assert_eq!((m.channels_opened, m.channels_closed), (1, 0), "{m:?}");
    assert_eq!(
        m.unproven_claims_refused, 0,
        "a stranger reached a ComObject"
    );
    // What a stranger can hold before its NEGOTIATE is a pending
    // handshake (a descriptor and the handshake's minimum rings), within
    // the open level's cap.
    assert!(m.handshakes_pending_peak <= pending_cap, "{m:?}");
    assert!(
        m.channel_buffer_bytes_peak <= one_channel && st.transport_bytes_peak <= one_channel,
        "rings beyond the member's: peak {} bytes, one channel {one_channel}",
        m.channel_buffer_bytes_peak
    );
    assert_eq!(
        m.messages_delivered,
        sent + echoes,
        "only the member's messages were delivered: {m:?}"
    );
    assert_eq!(
        (
            m.unhandled,
            m.claims_refused,
            m.sink_refused,
            m.budget_pauses
        ),
        (0, 0, 0, 0),
        "a stranger's message was read: {m:?}"
    );
    assert_eq!(
        dials.load(Ordering::SeqCst),
        0,
        "the node dialed an address a stranger listed"
    );

    // The attackers go: everything is back to the member alone.
    drop(idle);
    block_on(async {
        assert!(
            eventually(|| server.metrics().handshakes_pending == 0).await,
            "{:?}",
            server.metrics()
        );
        assert!(
            eventually(|| server.stats().output_bytes == 0).await,
            "still held: {} bytes",
            server.stats().output_bytes
        );
    });
    assert_eq!(slots.stats().in_use, 1);
    assert_eq!(server.site_count(), 1);
    assert!(server.metrics().channel_buffer_bytes <= one_channel);
    let r = site
        .request::<Echo, EchoReply>(&Echo { seq: 1 })
        .timeout(PATIENCE)
        .blocking()
        .unwrap();
    assert_eq!(r.msg.seq, 1);
    assert_eq!(server.metrics().channels_opened, 1);
}

/// The siege of tests/hostile/siege.rs with every node and every attacker that
/// handshakes holding the cookie: members under every attack at once by
/// other members (forged claims on the legitimate member's id included,
/// refused by the continuity proof) — the legitimate member's stream is
/// complete and in order, its channel never closed, the process's memory
/// under the siege's stated bound, and what the attackers cost returned.
#[test]
fn under_a_cookie_a_node_under_every_members_attack_at_once_serves_its_member() {
    common::siege::siege(&Level::cookie(cookie(1)));
}

/// The open level's bound on forwarded origins holds for a member: 3,000
/// forwards naming fresh sites by a raw peer holding the cookie leave at
/// most the claims' bound of entries, dial at most that many times, and
/// everything goes with the forwarder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_cookie_a_members_forwards_naming_fresh_sites_are_still_bounded() {
    hostile::forwards_naming_fresh_sites_are_bounded_and_reclaimed(&Level::cookie(cookie(1))).await;
}

/// The open level's bound on site references holds for a member: 50,000
/// references to unknown sites leave no actor and no lasting entry, a
/// message naming more than the per-peer bound does not decode, and
/// everything goes with the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_cookie_a_members_site_ref_floods_are_still_bounded() {
    hostile::floods_of_site_refs_are_bounded_and_reclaimed(&Level::cookie(cookie(1))).await;
}

/// The open level's output bounds hold for members: six members that ask for
/// 6.4 MB of echoes each and never read hold at most the node's output
/// bound, a reading member is still answered, and what is owed to them is
/// released once they vanish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_cookie_replies_owed_to_vanished_members_are_still_bounded() {
    hostile::replies_owed_to_vanished_readers_are_bounded_and_released(&Level::cookie(cookie(1)))
        .await;
}

/// What the cookie does not stop: a member claiming another member's id.
/// A member forging the id of a member cut off in its backoff is refused
/// by the continuity proof, not the cookie: the victim, back,
/// gets every reply once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_cookie_a_member_forging_another_members_id_breaks_nothing() {
    hostile::a_forged_claim_on_a_client_in_backoff_breaks_nothing(&Level::cookie(cookie(1))).await;
}
