//! Bytes a peer sends to a `tls:` listener, through the TLS session
//! (`sitenet_transport::tls::TlsSession`, as the TransObject pumps it) and
//! into the acceptor's machine: never panics, never stalls, and no claim
//! gets past the acceptor unless the peer's verified certificate names it.
//!
//! Not in `mod.rs`: it needs `sitenet-transport` (rustls), which the
//! protocols crate's replay test does not have; its own replay test is
//! `transport/tests/fuzz_corpus_tls.rs`.
//!
//! The first byte chooses the mode (low bit) and the chunk size (the rest):
//! - **raw**: the input is what a stranger writes to the socket, TLS records
//!   or not. Without a certificate of the deployment's CA nothing can be
//!   accepted.
//! - **inside**: a member certified as site 0xA completes the TLS handshake
//!   in memory, then sends the input as plaintext, in records of the chunk
//!   size: sitenet's frames inside TLS framing. Whatever NEGOTIATE the
//!   acceptor returns names site 0xA.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::rc::Rc;
use std::sync::OnceLock;

use sitenet_protocols::connection::handshake::{LocalInfo, MIN_BUFFER};
use sitenet_protocols::{Acceptor, ByteBuffer, Keyring, SiteId};
use sitenet_transport::tls::certs::{self, Validity};
use sitenet_transport::tls::{TlsIdentity, TlsSession};

/// One direction of an in-memory socket: reads say `WouldBlock` when empty.
type Queue = Rc<RefCell<VecDeque<u8>>>;

struct Pipe {
    rx: Queue,
    tx: Queue,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut q = self.rx.borrow_mut();
        if q.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(q.len());
        for (d, s) in buf.iter_mut().zip(q.drain(..n)) {
            *d = s;
        }
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.borrow_mut().extend(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The deployment: a CA, the acceptor (site 0xB) and a member (site 0xA).
struct Pki {
    server: TlsIdentity,
    member: TlsIdentity,
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let ca = certs::new_ca().expect("CA");
        let site = |id| {
            let s = certs::new_site(&ca, SiteId(id), &Validity::default()).expect("site");
            TlsIdentity::from_pem(&s.cert_pem, &s.key_pem, &ca.cert_pem).expect("identity")
        };
        Pki {
            server: site(0xB),
            member: site(0xA),
        }
    })
}

/// The acceptor's side of a `tls:` channel, as `accept_until_negotiate`
/// drives it.
struct Side {
    tls: TlsSession,
    io: Pipe,
    acc: Acceptor,
    input: ByteBuffer,
    output: ByteBuffer,
    done: bool,
    accepted: Option<SiteId>,
}

impl Side {
    /// Reads what the socket holds through TLS into the machine, until it
    /// would block or the handshake ended.
    fn pump(&mut self) {
        while !self.done {
            let spare = self.input.spare_mut();
            assert!(!spare.is_empty(), "acceptor stalled with a full ring");
            match self.tls.read_from(&mut self.io, spare) {
                Ok(0) | Err(_) => {
                    // End of stream, WouldBlock, or TLS refusing the peer.
                    return;
                }
                Ok(n) => self.input.commit(n),
            }
            if let Some(site) = self.tls.peer_site() {
                self.acc.certified(site);
            }
            match self.acc.handle_input(&mut self.input, &mut self.output) {
                Ok(Some(n)) => {
                    assert_eq!(
                        Some(n.site),
                        self.tls.peer_site(),
                        "a claim the certificate does not name got through"
                    );
                    assert_eq!(n.site, SiteId(0xA));
                    self.accepted = Some(n.site);
                    self.done = true;
                }
                Ok(None) => {}
                Err(_) => self.done = true,
            }
        }
    }
}

/// The check, for one input.
pub fn check(data: &[u8]) {
    let _ = run(data);
}

/// The check, telling which claim the acceptor returned (if any).
pub fn run(data: &[u8]) -> Option<SiteId> {
    let (&ctl, stream) = data.split_first()?;
    let chunk = 1 + (ctl >> 1) as usize * 64;
    let inside = ctl & 1 == 1;
    let pki = pki();
    let (c2s, s2c): (Queue, Queue) = Default::default();
    let local = LocalInfo {
        site: SiteId(0xB),
        listen: vec!["tls:127.0.0.1:7000".into()],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    };
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    let acc = Acceptor::with_keys(&local, [0xAC; 32], Keyring::default(), &mut output)
        .require_certificate();
    let mut side = Side {
        tls: pki.server.server_session().expect("server session"),
        io: Pipe {
            rx: c2s.clone(),
            tx: s2c.clone(),
        },
        acc,
        input: ByteBuffer::new(MIN_BUFFER as usize),
        output,
        done: false,
        accepted: None,
    };
    if !inside {
        for piece in stream.chunks(chunk) {
            c2s.borrow_mut().extend(piece);
            side.pump();
            assert!(side.tls.peer_site().is_none(), "a stranger was certified");
        }
        return side.accepted;
    }
    let mut client = pki.member.client_session().expect("client session");
    let mut cio = Pipe {
        rx: s2c.clone(),
        tx: c2s.clone(),
    };
    let mut scratch = [0u8; 4096];
    for _ in 0..8 {
        let _ = client.write_pending_to(&mut cio);
        side.pump();
        let _ = client.read_from(&mut cio, &mut scratch);
        if !client.is_handshaking() && !side.tls.is_handshaking() {
            break;
        }
    }
    assert!(
        !client.is_handshaking(),
        "the member's TLS handshake stalled"
    );
    for piece in stream.chunks(chunk) {
        let mut off = 0;
        while off < piece.len() {
            match client.write_vectored_to(&mut cio, &[IoSlice::new(&piece[off..])]) {
                Ok(n) => off += n,
                Err(e) => panic!("an in-memory pipe never blocks: {e}"),
            }
            side.pump();
        }
        if side.done {
            break;
        }
    }
    side.accepted
}
