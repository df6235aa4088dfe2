//! A TLS session reads its socket ahead of rustls: a burst of records
//! costs one socket read per 64 KiB, not one per 4 KiB, every byte comes
//! out in order, and bytes read ahead but not yet decrypted keep the
//! session's `has_input` true (the socket will not wake the driver for
//! them).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::rc::Rc;

use sitenet_protocols::SiteId;
use sitenet_transport::tls::certs::{self, Validity};
use sitenet_transport::tls::{TlsIdentity, TlsSession};

type Queue = Rc<RefCell<VecDeque<u8>>>;

/// One end of an in-memory socket that counts the reads that returned
/// bytes; reads say `WouldBlock` when it is empty.
struct Pipe {
    rx: Queue,
    tx: Queue,
    reads: Rc<Cell<usize>>,
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
        self.reads.set(self.reads.get() + 1);
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

fn identities() -> (TlsIdentity, TlsIdentity) {
    let ca = certs::new_ca().expect("CA");
    let site = |id| {
        let s = certs::new_site(&ca, SiteId(id), &Validity::default()).expect("site");
        TlsIdentity::from_pem(&s.cert_pem, &s.key_pem, &ca.cert_pem).expect("identity")
    };
    (site(0xB), site(0xA))
}

#[test]
fn a_burst_of_records_is_read_in_few_socket_reads_and_arrives_whole() {
    let (server_id, client_id) = identities();
    let (c2s, s2c): (Queue, Queue) = Default::default();
    let server_reads = Rc::new(Cell::new(0));
    let mut sio = Pipe {
        rx: c2s.clone(),
        tx: s2c.clone(),
        reads: server_reads.clone(),
    };
    let mut cio = Pipe {
        rx: s2c,
        tx: c2s.clone(),
        reads: Rc::new(Cell::new(0)),
    };
    let mut server: TlsSession = server_id.server_session().unwrap();
    let mut client: TlsSession = client_id.client_session().unwrap();
    let mut scratch = [0u8; 4096];
    for _ in 0..8 {
        let _ = client.write_pending_to(&mut cio);
        let _ = server.read_from(&mut sio, &mut scratch);
        let _ = client.read_from(&mut cio, &mut scratch);
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
    }
    assert!(!client.is_handshaking() && !server.is_handshaking());

    // 256 KiB of plaintext in records of up to 16 KiB, all in the pipe
    // before the server reads any of it.
    let sent: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 251) as u8).collect();
    let mut off = 0;
    while off < sent.len() {
        off += client
            .write_vectored_to(&mut cio, &[IoSlice::new(&sent[off..])])
            .expect("an in-memory pipe never blocks");
    }
    let ciphertext = c2s.borrow().len();
    assert!(ciphertext > sent.len());

    server_reads.set(0);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 48 << 10];
    loop {
        match server.read_from(&mut sio, &mut buf) {
            Ok(0) => panic!("end of stream"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(!server.has_input(), "would block with input held");
                break;
            }
            Err(e) => panic!("{e}"),
        }
        if c2s.borrow().is_empty() && got.len() < sent.len() {
            // The pipe is drained: whatever is left is inside the session,
            // and the driver must be told to read on.
            assert!(server.has_input(), "bytes held but has_input is false");
        }
    }
    assert_eq!(got, sent);
    // rustls alone reads at most 4 KiB per socket read: 64 or more here.
    let reads = server_reads.get();
    assert!(
        reads <= ciphertext.div_ceil(64 << 10),
        "{reads} socket reads for {ciphertext} bytes of ciphertext"
    );
}
