//! The metrics endpoint against clients that connect and send nothing:
//! they must not keep an honest scraper waiting. Idle connections are
//! held (each until its own head deadline) only up to the server's bound;
//! past it, the oldest silent one of the source holding the most is
//! dropped for the newcomer, so a scrape is answered at once while the
//! idle connections are still open.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::PATIENCE;
use sitenet::metrics_http::{self, Limits};

/// A head deadline far beyond the test's length: an idle connection is
/// closed only because the server needed its place, never because its
/// deadline passed, so what the test sees does not depend on speed.
const LONG: Duration = Duration::from_secs(600);

/// A runtime for the responder, on its own threads while the test blocks.
fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Serves `# EOF` on a free loopback port; its `HOST:PORT`.
fn serve(rt: &tokio::runtime::Runtime, limits: Limits) -> String {
    let listener = rt
        .block_on(metrics_http::bind("tcp:127.0.0.1:0"))
        .expect("binds");
    let address = metrics_http::local_address(&listener).unwrap();
    rt.spawn(metrics_http::serve(
        listener,
        || "# EOF\n".to_string(),
        limits,
    ));
    address.strip_prefix("tcp:").unwrap().to_string()
}

/// One scrape with a raw socket: the whole answer, read until the server
/// closes. The read timeout is far above any answer's time and far below
/// what a scraper queued behind idle connections waits (their deadline).
fn scrape(host: &str) -> String {
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("no answer within 30 s (idle connections hold the endpoint)")
        }
        Err(e) => panic!("scrape failed: {e}"),
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// True if the server has closed `s` (EOF or reset), false if it is open.
fn closed(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = match (&*s).read(&mut b) {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    s.set_nonblocking(false).unwrap();
    r
}

/// Waits (bounded by [`PATIENCE`]) until at most `bound` of `conns` are
/// open; how many are.
fn open_within(conns: &[TcpStream], bound: usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let open = conns.iter().filter(|s| !closed(s)).count();
        if open <= bound {
            return open;
        }
        assert!(
            Instant::now() < deadline,
            "{open} idle connections held, more than the bound {bound}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// 256 connections that send nothing, from the scraper's own address:
/// honest scrapes are answered at once, each time, while idle connections
/// are still held open (only as many as the server's bound).
#[test]
fn a_scrape_is_answered_while_idle_connections_are_held() {
    let rt = server_runtime();
    let limits = Limits {
        head_timeout: LONG,
        ..Limits::default()
    };
    let host = serve(&rt, limits.clone());
    let idle: Vec<TcpStream> = (0..256)
        .map(|_| TcpStream::connect(&host).unwrap())
        .collect();
    for _ in 0..3 {
        let answer = scrape(&host);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
        assert!(answer.ends_with("# EOF\n"), "{answer:?}");
    }
    // The server closes those it made room with (on their own tasks, so
    // perhaps just after the answer): they come down to the bound, and
    // the newest are still open, the scrapes did not wait for them to
    // time out.
    let open = open_within(&idle, limits.max_connections);
    assert!(open > 0, "every idle connection was closed");
    drop(idle);
}

/// An idle connection under the bound is left alone: it keeps its place
/// until its own deadline.
#[test]
fn idle_connections_under_the_bound_are_kept() {
    let rt = server_runtime();
    let limits = Limits {
        head_timeout: LONG,
        max_connections: 8,
        max_per_source: 8,
        ..Limits::default()
    };
    let host = serve(&rt, limits);
    let idle: Vec<TcpStream> = (0..7).map(|_| TcpStream::connect(&host).unwrap()).collect();
    let answer = scrape(&host);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    assert!(
        idle.iter().all(|s| !closed(s)),
        "an idle connection under the bound was closed"
    );
}

/// Idle connections from one source do not push out another source's: a
/// source holds at most `max_per_source` once the server is half full, so
/// a flood from 127.0.0.1 closes its own oldest, and what 127.0.0.2 holds
/// stays open.
#[test]
fn one_source_flooding_closes_only_its_own_connections() {
    let rt = server_runtime();
    let limits = Limits {
        head_timeout: LONG,
        max_connections: 16,
        max_per_source: 4,
        ..Limits::default()
    };
    let host = serve(&rt, limits);
    let other: Vec<TcpStream> = (0..4)
        .map(|_| {
            rt.block_on(async {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                let s = tokio::time::timeout(PATIENCE, s.connect(host.parse().unwrap()))
                    .await
                    .expect("connects in time")
                    .unwrap();
                s.into_std().unwrap()
            })
        })
        .collect();
    let flood: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(&host).unwrap())
        .collect();
    let answer = scrape(&host);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    open_within(&flood, 12);
    assert!(
        other.iter().all(|s| !closed(s)),
        "another source's idle connection was closed for the flood"
    );
}
