//! TCP channels' receive buffer (`TcpTuning`): bounded by default (what
//! keeps a backlog where sitenet's scheduler reaches it), set to what a
//! node asks for on both the connecting and the accepting side, and left
//! to the kernel's autotuning when a node asks for that.

mod common;

use common::within;
use sitenet_transport::channel::{TcpTuning, TCP_LOOPBACK_RECEIVE_BUFFER, TCP_RECEIVE_BUFFER};
use sitenet_transport::{Address, Channel, Listener};

/// A connected pair over loopback, both ends tuned with `tuning`.
async fn pair(tuning: TcpTuning) -> (Channel, Channel) {
    let l = Listener::bind(&Address::tcp("127.0.0.1", 0)).await.unwrap();
    let addr = l.local_address().unwrap();
    let (c, a) = within("connect and accept", async {
        tokio::join!(
            Channel::connect_tuned(&addr, tuning),
            l.accept_tuned(tuning)
        )
    })
    .await;
    (c.unwrap(), a.unwrap())
}

/// What a TCP socket nobody tuned reports.
fn untuned() -> usize {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    socket2::SockRef::from(&s).recv_buffer_size().unwrap()
}

#[tokio::test]
async fn the_receive_buffer_is_bounded_by_default_set_on_request_or_left_to_the_kernel() {
    // Default, peer on this host: the loopback bound (Linux reports twice
    // what was set).
    let (c, a) = pair(TcpTuning::default()).await;
    for ch in [&c, &a] {
        let n = ch.tcp_receive_buffer().unwrap();
        assert!(
            (TCP_LOOPBACK_RECEIVE_BUFFER..=2 * TCP_LOOPBACK_RECEIVE_BUFFER).contains(&n),
            "{n}"
        );
    }
    // The bound for other peers, when loopback gets no bound of its own.
    let (c, a) = pair(TcpTuning {
        loopback_receive_buffer: None,
        ..TcpTuning::default()
    })
    .await;
    for ch in [&c, &a] {
        let n = ch.tcp_receive_buffer().unwrap();
        assert!(
            (TCP_RECEIVE_BUFFER..=2 * TCP_RECEIVE_BUFFER).contains(&n),
            "{n}"
        );
    }
    // A size of the node's choosing, on both sides.
    let (c, a) = pair(TcpTuning {
        receive_buffer: Some(96 << 10),
        loopback_receive_buffer: None,
    })
    .await;
    for ch in [&c, &a] {
        let n = ch.tcp_receive_buffer().unwrap();
        assert!(((96 << 10)..=(192 << 10)).contains(&n), "{n}");
    }
    // None: untouched, as the kernel sets up any socket.
    let (c, a) = pair(TcpTuning {
        receive_buffer: None,
        loopback_receive_buffer: None,
    })
    .await;
    let kernel = untuned();
    assert_eq!(c.tcp_receive_buffer(), Some(kernel));
    assert_eq!(a.tcp_receive_buffer(), Some(kernel));
    // Not a TCP channel: no such buffer.
    let (m, _) = sitenet_transport::MemChannel::pair();
    assert_eq!(Channel::Mem(m).tcp_receive_buffer(), None);
}
