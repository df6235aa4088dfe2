//! Tests of the fault injector and the faulty channel.

use super::controls::lock;
use super::*;
use crate::address::Address;
use crate::channel::{Channel, Listener};
use std::fmt;
use std::io;
use std::time::Duration;

/// A connected loopback TCP pair: (connecting end, accepted end).
async fn pair() -> (Channel, Channel) {
    let l = Listener::bind(&Address::tcp("127.0.0.1", 0)).await.unwrap();
    let addr = l.local_address().unwrap();
    let (c, a) = tokio::join!(Channel::connect(&addr), l.accept());
    (c.unwrap(), a.unwrap())
}

fn faulty(ch: &Channel) -> &FaultyChannel {
    FaultyChannel::of(ch).unwrap_or_else(|| panic!("not a faulty channel: {ch:?}"))
}

/// The byte at stream offset `i`: a pattern that makes a shifted or
/// truncated stream visible.
fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

/// Writes `want` pattern bytes through `try_write2` in 1000-byte writes
/// split 300/700 over the two slices, until done or an error. Returns
/// every `Ok(n)` and the error that stopped it, if any.
async fn write_pattern(ch: &Channel, want: u64) -> (Vec<usize>, Option<io::Error>) {
    let mut results = Vec::new();
    let mut off = 0u64;
    while off < want {
        let len = (want - off).min(1000);
        let buf: Vec<u8> = (off..off + len).map(pattern).collect();
        let (a, b) = buf.split_at(buf.len().min(300));
        ch.writable().await.unwrap();
        match ch.try_write2(a, b) {
            Ok(n) => {
                results.push(n);
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return (results, Some(e)),
        }
    }
    (results, None)
}

/// Reads until end of stream or an error; returns the bytes and whether
/// it ended with an error (a reset) rather than `Ok(0)`.
async fn read_to_end(ch: &Channel) -> (Vec<u8>, Option<io::Error>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Err(e) = ch.readable().await {
            return (out, Some(e));
        }
        match ch.try_read(&mut buf) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Reads exactly `n` bytes.
async fn read_exact(ch: &Channel, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        ch.readable().await.unwrap();
        match ch.try_read(&mut out[got..]) {
            Ok(0) => panic!("end of stream after {got} of {n} bytes"),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read failed after {got} of {n} bytes: {e}"),
        }
    }
    out
}

/// Writes all of `data`.
async fn write_all(ch: &Channel, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        ch.writable().await.unwrap();
        match ch.try_write2(&data[off..], &[]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

#[test]
fn injector_is_send_sync_clone_debug() {
    fn check<T: Send + Sync + Clone + fmt::Debug>() {}
    check::<FaultInjector>();
    fn check_channel<T: Send + Sync + fmt::Debug>() {}
    check_channel::<Channel>();
    let inj = FaultInjector::new(1234);
    assert_eq!(inj.seed(), 1234);
    assert_eq!(
        inj.seed_report(),
        "fault injector seed: 1234 (set SITENET_FAULT_SEED=1234 to replay)"
    );
    assert!(format!("{inj:?}").contains("1234"));
}

#[test]
fn seed_from_environment() {
    let var = "SITENET_FAULT_SEED_TEST_ONLY_FAULT_RS";
    std::env::set_var(var, "987654321");
    let inj = FaultInjector::from_env_or_random(var);
    std::env::remove_var(var);
    assert_eq!(inj.seed(), 987654321);
    assert_eq!(
        inj.seed_report(),
        format!("fault injector seed: 987654321 (set {var}=987654321 to replay)")
    );
    // Unset: some seed, reported under the same name.
    let inj = FaultInjector::from_env_or_random(var);
    assert!(inj.seed_report().contains(&format!("{var}={}", inj.seed())));
}

/// (1) A cut at offset N: the reader gets exactly the first N bytes and
/// then the end; the writer gets a short write then `BrokenPipe`.
#[tokio::test]
async fn cut_after_delivers_exactly_n_bytes() {
    // 2200 and 2500 split the third write in its first and second slice;
    // 1 and 299 split the first write; 3000 falls on a write boundary.
    for n in [0u64, 1, 299, 1000, 2200, 2500, 3000, 65_537] {
        let inj = FaultInjector::new(7);
        let _seed = inj.report_on_panic();
        let (c, a) = pair().await;
        let w = inj.wrap(c);
        inj.cut_after(n);
        assert_eq!(faulty(&w).cut_offset(), (n > 0).then_some(n));
        let ((results, err), (got, _reset)) =
            tokio::join!(write_pattern(&w, n + 10_000), read_to_end(&a));

        let err = err.expect("the writer must see the cut");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "n={n}: {err}");
        assert_eq!(results.iter().map(|&k| k as u64).sum::<u64>(), n, "n={n}");
        if n % 1000 != 0 {
            assert!(
                *results.last().unwrap() < 1000,
                "n={n}: the crossing write must be short: {results:?}"
            );
        }
        assert_eq!(
            got.len() as u64,
            n,
            "n={n}: the reader must get exactly the bytes before the cut"
        );
        assert!(
            got.iter().enumerate().all(|(i, &b)| b == pattern(i as u64)),
            "n={n}: corrupt prefix"
        );

        // The cut side sees the end too, at once.
        assert!(faulty(&w).is_cut());
        assert_eq!(faulty(&w).bytes_written(), n);
        w.readable().await.unwrap();
        assert_eq!(w.try_read(&mut [0u8; 16]).unwrap(), 0);
        assert_eq!(
            w.try_write2(b"x", b"").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(inj.cuts(), 1);
    }
}

/// The write offsets at which each of four channels is cut under random
/// cuts with `seed`: one armed while live, three at wrap time, then all
/// four re-armed by a second call.
async fn random_cut_run(seed: u64) -> Vec<(u64, usize)> {
    let inj = FaultInjector::new(seed);
    let _seed = inj.report_on_panic();
    // The accepted ends stay open: a write to a closed peer would fail
    // with a reset before the cut.
    let mut peers = Vec::new();
    let (c, a) = pair().await;
    peers.push(a);
    let mut chans = vec![inj.wrap(c)];
    inj.random_cuts(500);
    for _ in 0..3 {
        let (c, a) = pair().await;
        peers.push(a);
        chans.push(inj.wrap(c));
    }
    // Re-draws for all four, in wrap order.
    inj.random_cuts(500);
    let mut out = Vec::new();
    for ch in &chans {
        let armed = faulty(ch).cut_offset().expect("armed");
        assert!(
            (1..=1000).contains(&armed),
            "offset {armed} outside 1..=2*mean"
        );
        let (results, err) = write_pattern(ch, 100_000).await;
        assert_eq!(err.unwrap().kind(), io::ErrorKind::BrokenPipe);
        let sent = results.iter().sum::<usize>();
        assert_eq!(sent as u64, armed);
        out.push((armed, sent));
    }
    assert_eq!(inj.cuts(), 4);
    out
}

/// (2) The same seed gives the same cuts; another seed gives others.
#[tokio::test]
async fn random_cuts_are_deterministic() {
    let a = random_cut_run(42).await;
    let b = random_cut_run(42).await;
    assert_eq!(a, b);
    let c = random_cut_run(43).await;
    assert_ne!(a, c, "seeds 42 and 43 drew the same four offsets");
}

#[tokio::test]
async fn stop_random_cuts_disarms() {
    let inj = FaultInjector::new(5);
    let (c, _a) = pair().await;
    inj.random_cuts(10);
    let w = inj.wrap(c);
    assert!(faulty(&w).cut_offset().is_some());
    inj.stop_random_cuts();
    assert_eq!(faulty(&w).cut_offset(), None);
    let (c2, _a2) = pair().await;
    let w2 = inj.wrap(c2);
    assert_eq!(faulty(&w2).cut_offset(), None);
    inj.cut_after(3);
    inj.disarm_cuts();
    assert_eq!(faulty(&w).cut_offset(), None);
    assert_eq!(inj.live_channels(), 2);
    drop(w);
    assert_eq!(inj.live_channels(), 1);
}

/// (3) A black hole: bytes written either way during it never arrive;
/// afterwards new bytes do.
#[tokio::test]
async fn blackhole_loses_bytes_both_ways() {
    let inj = FaultInjector::new(3);
    let _seed = inj.report_on_panic();
    let (c, b) = pair().await;
    let a = inj.wrap(c);

    write_all(&a, b"hello").await;
    assert_eq!(read_exact(&b, 5).await, b"hello");

    inj.set_blackhole(true);
    // Writes succeed and count towards the write offset...
    a.writable().await.unwrap();
    assert_eq!(a.try_write2(b"lo", b"st1").unwrap(), 5);
    assert_eq!(faulty(&a).bytes_written(), 10);
    // ...and the peer's bytes are drained and dropped while `a` waits.
    write_all(&b, b"lost2").await;
    while faulty(&a).bytes_discarded() < 5 {
        // Bounded wait for something that must not happen.
        let r = tokio::time::timeout(Duration::from_millis(20), a.readable()).await;
        assert!(r.is_err(), "readable() returned during a black hole");
    }
    assert_eq!(faulty(&a).bytes_discarded(), 5);
    assert_eq!(
        a.try_read(&mut [0u8; 16]).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );

    inj.set_blackhole(false);
    write_all(&a, b"after").await;
    write_all(&b, b"fresh").await;
    // TCP is ordered: had "lost1"/"lost2" travelled, they would come first.
    assert_eq!(read_exact(&b, 5).await, b"after");
    assert_eq!(read_exact(&a, 5).await, b"fresh");
    assert_eq!(inj.cuts(), 0);
}

/// A peer's end of stream seen during a black hole is reported after it.
#[tokio::test]
async fn blackhole_remembers_the_end() {
    let inj = FaultInjector::new(4);
    let (c, b) = pair().await;
    let a = inj.wrap(c);
    inj.set_blackhole(true);
    write_all(&b, b"gone").await;
    drop(b);
    // Drain until the end of stream has been seen (and hidden).
    while lock(&faulty(&a).shared.read).end.is_none() {
        let r = tokio::time::timeout(Duration::from_millis(20), a.readable()).await;
        assert!(r.is_err(), "readable() returned during a black hole");
    }
    inj.set_blackhole(false);
    let (got, err) = read_to_end(&a).await;
    assert!(got.is_empty() && err.is_none(), "{got:?} {err:?}");
}

/// (4) Delay: bytes surface no earlier than the delay after they were
/// read, in order, end of stream last.
#[tokio::test]
async fn delay_holds_bytes_back() {
    let d = Duration::from_millis(50);
    let inj = FaultInjector::new(9);
    let (c, b) = pair().await;
    let a = inj.wrap(c);
    inj.set_delay(d);

    let t0 = std::time::Instant::now();
    write_all(&b, b"ping").await;
    assert_eq!(read_exact(&a, 4).await, b"ping");
    assert!(
        t0.elapsed() >= d,
        "delivered after {:?}, before the {d:?} delay",
        t0.elapsed()
    );

    let t1 = std::time::Instant::now();
    write_all(&b, b"one,").await;
    write_all(&b, b"two").await;
    drop(b);
    let (got, err) = read_to_end(&a).await;
    assert!(t1.elapsed() >= d);
    assert_eq!(got, b"one,two");
    assert!(err.is_none(), "{err:?}");

    // Zero turns it off.
    inj.set_delay(Duration::ZERO);
    let (c, b) = pair().await;
    let a = inj.wrap(c);
    write_all(&b, b"now").await;
    assert_eq!(read_exact(&a, 3).await, b"now");
}

/// The delay queue is bounded: a burst bigger than the bound still
/// arrives whole and in order (the socket is read again as the queue
/// drains).
#[tokio::test]
async fn delay_queue_is_bounded() {
    let inj = FaultInjector::new(11);
    let (c, b) = pair().await;
    let a = inj.wrap(c);
    inj.set_delay(Duration::from_millis(5));
    let total = 3 * DELAY_QUEUE_LIMIT as u64 + 123;
    let b_ref = &b;
    let writer = async move {
        let (_, err) = write_pattern(b_ref, total).await;
        assert!(err.is_none());
    };
    let reader = async {
        let got = read_exact(&a, total as usize).await;
        assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(i as u64)));
        assert!(lock(&faulty(&a).shared.read).queued <= DELAY_QUEUE_LIMIT);
    };
    tokio::join!(writer, reader);
}

/// (5) `cut_all` from another thread wakes a pending `readable()`, and
/// both ends see the end of the channel.
#[tokio::test]
async fn cut_all_wakes_pending_readable() {
    let inj = FaultInjector::new(13);
    let _seed = inj.report_on_panic();
    let (c, b) = pair().await;
    let a = inj.wrap(c);

    let pending = a.readable();
    tokio::pin!(pending);
    tokio::select! {
        biased;
        _ = &mut pending => panic!("readable() with nothing sent"),
        _ = std::future::ready(()) => {}
    }
    let inj2 = inj.clone();
    std::thread::spawn(move || inj2.cut_all()).join().unwrap();
    pending.await.unwrap();

    assert_eq!(a.try_read(&mut [0u8; 8]).unwrap(), 0);
    a.writable().await.unwrap();
    assert_eq!(
        a.try_write2(b"x", b"y").unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
    let (got, _) = read_to_end(&b).await;
    assert!(got.is_empty());
    assert_eq!(inj.cuts(), 1);
    // A second cut_all does not count the same channel again.
    inj.cut_all();
    assert_eq!(inj.cuts(), 1);
}

/// A pending `writable()` on a full socket is woken by a cut too.
#[tokio::test]
async fn cut_all_wakes_pending_writable() {
    let inj = FaultInjector::new(17);
    let (c, _b) = pair().await;
    let a = inj.wrap(c);
    // Fill the socket until it would block (the peer never reads).
    let chunk = vec![0u8; 64 * 1024];
    loop {
        match a.try_write2(&chunk, &[]) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    let pending = a.writable();
    tokio::pin!(pending);
    let early = tokio::select! {
        biased;
        r = &mut pending => Some(r), // spurious readiness is allowed
        _ = std::future::ready(()) => None,
    };
    inj.cut_all();
    match early {
        Some(r) => r.unwrap(),
        None => pending.await.unwrap(),
    }
    assert_eq!(
        a.try_write2(b"x", b"").unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
}

#[tokio::test]
async fn cut_one_cuts_one_live_channel_at_a_time() {
    let inj = FaultInjector::new(7);
    let (a1, _b1) = pair().await;
    let (a2, _b2) = pair().await;
    let (a1, a2) = (inj.wrap(a1), inj.wrap(a2));
    assert!(inj.cut_one());
    assert_eq!(inj.cuts(), 1);
    assert!(inj.cut_one());
    assert_eq!(inj.cuts(), 2);
    // Both are cut now: nothing left to cut.
    assert!(!inj.cut_one());
    drop((a1, a2));
}

/// A wrapped channel is a plugged one of the same kind: its scheme, its
/// peer and (for an accepted in-process channel) the thread that connected
/// it are those of the channel it wraps, so the node places and logs it
/// as if it were not wrapped.
#[tokio::test]
async fn a_wrapped_channel_keeps_its_kind_peer_and_connecting_thread() {
    let inj = FaultInjector::new(19);
    let addr = Address::unique_mem("wrapped");
    let l = Listener::bind(&addr).await.unwrap();
    let c = Channel::connect(&addr).await.unwrap();
    let a = l.accept().await.unwrap();
    let here = std::thread::current().id();
    assert_eq!(a.connector_thread(), Some(here));
    let (c_peer, a_peer) = (c.peer(), a.peer());
    let (c, a) = (inj.wrap(c), inj.wrap(a));
    assert!(matches!(a, Channel::Plugged(_)));
    assert_eq!((a.scheme(), a.peer()), ("mem", a_peer));
    assert_eq!((c.scheme(), c.peer()), ("mem", c_peer));
    assert_eq!(a.connector_thread(), Some(here));
    assert_eq!(faulty(&a).id(), 2);

    let (t, u) = pair().await;
    let t_peer = t.peer();
    let t = inj.wrap(t);
    assert_eq!((t.scheme(), t.peer()), ("tcp", t_peer));
    assert_eq!(t.connector_thread(), None);
    assert!(FaultyChannel::of(&u).is_none());
}

/// A channel wrapped by two injectors: the outer one's cut cuts the inner
/// wrapper too, and the peer sees the end of the stream.
#[tokio::test]
async fn an_outer_cut_cuts_a_channel_wrapped_twice() {
    let (inner, outer) = (FaultInjector::new(23), FaultInjector::new(29));
    let (a, b) = crate::mem::MemChannel::pair();
    let a = outer.wrap(inner.wrap(Channel::Mem(a)));
    let b = Channel::Mem(b);
    write_all(&a, b"abc").await;
    outer.cut_all();
    assert_eq!((outer.cuts(), inner.cuts()), (1, 1));
    let (got, err) = read_to_end(&b).await;
    assert_eq!(got, b"abc");
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        a.try_write2(b"x", b"").unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
}
