//! In-process channels (`mem:NAME`) through the public API: connect and
//! accept, bytes both ways, end of stream and broken pipe, wake-ups, the
//! name registry, `BoundListener` without a runtime, and fault-injector cuts.

mod common;

use std::io;

use common::*;
use sitenet_transport::{Address, BoundListener, Channel, Listener, MEM_PIPE_CAPACITY};

/// A connected mem pair on a fresh name: (connecting end, accepting end).
async fn pair() -> (Channel, Channel) {
    let l = Listener::bind(&Address::unique_mem("pair")).await.unwrap();
    let addr = l.local_address().unwrap();
    let c = Channel::connect(&addr).await.unwrap();
    let a = within("accept", l.accept()).await.unwrap();
    (c, a)
}

#[tokio::test]
async fn mem_connect_accept_and_peers() {
    let addr = Address::unique_mem("peers");
    let l = Listener::bind(&addr).await.unwrap();
    assert_eq!(l.local_address().unwrap(), addr);
    // accept() pending first, woken by the connect.
    let mut acc = Box::pin(l.accept());
    assert!(is_pending(&mut acc).await);
    let c = Channel::connect(&addr).await.unwrap();
    let a = within("accept woken by connect", acc).await.unwrap();
    assert!(matches!(c, Channel::Mem(_)) && matches!(a, Channel::Mem(_)));
    assert_eq!(c.peer(), addr.to_string());
    assert!(a.peer().starts_with("mem:(client "), "{}", a.peer());
    check_bytes_both_ways(c, a).await;
}

#[tokio::test]
async fn mem_bytes_both_ways() {
    let (c, a) = pair().await;
    check_bytes_both_ways(c, a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mem_large_payload_concurrent_both_ways() {
    let (c, a) = pair().await;
    // 32 pipe capacities each way.
    check_large_concurrent(c, a, 32 * MEM_PIPE_CAPACITY as u64 + 12_345).await;
}

#[tokio::test]
async fn mem_eof_on_drop() {
    let (c, a) = pair().await;
    check_eof_on_drop(c, a).await;
    let (c, a) = pair().await;
    check_eof_on_drop(a, c).await;
}

#[tokio::test]
async fn mem_broken_pipe_after_peer_dropped() {
    let (c, a) = pair().await;
    check_broken_pipe(c, a).await;
    let (c, a) = pair().await;
    check_broken_pipe(a, c).await;
}

#[tokio::test]
async fn mem_pending_readable_woken_by_peer_drop() {
    let (c, a) = pair().await;
    check_readable_woken_by_drop(c, a).await;
    let (c, a) = pair().await;
    check_readable_woken_by_drop(a, c).await;
}

/// A writer waiting on a full pipe is woken when the reader drains it, and
/// again (to fail) when the reader is dropped.
#[tokio::test]
async fn mem_pending_writable_woken_by_read_and_by_drop() {
    let (c, a) = pair().await;
    let full = vec![5u8; MEM_PIPE_CAPACITY];
    assert_eq!(c.try_write2(&full, &[]).unwrap(), MEM_PIPE_CAPACITY);
    assert_eq!(
        c.try_write2(b"x", &[]).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    let mut w = Box::pin(c.writable());
    assert!(is_pending(&mut w).await, "the pipe is full");
    assert_eq!(a.try_read(&mut [0u8; 100]).unwrap(), 100);
    within("writable woken by a read", w).await.unwrap();
    assert_eq!(c.try_write2(&full, &[]).unwrap(), 100);

    let mut w = Box::pin(c.writable());
    assert!(is_pending(&mut w).await, "the pipe is full again");
    drop(a);
    within("writable woken by the reader's drop", w)
        .await
        .unwrap();
    assert_eq!(
        c.try_write2(b"x", &[]).unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
}

#[tokio::test]
async fn mem_connection_refused_without_listener() {
    let addr = Address::unique_mem("nobody");
    let e = Channel::connect(&addr).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}

#[tokio::test]
async fn mem_name_in_use_then_free_after_drop() {
    let addr = Address::unique_mem("taken");
    let l = Listener::bind(&addr).await.unwrap();
    let e = Listener::bind(&addr).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
    let e = BoundListener::bind(&addr).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    // unique_mem never hands out a bound name.
    assert_ne!(Address::unique_mem("taken"), addr);
    drop(l);
    let e = Channel::connect(&addr).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    let l = Listener::bind(&addr).await.unwrap();
    let c = Channel::connect(&addr).await.unwrap();
    let a = within("accept", l.accept()).await.unwrap();
    check_bytes_both_ways(c, a).await;
}

#[tokio::test]
async fn mem_empty_name_is_invalid_input() {
    let e = Listener::bind(&Address::mem("")).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("mem:NAME"), "{e}");
    let e = Channel::connect(&Address::mem("")).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

/// Bound (registered) with no runtime anywhere, so a node can report its
/// address first; connectable at once; a listener on a runtime later.
#[test]
fn mem_bound_listener_needs_no_runtime() {
    let addr = Address::unique_mem("bound");
    let b = BoundListener::bind(&addr).unwrap();
    assert_eq!(b.local_address().unwrap(), addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Connected before the listener is on the runtime: queued.
        let c = Channel::connect(&addr).await.unwrap();
        let l = b.into_listener().unwrap();
        assert_eq!(l.local_address().unwrap(), addr);
        let a = within("accept", l.accept()).await.unwrap();
        check_bytes_both_ways(c, a).await;
    });
}

#[tokio::test]
async fn mem_addresses_parse_and_print() {
    let addr: Address = "mem:some-node".parse().unwrap();
    assert_eq!(
        addr,
        Address::Mem {
            name: "some-node".into()
        }
    );
    assert_eq!(addr.to_string(), "mem:some-node");
    let e = "mem:".parse::<Address>().unwrap_err().to_string();
    assert!(e.contains("empty name") && e.contains("mem:NAME"), "{e}");
    let e = "pipe:x".parse::<Address>().unwrap_err().to_string();
    assert!(
        e.contains("tcp:HOST:PORT") && e.contains("unix:PATH") && e.contains("mem:NAME"),
        "{e}"
    );
}

#[tokio::test]
async fn mem_fault_cut_seen_by_both_ends() {
    let (c, a) = pair().await;
    check_fault_cut(c, a).await;
    let (c, a) = pair().await;
    check_fault_cut(a, c).await;
}

/// The fault injector's other modes work over mem channels too: a delayed
/// and then black-holed stream still delivers what it should.
#[tokio::test]
async fn mem_fault_delay_and_cut_after() {
    let (c, a) = pair().await;
    let inj = sitenet_transport::FaultInjector::new(7);
    let _seed = inj.report_on_panic();
    let r = inj.wrap(a);
    inj.set_delay(std::time::Duration::from_millis(5));
    write_all(&c, b"delayed").await;
    assert_eq!(read_exact(&r, 7).await, b"delayed");
    inj.set_delay(std::time::Duration::ZERO);
    let w = inj.wrap(c);
    inj.cut_after(1000);
    let (_, (got, err)) = tokio::join!(
        async {
            let e = write_until_error(&w).await;
            assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        },
        read_to_end(&r)
    );
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.len(), 1000);
}
