//! [`TransObject`]: one channel with its two ByteBuffers, and the one
//! implementation of moving bytes between the socket and the rings.
//!
//! A TransObject is the unit of transport resources: one descriptor and
//! `2 × buffer size` bytes of rings, known in advance (docs/architecture.md, "The design": no
//! FramedRead/FramedWrite, whose buffers grow). The handshake functions own
//! one by value until the channel belongs to a ComObject; the ComObject then
//! owns it and can give it up whole — the unit the fd-slot controller will
//! lease.

use std::io;
use std::sync::Arc;

use sitenet_protocols::{ByteBuffer, SiteId};
use sitenet_transport::tls::TlsSession;
use sitenet_transport::{Channel, SlotLease};

/// What one non-blocking read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadStatus {
    /// Bytes were appended to the input ring.
    Read(usize),
    /// The input ring is full: nothing was read (consume first).
    RingFull,
    /// Nothing to read now.
    WouldBlock,
    /// The peer closed its end.
    Eof,
}

/// What one turn of writing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteStatus {
    /// Bytes written to the socket.
    pub(crate) written: usize,
    /// Write calls that moved bytes.
    pub(crate) calls: usize,
    /// The socket would block with bytes still in the output ring.
    pub(crate) blocked: bool,
}

/// How many bytes of large bodies the output buffer may queue by reference
/// (`ByteBuffer::with_shared`): two maximum frames, so a 64 KiB message goes
/// out in one vectored write, while a message scheduled next waits behind
/// at most this much (40 µs at 3 GB/s). `sitenet bench` measured 4.1 GB/s
/// of bulk with 128 KiB against 3.3 GB/s with 256 KiB (the pieces stay in
/// the caches, presumably; not profiled).
pub(crate) const OUT_SHARED_LIMIT: usize = 128 << 10;

/// At most this many slices per vectored write (well under any `IOV_MAX`).
const MAX_IO_SLICES: usize = 64;

/// A channel and its two rings.
pub(crate) struct TransObject {
    /// Shared with the readiness futures spawned for it.
    ch: Arc<Channel>,
    /// Bytes read from the socket, not yet consumed by the session.
    pub(crate) inb: ByteBuffer,
    /// Frames marshaled by the session, not yet written.
    pub(crate) outb: ByteBuffer,
    peer: String,
    /// The channel slot this channel occupies (given back when the
    /// TransObject is dropped, i.e. when the channel closes).
    pub(crate) lease: Option<SlotLease>,
    /// TLS over the channel (a `tls:` address): rustls's engine, pumped by
    /// the same non-blocking reads and writes as a plain channel.
    tls: Option<Box<TlsSession>>,
}

impl std::fmt::Debug for TransObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransObject")
            .field("peer", &self.peer)
            .field("in", &self.inb.len())
            .field("out", &self.outb.len())
            .finish()
    }
}

impl TransObject {
    /// A channel with rings of `size` bytes each way, in the slot `lease`.
    pub(crate) fn new(ch: Channel, size: usize, lease: Option<SlotLease>) -> Self {
        let peer = ch.peer();
        Self {
            ch: Arc::new(ch),
            inb: ByteBuffer::new(size),
            outb: ByteBuffer::with_shared(size, OUT_SHARED_LIMIT),
            peer,
            lease,
            tls: None,
        }
    }

    /// Runs TLS over the channel from now on (before any byte moved).
    pub(crate) fn start_tls(&mut self, session: TlsSession) {
        self.tls = Some(Box::new(session));
    }

    /// The site the peer's certificate names, once TLS verified it; `None`
    /// on a plain channel or before the TLS handshake finished.
    pub(crate) fn certified_peer(&self) -> Option<SiteId> {
        self.tls.as_ref().and_then(|t| t.peer_site())
    }

    /// Whether the channel runs TLS.
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Bytes wait to be written: in the output buffer, or (TLS) encrypted
    /// in the session. The driver keeps writing, and waits for the socket,
    /// until this is false.
    pub(crate) fn out_pending(&self) -> bool {
        !self.outb.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Input waits that the socket's readiness will not announce (TLS:
    /// decrypted bytes the input ring had no room for): read before
    /// waiting.
    pub(crate) fn input_buffered(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.has_input())
    }

    /// See [`Channel::connector_thread`].
    pub(crate) fn connector_thread(&self) -> Option<std::thread::ThreadId> {
        self.ch.connector_thread()
    }

    /// The peer's address, for logs and fault reports.
    pub(crate) fn peer(&self) -> &str {
        &self.peer
    }

    /// Moves the channel to the I/O driver of the thread this is called on
    /// (see `Channel::rehome`): a ComObject adopting a channel accepted on
    /// another thread calls it first. Left where it is, with a warning, if
    /// a readiness future still holds the channel or the move fails: it
    /// works there too, its events crossing threads.
    pub(crate) fn rehome(&mut self) {
        let r = match Arc::get_mut(&mut self.ch) {
            Some(ch) => ch.rehome(),
            None => Err(std::io::Error::other("a readiness future holds it")),
        };
        if let Err(e) = r {
            tracing::warn!(peer = %self.peer, error = %e, "channel left on the thread that accepted it");
        }
    }

    /// The channel, for a readiness future.
    pub(crate) fn channel(&self) -> Arc<Channel> {
        self.ch.clone()
    }

    /// Bytes both rings hold in memory.
    pub(crate) fn ring_bytes(&self) -> u64 {
        (self.inb.capacity() + self.outb.capacity()) as u64
    }

    /// Replaces both rings by rings of `size`, keeping what they hold (the
    /// acceptor's handshake runs on small rings; full-size ones are
    /// allocated only once the link decision accepted the channel).
    pub(crate) fn resize(&mut self, size: usize) {
        self.resize_in(size);
        self.resize_out(size);
    }

    /// Replaces the input ring by one of `size` bytes (at least what it
    /// holds), keeping its contents. Returns the change in ring bytes.
    pub(crate) fn resize_in(&mut self, size: usize) -> i64 {
        if let Some(t) = self.tls.as_mut() {
            t.release_idle();
        }
        self.inb.resize(size)
    }

    /// The same for the output ring.
    pub(crate) fn resize_out(&mut self, size: usize) -> i64 {
        self.outb.resize(size)
    }

    /// Closes the channel after a final frame (LEAVING, CLOSE_HARD, a
    /// final ack) without losing it: writes what the output ring still
    /// holds, ends the writing direction, then reads and discards until
    /// the peer closes, at most `within`. Dropping a TCP socket with unread
    /// input makes the kernel send a reset and discard what it had not
    /// yet transmitted — a peer flooding us then never reads the frame
    /// that says why we went (a graceful shutdown looked like a crash
    /// about one run in four in
    /// `tests/cli.rs::send_exits_1_on_a_new_incarnation_a_shutdown_or_after_give_up`).
    /// The descriptor and the slot lease are held until then. TCP (TLS
    /// included) needs it: a Unix or mem channel delivers what was
    /// written into the peer's side at once, and is dropped now. A
    /// plugged transport's channel lingers too: sitenet cannot know what
    /// its drop discards.
    pub(crate) async fn linger_close(mut self, within: std::time::Duration) {
        if matches!(self.ch.scheme(), "unix" | "mem") {
            return;
        }
        let _ = tokio::time::timeout(within, async {
            while self.out_pending() {
                if self.ch.writable().await.is_err() || self.write_some(usize::MAX).is_err() {
                    return;
                }
            }
            if self.ch.shutdown_write().is_err() {
                return;
            }
            let mut scratch = vec![0u8; 16 * 1024];
            loop {
                if self.ch.readable().await.is_err() {
                    return;
                }
                match self.ch.try_read(&mut scratch) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        })
        .await;
    }

    /// The transport the channel runs: `tls` when TLS runs over it, else
    /// the channel's scheme (`tcp`, `unix`, `mem`, or a plugged
    /// transport's).
    pub(crate) fn transport(&self) -> &'static str {
        if self.tls.is_some() {
            "tls"
        } else {
            self.ch.scheme()
        }
    }

    /// One non-blocking read into the input ring.
    pub(crate) fn read_once(&mut self) -> io::Result<ReadStatus> {
        let spare = self.inb.spare_mut();
        if spare.is_empty() {
            return Ok(ReadStatus::RingFull);
        }
        let st = Self::read(&self.ch, self.tls.as_deref_mut(), spare)?;
        if let ReadStatus::Read(n) = st {
            self.inb.commit(n);
        }
        Ok(st)
    }

    /// One non-blocking read into `target` (a fragment's place in its
    /// message, for zero-copy receive) instead of the input ring.
    pub(crate) fn read_into(&mut self, target: &mut [u8]) -> io::Result<ReadStatus> {
        Self::read(&self.ch, self.tls.as_deref_mut(), target)
    }

    /// One non-blocking read into `buf` (through TLS if the channel runs
    /// it), as a status.
    fn read(ch: &Channel, tls: Option<&mut TlsSession>, buf: &mut [u8]) -> io::Result<ReadStatus> {
        let r = match tls {
            Some(t) => t.read(ch, buf),
            None => ch.try_read(buf),
        };
        match r {
            Ok(0) => Ok(ReadStatus::Eof),
            Ok(n) => {
                crate::idle_spin::note_io();
                Ok(ReadStatus::Read(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(ReadStatus::WouldBlock),
            Err(e) => Err(e),
        }
    }

    /// Writes from the output buffer (ring bytes and the large bodies it
    /// holds by reference, with vectored writes) until it is empty, the socket would
    /// block, or `budget` bytes were written.
    pub(crate) fn write_some(&mut self, budget: usize) -> io::Result<WriteStatus> {
        let mut st = WriteStatus {
            written: 0,
            calls: 0,
            blocked: false,
        };
        while st.written < budget {
            if self.outb.is_empty() {
                // TLS: records the socket has not taken yet.
                if let Some(t) = self.tls.as_mut().filter(|t| t.wants_write()) {
                    match t.write_pending(&self.ch) {
                        Ok(calls) => st.calls += calls,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => st.blocked = true,
                        Err(e) => return Err(e),
                    }
                }
                break;
            }
            // At most what is left of the budget in this call.
            let mut slices = [io::IoSlice::new(&[]); MAX_IO_SLICES];
            let k = self.outb.io_slices(&mut slices, budget - st.written);
            let w = match self.tls.as_mut() {
                Some(t) => t.write_vectored(&self.ch, &slices[..k]),
                None => self.ch.try_write_vectored(&slices[..k]),
            };
            match w {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    crate::idle_spin::note_io();
                    self.outb.consume(n);
                    st.written += n;
                    st.calls += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.blocked = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(st)
    }

    /// Writes the whole output ring (and, TLS, what the session holds),
    /// waiting for the socket as needed.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        while self.out_pending() {
            self.ch.writable().await?;
            self.write_some(usize::MAX)?;
        }
        Ok(())
    }

    /// Waits until something was read into the input ring; `Ok(false)` on
    /// end of stream. Returns at once if the ring is full. TLS handshake
    /// messages waiting to go out are written first (the peer waits for
    /// them before it sends anything).
    pub(crate) async fn fill(&mut self) -> io::Result<bool> {
        loop {
            if self.is_tls() && self.out_pending() {
                self.flush().await?;
            }
            if !self.input_buffered() {
                self.ch.readable().await?;
            }
            match self.read_once()? {
                ReadStatus::Read(_) | ReadStatus::RingFull => return Ok(true),
                ReadStatus::Eof => return Ok(false),
                ReadStatus::WouldBlock => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected loopback pair: our channel and the peer's socket.
    async fn pair() -> (Channel, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        (Channel::Tcp(c.unwrap()), s.unwrap().0)
    }

    /// A write turn writes at most its budget, however much the socket
    /// would take, so a 256 MiB message to a fast peer does not hold the
    /// thread without yielding.
    #[tokio::test]
    async fn a_write_turn_stops_at_its_budget() {
        let (ch, mut peer) = pair().await;
        let mut t = TransObject::new(ch, 1 << 20, None);
        let data = vec![7u8; (1 << 20) - 1];
        t.outb.push(&data);
        let budget = 64 * 1024;
        let mut turns = 0;
        let mut total = 0;
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = vec![0u8; 1 << 16];
            while got < (1 << 20) - 1 {
                use tokio::io::AsyncReadExt;
                got += peer.read(&mut buf).await.unwrap();
            }
            got
        });
        while !t.outb.is_empty() {
            t.ch.writable().await.unwrap();
            let st = t.write_some(budget).unwrap();
            assert!(st.written <= budget, "turn wrote {} > {budget}", st.written);
            total += st.written;
            turns += 1;
        }
        assert_eq!(total, data.len());
        assert!(turns >= data.len() / budget, "{turns} turns");
        assert_eq!(reader.await.unwrap(), data.len());
    }

    #[tokio::test]
    async fn resize_keeps_what_the_rings_hold() {
        let (ch, _peer) = pair().await;
        let mut t = TransObject::new(ch, 4096, None);
        t.inb.push(b"left over from the handshake");
        t.outb.push(b"answer");
        t.resize(65_536);
        assert_eq!(t.inb.capacity(), 65_536);
        assert_eq!(t.outb.capacity(), 65_536);
        let (a, b) = t.inb.chunks();
        assert_eq!([a, b].concat(), b"left over from the handshake");
        let (a, b) = t.outb.chunks();
        assert_eq!([a, b].concat(), b"answer");
        assert_eq!(t.ring_bytes(), 2 * 65_536);
    }
}
