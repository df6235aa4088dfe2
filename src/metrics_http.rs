//! A node's metrics over HTTP (`sitenet node --metrics tcp:HOST:PORT`):
//! `GET /metrics` answers
//! [`Node::openmetrics`](crate::Node::openmetrics) with the OpenMetrics
//! content type, any other path 404, so Prometheus (or `curl`) scrapes a
//! node directly.
//!
//! A tiny HTTP/1.1 responder, not a web server: one request per
//! connection (`Connection: close`), nothing read but the request head.
//! It is reachable by whoever reaches its address, so it is written for
//! hostile peers: the head is read into a fixed buffer
//! ([`Limits::max_head_bytes`]) within a deadline for the whole head
//! ([`Limits::head_timeout`], not per read: a peer dripping a byte at a
//! time is cut off all the same), the answer is written within
//! [`Limits::write_timeout`], and every connection is accepted at once and
//! served on a task of its own, so scrapes are answered concurrently.
//! At most [`Limits::max_connections`] connections are held at once, and
//! one source address (an IPv6 /64) holds at most
//! [`Limits::max_per_source`] of them once the server is half full: the
//! same table as the node's pending handshakes
//! (`sitenet_protocols::slots::admission`). Past a bound, the newcomer is served
//! and the oldest connection still sending its head, of the source holding
//! the most, is closed for it. Refusing the newcomer instead would let
//! connections that send nothing hold the endpoint for their whole
//! deadline, again and again; dropping the oldest silent one means an
//! honest scraper, which sends its head at once, is answered unless idle
//! connections keep arriving faster than it writes a few hundred bytes.
//! What a connection can make the server hold is therefore bounded
//! whatever it sends.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use sitenet::metrics_http::{self, Limits};
//!
//! let node = sitenet::Node::builder().listen("tcp:127.0.0.1:0").start()?;
//! let listener = metrics_http::bind("tcp:127.0.0.1:9464").await?;
//! println!("metrics: {}", metrics_http::local_address(&listener)?);
//! tokio::spawn(metrics_http::serve_node(listener, node, Limits::default()));
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sitenet_protocols::node::log_limit::{LogLimit, LogVerdict};
use sitenet_protocols::slots::admission::{Admission, AdmissionConfig, Source};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::{Address, AddressError, Node, OPENMETRICS_CONTENT_TYPE};

/// The path scrapers ask for.
pub const METRICS_PATH: &str = "/metrics";

/// What one scraping connection may cost the server: each bounds what a
/// hostile peer can hold (memory, a task, a descriptor) and for how long.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request head read (request line and headers); a longer
    /// one is answered 431 and the connection closed. Scrapers send a
    /// few hundred bytes.
    pub max_head_bytes: usize,
    /// The time a client has to send its whole request head; then it is
    /// answered 408 and closed.
    pub head_timeout: Duration,
    /// The time a client has to take the whole answer; then the connection
    /// is dropped.
    pub write_timeout: Duration,
    /// Connections held at once (at least 1); past it, the oldest one
    /// still sending its head (of the source holding the most) is closed
    /// for the newcomer.
    pub max_connections: usize,
    /// Connections one source address (an IPv6 /64) holds at most (at
    /// least 1) once the server holds half of `max_connections`; past it,
    /// that source's oldest one still sending its head is closed for its
    /// newcomer.
    pub max_per_source: usize,
}

impl Default for Limits {
    /// 8 KiB of head within 5 s, the answer taken within 10 s, 64
    /// connections at once, 16 from one source once 32 are held.
    fn default() -> Self {
        Self {
            max_head_bytes: 8 * 1024,
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 64,
            max_per_source: 16,
        }
    }
}

/// Why the metrics listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MetricsHttpError {
    /// The address does not parse.
    #[error("metrics address: {0}")]
    Address(#[from] AddressError),
    /// The address is not `tcp:HOST:PORT` (the metrics are plain HTTP).
    #[error(
        "metrics address {0:?} is not tcp:HOST:PORT (the metrics are served over plain HTTP, \
         for example tcp:127.0.0.1:9464)"
    )]
    NotTcp(String),
    /// Binding failed (address in use, not an address of this host…).
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The system's reason.
        #[source]
        source: io::Error,
    },
}

/// The host and port of a `tcp:HOST:PORT` address: checked before a node
/// starts, so a wrong `--metrics` is a usage error, not a half-started
/// node.
pub fn parse(addr: &str) -> Result<(String, u16), MetricsHttpError> {
    match addr.parse::<Address>()? {
        Address::Tcp { host, port } => Ok((host, port)),
        _ => Err(MetricsHttpError::NotTcp(addr.to_string())),
    }
}

/// Listens on `addr` (`tcp:HOST:PORT`; port 0 picks a free one, which
/// [`local_address`] tells).
pub async fn bind(addr: &str) -> Result<TcpListener, MetricsHttpError> {
    let (host, port) = parse(addr)?;
    TcpListener::bind((host.as_str(), port))
        .await
        .map_err(|source| MetricsHttpError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// The address a listener is bound to, as `tcp:IP:PORT` (the form
/// `sitenet node` prints).
pub fn local_address(listener: &TcpListener) -> io::Result<String> {
    Ok(format!("tcp:{}", listener.local_addr()?))
}

/// [`serve`] with `node`'s [`openmetrics`](crate::Node::openmetrics).
pub async fn serve_node(listener: TcpListener, node: Node, limits: Limits) {
    serve(listener, move || node.openmetrics(), limits).await
}

/// Answers scrapes on `listener` with what `render` returns (OpenMetrics
/// text, `# EOF` included) until the task is dropped: it never returns
/// by itself. `render` runs once per `GET /metrics`, on the task that
/// answers it.
pub async fn serve<F>(listener: TcpListener, render: F, limits: Limits)
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let render = Arc::new(render);
    let held = Arc::new(Held::new(&limits));
    // Out of descriptors, every accept fails for as long as it lasts: a
    // few lines per window, the rest counted in the next line.
    let mut accept_logs = LogLimit::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                if let LogVerdict::Log { suppressed } = accept_logs.check(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "metrics: accepting a connection failed");
                }
                // Out of descriptors, most likely: wait instead of spinning.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (ticket, closed) = held.admit(peer.ip());
        let render = render.clone();
        let limits = limits.clone();
        let held = held.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = answer(stream, &*render, &limits, || held.spoke(ticket)) => {}
                // Its place was given to a newer connection.
                _ = closed => {
                    tracing::debug!(%peer, "metrics: idle connection closed for a newer one");
                }
            }
            held.finish(ticket);
            tracing::trace!(%peer, "metrics: connection done");
        });
    }
}

/// The connections held at once: the admission table (the bounds, and who
/// is closed past them) and, for each, the sender that closes it.
struct Held {
    state: Mutex<HeldState>,
}

struct HeldState {
    table: Admission,
    close: HashMap<u64, oneshot::Sender<()>>,
}

impl Held {
    fn new(limits: &Limits) -> Self {
        let cfg = AdmissionConfig {
            max_pending: limits.max_connections.max(1),
            max_per_source: limits.max_per_source.max(1),
            // The deadlines are kept by each connection's task; the table
            // only chooses who makes room.
            silence: limits.head_timeout,
            timeout: limits.head_timeout.saturating_add(limits.write_timeout),
        }
        .normalised();
        Self {
            state: Mutex::new(HeldState {
                table: Admission::new(cfg),
                close: HashMap::new(),
            }),
        }
    }

    /// Takes a connection from `ip` on; closes the one it replaces, if a
    /// bound was hit. The receiver completes when this one is closed so.
    fn admit(&self, ip: IpAddr) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state.lock();
        let a = st.table.admit(Instant::now(), Source::of(Some(ip)));
        st.close.insert(a.ticket, tx);
        if let Some((victim, _)) = a.dropped {
            if let Some(close) = st.close.remove(&victim) {
                let _ = close.send(());
            }
        }
        (a.ticket, rx)
    }

    /// The connection's head is read: it is closed for a newcomer only if
    /// no connection is still sending its head.
    fn spoke(&self, ticket: u64) {
        self.state.lock().table.spoke(ticket);
    }

    fn finish(&self, ticket: u64) {
        let mut st = self.state.lock();
        st.table.finish(ticket);
        st.close.remove(&ticket);
    }
}

/// Why a request head was not read.
#[derive(Debug)]
enum HeadError {
    /// Longer than the limit.
    TooLarge,
    /// The peer closed (or reset) first.
    Closed,
}

/// Serves one connection: reads its head, writes one answer, closes.
async fn answer(
    mut stream: TcpStream,
    render: &(dyn Fn() -> String + Send + Sync),
    limits: &Limits,
    head_read: impl FnOnce(),
) {
    let _ = stream.set_nodelay(true);
    let head = tokio::time::timeout(
        limits.head_timeout,
        read_head(&mut stream, limits.max_head_bytes),
    )
    .await;
    head_read();
    let response = match head {
        Ok(Ok(head)) => route(&head, render),
        Ok(Err(HeadError::TooLarge)) => {
            tracing::debug!(
                limit = limits.max_head_bytes,
                "metrics: request head too large"
            );
            plain(
                431,
                "Request Header Fields Too Large",
                "request head too large\n",
            )
        }
        Ok(Err(HeadError::Closed)) => return,
        Err(_) => {
            tracing::debug!(timeout = ?limits.head_timeout, "metrics: no request head in time");
            plain(408, "Request Timeout", "no request in time\n")
        }
    };
    let written = tokio::time::timeout(limits.write_timeout, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::debug!("metrics: the answer was not taken");
    }
}

/// Reads until the empty line that ends a request head, into a buffer of
/// `max` bytes at most; returns the head without that line.
async fn read_head(stream: &mut TcpStream, max: usize) -> Result<Vec<u8>, HeadError> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Err(HeadError::TooLarge);
        }
        let n = stream
            .read(&mut buf[len..])
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        // The end may straddle two reads: look again from a little before.
        let from = len.saturating_sub(2);
        len += n;
        if let Some(end) = head_end(&buf[..len], from) {
            buf.truncate(end);
            return Ok(buf);
        }
    }
}

/// Where the head in `buf` ends (at the `\n` ending its last header line),
/// looking at line ends from `from` on: an empty line is `\n\r\n`, or
/// `\n\n` from a client that ends lines with a bare LF (RFC 9112 §2.2
/// lets a server accept those).
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find(|&i| {
        buf[i] == b'\n'
            && (buf.get(i + 1) == Some(&b'\n')
                || (buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n')))
    })
}

/// The answer to a request head.
fn route(head: &[u8], render: &(dyn Fn() -> String + Send + Sync)) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return plain(400, "Bad Request", "request line is not UTF-8\n");
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return plain(400, "Bad Request", "expected: GET /metrics HTTP/1.1\n");
    };
    if !version.starts_with("HTTP/1.") {
        return plain(505, "HTTP Version Not Supported", "HTTP/1.x only\n");
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != METRICS_PATH {
        return plain(404, "Not Found", "not found: the metrics are at /metrics\n");
    }
    match method {
        "GET" | "HEAD" => {
            let body = render();
            let mut out = head_of(200, "OK", OPENMETRICS_CONTENT_TYPE, body.len(), "");
            if method == "GET" {
                out.extend_from_slice(body.as_bytes());
            }
            out
        }
        _ => {
            let body = "only GET and HEAD\n";
            let mut out = head_of(
                405,
                "Method Not Allowed",
                "text/plain; charset=utf-8",
                body.len(),
                "Allow: GET, HEAD\r\n",
            );
            out.extend_from_slice(body.as_bytes());
            out
        }
    }
}

/// A plain-text answer.
fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let mut out = head_of(status, reason, "text/plain; charset=utf-8", body.len(), "");
    out.extend_from_slice(body.as_bytes());
    out
}

/// A response head; `extra` is more header lines, each ending in CRLF.
fn head_of(status: u16, reason: &str, content_type: &str, length: usize, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\
         Connection: close\r\n{extra}\r\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn heads_end_at_an_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\n\n", 0), Some(22));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n", 0), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
    }

    #[test]
    fn routes() {
        let render = || "x 1\n# EOF\n".to_string();
        let ok = text(route(b"GET /metrics HTTP/1.1\r\nHost: a", &render));
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}\r\n")));
        assert!(ok.contains("Content-Length: 10\r\n"));
        assert!(ok.ends_with("\r\n\r\nx 1\n# EOF\n"));
        let head = text(route(b"HEAD /metrics?x=1 HTTP/1.0", &render));
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"));
        for (req, status) in [
            (&b"GET / HTTP/1.1"[..], "404"),
            (b"GET /metricsx HTTP/1.1", "404"),
            (b"POST /metrics HTTP/1.1", "405"),
            (b"GET /metrics HTTP/2.0", "505"),
            (b"GET /metrics", "400"),
            (b"GET  /metrics HTTP/1.1", "400"),
            (b"\xff\xfe /metrics HTTP/1.1", "400"),
            (b"", "400"),
        ] {
            let r = text(route(req, &render));
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status} ")),
                "{:?}: {r}",
                String::from_utf8_lossy(req)
            );
            assert!(r.contains("Connection: close\r\n"));
        }
    }

    #[test]
    fn addresses() {
        assert_eq!(parse("tcp:127.0.0.1:0").unwrap(), ("127.0.0.1".into(), 0));
        assert!(matches!(
            parse("unix:/tmp/m.sock"),
            Err(MetricsHttpError::NotTcp(_))
        ));
        assert!(matches!(
            parse("127.0.0.1:80"),
            Err(MetricsHttpError::Address(_))
        ));
    }
}
