//! A peer that speaks the wire protocol by hand over a blocking socket: the
//! hostile peers of tests/hostile.rs (and any test that must send what a
//! `Node` never would).

use std::io::{Read, Write};
use std::net::TcpStream;

use sitenet::protocols::frame::{FrameHeader, FrameKind};
use sitenet::protocols::{
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
    /// `keys` (issue 18; none: the open level).
    pub fn try_connect_keyed(
        target: &str,
        id: SiteId,
        listen: Vec<String>,
        keys: Keyring,
    ) -> Result<Self, OpenError> {
        let hostport = target.strip_prefix("tcp:").expect("tcp address");
        let mut s = TcpStream::connect(hostport).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let local = LocalInfo {
            site: id,
            listen,
            buffer_size: 65_536,
            max_message: 1 << 20,
        };
        let mut hs = Initiator::new(local, None, 0, 0, rand::random()).with_keys(keys);
        let mut inb = ByteBuffer::new(65_536);
        let mut outb = ByteBuffer::new(65_536);
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "the node closed the channel during the handshake");
            inb.push(&buf[..n]);
            let done = hs.handle_input(&mut inb, &mut outb)?;
            let (a, b) = outb.chunks();
            s.write_all(&[a, b].concat()).unwrap();
            outb.clear();
            if done.is_some() {
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
        Self::connect_as(target, SiteId(rand::random::<u128>()), Vec::new())
    }

    /// A fresh peer (see [`connect`](Self::connect)) that asks the
    /// node's echo service for 200 echoes of 32 KiB bodies (6.4 MB of
    /// replies) and never reads: what the node then owes it is held until
    /// the peer reads, goes, or is given up. Returned to keep the channel.
    pub fn echo_hog(target: &str) -> Self {
        use sitenet::services::Echo;
        use sitenet::Message;
        let mut p = Self::connect(target);
        let body = vec![7u8; 32 * 1024];
        for seq in 0..200u64 {
            let header = rmp_serde::to_vec(&Echo { seq }).unwrap();
            p.send(Echo::ID, MessageKind::Request, seq + 1, &header, &body);
        }
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
        let h = FrameHeader::whole(FrameKind::Data, 3, self.last_sent, payload.len() as u32, 0);
        let mut hb = [0u8; sitenet::protocols::HEADER_LEN];
        h.encode(&mut hb);
        v.extend_from_slice(&hb);
        v.extend_from_slice(&payload);
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
            let mut hb = [0u8; sitenet::protocols::HEADER_LEN];
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
) -> [u8; sitenet::protocols::HEADER_LEN] {
    let mut b = [0u8; sitenet::protocols::HEADER_LEN];
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
