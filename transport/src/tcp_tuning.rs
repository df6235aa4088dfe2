//! How a TCP channel's socket is set up: no Nagle delay, a bounded unsent
//! backlog in the kernel and a bounded receive buffer, so that the backlog
//! stays where sitenet's scheduler reaches it. Re-exported from
//! [`channel`](crate::channel), where it has always been named.

use std::io;

use tokio::net::TcpStream;

/// Unsent bytes a TCP socket may hold before it stops taking more (Linux
/// `TCP_NOTSENT_LOWAT`). The kernel's send buffer grows to megabytes, and
/// whatever sits there is beyond the reach of sitenet's scheduler: a
/// priority-4 message written after a 64 MiB one would wait behind all of
/// it. With this bound the backlog stays in sitenet's ring, where the
/// scheduler interleaves lanes, and the kernel holds only enough to keep
/// the link busy.
pub const TCP_NOTSENT_LOWAT: u32 = 128 * 1024;

/// The kernel's receive buffer of a TCP channel (`SO_RCVBUF`; Linux
/// doubles it for its bookkeeping). Left to autotuning it grows to tens of
/// megabytes, and when the reader is briefly slower than a zero-copy
/// writer the backlog piles up there, where no scheduler reaches: a
/// priority-4 message sent after a 64 MiB one then waits behind all of it.
/// `sitenet bench --processes` (bulk, 1 MiB round trips, then that case;
/// six runs each): autotuned 2.8–31 ms; 256 KiB 0.78–1.07 ms; 128 KiB
/// 0.65–0.78 ms, but bulk 10% and 1 MiB round trips 18% slower. The price
/// of 256 KiB is the window: it covers the bandwidth-delay product of
/// 10 Gbit/s only up to 0.2 ms of round trip, so a long fat link is slower
/// than with autotuning.
pub const TCP_RECEIVE_BUFFER: usize = 256 << 10;

/// The receive buffer of a TCP channel whose peer is on this host (a
/// loopback address), and ([`TCP_LOOPBACK_NOTSENT_LOWAT`]) its unsent
/// backlog. Loopback's bandwidth-delay product is a few kilobytes, so a
/// window of megabytes, or of [`TCP_RECEIVE_BUFFER`], buys no throughput
/// and only queues bytes ahead of an urgent message. `sitenet bench
/// --processes`, alternated in one sitting against 256 KiB and 128 KiB of
/// unsent backlog: bulk 8 MiB 1.27× faster (1.20–1.44), 1 MiB round trips
/// 1.18×, a 64 B priority-4 message behind a 64 MiB one 0.5 ms against
/// 1.1 ms (docs/performance.md).
pub const TCP_LOOPBACK_RECEIVE_BUFFER: usize = 64 << 10;

/// Unsent bytes a TCP socket to a peer on this host may hold (see
/// [`TCP_LOOPBACK_RECEIVE_BUFFER`]).
pub const TCP_LOOPBACK_NOTSENT_LOWAT: u32 = 32 * 1024;

/// How a TCP channel's socket is set up beyond what every channel gets (no
/// Nagle delay, a bounded unsent backlog: [`TCP_NOTSENT_LOWAT`]).
///
/// ```
/// use sitenet_transport::channel::{TcpTuning, TCP_RECEIVE_BUFFER};
///
/// // The default bounds the kernel's receive buffer (see TCP_RECEIVE_BUFFER)...
/// assert_eq!(TcpTuning::default().receive_buffer, Some(TCP_RECEIVE_BUFFER));
/// // ...which a long fat link may hand back to the kernel's autotuning.
/// let wan = TcpTuning { receive_buffer: None, ..TcpTuning::default() };
/// # let _ = wan;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpTuning {
    /// The kernel's receive buffer (`SO_RCVBUF`), or `None` to leave it to
    /// the kernel's autotuning: a window large enough for any link, at the
    /// price of a backlog no scheduler reaches (see [`TCP_RECEIVE_BUFFER`]).
    pub receive_buffer: Option<usize>,
    /// The receive buffer when the peer is on this host (a loopback
    /// address; unsent backlog then [`TCP_LOOPBACK_NOTSENT_LOWAT`]), or
    /// `None` to treat such a peer as any other (see
    /// [`TCP_LOOPBACK_RECEIVE_BUFFER`]).
    pub loopback_receive_buffer: Option<usize>,
}

impl Default for TcpTuning {
    fn default() -> Self {
        Self {
            receive_buffer: Some(TCP_RECEIVE_BUFFER),
            loopback_receive_buffer: Some(TCP_LOOPBACK_RECEIVE_BUFFER),
        }
    }
}

/// Sets up a TCP stream the way channels use it: no Nagle delay, a bounded
/// unsent backlog in the kernel ([`TCP_NOTSENT_LOWAT`], where the system
/// has it) and the receive buffer `tuning` asks for (its loopback one if
/// the peer is on this host).
pub(crate) fn tune_tcp(s: &TcpStream, tuning: TcpTuning) -> io::Result<()> {
    s.set_nodelay(true)?;
    let local_peer = tuning
        .loopback_receive_buffer
        .filter(|_| s.peer_addr().is_ok_and(|a| a.ip().is_loopback()));
    let (receive_buffer, _lowat) = match local_peer {
        Some(n) => (Some(n), TCP_LOOPBACK_NOTSENT_LOWAT),
        None => (tuning.receive_buffer, TCP_NOTSENT_LOWAT),
    };
    if let Some(n) = receive_buffer {
        socket2::SockRef::from(s).set_recv_buffer_size(n)?;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket2::SockRef::from(s).set_tcp_notsent_lowat(_lowat) {
        tracing::debug!(error = %e, "TCP_NOTSENT_LOWAT not available; the kernel buffers freely");
    }
    Ok(())
}
