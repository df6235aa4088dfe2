use std::collections::HashMap;
use std::io::{self, ErrorKind, IoSlice};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;

use super::*;
use crate::channel::{BoundListener, Channel, TcpTuning};
use crate::{Address, AddressError, FaultInjector, Listener};

/// A transport over `tokio::io::duplex` pairs, listeners by name.
#[derive(Default)]
struct Pipes {
    names: Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>,
    capacity: usize,
}

struct PipeListener {
    name: String,
    queue: tokio::sync::Mutex<mpsc::Receiver<DuplexStream>>,
}

impl Transport for Pipes {
    fn check(&self, rest: &str) -> Result<(), String> {
        if rest.contains('/') {
            return Err("a pipe name has no '/'".into());
        }
        Ok(())
    }

    fn connect<'a>(
        &'a self,
        rest: &'a str,
    ) -> BoxFuture<'a, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            let q = self.names.lock().get(rest).cloned();
            let q = q.ok_or(ErrorKind::ConnectionRefused)?;
            let (ours, theirs) = tokio::io::duplex(self.capacity.max(1));
            q.send(theirs)
                .await
                .map_err(|_| io::Error::from(ErrorKind::ConnectionRefused))?;
            Ok(Box::new(StreamChannel::new(ours, rest)) as Box<dyn TransportChannel>)
        })
    }

    fn bind(&self, rest: &str) -> io::Result<Box<dyn TransportListener>> {
        let (tx, rx) = mpsc::channel(8);
        let mut names = self.names.lock();
        if names.contains_key(rest) {
            return Err(ErrorKind::AddrInUse.into());
        }
        names.insert(rest.to_string(), tx);
        Ok(Box::new(PipeListener {
            name: rest.into(),
            queue: rx.into(),
        }))
    }
}

impl TransportListener for PipeListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<Box<dyn TransportChannel>>> {
        Box::pin(async move {
            let s = self.queue.lock().await.recv().await;
            let s = s.ok_or(ErrorKind::ConnectionAborted)?;
            Ok(Box::new(StreamChannel::new(s, "(client)")) as Box<dyn TransportChannel>)
        })
    }

    fn local_address(&self) -> io::Result<String> {
        Ok(self.name.clone())
    }
}

fn registry(capacity: usize) -> TransportRegistry {
    let mut r = TransportRegistry::new();
    r.register(
        "pipe",
        Arc::new(Pipes {
            capacity,
            ..Pipes::default()
        }),
    )
    .unwrap();
    r
}

use crate::test_runtime as rt;

#[test]
fn a_registered_scheme_parses_and_prints_back() {
    let r = registry(1024);
    let a = r.parse("pipe:node-a").unwrap();
    assert_eq!(a, Address::plugged("pipe", "node-a"));
    assert_eq!(a.scheme(), "pipe");
    assert_eq!(a.socket_string(), "node-a");
    assert_eq!(a.to_string(), "pipe:node-a");
    assert_eq!(r.parse(&a.to_string()).unwrap(), a);
    // Everything after the first colon is the transport's.
    let b = r.parse("pipe:a:b c").unwrap();
    assert_eq!(b, Address::plugged("pipe", "a:b c"));
    assert_eq!(r.parse(&b.to_string()).unwrap(), b);
    // The built-in forms parse as ever.
    assert_eq!(r.parse("tcp:127.0.0.1:1"), Ok(Address::tcp("127.0.0.1", 1)));
    assert_eq!(r.parse("mem:x"), Ok(Address::mem("x")));
    assert!(matches!(r.parse("tcp:h"), Err(AddressError::HostPort(_))));
    assert_eq!(r.schemes().collect::<Vec<_>>(), ["pipe"]);
}

#[test]
fn an_unregistered_scheme_is_a_typed_error_that_says_so() {
    let r = registry(1024);
    for (s, scheme) in [("quic:h:1", "quic"), ("pipes:a", "pipes")] {
        let e = r.parse(s).unwrap_err();
        assert_eq!(
            e,
            AddressError::Unregistered {
                address: s.into(),
                scheme: scheme.into()
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("no transport is registered"), "{msg}");
        assert!(msg.contains("tcp:HOST:PORT"), "{msg}");
    }
    // Plain parsing knows no plugged transport at all.
    assert!(matches!(
        "pipe:a".parse::<Address>(),
        Err(AddressError::Unregistered { .. })
    ));
    // Not a scheme name: the old error.
    assert!(matches!(r.parse("PIPE:a"), Err(AddressError::Scheme(_))));
    assert!(matches!(r.parse("nothing"), Err(AddressError::Scheme(_))));
}

#[test]
fn the_transport_checks_its_part() {
    let r = registry(1024);
    let e = r.parse("pipe:").unwrap_err();
    assert!(matches!(e, AddressError::Invalid { .. }), "{e:?}");
    assert!(e.to_string().contains("nothing after pipe:"), "{e}");
    let e = r.parse("pipe:a/b").unwrap_err();
    assert_eq!(
        e,
        AddressError::Invalid {
            address: "pipe:a/b".into(),
            reason: "a pipe name has no '/'".into()
        }
    );
}

#[test]
fn registration_refuses_built_in_bad_and_taken_names() {
    let mut r = registry(1024);
    let t: Arc<dyn Transport> = Arc::new(Pipes::default());
    for b in ["tcp", "tls", "unix", "mem"] {
        assert_eq!(
            r.register(b, t.clone()).err(),
            Some(RegisterError::BuiltIn(b.into()))
        );
    }
    for bad in ["", "Pipe", "1pipe", "pi:pe", "pi pe", &"p".repeat(33)] {
        assert_eq!(
            r.register(bad, t.clone()).err(),
            Some(RegisterError::Name(bad.into())),
            "{bad:?}"
        );
    }
    assert_eq!(
        r.register("pipe", t.clone()).err(),
        Some(RegisterError::Taken("pipe".into()))
    );
    r.register("x-pipe+2.0", t.clone()).unwrap();
    // A clone shares what was registered before it, not after.
    let before = r.clone();
    r.register("later", t.clone()).unwrap();
    assert!(before.get("later").is_none() && r.get("later").is_some());
    let mut other = TransportRegistry::new();
    other.register("third", t.clone()).unwrap();
    other.extend(&before).unwrap();
    assert_eq!(
        other.schemes().collect::<Vec<_>>(),
        ["pipe", "third", "x-pipe+2.0"]
    );
    assert_eq!(
        other.extend(&before).err(),
        Some(RegisterError::Taken("pipe".into()))
    );
    assert_eq!(format!("{before:?}"), r#"{"pipe", "x-pipe+2.0"}"#);
}

#[test]
fn plugged_addresses_need_their_registry() {
    let a = Address::plugged("pipe", "x");
    let rt = rt();
    rt.block_on(async {
        let e = Channel::connect(&a).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.to_string().contains("no transport is registered"), "{e}");
        assert_eq!(
            Listener::bind(&a).await.unwrap_err().kind(),
            ErrorKind::Unsupported
        );
        assert_eq!(
            BoundListener::bind(&a).unwrap_err().kind(),
            ErrorKind::Unsupported
        );
        // Another registry does not have it either.
        let e = TransportRegistry::new()
            .connect(&a, TcpTuning::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    });
}

#[test]
fn a_plugged_channel_moves_bytes_both_ways_and_ends() {
    let r = registry(1024);
    let rt = rt();
    rt.block_on(async {
        let addr = r.parse("pipe:both").unwrap();
        let bound = r.bind(&addr).unwrap();
        assert_eq!(bound.local_address().unwrap(), addr);
        assert_eq!(
            r.bind(&addr).unwrap_err().kind(),
            ErrorKind::AddrInUse,
            "the transport refuses a second bind"
        );
        let listener = bound.into_listener().unwrap();
        assert_eq!(listener.local_address().unwrap(), addr);
        assert!(!listener.is_tls());
        let c = r.connect(&addr, TcpTuning::default()).await.unwrap();
        let s = listener.accept().await.unwrap();
        assert_eq!(c.scheme(), "pipe");
        assert_eq!(c.peer(), "pipe:both");
        assert_eq!(s.peer(), "pipe:(client)");
        assert_eq!(c.tcp_receive_buffer(), None);
        assert!(format!("{c:?}").contains("pipe"));

        c.writable().await.unwrap();
        assert_eq!(c.try_write2(b"abc", b"def").unwrap(), 6);
        let mut buf = [0u8; 16];
        s.readable().await.unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 6);
        assert_eq!(&buf[..6], b"abcdef");
        assert_eq!(
            s.try_read(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        s.try_write2(b"back", &[]).unwrap();
        c.readable().await.unwrap();
        assert_eq!(c.try_read(&mut buf).unwrap(), 4);

        // The writing direction ends; reading goes on.
        c.shutdown_write().unwrap();
        s.readable().await.unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 0);
        s.try_write2(b"still", &[]).unwrap();
        c.readable().await.unwrap();
        assert_eq!(c.try_read(&mut buf).unwrap(), 5);
        drop(s);
        c.readable().await.unwrap();
        assert_eq!(c.try_read(&mut buf).unwrap(), 0);
    });
}

#[test]
fn readiness_waits_and_is_woken() {
    let r = registry(8);
    let rt = rt();
    rt.block_on(async {
        let addr = r.parse("pipe:wake").unwrap();
        let listener = r.bind(&addr).unwrap().into_listener().unwrap();
        let c = Arc::new(r.connect(&addr, TcpTuning::default()).await.unwrap());
        let s = Arc::new(listener.accept().await.unwrap());
        let mut buf = [0u8; 64];
        // Nothing to read: the read blocks, readiness waits...
        assert_eq!(
            s.try_read(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.readable().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        // ...until the peer writes.
        c.try_write2(b"x", &[]).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 1);

        // Eight bytes fill the pipe: the writer blocks until the reader reads.
        assert_eq!(c.try_write2(&[7; 20], &[]).unwrap(), 8);
        assert_eq!(
            c.try_write2(b"y", &[]).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        let waiting = tokio::spawn({
            let c = c.clone();
            async move { c.writable().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        assert_eq!(s.try_read(&mut buf).unwrap(), 8);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        let bufs = [IoSlice::new(b"ab"), IoSlice::new(b"cd")];
        assert_eq!(c.try_write_vectored(&bufs).unwrap(), 4);
        s.readable().await.unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"abcd");
    });
}

#[test]
fn the_fault_injector_cuts_a_plugged_channel() {
    let r = registry(1024);
    let rt = rt();
    rt.block_on(async {
        let addr = r.parse("pipe:cut").unwrap();
        let listener = r.bind(&addr).unwrap().into_listener().unwrap();
        let f = FaultInjector::new(7);
        let c = f.wrap(r.connect(&addr, TcpTuning::default()).await.unwrap());
        let s = listener.accept().await.unwrap();
        assert_eq!(c.scheme(), "pipe");
        assert_eq!(c.peer(), "pipe:cut");
        c.try_write2(b"before", &[]).unwrap();
        f.cut_all();
        let mut buf = [0u8; 16];
        // The peer reads what was sent, then the end.
        let mut got = Vec::new();
        loop {
            s.readable().await.unwrap();
            match s.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"before");
        assert_eq!(
            s.try_write2(b"x", &[]).unwrap_err().kind(),
            ErrorKind::BrokenPipe
        );
        assert_eq!(
            c.try_write2(b"x", &[]).unwrap_err().kind(),
            ErrorKind::BrokenPipe
        );
        assert_eq!(f.cuts(), 1);
    });
}

#[test]
fn a_closed_stream_channel_reads_the_end_and_refuses_writes() {
    let (a, b) = tokio::io::duplex(64);
    let (a, b) = (StreamChannel::new(a, "b"), StreamChannel::new(b, "a"));
    a.close();
    let mut buf = [0u8; 4];
    assert_eq!(a.try_read(&mut buf).unwrap(), 0);
    assert_eq!(
        a.try_write_vectored(&[IoSlice::new(b"x")])
            .unwrap_err()
            .kind(),
        ErrorKind::BrokenPipe
    );
    assert!(a.shutdown_write().is_ok());
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(a.poll_read_ready(&mut cx).is_ready());
    assert!(a.poll_write_ready(&mut cx).is_ready());
    assert_eq!(b.try_read(&mut buf).unwrap(), 0);
    assert!(b.try_write_vectored(&[IoSlice::new(b"x")]).is_err());
    // Empty buffers move nothing, as with a socket.
    assert_eq!(b.try_read(&mut []).unwrap(), 0);
    assert!(format!("{a:?}").contains("closed: true"));
}
