//! Driving a channel through the open protocol before it belongs to a
//! ComObject: the initiator's connect-and-negotiate and the acceptor's
//! present-and-wait. Both own the channel by value and bound every wait by
//! the handshake timeout; the protocol itself is decided by the sans-IO
//! machines in `sitenet_protocols::handshake`.

use std::io;
use std::time::Duration;

use thiserror::Error;

use sitenet_protocols::handshake::MIN_BUFFER;
use sitenet_protocols::{
    Acceptor, ByteBuffer, Initiator, LocalInfo, Negotiate, OpenError, Opened, SiteId,
};
use sitenet_transport::{Address, Channel};

/// Why a channel did not get through its open protocol.
#[derive(Debug, Error)]
pub(crate) enum OpenFailure {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    #[error("channel failed during the handshake: {0}")]
    Io(#[from] io::Error),
    #[error("peer closed the channel during the handshake")]
    Closed,
    #[error(transparent)]
    Open(#[from] OpenError),
}

impl OpenFailure {
    pub(crate) fn permanent(&self) -> Option<&OpenError> {
        match self {
            Self::Open(e) if e.is_permanent() => Some(e),
            _ => None,
        }
    }
}

/// A channel with its two ByteBuffers.
pub(crate) struct RawChannel {
    pub(crate) ch: Channel,
    pub(crate) inb: ByteBuffer,
    pub(crate) outb: ByteBuffer,
}

async fn flush(ch: &Channel, outb: &mut ByteBuffer) -> io::Result<()> {
    while !outb.is_empty() {
        ch.writable().await?;
        let (a, b) = outb.chunks();
        match ch.try_write2(a, b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => outb.consume(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is available into `inb`; `Ok(false)` on end of stream.
async fn fill(ch: &Channel, inb: &mut ByteBuffer) -> io::Result<bool> {
    loop {
        ch.readable().await?;
        let spare = inb.spare_mut();
        if spare.is_empty() {
            return Ok(true);
        }
        match ch.try_read(spare) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                inb.commit(n);
                return Ok(true);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Connects to `addr` and runs the initiator's side of the open protocol
/// (`hs`, already told what to propose) over ByteBuffers of `buffer_size`.
pub(crate) async fn connect_and_open(
    addr: Address,
    fault: Option<sitenet_transport::FaultInjector>,
    buffer_size: u32,
    mut hs: Initiator,
    connect_timeout: Duration,
    handshake_timeout: Duration,
) -> Result<(RawChannel, Opened), (OpenFailure, Option<SiteId>)> {
    let ch = match actix_rt::time::timeout(connect_timeout, Channel::connect(&addr)).await {
        Err(_) => return Err((OpenFailure::ConnectTimeout(addr.to_string()), None)),
        Ok(Err(source)) => {
            return Err((
                OpenFailure::Connect {
                    addr: addr.to_string(),
                    source,
                },
                None,
            ))
        }
        Ok(Ok(ch)) => match &fault {
            Some(f) => f.wrap(ch),
            None => ch,
        },
    };
    let size = buffer_size as usize;
    let mut raw = RawChannel {
        ch,
        inb: ByteBuffer::new(size),
        outb: ByteBuffer::new(size),
    };
    let run = async {
        loop {
            if !fill(&raw.ch, &mut raw.inb).await? {
                return Err(OpenFailure::Closed);
            }
            let done = hs.handle_input(&mut raw.inb, &mut raw.outb)?;
            flush(&raw.ch, &mut raw.outb).await?;
            if let Some(opened) = done {
                return Ok(opened);
            }
        }
    };
    let r = actix_rt::time::timeout(handshake_timeout, run).await;
    match r {
        Err(_) => Err((OpenFailure::Open(OpenError::Timeout), hs.presented())),
        Ok(Err(e)) => Err((e, hs.presented())),
        Ok(Ok(opened)) => Ok((raw, opened)),
    }
}

/// Runs the acceptor's side up to NEGOTIATE on a freshly accepted channel.
/// The handshake uses minimum-size buffers (a flood of half-open connections
/// costs little); they are replaced by full-size ones once the peer has
/// identified itself. On failure the channel is handed back with the reason,
/// so the caller can report the fault before the peer sees the close.
pub(crate) async fn accept_until_negotiate(
    ch: Channel,
    local: LocalInfo,
    handshake_timeout: Duration,
) -> Result<(RawChannel, Negotiate), (Channel, OpenFailure)> {
    let small = MIN_BUFFER as usize;
    let mut inb = ByteBuffer::new(small);
    let mut outb = ByteBuffer::new(small);
    let mut acc = Acceptor::new(&local, &mut outb);
    let run = async {
        flush(&ch, &mut outb).await?;
        loop {
            if !fill(&ch, &mut inb).await? {
                return Err(OpenFailure::Closed);
            }
            if let Some(n) = acc.handle_input(&mut inb)? {
                return Ok(n);
            }
        }
    };
    let neg = match actix_rt::time::timeout(handshake_timeout, run).await {
        Err(_) => return Err((ch, OpenFailure::Open(OpenError::Timeout))),
        Ok(Err(e)) => return Err((ch, e)),
        Ok(Ok(n)) => n,
    };
    let size = local.buffer_size as usize;
    let mut big_in = ByteBuffer::new(size);
    let (a, b) = inb.chunks();
    big_in.push(a);
    big_in.push(b);
    Ok((
        RawChannel {
            ch,
            inb: big_in,
            outb: ByteBuffer::new(size),
        },
        neg,
    ))
}

/// Writes what is in `outb` (a refusal) and drops the channel, within `limit`.
pub(crate) async fn flush_and_close(mut raw: RawChannel, limit: Duration) {
    let _ = actix_rt::time::timeout(limit, flush(&raw.ch, &mut raw.outb)).await;
}
