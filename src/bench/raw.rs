//! The raw tokio TCP baseline every sitenet figure is compared with, in the
//! same run: length-prefixed frames (`u32` little-endian length, payload),
//! `TCP_NODELAY` on both ends, reads into one large buffer with every
//! complete frame handled in one pass, and batched writes. A fair,
//! reasonably tuned baseline, not a strawman.
//!
//! A connection starts with one mode byte:
//!
//! - `E` — echo every frame back;
//! - `S` — sink: count frames; a frame whose length field is `u32::MAX`
//!   asks for the count, answered by a 16-byte frame `count: u64 LE,
//!   bytes: u64 LE`;
//! - `H` — head-of-line: frames of at least [`MIXED_SINK_FROM`] bytes are
//!   sunk, smaller ones echoed (a small frame written right after a big
//!   one comes back once the big one has crossed: TCP has one lane).
//!
//! The `raw_tcp` example is a command line over this module.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Connection mode byte: echo every frame.
pub const MODE_ECHO: u8 = b'E';
/// Connection mode byte: count frames, answer `SYNC` with the count.
pub const MODE_SINK: u8 = b'S';
/// Connection mode byte: sink big frames, echo small ones.
pub const MODE_MIXED: u8 = b'H';
/// In mode `H`, frames of at least this many bytes are sunk.
pub const MIXED_SINK_FROM: usize = 1024;
/// Length field of the sink's "how many did you get?" frame (no payload).
pub const SYNC: u32 = u32::MAX;
/// Largest payload either side accepts.
pub const MAX_FRAME: usize = 1 << 30;
/// Size of the read buffer (grown when a frame is bigger).
const READ_BUF: usize = 256 * 1024;
/// Streams write once this many bytes are batched.
const SEND_BATCH: usize = 64 * 1024;

fn protocol_error(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

/// Makes room for the next read: at least a quarter of the read buffer, and
/// the whole of a partly received frame.
fn make_room(buf: &mut BytesMut) {
    let mut want = READ_BUF / 4;
    if buf.len() >= 4 {
        let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
        if len != SYNC && (len as usize) <= MAX_FRAME {
            want = want.max(4 + len as usize - buf.len().min(4 + len as usize));
        }
    }
    if buf.capacity() - buf.len() < want {
        buf.reserve(want.max(READ_BUF));
    }
}

// ---------------------------------------------------------------- server

/// Binds `listen` (`HOST:PORT`), calls `bound` with the real address, and
/// serves connections for ever on a current-thread runtime.
pub fn serve_forever(listen: &str, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let l = TcpListener::bind(listen).await?;
        bound(l.local_addr()?);
        accept_loop(l).await;
        Ok(())
    })
}

/// Starts a server on its own thread (its own current-thread runtime) and
/// returns its address. It serves until the process ends.
pub fn spawn_server_thread() -> io::Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<SocketAddr>>();
    std::thread::Builder::new()
        .name("raw-tcp-server".into())
        .spawn(move || {
            let tx2 = tx.clone();
            if let Err(e) = serve_forever("127.0.0.1:0", move |a| {
                let _ = tx2.send(Ok(a));
            }) {
                let _ = tx.send(Err(e));
            }
        })?;
    rx.recv()
        .map_err(|_| io::Error::other("the server thread died"))?
}

/// Accepts connections for ever, serving each on a task of the current
/// (single-threaded) runtime.
pub async fn accept_loop(l: TcpListener) {
    loop {
        match l.accept().await {
            Ok((s, peer)) => {
                tokio::spawn(async move {
                    if let Err(e) = serve(s).await {
                        tracing::warn!(%peer, error = %e, "raw tcp server: connection failed");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "raw tcp server: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One connection: reads a mode byte, then frames until EOF. Every complete
/// frame in the read buffer is handled in one pass; the replies of a pass
/// are written with one `write_all`.
async fn serve(mut s: TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut mode = [0u8; 1];
    s.read_exact(&mut mode).await?;
    let mode = mode[0];
    if ![MODE_ECHO, MODE_SINK, MODE_MIXED].contains(&mode) {
        return Err(protocol_error(format!("unknown mode byte {mode:#04x}")));
    }
    let mut inbuf = BytesMut::with_capacity(READ_BUF);
    let mut out: Vec<u8> = Vec::with_capacity(READ_BUF);
    let (mut count, mut bytes) = (0u64, 0u64);
    loop {
        make_room(&mut inbuf);
        if s.read_buf(&mut inbuf).await? == 0 {
            if !inbuf.is_empty() {
                return Err(protocol_error(format!(
                    "closed in the middle of a frame ({} bytes pending)",
                    inbuf.len()
                )));
            }
            return Ok(());
        }
        let mut pos = 0;
        while inbuf.len() - pos >= 4 {
            let len = u32::from_le_bytes(inbuf[pos..pos + 4].try_into().expect("4 bytes"));
            if len == SYNC {
                if mode != MODE_SINK {
                    return Err(protocol_error("sync frame outside a sink connection"));
                }
                out.extend_from_slice(&16u32.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
                pos += 4;
                continue;
            }
            let len = len as usize;
            if len > MAX_FRAME {
                return Err(protocol_error(format!(
                    "frame of {len} bytes exceeds {MAX_FRAME}"
                )));
            }
            if inbuf.len() - pos - 4 < len {
                break;
            }
            let echo = mode == MODE_ECHO || (mode == MODE_MIXED && len < MIXED_SINK_FROM);
            if echo {
                out.extend_from_slice(&inbuf[pos..pos + 4 + len]);
            } else {
                count += 1;
                bytes += len as u64;
            }
            pos += 4 + len;
        }
        inbuf.advance(pos);
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
    }
}

// ---------------------------------------------------------------- client

/// Connects to `addr` (`HOST:PORT`) within `timeout` and announces `mode`.
pub async fn connect(addr: &str, timeout: Duration, mode: u8) -> io::Result<TcpStream> {
    let mut s = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection to {addr} within {timeout:?}"),
            ))
        }
    };
    s.set_nodelay(true)?;
    s.write_all(&[mode]).await?;
    Ok(s)
}

/// Reads until `buf` starts with one complete frame; returns its payload
/// length (the frame is `buf[..4 + len]`, left in place).
async fn read_frame(s: &mut TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        if buf.len() >= 4 {
            let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_FRAME {
                return Err(protocol_error(format!(
                    "received a frame of {len} bytes (more than {MAX_FRAME}): \
                     is the peer a raw_tcp server?"
                )));
            }
            if buf.len() >= 4 + len {
                return Ok(len);
            }
        }
        make_room(buf);
        if s.read_buf(buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
    }
}

/// `count` round trips of `size` bytes, one outstanding at a time, after
/// one untimed warm-up round trip. Returns their times in nanoseconds.
pub async fn rtt(
    addr: &str,
    count: u64,
    size: usize,
    timeout: Duration,
) -> io::Result<Histogram<u64>> {
    let mut s = connect(addr, timeout, MODE_ECHO).await?;
    let mut frame = Vec::with_capacity(4 + size);
    frame.extend_from_slice(&(size as u32).to_le_bytes());
    frame.resize(4 + size, 0xA5);
    let mut inbuf = BytesMut::with_capacity(READ_BUF.max(4 + size));
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    for seq in 0..=count {
        if size >= 8 {
            frame[4..12].copy_from_slice(&seq.to_le_bytes());
        }
        let t = Instant::now();
        s.write_all(&frame).await?;
        let len = read_frame(&mut s, &mut inbuf).await?;
        let elapsed = t.elapsed();
        let echoed_seq = if size >= 8 {
            u64::from_le_bytes(inbuf[4..12].try_into().expect("8 bytes"))
        } else {
            seq
        };
        if len != size || echoed_seq != seq {
            return Err(protocol_error(format!(
                "echo mismatch: sent seq {seq} size {size}, got seq {echoed_seq} size {len}"
            )));
        }
        inbuf.advance(4 + len);
        if seq > 0 {
            hist.record(elapsed.as_nanos() as u64).expect("in range");
        }
    }
    Ok(hist)
}

/// Streams `count` frames of `size` bytes one way, as fast as batched
/// writes go, then one round trip confirms the server counted them all.
/// Returns the time from the first write to that confirmation.
pub async fn stream(
    addr: &str,
    count: u64,
    size: usize,
    timeout: Duration,
) -> io::Result<Duration> {
    let mut s = connect(addr, timeout, MODE_SINK).await?;
    let payload = vec![0x5Au8; size];
    let header = (size as u32).to_le_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(SEND_BATCH + 4 + size.min(SEND_BATCH));
    let t = Instant::now();
    for _ in 0..count {
        out.extend_from_slice(&header);
        if size >= SEND_BATCH {
            // Big frames go straight from their buffer, no copy.
            s.write_all(&out).await?;
            out.clear();
            s.write_all(&payload).await?;
            continue;
        }
        out.extend_from_slice(&payload);
        if out.len() >= SEND_BATCH {
            s.write_all(&out).await?;
            out.clear();
        }
    }
    out.extend_from_slice(&SYNC.to_le_bytes());
    s.write_all(&out).await?;
    let mut inbuf = BytesMut::with_capacity(64);
    let len = read_frame(&mut s, &mut inbuf).await?;
    let elapsed = t.elapsed();
    if len != 16 {
        return Err(protocol_error(format!(
            "the sync reply has {len} bytes, expected 16 (is it a raw_tcp server?)"
        )));
    }
    let got = u64::from_le_bytes(inbuf[4..12].try_into().expect("8 bytes"));
    let got_bytes = u64::from_le_bytes(inbuf[12..20].try_into().expect("8 bytes"));
    if got != count || got_bytes != count * size as u64 {
        return Err(protocol_error(format!(
            "the server counted {got} messages ({got_bytes} bytes), sent {count} ({} bytes)",
            count * size as u64
        )));
    }
    Ok(elapsed)
}

/// Writes a frame of `big` bytes and, right after it, one of `small`
/// bytes; returns how long after the small frame was handed to the socket
/// its echo came back (TCP delivers it after the whole big frame).
pub async fn head_of_line(
    addr: &str,
    big: usize,
    small: usize,
    timeout: Duration,
) -> io::Result<Duration> {
    assert!(big >= MIXED_SINK_FROM && small < MIXED_SINK_FROM);
    let mut s = connect(addr, timeout, MODE_MIXED).await?;
    let mut frames = Vec::with_capacity(8 + big + small);
    frames.extend_from_slice(&(big as u32).to_le_bytes());
    frames.resize(4 + big, 0x11);
    frames.extend_from_slice(&(small as u32).to_le_bytes());
    frames.resize(8 + big + small, 0x22);
    let (mut rd, mut wr) = s.split();
    // The small frame is handed over with the big one, behind it: its
    // delay runs from then.
    let t = Instant::now();
    let write = wr.write_all(&frames);
    let mut inbuf = BytesMut::with_capacity(READ_BUF);
    let read = async {
        loop {
            make_room(&mut inbuf);
            if rd.read_buf(&mut inbuf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            if inbuf.len() >= 4 + small {
                return Ok::<_, io::Error>(t.elapsed());
            }
        }
    };
    let (w, r) = tokio::join!(write, read);
    w?;
    r
}
