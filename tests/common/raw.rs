//! A peer that speaks the wire protocol by hand over a blocking socket: the
//! hostile peers of tests/hostile.rs (and any test that must send what a
//! `Node` never would).

use std::io::{Read, Write};
use std::net::TcpStream;

use sitenet::protocols::frame::{FrameHeader, FrameKind};
use sitenet::protocols::{ByteBuffer, Initiator, LocalInfo, MessageKind, Prelude, SiteId};

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
        let hostport = target.strip_prefix("tcp:").expect("tcp address");
        let mut s = TcpStream::connect(hostport).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let local = LocalInfo {
            site: id,
            listen,
            buffer_size: 65_536,
            max_message: 1 << 20,
        };
        let mut hs = Initiator::new(local, None, 0, 0);
        let mut inb = ByteBuffer::new(65_536);
        let mut outb = ByteBuffer::new(65_536);
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "the node closed the channel during the handshake");
            inb.push(&buf[..n]);
            let done = hs.handle_input(&mut inb, &mut outb).expect("handshake");
            let (a, b) = outb.chunks();
            s.write_all(&[a, b].concat()).unwrap();
            outb.clear();
            if done.is_some() {
                return Self {
                    socket: s,
                    id,
                    last_sent: 0,
                };
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
