//! # raw_tcp — the raw tokio TCP baseline for every sitenet measurement
//!
//! sitenet is only worth its protocol (handshakes, acks, priorities,
//! fragmentation, reconnects) if it costs little over what plain TCP gives on
//! the same machine. Numbers from another day or another machine mean
//! nothing, so every sitenet figure is compared with this program measured
//! **in the same run**: a raw tokio TCP echo server and client doing the same
//! workloads as `sitenet ping`, with nothing on top but length-prefixed
//! frames.
//!
//! It is a fair, reasonably tuned baseline, not a strawman:
//!
//! * frames are `u32` little-endian length + payload;
//! * `TCP_NODELAY` on both ends;
//! * reads go into one large buffer (256 KiB, grown for bigger frames), and
//!   every complete frame in it is handled in one pass;
//! * writes are batched: replies (or, for `send`, outgoing frames up to
//!   64 KiB) are accumulated into one buffer and written with one `write_all`;
//! * threads as in `sitenet ping`: the client runs on one current-thread tokio
//!   runtime, the server on its own current-thread runtime.
//!
//! A connection starts with one mode byte: `E` (echo every frame back) or
//! `S` (sink: count frames; a frame whose length field is `u32::MAX` asks for
//! the count, answered by a 16-byte frame `count: u64 LE, bytes: u64 LE`).
//!
//! ## Workloads
//!
//! * `ping` — COUNT round trips of SIZE bytes, one outstanding at a time, after
//!   one untimed warm-up round trip (as `sitenet ping`). Reports min/p50/p99/
//!   max/mean in µs from an hdrhistogram; `--json` prints the same keys as
//!   `sitenet ping --json`: `count, size, min_us, p50_us, p99_us, max_us,
//!   mean_us` (there is no `site_id`: raw TCP has no sites).
//! * `send` — COUNT messages of SIZE bytes streamed one way as fast as
//!   possible (batched writes), counted by the server, then one final round
//!   trip confirms the server saw them all. Reports `count, size,
//!   msgs_per_sec` (and `mb_per_sec`, `elapsed_ms`).
//!
//! ## Running
//!
//! Two processes, as sitenet's `node` + `ping` (build first so the server
//! starts at once):
//!
//! ```text
//! cargo build --release --example raw_tcp
//! ./target/release/examples/raw_tcp server --listen 127.0.0.1:0 &
//! #   -> {"listen":"127.0.0.1:PORT"}   (first stdout line; serves until killed)
//! ./target/release/examples/raw_tcp ping 127.0.0.1:PORT --count 10000 --size 64 --json
//! ./target/release/examples/raw_tcp send 127.0.0.1:PORT --count 1000000 --size 64 --json
//! kill %1
//! ```
//!
//! and the sitenet side in the same run:
//!
//! ```text
//! ./target/release/sitenet node --listen tcp:127.0.0.1:0 &
//! ./target/release/sitenet ping tcp:127.0.0.1:PORT --count 10000 --size 64 --json
//! ```
//!
//! One process (the server on its own thread, for quick runs):
//!
//! ```text
//! cargo run --release --example raw_tcp -- both --count 2000 --size 64 --json
//! cargo run --release --example raw_tcp -- both --workload send --count 1000000 --size 64
//! ```
//!
//! Addresses may be written `HOST:PORT` or, as for sitenet, `tcp:HOST:PORT`.
//! Exit codes: 0 success, 1 failure (connection refused, timeout, a wrong
//! echo), 2 usage errors and malformed addresses.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use clap::{Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Connection mode byte: echo every frame.
const MODE_ECHO: u8 = b'E';
/// Connection mode byte: count frames, answer `SYNC` with the count.
const MODE_SINK: u8 = b'S';
/// Length field of the sink's "how many did you get?" frame (no payload).
const SYNC: u32 = u32::MAX;
/// Largest payload either side accepts.
const MAX_FRAME: usize = 1 << 30;
/// Size of the read buffer (grown when a frame is bigger).
const READ_BUF: usize = 256 * 1024;
/// `send` writes once this many bytes are batched.
const SEND_BATCH: usize = 64 * 1024;

#[derive(Parser)]
#[command(
    name = "raw_tcp",
    about = "Raw tokio TCP baseline (length-prefixed frames) for sitenet comparisons"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve echo and sink connections. Prints {"listen": "HOST:PORT"} as its
    /// first stdout line, then serves until killed.
    Server {
        /// Address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Round trips to a server, one outstanding at a time.
    Ping {
        /// The server's address, HOST:PORT (or tcp:HOST:PORT).
        addr: String,
        #[command(flatten)]
        opts: Opts,
    },
    /// Stream messages one way as fast as possible, then confirm the count.
    Send {
        /// The server's address, HOST:PORT (or tcp:HOST:PORT).
        addr: String,
        #[command(flatten)]
        opts: Opts,
    },
    /// Start a server in this process on its own thread and run a workload
    /// against it.
    Both {
        /// Which workload to run.
        #[arg(long, value_enum, default_value_t = Workload::Ping)]
        workload: Workload,
        #[command(flatten)]
        opts: Opts,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    Ping,
    Send,
}

#[derive(clap::Args, Clone, Copy)]
struct Opts {
    /// Number of round trips (ping) or messages (send).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the connection to be established.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

/// Why a command failed, and so its exit code.
enum Fail {
    /// Exit code 2.
    Usage(String),
    /// Exit code 1.
    Failure(String),
}

impl Fail {
    fn exit(self) -> ExitCode {
        match self {
            Fail::Usage(m) => {
                eprintln!("raw_tcp: {m}");
                ExitCode::from(2)
            }
            Fail::Failure(m) => {
                eprintln!("raw_tcp: {m}");
                ExitCode::from(1)
            }
        }
    }
}

/// The result of `ping`: the JSON keys of `sitenet ping --json`.
#[derive(Debug, Serialize)]
struct PingResult {
    count: u64,
    size: usize,
    min_us: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
}

/// The result of `send`.
#[derive(Debug, Serialize)]
struct SendResult {
    count: u64,
    size: usize,
    msgs_per_sec: f64,
    mb_per_sec: f64,
    elapsed_ms: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Server { listen } => run_server(&listen),
        Cmd::Ping { addr, opts } => {
            check(&opts).and_then(|()| run_client(&parse_addr(&addr)?, Workload::Ping, opts))
        }
        Cmd::Send { addr, opts } => {
            check(&opts).and_then(|()| run_client(&parse_addr(&addr)?, Workload::Send, opts))
        }
        Cmd::Both { workload, opts } => check(&opts).and_then(|()| run_both(workload, opts)),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

fn check(o: &Opts) -> Result<(), Fail> {
    if o.count == 0 {
        return Err(Fail::Usage("--count must be at least 1".into()));
    }
    if o.size > MAX_FRAME {
        return Err(Fail::Usage(format!(
            "--size {} exceeds the largest frame ({MAX_FRAME} bytes)",
            o.size
        )));
    }
    if !(o.timeout.is_finite() && o.timeout > 0.0) {
        return Err(Fail::Usage(format!(
            "--timeout must be a positive number of seconds, got {}",
            o.timeout
        )));
    }
    Ok(())
}

/// `HOST:PORT` or `tcp:HOST:PORT` → `HOST:PORT` (resolved when connecting).
fn parse_addr(a: &str) -> Result<String, Fail> {
    let s = a.strip_prefix("tcp:").unwrap_or(a);
    let bad = || {
        Fail::Usage(format!(
            "malformed address {a:?}: expected HOST:PORT or tcp:HOST:PORT"
        ))
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(s.to_string())
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime, Fail> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::Failure(format!("cannot start a tokio runtime: {e}")))
}

// ---------------------------------------------------------------- server

fn run_server(listen: &str) -> Result<(), Fail> {
    let addr = parse_addr(listen)?;
    let rt = current_thread_runtime()?;
    rt.block_on(async {
        let l = TcpListener::bind(&addr)
            .await
            .map_err(|e| Fail::Failure(format!("cannot listen on {addr}: {e}")))?;
        let local = l
            .local_addr()
            .map_err(|e| Fail::Failure(format!("cannot listen on {addr}: {e}")))?;
        println!("{}", serde_json::json!({ "listen": local.to_string() }));
        let _ = io::stdout().flush();
        accept_loop(l).await;
        Ok(())
    })
}

/// Accepts connections for ever, serving each on a task of the current
/// (single-threaded) runtime.
async fn accept_loop(l: TcpListener) {
    loop {
        match l.accept().await {
            Ok((s, peer)) => {
                tokio::spawn(async move {
                    if let Err(e) = serve(s).await {
                        eprintln!("raw_tcp server: connection from {peer}: {e}");
                    }
                });
            }
            Err(e) => {
                eprintln!("raw_tcp server: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn protocol_error(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

/// Makes room for the next read: at least a quarter of `READ_BUF`, and the
/// whole of a partly received frame.
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

/// One connection: reads a mode byte, then frames until EOF. Every complete
/// frame in the read buffer is handled in one pass; the replies of a pass
/// are written with one `write_all`.
async fn serve(mut s: TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut mode = [0u8; 1];
    s.read_exact(&mut mode).await?;
    let mode = mode[0];
    if mode != MODE_ECHO && mode != MODE_SINK {
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
                    return Err(protocol_error("sync frame on an echo connection"));
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
            if mode == MODE_ECHO {
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

/// Starts a server on its own thread (with its own current-thread runtime)
/// and returns its address.
fn spawn_server_thread() -> Result<String, Fail> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<String, String>>();
    std::thread::Builder::new()
        .name("raw-tcp-server".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot start a tokio runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let l = match TcpListener::bind("127.0.0.1:0").await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(format!("cannot listen on 127.0.0.1:0: {e}")));
                        return;
                    }
                };
                let addr = l
                    .local_addr()
                    .map(|a| a.to_string())
                    .map_err(|e| e.to_string());
                let _ = tx.send(addr);
                accept_loop(l).await;
            });
        })
        .map_err(|e| Fail::Failure(format!("cannot start the server thread: {e}")))?;
    rx.recv()
        .map_err(|_| Fail::Failure("the server thread died".into()))?
        .map_err(Fail::Failure)
}

fn run_both(workload: Workload, opts: Opts) -> Result<(), Fail> {
    let addr = spawn_server_thread()?;
    run_client(&addr, workload, opts)
}

// ---------------------------------------------------------------- client

fn run_client(addr: &str, workload: Workload, o: Opts) -> Result<(), Fail> {
    let rt = current_thread_runtime()?;
    let timeout = Duration::from_secs_f64(o.timeout);
    match workload {
        Workload::Ping => {
            let r = rt.block_on(ping(addr, o.count, o.size, timeout))?;
            if o.json {
                println!("{}", serde_json::to_string(&r).expect("serialisable"));
            } else {
                println!(
                    "{} round trips of {} bytes to {addr} (raw tcp): min {:.1} µs, p50 {:.1} µs, \
                     p99 {:.1} µs, max {:.1} µs, mean {:.1} µs",
                    r.count, r.size, r.min_us, r.p50_us, r.p99_us, r.max_us, r.mean_us
                );
            }
        }
        Workload::Send => {
            let r = rt.block_on(send(addr, o.count, o.size, timeout))?;
            if o.json {
                println!("{}", serde_json::to_string(&r).expect("serialisable"));
            } else {
                println!(
                    "{} messages of {} bytes to {addr} (raw tcp): {:.0} msg/s, {:.1} MB/s, {:.1} ms",
                    r.count, r.size, r.msgs_per_sec, r.mb_per_sec, r.elapsed_ms
                );
            }
        }
    }
    Ok(())
}

async fn connect(addr: &str, timeout: Duration, mode: u8) -> Result<TcpStream, Fail> {
    let s = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Fail::Failure(format!("{addr} unreachable: {e}"))),
        Err(_) => {
            return Err(Fail::Failure(format!(
                "{addr} unreachable: no connection within {timeout:?}"
            )))
        }
    };
    let io_fail = |e: io::Error| Fail::Failure(format!("{addr}: {e}"));
    s.set_nodelay(true).map_err(io_fail)?;
    let mut s = s;
    s.write_all(&[mode]).await.map_err(io_fail)?;
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

async fn ping(addr: &str, count: u64, size: usize, timeout: Duration) -> Result<PingResult, Fail> {
    let mut s = connect(addr, timeout, MODE_ECHO).await?;
    let io_fail = |e: io::Error| Fail::Failure(format!("ping {addr}: {e}"));
    let mut frame = Vec::with_capacity(4 + size);
    frame.extend_from_slice(&(size as u32).to_le_bytes());
    frame.resize(4 + size, 0xA5);
    let mut inbuf = BytesMut::with_capacity(READ_BUF.max(4 + size));
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    // One untimed warm-up round trip, as `sitenet ping`.
    for seq in 0..=count {
        if size >= 8 {
            frame[4..12].copy_from_slice(&seq.to_le_bytes());
        }
        let t = Instant::now();
        s.write_all(&frame).await.map_err(io_fail)?;
        let len = read_frame(&mut s, &mut inbuf).await.map_err(io_fail)?;
        let elapsed = t.elapsed();
        let echoed_seq = if size >= 8 {
            u64::from_le_bytes(inbuf[4..12].try_into().expect("8 bytes"))
        } else {
            seq
        };
        if len != size || echoed_seq != seq {
            return Err(Fail::Failure(format!(
                "echo mismatch: sent seq {seq} size {size}, got seq {echoed_seq} size {len}"
            )));
        }
        inbuf.advance(4 + len);
        if seq > 0 {
            hist.record(elapsed.as_nanos() as u64).expect("in range");
        }
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(PingResult {
        count,
        size,
        min_us: us(hist.min()),
        p50_us: us(hist.value_at_quantile(0.5)),
        p99_us: us(hist.value_at_quantile(0.99)),
        max_us: us(hist.max()),
        mean_us: hist.mean() / 1000.0,
    })
}

async fn send(addr: &str, count: u64, size: usize, timeout: Duration) -> Result<SendResult, Fail> {
    let mut s = connect(addr, timeout, MODE_SINK).await?;
    let io_fail = |e: io::Error| Fail::Failure(format!("send {addr}: {e}"));
    let payload = vec![0x5Au8; size];
    let header = (size as u32).to_le_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(SEND_BATCH + 4 + size);
    let t = Instant::now();
    for _ in 0..count {
        out.extend_from_slice(&header);
        out.extend_from_slice(&payload);
        if out.len() >= SEND_BATCH {
            s.write_all(&out).await.map_err(io_fail)?;
            out.clear();
        }
    }
    // The final round trip: the server answers once it has counted all.
    out.extend_from_slice(&SYNC.to_le_bytes());
    s.write_all(&out).await.map_err(io_fail)?;
    let mut inbuf = BytesMut::with_capacity(64);
    let len = read_frame(&mut s, &mut inbuf).await.map_err(io_fail)?;
    let elapsed = t.elapsed();
    if len != 16 {
        return Err(Fail::Failure(format!(
            "send {addr}: the sync reply has {len} bytes, expected 16 (is it a raw_tcp server?)"
        )));
    }
    let got = u64::from_le_bytes(inbuf[4..12].try_into().expect("8 bytes"));
    let got_bytes = u64::from_le_bytes(inbuf[12..20].try_into().expect("8 bytes"));
    if got != count || got_bytes != count * size as u64 {
        return Err(Fail::Failure(format!(
            "send {addr}: the server counted {got} messages ({got_bytes} bytes), sent {count} ({} bytes)",
            count * size as u64
        )));
    }
    let secs = elapsed.as_secs_f64();
    Ok(SendResult {
        count,
        size,
        msgs_per_sec: count as f64 / secs,
        mb_per_sec: (count * size as u64) as f64 / secs / 1e6,
        elapsed_ms: secs * 1e3,
    })
}
