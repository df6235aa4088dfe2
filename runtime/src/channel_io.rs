//! Driving a channel through the open protocol before it belongs to a
//! ComObject: the initiator's connect-and-negotiate and the acceptor's
//! present-and-wait. Both own the [`TransObject`] by value and bound every
//! wait by the handshake timeout; the protocol itself is decided by the
//! sans-IO machines in `sitenet_protocols::connection::handshake`.

use std::io;
use std::time::Duration;

use thiserror::Error;

use sitenet_protocols::connection::handshake::MIN_BUFFER;
use sitenet_protocols::{
    Acceptor, Initiator, LocalInfo, Negotiate, Nonce, OpenError, Opened, SiteId,
};
use sitenet_transport::channel::TcpTuning;
use sitenet_transport::{Address, Channel, SlotLease};

use crate::trans_object::TransObject;

/// Why a channel did not get through its open protocol.
#[derive(Debug, Error)]
pub(crate) enum OpenFailure {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    #[error("channel failed during the handshake: {0}")]
    Io(io::Error),
    #[error("peer closed the channel during the handshake")]
    Closed,
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The admission rules closed the pending handshake.
    #[error("closed in its handshake: {0}")]
    Dropped(sitenet_protocols::slots::admission::Dropped),
    #[error("the node is stopping")]
    Stopping,
}

impl From<io::Error> for OpenFailure {
    /// TLS refusing the peer (its certificate, its records) is the open
    /// protocol failing for good, not the socket.
    fn from(e: io::Error) -> Self {
        match sitenet_transport::tls::TlsSession::refusal(&e) {
            Some(why) => Self::Open(OpenError::Tls(why)),
            None => Self::Io(e),
        }
    }
}

/// The IP address of a channel's peer (`Channel::peer`: `tcp:IP:PORT`);
/// `None` for Unix-socket and in-process channels, which have none.
pub(crate) fn peer_ip(peer: &str) -> Option<std::net::IpAddr> {
    peer.strip_prefix("tcp:")?
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| a.ip())
}

impl From<OpenFailure> for sitenet_protocols::OpenFailure {
    fn from(e: OpenFailure) -> Self {
        match e {
            OpenFailure::Open(e) => Self::Open(e),
            other => Self::Transport(other.to_string()),
        }
    }
}

/// How a node dials out: what its configuration says of connecting (an
/// owned copy, for the future that connects).
pub(crate) struct Dial {
    pub(crate) fault: Option<sitenet_transport::FaultInjector>,
    pub(crate) tcp: TcpTuning,
    pub(crate) buffer_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    /// Longest wait in the acceptor's line (`NodeConfig::line_give_up`).
    pub(crate) line_give_up: Duration,
    pub(crate) tls: Option<sitenet_transport::tls::TlsIdentity>,
    /// What dials a plugged transport's address.
    pub(crate) transports: sitenet_transport::TransportRegistry,
}

impl Dial {
    pub(crate) fn new(cfg: &crate::NodeConfig) -> Self {
        Self {
            fault: cfg.fault_injector.clone(),
            tcp: cfg.tcp_tuning(),
            buffer_size: cfg.buffer_size,
            connect_timeout: cfg.connect_timeout,
            handshake_timeout: cfg.handshake_timeout,
            line_give_up: cfg.line_give_up,
            tls: cfg.tls.clone(),
            transports: cfg.transports.clone(),
        }
    }
}

/// Connects to `addr` and runs the initiator's side of the open protocol
/// (`hs`, already told what to propose) over rings of the dial's buffer
/// size, in the channel slot `lease` (given back if the open fails).
///
/// The handshake is bounded by the handshake timeout, unless the acceptor
/// puts the connection in its waiting line (a `WAIT` frame):
/// `on_wait` is then told the acceptor's hold time (the ComObject waits
/// with a give-up deadline, and abandons this future when it passes), and
/// the wait for the answer is bounded by the shorter of that hold time
/// and the dial's `line_give_up`, plus a handshake timeout.
pub(crate) async fn connect_and_open(
    addr: Address,
    lease: Option<SlotLease>,
    dial: Dial,
    mut hs: Initiator,
    mut on_wait: impl FnMut(Duration),
) -> Result<(TransObject, Opened), (OpenFailure, Option<SiteId>)> {
    let Dial {
        fault,
        tcp,
        buffer_size,
        connect_timeout,
        handshake_timeout,
        line_give_up,
        tls,
        transports,
    } = dial;
    // A `tls:` address: TLS runs in the TransObject, with this site's
    // certificate.
    let session = match (addr.is_tls(), &tls) {
        (false, _) => None,
        (true, Some(id)) => match id.client_session() {
            Ok(s) => Some(s),
            Err(e) => return Err((e.into(), None)),
        },
        // Never reachable from here: a permanent failure, said plainly.
        (true, None) => {
            return Err((
                OpenFailure::Open(OpenError::Tls(format!(
                    "{addr} is a tls: address and this node holds no certificate \
                     (NodeConfig::tls; --cert, --key and --ca on the command line)"
                ))),
                None,
            ))
        }
    };
    let connect = transports.connect(&addr, tcp);
    let ch = match actix_rt::time::timeout(connect_timeout, connect).await {
        Err(_) => return Err((OpenFailure::ConnectTimeout(addr.to_string()), None)),
        Ok(Err(source)) => {
            return Err((
                OpenFailure::Connect {
                    addr: addr.to_string(),
                    source,
                },
                None,
            ))
        }
        Ok(Ok(ch)) => match &fault {
            Some(f) => f.wrap(ch),
            None => ch,
        },
    };
    let mut t = TransObject::new(ch, buffer_size as usize, lease);
    if let Some(s) = session {
        t.start_tls(s);
    }
    let mut deadline = tokio::time::Instant::now() + handshake_timeout;
    let mut waiting = false;
    let run = async {
        loop {
            let filled = tokio::time::timeout_at(deadline, t.fill()).await;
            if !filled.map_err(|_| OpenError::Timeout)?? {
                return Err(OpenFailure::Closed);
            }
            if let Some(site) = t.certified_peer() {
                hs.certified(site);
            }
            let done = hs.handle_input(&mut t.inb, &mut t.outb)?;
            if let Some(w) = hs.take_wait() {
                let hold = Duration::from_millis(w.hold_ms.into());
                on_wait(hold);
                if !std::mem::replace(&mut waiting, true) {
                    deadline =
                        tokio::time::Instant::now() + hold.min(line_give_up) + handshake_timeout;
                }
            }
            tokio::time::timeout_at(deadline, t.flush())
                .await
                .map_err(|_| OpenError::Timeout)??;
            if let Some(opened) = done {
                return Ok(opened);
            }
        }
    };
    match run.await {
        Err(e) => Err((e, hs.presented())),
        Ok(opened) => Ok((t, opened)),
    }
}

/// Runs the acceptor's side up to NEGOTIATE on a freshly accepted channel,
/// which holds no channel slot yet (the caller takes one once the peer has
/// presented itself). The handshake uses minimum-size rings (a flood of
/// half-open connections costs little); the ComObject grows them only if
/// the link decision accepts the channel. `spoke` is called once, when the
/// peer's first bytes arrive; the handshake ends when the admission rules
/// fire `dropped` (a cap or a deadline: the silence deadline, or the
/// handshake timeout), or with the node (its sender dropped). On failure
/// the channel is handed back with the reason, so the caller can report the
/// fault before the peer sees the close.
pub(crate) async fn accept_until_negotiate(
    ch: Channel,
    local: LocalInfo,
    keys: sitenet_protocols::Keyring,
    tls: Tls,
    dropped: tokio::sync::oneshot::Receiver<sitenet_protocols::slots::admission::Dropped>,
    spoke: impl FnOnce(),
) -> Result<(TransObject, Accepted), (TransObject, OpenFailure)> {
    let mut t = TransObject::new(ch, MIN_BUFFER as usize, None);
    // A nonce of its own for every handshake: the initiator's proof of
    // continuity is bound to it.
    // Holding cookies, the machine refuses a NEGOTIATE that proves none
    // before returning it (and writes the refusal to `t.outb`).
    let mut acc = Acceptor::with_keys(&local, fresh_nonce(), keys, &mut t.outb);
    if tls.required {
        acc = acc.require_certificate();
    }
    if let Some(s) = tls.session {
        t.start_tls(s);
    }
    let outcome = {
        let run = async {
            t.flush().await?;
            let mut spoke = Some(spoke);
            loop {
                if !t.fill().await? {
                    return Err(OpenFailure::Closed);
                }
                if let Some(f) = spoke.take() {
                    f();
                }
                if let Some(site) = t.certified_peer() {
                    acc.certified(site);
                }
                if let Some(n) = acc.handle_input(&mut t.inb, &mut t.outb)? {
                    return Ok(n);
                }
            }
        };
        tokio::select! {
            r = run => r,
            why = dropped => Err(why.map_or(OpenFailure::Stopping, OpenFailure::Dropped)),
        }
    };
    match outcome {
        Err(e) => Err((t, e)),
        Ok(neg) => Ok((
            t,
            Accepted {
                neg,
                nonce: acc.nonce(),
                cookie: acc.answer_proof(),
                certificate: acc.peer_certificate(),
            },
        )),
    }
}

/// A NEGOTIATE that got through the acceptor's machine: what the site's
/// ComObject needs to decide and answer.
pub(crate) struct Accepted {
    pub(crate) neg: Negotiate,
    /// The nonce our PRESENT carried.
    pub(crate) nonce: Nonce,
    /// Our cookie proof for the answer (`None` at the open level).
    pub(crate) cookie: Option<sitenet_protocols::CookieProof>,
    /// What TLS proved of the peer.
    pub(crate) certificate: sitenet_protocols::PeerCertificate,
}

/// The TLS an accepted channel runs (none at the open and cookie levels).
pub(crate) struct Tls {
    /// The session, for a channel accepted on a `tls:` listener.
    pub(crate) session: Option<sitenet_transport::tls::TlsSession>,
    /// This node holds a certificate: the peer must prove one.
    pub(crate) required: bool,
}

/// A handshake nonce (see `sitenet_protocols::connection::handshake::continuity`):
/// drawn here, by the driver, since the protocol machines never draw one.
pub(crate) fn fresh_nonce() -> Nonce {
    rand::random()
}

/// Writes what is in the output ring (a refusal) and drops the channel,
/// within `limit`.
pub(crate) async fn flush_and_close(mut t: TransObject, limit: Duration) {
    let _ = actix_rt::time::timeout(limit, t.flush()).await;
}
