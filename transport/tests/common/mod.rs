//! Helpers shared by the channel tests: bounded waits, pattern streams,
//! read/write loops over the readiness API, and temporary directories for
//! Unix socket files.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use sitenet_transport::Channel;

/// Every await on the channel is bounded by this: generous, so a slow CI
/// machine never fails a correct test, but a lost wake-up still ends in a
/// clear failure rather than a hung run.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Awaits `f`, failing the test with `what` if it takes longer than [`LIMIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {LIMIT:?}: {what}"),
    }
}

/// Polls `f` once with the current task's waker: true if it is still
/// pending (so a later wake-up must come from a notification).
pub async fn is_pending<F: Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_pending())).await
}

/// The byte at stream offset `i` of stream `seed`: a pattern that makes a
/// shifted, truncated or mixed-up stream visible.
pub fn pattern(seed: u8, i: u64) -> u8 {
    ((i % 251) as u8).wrapping_add(seed.wrapping_mul(31))
}

/// Writes `len` pattern bytes of stream `seed`, in writes of varying sizes
/// (up to 96 KiB) split at varying points over `try_write2`'s two slices.
pub async fn write_pattern(ch: &Channel, seed: u8, len: u64) {
    let mut off = 0u64;
    let mut step = 0u64;
    while off < len {
        step += 1;
        let size = ((step * 7919) % (96 * 1024) + 1).min(len - off);
        let buf: Vec<u8> = (off..off + size).map(|i| pattern(seed, i)).collect();
        let split = ((step * 104_729) % (size + 1)) as usize;
        let (a, b) = buf.split_at(split);
        let mut sent = 0usize;
        while sent < buf.len() {
            within("writable", ch.writable()).await.unwrap();
            let r = if sent < a.len() {
                ch.try_write2(&a[sent..], b)
            } else {
                ch.try_write2(&b[sent - a.len()..], &[])
            };
            match r {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write failed at offset {}: {e}", off + sent as u64),
            }
        }
        off += size;
    }
}

/// Reads until end of stream; returns the bytes, or the error that ended it.
pub async fn read_to_end(ch: &Channel) -> (Vec<u8>, Option<io::Error>) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = within("readable", ch.readable()).await {
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
pub async fn read_exact(ch: &Channel, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        within("readable", ch.readable()).await.unwrap();
        match ch.try_read(&mut out[got..]) {
            Ok(0) => panic!("end of stream after {got} of {n} bytes"),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read failed after {got} of {n} bytes: {e}"),
        }
    }
    out
}

/// Reads `len` bytes and checks them against stream `seed`, byte for byte,
/// then expects end of stream.
pub async fn read_and_check_pattern(ch: &Channel, seed: u8, len: u64) {
    let (got, err) = read_to_end(ch).await;
    if let Some(e) = err {
        panic!("read failed after {} bytes: {e}", got.len());
    }
    assert_eq!(got.len() as u64, len, "stream length");
    if let Some(i) = (0..len).find(|&i| got[i as usize] != pattern(seed, i)) {
        panic!(
            "byte {i} is {} where {} was sent",
            got[i as usize],
            pattern(seed, i)
        );
    }
}

/// Writes all of `data` in one slice.
pub async fn write_all(ch: &Channel, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        within("writable", ch.writable()).await.unwrap();
        match ch.try_write2(&data[off..], &[]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

/// Writes until a write fails with an error other than `WouldBlock` (the
/// peer is gone); returns that error. Fails the test if 64 MiB go through.
pub async fn write_until_error(ch: &Channel) -> io::Error {
    let chunk = vec![9u8; 64 * 1024];
    let mut total = 0usize;
    loop {
        within("writable", ch.writable()).await.unwrap();
        match ch.try_write2(&chunk, &[]) {
            Ok(n) => {
                total += n;
                assert!(total < 64 << 20, "writes to a closed peer kept succeeding");
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return e,
        }
    }
}

/// A fresh directory under the system temp dir, removed when dropped: a
/// place for Unix socket files that no other test (or run) shares.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "sitenet-t-{}-{nanos:x}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A socket path inside the directory.
    pub fn sock(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---- Checks every channel kind must pass, given a connected pair
// ---- (connecting end, accepting end).

/// A few bytes each way, in order, through `try_write2` with both slices.
pub async fn check_bytes_both_ways(c: Channel, a: Channel) {
    within("c -> a", async {
        let mut sent = 0;
        while sent < 11 {
            c.writable().await.unwrap();
            let msg = b"hello world";
            let (x, y) = msg[sent..].split_at((5usize).saturating_sub(sent));
            match c.try_write2(x, y) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(read_exact(&a, 11).await, b"hello world");
    write_all(&a, b"and back").await;
    assert_eq!(read_exact(&c, 8).await, b"and back");
    // Nothing more: WouldBlock, not end of stream.
    let mut buf = [0u8; 4];
    assert_eq!(
        c.try_read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

/// `len` bytes each way at once, each direction written by one task and read
/// by another (four tasks, two per channel, awaiting readability and
/// writability of the same channel concurrently), verified byte for byte.
pub async fn check_large_concurrent(c: Channel, a: Channel, len: u64) {
    let c = std::sync::Arc::new(c);
    let a = std::sync::Arc::new(a);
    let tasks = [
        tokio::spawn({
            let c = c.clone();
            async move { write_pattern(&c, 1, len).await }
        }),
        tokio::spawn({
            let a = a.clone();
            async move { read_exact_pattern(&a, 1, len).await }
        }),
        tokio::spawn({
            let a = a.clone();
            async move { write_pattern(&a, 2, len).await }
        }),
        tokio::spawn({
            let c = c.clone();
            async move { read_exact_pattern(&c, 2, len).await }
        }),
    ];
    for t in tasks {
        within("a transfer task", t).await.unwrap();
    }
}

/// Reads exactly `len` bytes of stream `seed` and checks them.
pub async fn read_exact_pattern(ch: &Channel, seed: u8, len: u64) {
    let mut buf = vec![0u8; 48 * 1024];
    let mut off = 0u64;
    while off < len {
        within("readable", ch.readable()).await.unwrap();
        let want = buf.len().min((len - off) as usize);
        match ch.try_read(&mut buf[..want]) {
            Ok(0) => panic!("end of stream after {off} of {len} bytes"),
            Ok(n) => {
                for (k, &byte) in buf[..n].iter().enumerate() {
                    let i = off + k as u64;
                    assert_eq!(byte, pattern(seed, i), "byte {i} of stream {seed}");
                }
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read failed after {off} of {len} bytes: {e}"),
        }
    }
}

/// The reader gets every byte sent before the writer's end was dropped,
/// then end of stream (`Ok(0)`), and keeps getting it.
pub async fn check_eof_on_drop(writer: Channel, reader: Channel) {
    write_all(&writer, b"last words").await;
    drop(writer);
    let (got, err) = read_to_end(&reader).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, b"last words");
    within("readable after eof", reader.readable())
        .await
        .unwrap();
    assert_eq!(reader.try_read(&mut [0u8; 8]).unwrap(), 0);
}

/// Writing to a channel whose peer was dropped fails with `BrokenPipe`.
pub async fn check_broken_pipe(writer: Channel, reader: Channel) {
    drop(reader);
    let e = write_until_error(&writer).await;
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
}

/// A `readable()` already pending when the peer is dropped returns, and the
/// read then sees end of stream.
pub async fn check_readable_woken_by_drop(reader: Channel, peer: Channel) {
    let mut r = Box::pin(reader.readable());
    assert!(
        is_pending(&mut r).await,
        "nothing was sent: must be pending"
    );
    drop(peer);
    within("readable woken by the peer's drop", r)
        .await
        .unwrap();
    assert_eq!(reader.try_read(&mut [0u8; 8]).unwrap(), 0);
}

/// A fault-injector cut of `c` (wrapped) ends the channel for both ends:
/// the peer gets the bytes sent before the cut, then end of stream (its
/// pending `readable()` is woken), and its writes fail; the wrapped end
/// reads end of stream and its writes fail with `BrokenPipe`.
pub async fn check_fault_cut(c: Channel, a: Channel) {
    let inj = sitenet_transport::FaultInjector::new(42);
    let _seed = inj.report_on_panic();
    let w = inj.wrap(c);
    write_all(&w, b"before the cut").await;
    assert_eq!(read_exact(&a, 14).await, b"before the cut");
    write_all(&w, b"tail").await;
    // The peer is waiting for more when the cut comes.
    let ((got, err), ()) = tokio::join!(read_to_end(&a), async {
        tokio::task::yield_now().await;
        inj.cut_all();
    });
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, b"tail");
    assert_eq!(inj.cuts(), 1);
    // The wrapped end.
    within("readable after cut", w.readable()).await.unwrap();
    assert_eq!(w.try_read(&mut [0u8; 8]).unwrap(), 0);
    let e = w.try_write2(b"x", &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    // The peer's writes fail too: the cut closed both directions.
    let e = write_until_error(&a).await;
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
}
