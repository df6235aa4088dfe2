//! A peer that speaks the wire protocol by hand over a blocking socket: the
//! hostile peers of tests/hostile/peers.rs (and any test that must send what a
//! `Node` never would).

use std::io::{Read, Write};
use std::net::TcpStream;

use sitenet_protocols::wire::frame::{FrameHeader, FrameKind};
use sitenet_protocols::{
    ByteBuffer, Initiator, Keyring, LocalInfo, MessageKind, OpenError, Prelude, SiteId,
};

use super::PATIENCE;

/// A raw peer after its handshake: its socket and the number of its last
/// message sent.
pub struct RawPeer {
    pub socket: TcpStream,
    pub id: SiteId,
    last_sent: u64,
}

impl RawPeer {
    /// Connects to `target` (`tcp:HOST:PORT`) and runs the initiator's
    /// open protocol as site `id`, listing `listen` (addresses it may not
    /// own). Panics if the node refuses.
    pub fn connect_as(target: &str, id: SiteId, listen: Vec<String>) -> Self {
        Self::try_connect_as(target, id, listen).expect("handshake")
    }

    /// [`connect_as`](Self::connect_as), returning the open protocol's
    /// error (a refusal among them) instead of panicking.
    pub fn try_connect_as(
        target: &str,
        id: SiteId,
        listen: Vec<String>,
    ) -> Result<Self, OpenError> {
        Self::try_connect_keyed(target, id, listen, Keyring::default())
    }

    /// [`try_connect_as`](Self::try_connect_as) proving the cookies in
    /// `keys` (none: the open level).
    pub fn try_connect_keyed(
        target: &str,
        id: SiteId,
        listen: Vec<String>,
        keys: Keyring,
    ) -> Result<Self, OpenError> {
        Self::open(target, id, initiator(id, listen, keys), &[])
            .map_err(|e| e.expect("the node closed the channel during the handshake"))
    }

    /// Runs the initiator's machine `hs` (as site `id`) on a fresh
    /// connection to `target` (`tcp:HOST:PORT`), writing `after` in the same
    /// write as its NEGOTIATE, before the node has answered: a peer that
    /// sends what it means to send whether or not it is let in. The error
    /// is the open's (`None`: the node closed the channel, or reset it,
    /// before its answer was read).
    pub fn open(
        target: &str,
        id: SiteId,
        mut hs: Initiator,
        after: &[u8],
    ) -> Result<Self, Option<OpenError>> {
        let hostport = target.strip_prefix("tcp:").expect("tcp address");
        let mut s = TcpStream::connect(hostport).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        let mut inb = ByteBuffer::new(65_536);
        let mut outb = ByteBuffer::new(65_536);
        let mut buf = [0u8; 4096];
        let mut after = Some(after);
        // Once NEGOTIATE is written, the node may close the channel, or
        // reset it (closing with input unread), and a write may meet that.
        let mut negotiated = false;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => return Err(None),
                Ok(n) => n,
                Err(e) if negotiated && e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(None)
                }
                Err(e) => panic!("read: {e}"),
            };
            inb.push(&buf[..n]);
            let done = hs.handle_input(&mut inb, &mut outb).map_err(Some)?;
            let (a, b) = outb.chunks();
            let mut out = [a, b].concat();
            outb.clear();
            if !out.is_empty() {
                if let Some(rest) = after.take() {
                    out.extend_from_slice(rest);
                }
                negotiated = true;
                // A failed write shows in the next read.
                let _ = s.write_all(&out);
            }
            if done.is_some() {
                s.set_write_timeout(None).unwrap();
                return Ok(Self {
                    socket: s,
                    id,
                    last_sent: 0,
                });
            }
        }
    }

    /// [`connect_as`](Self::connect_as) a fresh random site that listens
    /// nowhere (it cannot be called back).
    pub fn connect(target: &str) -> Self {
        Self::connect_keyed(target, Keyring::default())
    }

    /// [`connect`](Self::connect) proving the cookies in `keys`.
    pub fn connect_keyed(target: &str, keys: Keyring) -> Self {
        Self::try_connect_keyed(target, SiteId(rand::random::<u128>()), Vec::new(), keys)
            .expect("handshake")
    }

    /// `n` [`echo_hog_keyed`](Self::echo_hog_keyed)s connecting at once,
    /// each on a thread of its own.
    pub fn echo_hogs(target: &str, n: usize, keys: Keyring) -> Vec<Self> {
        let hogs: Vec<_> = (0..n)
            .map(|_| {
                let (target, keys) = (target.to_string(), keys.clone());
                std::thread::spawn(move || Self::echo_hog_keyed(&target, keys))
            })
            .collect();
        hogs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// A fresh peer proving the cookies in `keys` (see
    /// [`connect_keyed`](Self::connect_keyed)) that asks the node's echo
    /// service for 200 echoes of 32 KiB bodies (6.4 MB of replies) and
    /// never reads: what the node then owes it is held until the peer
    /// reads, goes, or is given up. Returned to keep the channel.
    pub fn echo_hog_keyed(target: &str, keys: Keyring) -> Self {
        let mut p = Self::connect_keyed(target, keys);
        let mut w = Wire::default();
        echo_hog_requests(&mut w);
        p.socket.write_all(&w.bytes).unwrap();
        p
    }

    /// Appends one DATA frame with one whole message (it must fit a frame)
    /// to `v`, numbered after the last one.
    pub fn message(
        &mut self,
        v: &mut Vec<u8>,
        type_id: u32,
        kind: MessageKind,
        corr: u64,
        header: &[u8],
        body: &[u8],
    ) {
        self.last_sent += 1;
        encode_message(v, self.last_sent, type_id, kind, corr, header, body);
    }

    /// Sends one message (see [`message`](Self::message)).
    pub fn send(&mut self, type_id: u32, kind: MessageKind, corr: u64, header: &[u8], body: &[u8]) {
        let mut v = Vec::new();
        self.message(&mut v, type_id, kind, corr, header, body);
        self.socket.write_all(&v).unwrap();
    }

    /// Reads frames until a DATA or PACKED frame has come (a message from the node,
    /// such as a reply: everything the node did before sending it is done).
    pub fn read_until_data(&mut self) {
        loop {
            let mut hb = [0u8; sitenet_protocols::HEADER_LEN];
            self.socket
                .read_exact(&mut hb)
                .expect("a frame from the node");
            let h = FrameHeader::decode(&hb, 1 << 20).expect("a valid frame header");
            let mut payload = vec![0u8; h.payload_len as usize];
            self.socket.read_exact(&mut payload).expect("its payload");
            if matches!(h.kind, FrameKind::Data | FrameKind::Packed) {
                return;
            }
        }
    }
}

/// A TCP relay to a node that a test can cut and hold, as a network failure
/// would: a genuine site behind it loses its channel and, while the relay
/// holds, cannot reconnect (its attempts wait at the relay, as over a
/// slow network, and go through once it is released). It can also lose
/// what the target sends, so that the target holds messages its peer
/// never received.
pub struct Relay {
    /// Where sites connect to reach the target (`tcp:127.0.0.1:PORT`).
    pub address: String,
    state: std::sync::Arc<RelayState>,
}

#[derive(Default)]
struct RelayState {
    /// Relaying (true) or holding new connections (false).
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    /// Both ends of every relayed connection, to cut them.
    live: std::sync::Mutex<Vec<TcpStream>>,
    /// Bytes from the target are dropped, not relayed.
    lose_from_target: std::sync::atomic::AtomicBool,
}

impl Relay {
    /// Relays connections to `target` (`tcp:HOST:PORT`), open at first.
    pub fn to(target: &str) -> Self {
        let upstream = target
            .strip_prefix("tcp:")
            .expect("tcp address")
            .to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("tcp:{}", listener.local_addr().unwrap());
        let state = std::sync::Arc::new(RelayState::default());
        *state.open.lock().unwrap() = true;
        let st = state.clone();
        std::thread::spawn(move || {
            for down in listener.incoming() {
                let Ok(down) = down else { return };
                let st = st.clone();
                let upstream = upstream.clone();
                std::thread::spawn(move || {
                    let open = st.open.lock().unwrap();
                    let open = st
                        .opened
                        .wait_timeout_while(open, PATIENCE, |o| !*o)
                        .unwrap()
                        .0;
                    drop(open);
                    let Ok(up) = TcpStream::connect(&upstream) else {
                        return;
                    };
                    let mut live = st.live.lock().unwrap();
                    live.push(down.try_clone().unwrap());
                    live.push(up.try_clone().unwrap());
                    drop(live);
                    let (mut d1, mut u1) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut d1, &mut u1);
                        let _ = u1.shutdown(std::net::Shutdown::Both);
                    });
                    let (mut d2, mut u2) = (down, up);
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        match u2.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(_)
                                if st
                                    .lose_from_target
                                    .load(std::sync::atomic::Ordering::SeqCst) => {}
                            Ok(n) => {
                                if d2.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = d2.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Self { address, state }
    }

    /// From now on, loses what the target sends (until
    /// [`release`](Self::release)).
    pub fn lose_from_target(&self) {
        self.state
            .lose_from_target
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Cuts every relayed connection and holds new ones until
    /// [`release`](Self::release).
    pub fn cut_and_hold(&self) {
        *self.state.open.lock().unwrap() = false;
        for s in self.state.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Relays again (both ways), held connections first.
    pub fn release(&self) {
        self.state
            .lose_from_target
            .store(false, std::sync::atomic::Ordering::SeqCst);
        *self.state.open.lock().unwrap() = true;
        self.state.opened.notify_all();
    }
}

/// A frame header as a raw peer writes it (no ack, offset 0): what a test
/// needs to send a frame a `Node` never would.
pub fn frame_header(
    kind: FrameKind,
    lane: u8,
    flags: u8,
    payload_len: u32,
    msg_number: u64,
) -> [u8; sitenet_protocols::HEADER_LEN] {
    let mut b = [0u8; sitenet_protocols::HEADER_LEN];
    FrameHeader {
        kind,
        lane,
        flags,
        payload_len,
        ack: 0,
        msg_number,
        frag_offset: 0,
    }
    .encode(&mut b);
    b
}

/// A forwarded request's origin block, built by hand: the descriptor's
/// length (u16, little-endian), the descriptor, then the typed header.
pub fn origin_block(origin: &str, header: &[u8]) -> Vec<u8> {
    let mut v = (origin.len() as u16).to_le_bytes().to_vec();
    v.extend_from_slice(origin.as_bytes());
    v.extend_from_slice(header);
    v
}

/// The initiator's machine of a raw peer: site `id`, listing `listen`,
/// proving the cookies in `keys`, new to the node (it claims no message
/// received, no generation).
pub fn initiator(id: SiteId, listen: Vec<String>, keys: Keyring) -> Initiator {
    let local = LocalInfo {
        site: id,
        listen,
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    };
    Initiator::new(local, None, 0, 0, rand::random()).with_keys(keys)
}

/// Appends one DATA frame (lane 3) holding one whole message numbered
/// `number` to `v`.
fn encode_message(
    v: &mut Vec<u8>,
    number: u64,
    type_id: u32,
    kind: MessageKind,
    corr: u64,
    header: &[u8],
    body: &[u8],
) {
    let mut payload = Prelude {
        type_id,
        kind,
        header_len: header.len() as u32,
        body_len: body.len() as u64,
        corr,
    }
    .encode()
    .to_vec();
    payload.extend_from_slice(header);
    payload.extend_from_slice(body);
    let h = FrameHeader::whole(FrameKind::Data, 3, number, payload.len() as u32, 0);
    let mut hb = [0u8; sitenet_protocols::HEADER_LEN];
    h.encode(&mut hb);
    v.extend_from_slice(&hb);
    v.extend_from_slice(&payload);
}

/// What a raw peer writes after its handshake, built before it has one:
/// messages numbered from 1, as a fresh [`RawPeer`] numbers them, and any
/// frames a test writes by hand.
#[derive(Default)]
pub struct Wire {
    pub bytes: Vec<u8>,
    last_sent: u64,
}

impl Wire {
    /// Appends one whole message (see [`RawPeer::message`]).
    pub fn message(
        &mut self,
        type_id: u32,
        kind: MessageKind,
        corr: u64,
        header: &[u8],
        body: &[u8],
    ) {
        self.last_sent += 1;
        encode_message(
            &mut self.bytes,
            self.last_sent,
            type_id,
            kind,
            corr,
            header,
            body,
        );
    }

    /// Appends bytes as they are (a frame written by hand).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }
}

/// 200 echo requests with 32 KiB bodies (6.4 MB of replies): what
/// [`RawPeer::echo_hog_keyed`] asks for and never reads.
pub fn echo_hog_requests(w: &mut Wire) {
    use sitenet::services::Echo;
    use sitenet::Message;
    let body = vec![7u8; 32 * 1024];
    for seq in 0..200u64 {
        let header = rmp_serde::to_vec(&Echo { seq }).unwrap();
        w.message(Echo::ID, MessageKind::Request, seq + 1, &header, &body);
    }
}
