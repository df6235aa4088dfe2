//! The tunables of a ComObject: its waits (backoff, linger, give-up) and
//! the link decision it uses, shared by every ComObject of a node.

use std::sync::Arc;
use std::time::Duration;

use crate::base::site::SiteId;
use crate::connection::link::{decide, Decision, LinkView};
use crate::connection::session::SessionConfig;

/// Tunables of a ComObject (docs/architecture.md, "The design": defaults); the session's own are in
/// [`SessionConfig`].
#[derive(Debug, Clone)]
pub struct ComConfig {
    /// The session's tunables (shared: every ComObject of a node points at
    /// one copy).
    pub session: Arc<SessionConfig>,
    /// This node's ByteBuffer size: an acceptor answers with the smaller of
    /// it and the initiator's proposal (it may lower, never raise).
    pub buffer_size: u32,
    /// Largest message this node accepts (told to the peer in the answer).
    pub max_message: u64,
    /// First reconnect delay; doubles per failed attempt …
    pub reconnect_min: Duration,
    /// … up to this …
    pub reconnect_max: Duration,
    /// … each delay multiplied by a factor drawn from `1 ± jitter`.
    pub reconnect_jitter: f64,
    /// No references, nothing pending and idle this long: close weakly;
    /// after a rejected weak close, none is tried again for this long.
    pub linger: Duration,
    /// A working channel that carried no application message for this
    /// long, with nothing pending, may shrink its rings to the minimum (they
    /// grow back on demand): an idle channel does not keep two full-size
    /// buffers for ever.
    pub ring_idle: Duration,
    /// After the peer's hard close, wait this long for it to call back
    /// before reconnecting ourselves — only with nothing to send: with
    /// messages to send the site reopens at once (the peer calls back only
    /// for messages of its own), if the peer acknowledged one of them on
    /// the channel it closed (one that acknowledged nothing could have us
    /// redial it in a loop).
    pub reopen_after_peer_hard_close: Duration,
    /// Longest wait in a peer's line: an open attempt the peer
    /// told to wait is abandoned after this long (or after the peer's own
    /// hold time, if shorter), and the site retries after its backoff.
    pub line_give_up: Duration,
    /// This node listens at an address its peers can call (a node without
    /// listen addresses is not). A node that can be called back does not
    /// reopen a channel its peer closed hard just in case the peer holds
    /// messages for it: the peer calls back when it does. Reopening
    /// without need kept every idle pair of referenced sites churning
    /// through the slot limits for ever (found by the simulator; see
    /// `ComObject::wants_channel`).
    pub callable: bool,
    /// Temporarily failed this long: fail permanently. `None`: never.
    pub give_up_after: Option<Duration>,
    /// Temporarily failed this long while the site cannot be called back
    /// (it named no address this node can reach — a client that does not
    /// listen): fail permanently, handing back what it was owed. Only the
    /// site can restore the channel, and a site that went for good would
    /// otherwise pin its queued replies for ever. Applies even when
    /// `give_up_after` is `None`; the shorter of the two wins.
    pub unreachable_give_up: Duration,
    /// The schemes of the transports the node plugged in: the addresses of
    /// a peer's listen list its books keep beyond the built-in kinds (see
    /// [`PluggedSchemes`](crate::connection::address_book::PluggedSchemes)).
    pub plugged: crate::connection::address_book::PluggedSchemes,
    /// This node's site id (the link decision's tie-break). Kept here, in
    /// the configuration every ComObject of the node shares, rather than in
    /// each of them; `ComObject::new` sets it.
    pub local: SiteId,
    /// The link decision (replaced only by tests that break it on purpose,
    /// through `ComObject::with_decide`).
    #[doc(hidden)]
    pub decide: fn(LinkView, &crate::connection::handshake::Negotiate) -> Decision,
}

impl ComConfig {
    /// `cfg`, with every wait at most [`MAX_WAIT`](crate::base::timer::MAX_WAIT)
    /// (a copy only if one is longer), its session's too: `Duration::MAX`
    /// given for "never" made a deadline past what the clock holds, and
    /// the machine panicked where it set its timer.
    pub(crate) fn bounded(cfg: Arc<ComConfig>) -> Arc<ComConfig> {
        let max = crate::base::timer::MAX_WAIT;
        let waits = [
            cfg.reconnect_min,
            cfg.reconnect_max,
            cfg.linger,
            cfg.ring_idle,
            cfg.reopen_after_peer_hard_close,
            cfg.line_give_up,
            cfg.give_up_after.unwrap_or_default(),
            cfg.unreachable_give_up,
        ];
        if waits.iter().all(|d| *d <= max) && cfg.session.within_bounds() {
            return cfg;
        }
        // Checked above without a copy: copying shares its two `Arc`s.
        let mut c = (*cfg).clone();
        c.session = SessionConfig::bounded(c.session.clone());
        crate::base::timer::bound([
            &mut c.reconnect_min,
            &mut c.reconnect_max,
            &mut c.linger,
            &mut c.ring_idle,
            &mut c.reopen_after_peer_hard_close,
            &mut c.line_give_up,
            &mut c.unreachable_give_up,
        ]);
        if let Some(d) = &mut c.give_up_after {
            crate::base::timer::bound([d]);
        }
        Arc::new(c)
    }
}

impl Default for ComConfig {
    fn default() -> Self {
        Self {
            session: Arc::default(),
            buffer_size: 64 * 1024,
            max_message: 256 * 1024 * 1024,
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_secs(5),
            reconnect_jitter: 0.2,
            linger: Duration::from_secs(10),
            ring_idle: Duration::from_secs(2),
            reopen_after_peer_hard_close: Duration::from_secs(5),
            line_give_up: Duration::from_secs(60),
            callable: false,
            give_up_after: None,
            unreachable_give_up: Duration::from_secs(15),
            plugged: crate::connection::address_book::PluggedSchemes::default(),
            local: SiteId(0),
            decide,
        }
    }
}
