//! `Channel::rehome`: a channel accepted on one thread's
//! runtime and handed to another's works there on its own, even once the
//! runtime that accepted it is gone, and loses none of the bytes that
//! waited in the socket meanwhile.

mod common;

use std::io::ErrorKind;

use common::{within, TempDir};
use sitenet_transport::{Address, Channel, Listener};

/// A runtime of one thread, as each of a node's arbiters is.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Reads exactly `n` bytes.
async fn read_n(ch: &Channel, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < n {
        ch.readable().await.unwrap();
        match ch.try_read(&mut buf) {
            Ok(0) => panic!("closed after {} bytes", got.len()),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

async fn write_all(ch: &Channel, mut data: &[u8]) {
    while !data.is_empty() {
        ch.writable().await.unwrap();
        match ch.try_write2(data, &[]) {
            Ok(k) => data = &data[k..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("write: {e}"),
        }
    }
}

fn moved_between_runtimes(addr: Address) {
    // Accepted on the first runtime, with bytes already waiting in it.
    let first = runtime();
    let (mut accepted, client) = first.block_on(async {
        let l = Listener::bind(&addr).await.unwrap();
        let at = l.local_address().unwrap();
        let (c, a) = within("connect and accept", async {
            tokio::join!(Channel::connect(&at), l.accept())
        })
        .await;
        let (c, a) = (c.unwrap(), a.unwrap());
        write_all(&c, b"before").await;
        (a, c)
    });
    // The first runtime is gone: a channel still registered with its
    // driver can no longer wait for readiness.
    drop(first);
    let second = std::thread::spawn(move || {
        runtime().block_on(async move {
            accepted.rehome().unwrap();
            let got = read_n(&accepted, 6).await;
            write_all(&accepted, b"answer").await;
            (got, accepted)
        })
    })
    .join()
    .unwrap();
    assert_eq!(second.0, b"before");
    runtime().block_on(async move {
        let mut client = client;
        client.rehome().unwrap();
        assert_eq!(read_n(&client, 6).await, b"answer");
    });
}

#[test]
fn a_tcp_channel_moves_to_another_runtime() {
    moved_between_runtimes(Address::tcp("127.0.0.1", 0));
}

#[test]
fn a_unix_channel_moves_to_another_runtime() {
    let dir = TempDir::new();
    moved_between_runtimes(Address::unix(dir.sock("rehome.sock")));
}
