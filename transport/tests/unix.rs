//! Unix domain socket channels (`unix:PATH`) through the public API:
//! connect and accept, bytes both ways, end of stream and broken pipe,
//! wake-ups, binding over stale and live socket files, `BoundListener`,
//! and fault-injector cuts. Socket files live in a fresh temp directory per
//! test.

mod common;

use std::io;

use common::*;
use sitenet_transport::{Address, BoundListener, Channel, Listener};

/// A connected Unix pair in `dir`: (connecting end, accepting end).
async fn pair(dir: &TempDir) -> (Channel, Channel) {
    let l = Listener::bind(&Address::unix(dir.sock("pair.sock")))
        .await
        .unwrap();
    let addr = l.local_address().unwrap();
    let (c, a) = within("connect and accept", async {
        tokio::join!(Channel::connect(&addr), l.accept())
    })
    .await;
    (c.unwrap(), a.unwrap())
}

#[tokio::test]
async fn unix_connect_accept_and_peers() {
    let dir = TempDir::new();
    let addr = Address::unix(dir.sock("s"));
    let l = Listener::bind(&addr).await.unwrap();
    assert_eq!(l.local_address().unwrap(), addr);
    let (c, a) = within("connect and accept", async {
        tokio::join!(Channel::connect(&addr), l.accept())
    })
    .await;
    let (c, a) = (c.unwrap(), a.unwrap());
    assert!(matches!(c, Channel::Unix(_)) && matches!(a, Channel::Unix(_)));
    assert_eq!(c.peer(), addr.to_string());
    assert_eq!(a.peer(), "unix:(client)");
    check_bytes_both_ways(c, a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unix_large_payload_concurrent_both_ways() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_large_concurrent(c, a, 8 << 20).await;
}

#[tokio::test]
async fn unix_eof_on_drop() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_eof_on_drop(c, a).await;
}

#[tokio::test]
async fn unix_eof_on_drop_of_the_accepting_end() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_eof_on_drop(a, c).await;
}

#[tokio::test]
async fn unix_broken_pipe_after_peer_dropped() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_broken_pipe(c, a).await;
}

#[tokio::test]
async fn unix_pending_readable_woken_by_peer_drop() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_readable_woken_by_drop(c, a).await;
}

#[tokio::test]
async fn unix_bind_replaces_a_stale_socket_file() {
    let dir = TempDir::new();
    let path = dir.sock("stale.sock");
    // A socket file with no listener: bound, then closed.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let addr = Address::unix(&path);
    let l = Listener::bind(&addr).await.unwrap();
    let (c, a) = within("connect and accept", async {
        tokio::join!(Channel::connect(&addr), l.accept())
    })
    .await;
    check_bytes_both_ways(c.unwrap(), a.unwrap()).await;
    // The same for a synchronous bind, over the file `l` leaves behind.
    drop(l);
    let b = BoundListener::bind(&addr).unwrap();
    assert_eq!(b.local_address().unwrap(), addr);
}

#[tokio::test]
async fn unix_bind_over_a_live_listener_fails() {
    let dir = TempDir::new();
    let addr = Address::unix(dir.sock("live.sock"));
    let l = Listener::bind(&addr).await.unwrap();
    let e = Listener::bind(&addr).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    assert!(e.to_string().contains("live"), "{e}");
    let e = BoundListener::bind(&addr).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    // The live listener saw each probe as a connection that closed at once
    // (end of stream before any byte), and still works.
    for _ in 0..2 {
        let probe = within("accept a probe", l.accept()).await.unwrap();
        let (got, err) = read_to_end(&probe).await;
        assert!(got.is_empty() && err.is_none(), "{got:?} {err:?}");
    }
    let (c, a) = within("connect and accept", async {
        tokio::join!(Channel::connect(&addr), l.accept())
    })
    .await;
    check_bytes_both_ways(c.unwrap(), a.unwrap()).await;
}

#[tokio::test]
async fn unix_bind_never_removes_a_file_that_is_not_a_socket() {
    let dir = TempDir::new();
    let path = dir.sock("precious.txt");
    std::fs::write(&path, b"keep me").unwrap();
    let e = Listener::bind(&Address::unix(&path)).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

#[tokio::test]
async fn unix_connect_without_listener_fails() {
    let dir = TempDir::new();
    let e = Channel::connect(&Address::unix(dir.sock("none")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    let e = Channel::connect(&Address::unix("")).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let e = BoundListener::bind(&Address::unix("")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

/// Bound with no runtime (so a node reports its address first), then
/// registered on a runtime.
#[test]
fn unix_bound_listener_needs_no_runtime() {
    let dir = TempDir::new();
    let addr = Address::unix(dir.sock("bound.sock"));
    let b = BoundListener::bind(&addr).unwrap();
    assert_eq!(b.local_address().unwrap(), addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = b.into_listener().unwrap();
        assert_eq!(l.local_address().unwrap(), addr);
        let (c, a) = within("connect and accept", async {
            tokio::join!(Channel::connect(&addr), l.accept())
        })
        .await;
        check_bytes_both_ways(c.unwrap(), a.unwrap()).await;
    });
}

#[test]
fn unix_addresses_parse_and_print() {
    let addr: Address = "unix:/run/sitenet/a.sock".parse().unwrap();
    assert_eq!(
        addr,
        Address::Unix {
            path: "/run/sitenet/a.sock".into()
        }
    );
    assert_eq!(addr.to_string(), "unix:/run/sitenet/a.sock");
    assert_eq!(addr.to_string().parse::<Address>().unwrap(), addr);
    let e = "unix:".parse::<Address>().unwrap_err().to_string();
    assert!(e.contains("empty path") && e.contains("unix:PATH"), "{e}");
    let e = "/run/sitenet/a.sock"
        .parse::<Address>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tcp:HOST:PORT") && e.contains("unix:PATH") && e.contains("mem:NAME"),
        "{e}"
    );
}

#[tokio::test]
async fn unix_fault_cut_seen_by_both_ends() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_fault_cut(c, a).await;
}

#[tokio::test]
async fn unix_fault_cut_of_the_accepting_end_seen_by_both_ends() {
    let dir = TempDir::new();
    let (c, a) = pair(&dir).await;
    check_fault_cut(a, c).await;
}
