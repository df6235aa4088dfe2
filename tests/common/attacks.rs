//! The siege's attacks (tests/hostile/siege.rs, tests/hostile/cookie.rs): what
//! a hostile peer writes, before a handshake or after one, as bytes a test
//! sends over a raw socket.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sitenet::services::Echo;
use sitenet::Message;
use sitenet_protocols::wire::frame::{FLAG_FIRST, FLAG_LAST};
use sitenet_protocols::{FrameKind, MessageKind, SiteId, HEADER_LEN, PROTOCOL_VERSION};

use super::raw::{self, Wire};
use super::Numbered;

/// Flags of a frame holding a whole message.
pub const WHOLE: u8 = FLAG_FIRST | FLAG_LAST;

/// A message carrying site references (a peer's may name sites nobody
/// knows).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Peers(pub Vec<sitenet::SiteRef>);
impl Message for Peers {
    const ID: u32 = 731;
}

/// A blocking connection to `addr` (`tcp:HOST:PORT`), reads timing out
/// after 30 s.
pub fn tcp(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr.strip_prefix("tcp:").unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Reads until the node closes the connection (or the read times out).
pub fn until_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            return;
        }
    }
}

/// A frame header on lane 3 for data, 5 for the rest (`flags`:
/// [`WHOLE`] for a whole message).
pub fn frame_header(
    kind: FrameKind,
    flags: u8,
    payload_len: u32,
    msg_number: u64,
) -> [u8; HEADER_LEN] {
    let lane = if kind == FrameKind::Data { 3 } else { 5 };
    raw::frame_header(kind, lane, flags, payload_len, msg_number)
}

/// Runs `attack` in a loop on a thread of its own until `stop` is set,
/// counting its rounds in `rounds`.
pub fn attacker(
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
    attack: impl Fn() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let (stop, rounds) = (stop.clone(), rounds.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            attack();
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Before any handshake: 4 KiB of garbage instead of one, until the node
/// closes the connection.
pub fn garbage(target: &str) {
    let mut s = tcp(target);
    let garbage: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
    let _ = s.write_all(&garbage);
    until_closed(&mut s);
}

/// Before any handshake, three connections: a wrong version, an oversized
/// handshake frame, a truncated one.
pub fn bad_handshake_frames(target: &str) {
    let mut h = frame_header(FrameKind::Negotiate, WHOLE, 0, 0);
    h[0] = PROTOCOL_VERSION.wrapping_add(1);
    let mut s = tcp(target);
    let _ = s.write_all(&h);
    until_closed(&mut s);
    let mut s = tcp(target);
    let _ = s.write_all(&frame_header(FrameKind::Negotiate, WHOLE, u32::MAX, 0));
    until_closed(&mut s);
    let mut s = tcp(target);
    let _ = s.write_all(&frame_header(FrameKind::Negotiate, WHOLE, 10, 0)[..20]);
    drop(s);
}

/// After a handshake: a data frame announcing a 1 GiB payload.
pub fn oversized_frame(w: &mut Wire) {
    w.raw(&frame_header(FrameKind::Data, WHOLE, 1 << 30, 1));
}

/// After a handshake: a continuation with no first fragment.
pub fn orphan_continuation(w: &mut Wire) {
    w.raw(&frame_header(FrameKind::Data, FLAG_LAST, 4, 1));
    w.raw(&[1, 2, 3, 4]);
}

/// After a handshake: 500 messages whose header is not a [`Numbered`].
pub fn malformed_messages(w: &mut Wire) {
    for _ in 0..500 {
        w.message(Numbered::ID, MessageKind::OneWay, 0, b"\xc1\xc1", &[]);
    }
}

/// After a handshake: the first 60 KiB of a 1 MiB message, then nothing
/// (it holds reassembly budget until it is abandoned).
pub fn stalled_partial_message(w: &mut Wire) {
    let prelude = sitenet_protocols::Prelude {
        type_id: Numbered::ID,
        kind: MessageKind::OneWay,
        header_len: 0,
        body_len: 1 << 20,
        corr: 0,
    }
    .encode();
    let payload = 60 * 1024;
    let mut f = frame_header(FrameKind::Data, FLAG_FIRST, payload as u32, 0).to_vec();
    f.extend_from_slice(&prelude);
    f.resize(HEADER_LEN + payload, 0);
    w.raw(&f);
}

/// An address where nothing answers (a port bound and closed again:
/// connections there are refused at once).
pub fn nowhere() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("tcp:{}", l.local_addr().unwrap())
}

/// After a handshake: 200 forwarded echo requests, each naming a fresh
/// origin at `mem:siege-nowhere-N` and `nowhere`.
pub fn forwards_from_fresh_origins(w: &mut Wire, nowhere: &str) {
    for seq in 0..200u64 {
        let origin = format!(
            "{}@mem:siege-nowhere-{seq},{nowhere}",
            SiteId(rand::random::<u128>())
        );
        let header = rmp_serde::to_vec(&Echo { seq }).unwrap();
        let block = raw::origin_block(&origin, &header);
        w.message(Echo::ID, MessageKind::Forward, seq + 1, &block, &[]);
    }
}

/// After a handshake: one [`Peers`] message naming 500 sites nobody
/// knows.
pub fn site_ref_flood(w: &mut Wire) {
    let refs: Vec<String> = (0..500)
        .map(|i| format!("{}@mem:siege-ref-{i}", SiteId(rand::random::<u128>())))
        .collect();
    let header = rmp_serde::to_vec(&refs).unwrap();
    w.message(Peers::ID, MessageKind::OneWay, 0, &header, &[]);
}
