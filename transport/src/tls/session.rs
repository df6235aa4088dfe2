//! [`TlsSession`]: rustls's engine for one channel, with the same
//! non-blocking read and write calls as a [`Channel`], so the TransObject
//! pumps a TLS channel exactly as a plain one.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use sitenet_protocols::SiteId;

use super::verify::site_of_cert;
use super::TLS_SEND_LIMIT;
use crate::Channel;

/// One channel's TLS: rustls's sans-IO connection and what it has learnt
/// of the peer.
///
/// The calls mirror [`Channel::try_read`] and
/// [`Channel::try_write_vectored`]: they move bytes between the caller's
/// buffers and the socket without blocking, `WouldBlock` when the socket
/// has nothing to give or take now, `Ok(0)` from a read at the end of the
/// stream. Two differences the driver must know: plaintext (and ciphertext
/// read ahead) can wait inside the session while the socket is not
/// readable ([`has_input`]), and
/// ciphertext can wait to be sent while the driver has nothing left to
/// write ([`wants_write`]).
///
/// [`has_input`]: TlsSession::has_input
/// [`wants_write`]: TlsSession::wants_write
pub struct TlsSession {
    conn: rustls::Connection,
    /// Plaintext decrypted and not yet read (as rustls last reported it,
    /// less what was read since).
    plaintext: usize,
    /// The site the peer's certificate names, once the handshake checked it.
    peer: Option<SiteId>,
    /// The file of the CA certificates this site trusts, if it came from
    /// one: a refusal names it.
    ca: Option<Arc<Path>>,
    /// Ciphertext read from the socket that rustls has not taken yet.
    ahead: ReadAhead,
}

/// How much ciphertext one socket read takes. rustls asks for at most
/// 4 KiB per read, so a 16 KiB record took four or five system calls;
/// reading ahead into this buffer takes a burst of records in one, and
/// rustls copies its 4 KiB pieces from memory.
const READ_AHEAD: usize = 64 << 10;

/// Ciphertext read ahead of rustls (see [`READ_AHEAD`]). The buffer is
/// allocated on the first read and kept while the session works; a
/// session whose rings are shrunk for idleness gives it back
/// ([`TlsSession::release_idle`]).
#[derive(Default)]
struct ReadAhead {
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

impl ReadAhead {
    /// Serves `out` from the bytes read ahead, reading the socket (one
    /// call, up to [`READ_AHEAD`] bytes) when none are left.
    fn read(&mut self, io: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.end {
            if self.buf.is_empty() {
                self.buf = vec![0; READ_AHEAD];
            }
            self.at = 0;
            self.end = 0;
            self.end = io.read(&mut self.buf)?;
        }
        let n = out.len().min(self.end - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }

    /// Bytes read ahead and not yet taken.
    fn held(&self) -> usize {
        self.end - self.at
    }

    /// Gives the buffer back if it holds nothing.
    fn release_idle(&mut self) {
        if self.held() == 0 {
            *self = Self::default();
        }
    }
}

/// The socket as rustls reads it: through the read-ahead buffer.
struct Ahead<'a, R> {
    ahead: &'a mut ReadAhead,
    io: &'a mut R,
}

impl<R: Read> Read for Ahead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.ahead.read(self.io, buf)
    }
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("handshaking", &self.conn.is_handshaking())
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// Socket reads one [`TlsSession::read`] makes at most.
const MAX_READS_PER_CALL: usize = 32;

/// A channel seen as blocking `Read`/`Write` for rustls's `read_tls` and
/// `write_tls` (which pass `WouldBlock` through).
struct Io<'a>(&'a Channel);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// TLS refusing a channel: rustls's error, and what a user can do about
/// it. A refusal of trust says which side does not trust which CA, in
/// place of rustls's `BadSignature` or `received fatal alert:
/// DecryptError`.
#[derive(Debug)]
struct Refused {
    error: rustls::Error,
    /// This side dialed (the peer is the node it dials).
    dialer: bool,
    /// The file of the CA certificates this side trusts.
    ca: Option<Arc<Path>>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use rustls::AlertDescription as A;
        use rustls::CertificateError as C;
        use rustls::Error as E;
        let ours = match &self.ca {
            Some(p) => format!("--ca ({})", p.display()),
            None => "trusted CA".into(),
        };
        match (&self.error, self.dialer) {
            (E::InvalidCertificate(C::UnknownIssuer | C::BadSignature), true) => write!(
                f,
                "this node's certificate is not signed by your {ours}: trust the CA that \
                 signed it, or give the node a certificate of your CA"
            ),
            (E::InvalidCertificate(C::UnknownIssuer | C::BadSignature), false) => write!(
                f,
                "the dialing site's certificate is not signed by this node's {ours}: it is \
                 not a member of this deployment"
            ),
            (
                E::InvalidCertificate(
                    c @ (C::Expired
                    | C::ExpiredContext { .. }
                    | C::NotValidYet
                    | C::NotValidYetContext { .. }),
                ),
                dialer,
            ) => write!(
                f,
                "{} certificate is not valid now ({c}): renew it (`sitenet cert site`) or \
                 check the clocks",
                if dialer {
                    "this node's"
                } else {
                    "the dialing site's"
                }
            ),
            (
                E::AlertReceived(
                    a @ (A::UnknownCA
                    | A::DecryptError
                    | A::BadCertificate
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate),
                ),
                true,
            ) => write!(
                f,
                "the node does not trust your certificate's CA (it answered {a:?}): use a \
                 certificate signed by the node's CA, or have the node trust yours"
            ),
            (
                E::AlertReceived(
                    a @ (A::UnknownCA
                    | A::DecryptError
                    | A::BadCertificate
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate),
                ),
                false,
            ) => write!(
                f,
                "the dialing site does not trust this node's certificate's CA (it answered {a:?})"
            ),
            (E::AlertReceived(A::CertificateExpired), true) => write!(
                f,
                "the node refused your certificate as not valid now (expired or not yet \
                 valid): renew it (`sitenet cert site`) or check the clocks"
            ),
            (E::AlertReceived(A::CertificateExpired), false) => write!(
                f,
                "the dialing site refused this node's certificate as not valid now (expired \
                 or not yet valid)"
            ),
            (e, _) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl TlsSession {
    pub(super) fn new(mut conn: rustls::Connection, ca: Option<Arc<Path>>) -> Self {
        conn.set_buffer_limit(Some(TLS_SEND_LIMIT));
        Self {
            conn,
            plaintext: 0,
            peer: None,
            ca,
            ahead: ReadAhead::default(),
        }
    }

    /// The error a failed TLS handshake or record becomes: `InvalidData`
    /// with the refusal inside, so the driver can tell it from a socket's
    /// ([`refusal`](Self::refusal)).
    fn refused(&self, error: rustls::Error) -> io::Error {
        let dialer = matches!(self.conn, rustls::Connection::Client(_));
        let ca = self.ca.clone();
        io::Error::new(io::ErrorKind::InvalidData, Refused { error, dialer, ca })
    }

    /// Reads decrypted bytes into `buf`: what the session holds first,
    /// else what the socket has (handshake records are processed and
    /// answered on the way). `Ok(0)` at the end of the stream (with or
    /// without the peer's close_notify: sitenet's own protocol says whether
    /// anything was cut short).
    pub fn read(&mut self, ch: &Channel, buf: &mut [u8]) -> io::Result<usize> {
        self.read_from(&mut Io(ch), buf)
    }

    /// [`read`](Self::read) from any non-blocking byte stream (`io`'s
    /// reads and writes return `WouldBlock` when they cannot go on): a
    /// test or fuzz target's in-memory pipe.
    pub fn read_from(&mut self, io: &mut (impl Read + Write), buf: &mut [u8]) -> io::Result<usize> {
        // Records that decrypt to nothing (a handshake message, an empty
        // record) do not keep the caller here for ever: after this many
        // socket reads it hears `WouldBlock`, and the socket, still
        // readable, wakes it again.
        for _ in 0..MAX_READS_PER_CALL {
            match self.conn.reader().read(buf) {
                Ok(n) => {
                    self.plaintext = self.plaintext.saturating_sub(n);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            self.plaintext = 0;
            // Nothing decrypted is waiting: take what the socket has.
            let eof = self.conn.read_tls(&mut Ahead {
                ahead: &mut self.ahead,
                io,
            })? == 0;
            let state = match self.conn.process_new_packets() {
                Ok(s) => s,
                Err(e) => {
                    // rustls queued an alert telling the peer why.
                    let _ = self.write_pending_to(io);
                    return Err(self.refused(e));
                }
            };
            self.plaintext = state.plaintext_bytes_to_read();
            if self.peer.is_none() && !self.conn.is_handshaking() {
                self.peer = self
                    .conn
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(site_of_cert);
            }
            // Handshake answers go out now, not when the driver next
            // writes (an acceptor writes nothing until NEGOTIATE).
            match self.write_pending_to(io) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if eof && self.plaintext == 0 {
                return Ok(0);
            }
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Encrypts from `bufs` (in order) what the session's send limit lets
    /// it hold and writes it to the socket: returns how many plaintext
    /// bytes were taken, `WouldBlock` if none could be (the socket is
    /// blocked with [`TLS_SEND_LIMIT`] bytes waiting).
    pub fn write_vectored(&mut self, ch: &Channel, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored_to(&mut Io(ch), bufs)
    }

    /// [`write_vectored`](Self::write_vectored) to any non-blocking byte
    /// stream.
    pub fn write_vectored_to(
        &mut self,
        io: &mut impl Write,
        bufs: &[io::IoSlice<'_>],
    ) -> io::Result<usize> {
        match self.write_pending_to(io) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let n = self.conn.writer().write_vectored(bufs)?;
        match self.write_pending_to(io) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => {}
            Err(e) => return Err(e),
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Writes the ciphertext the session holds until none is left
    /// (returns the write calls made) or the socket would block
    /// (`WouldBlock`).
    pub fn write_pending(&mut self, ch: &Channel) -> io::Result<usize> {
        self.write_pending_to(&mut Io(ch))
    }

    /// [`write_pending`](Self::write_pending) to any non-blocking byte
    /// stream.
    pub fn write_pending_to(&mut self, io: &mut impl Write) -> io::Result<usize> {
        let mut calls = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(io)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                _ => calls += 1,
            }
        }
        Ok(calls)
    }

    /// Ciphertext waits to be written (a handshake message, an alert, or
    /// records the socket did not take).
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Gives back the buffer of ciphertext read ahead if it holds nothing:
    /// for a session that has gone idle (its driver shrinks its rings).
    pub fn release_idle(&mut self) {
        self.ahead.release_idle();
    }

    /// Decrypted bytes, or ciphertext read ahead of rustls, wait to be
    /// read: the socket may never become readable for them, so the driver
    /// reads before it waits.
    pub fn has_input(&self) -> bool {
        self.plaintext > 0 || self.ahead.held() > 0
    }

    /// The site the peer's certificate names, once the TLS handshake
    /// verified it (chain, validity, exactly one site name); `None` before.
    pub fn peer_site(&self) -> Option<SiteId> {
        self.peer
    }

    /// The TLS handshake is still running.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether `e` (from [`read`](Self::read) or a write) is TLS refusing
    /// the peer or its records, not the socket failing: what it said.
    pub fn refusal(e: &io::Error) -> Option<String> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<Refused>())
            .map(|t| t.to_string())
    }
}
