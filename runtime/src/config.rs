//! Node configuration, with the design's defaults (docs/architecture.md, "The design").

use std::time::Duration;

use sitenet_protocols::connection::scheduler::SchedulerConfig;
use sitenet_protocols::SessionConfig;
use sitenet_transport::TransController;

/// The longest duration a setting of [`NodeConfig`] takes: 10^9 seconds
/// (about 31 years). A longer one, `Duration::MAX` included, counts as
/// this, which is never in practice: a deadline further from now than the
/// clock holds is not something a node can wait for.
pub const MAX_DURATION: Duration = sitenet_protocols::base::timer::MAX_WAIT;

/// Everything tunable about a node. `Default` gives the design's defaults (docs/architecture.md).
///
/// Every duration is at most [`MAX_DURATION`] (a longer one counts as it),
/// so `Duration::MAX` may be given for "never".
///
/// ```
/// use std::time::Duration;
/// use sitenet_runtime::{Node, NodeConfig};
///
/// // Start from the defaults and change what the deployment needs. The
/// // struct is `#[non_exhaustive]` (new settings are added without
/// // breaking anyone), so it is changed in place rather than built as a
/// // literal: here, or in `NodeBuilder::configure(|c| …)`.
/// let mut cfg = NodeConfig::default();
/// cfg.max_message_size = 64 << 20;                     // 64 MiB messages
/// cfg.heartbeat_interval = Duration::from_millis(250); // faster failure detection
/// cfg.silence_timeout = Duration::from_secs(2);
/// cfg.give_up_after = Some(Duration::from_secs(20));   // then fail for good
/// let node = Node::builder().config(cfg).start()?;
/// assert_eq!(node.config().max_message_size, 64 << 20);
/// # Ok::<(), sitenet_runtime::NodeError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// ByteBuffer size per channel direction (minimum 4 KiB). The initiator
    /// proposes it; an acceptor with a smaller one lowers it.
    pub buffer_size: u32,
    /// Largest message accepted or sent (prelude, header and body).
    pub max_message_size: u64,
    /// Bytes one remote site may hold in its outbox, queues and
    /// unacknowledged ledger together before `send` waits (a send's `try_now` fails),
    /// each message counted by what it occupies (its wire bytes and its
    /// record, about 96 bytes). Never less than twice `max_message_size`.
    pub output_bound: u64,
    /// Bytes all partly received messages of the node may hold.
    pub reassembly_budget: u64,
    /// Explicit ack after this many bytes …
    pub ack_bytes: u64,
    /// … or messages …
    pub ack_messages: u32,
    /// … or this long without a piggy-backed ack.
    pub ack_delay: Duration,
    /// Weights of levels 2, 3, 4 when they share a channel (by bytes).
    pub lane_weights: [u32; 3],
    /// Level 1 waits at most this long before competing as level 2.
    pub background_promotion: Duration,
    /// Bound on the open protocol (above zero).
    pub handshake_timeout: Duration,
    /// Bound on establishing a TCP connection (above zero).
    pub connect_timeout: Duration,
    /// The kernel's receive buffer of each TCP channel (`SO_RCVBUF`),
    /// connected or accepted. The default, 256 KiB, keeps a backlog in
    /// sitenet's rings, where the scheduler lets an urgent message pass a
    /// bulk transfer (measured: an urgent message behind a 64 MiB one took
    /// 2.8–31 ms with autotuning, 0.8–1.1 ms with 256 KiB); it covers the
    /// bandwidth-delay product of 10 Gbit/s up to 0.2 ms of round trip.
    /// `None` leaves it to the kernel's autotuning: for long fat links,
    /// where throughput matters more than overtaking.
    pub tcp_receive_buffer: Option<usize>,
    /// The kernel's receive buffer of a TCP channel whose peer is on this
    /// host (a loopback address), used instead of `tcp_receive_buffer`
    /// for it, with an unsent backlog of 32 KiB. Default 64 KiB:
    /// loopback's bandwidth-delay product is a few kilobytes, and a larger
    /// window only queues bytes ahead of an urgent message (measured over
    /// loopback against 256 KiB: bulk 1.27× faster, an urgent message
    /// behind a 64 MiB one 0.5 ms against 1.1 ms). `None` treats such a
    /// peer as any other.
    pub tcp_loopback_receive_buffer: Option<usize>,
    /// First reconnect delay; doubles per failed attempt …
    pub reconnect_min: Duration,
    /// … up to this, with ±20% jitter.
    pub reconnect_max: Duration,
    /// Accepted connections this node holds in their handshake at most.
    /// Such a connection holds a file descriptor but no channel slot (the
    /// slot is taken once its peer has presented itself), so it is no slot
    /// pressure; this cap bounds its descriptors instead. At the cap a new
    /// connection is still admitted and the oldest silent pending one (of
    /// the source holding the most) is closed: see
    /// `sitenet_protocols::slots::admission` for why the oldest, not the newest.
    /// The default is [`handshake_fds`](sitenet_protocols::slots::admission::handshake_fds)
    /// of the process's descriptor limit — an eighth of what the 64
    /// reserved descriptors leave, 8 to 1,024 (120 at the common limit of
    /// 1,024) — the room the process's slot limits
    /// ([`SlotConfig::from_fd_limit`](sitenet_protocols::slots::SlotConfig::from_fd_limit))
    /// leave out of their hard limit: with every slot in use and every
    /// pending handshake open, the process still has its descriptors.
    /// (Several listening nodes in one process share that room.)
    pub max_pending_handshakes: usize,
    /// Pending handshakes one source address (an IPv6 /64) holds at most
    /// once the node holds half of `max_pending_handshakes`; beyond, a new
    /// one from it closes its own oldest. Below half the cap a burst from
    /// one address (a NAT, a process starting many clients) is not held
    /// back. 8 by default. Unix-socket and in-process connections have no
    /// address: only the node's cap bounds them.
    pub max_pending_handshakes_per_source: usize,
    /// An accepted connection that has sent nothing for this long is
    /// closed (an honest initiator answers PRESENT within a round trip);
    /// one that has spoken has until `handshake_timeout`. 2 s by default;
    /// never more than `handshake_timeout`; above zero.
    pub handshake_silence: Duration,
    /// Send a heartbeat on a channel idle this long (above zero).
    pub heartbeat_interval: Duration,
    /// A channel silent this long is presumed dead: the site is temporarily
    /// failed and reconnected. Longer than `heartbeat_interval` (else an
    /// idle peer is taken for failed between two of its heartbeats), or
    /// [`MAX_DURATION`]: never.
    pub silence_timeout: Duration,
    /// Bound on every wait of the close protocol.
    pub close_timeout: Duration,
    /// A partly received message that gets no fragment for this long is
    /// abandoned and its channel closed; a channel that holds reassembly
    /// budget while waiting this long for more gives way to the oldest
    /// holder (its peer resends from the first fragment).
    pub reassembly_idle: Duration,
    /// While another channel waits for reassembly budget, the oldest
    /// holder (which may exceed its share and never gives way otherwise)
    /// keeps its place only while it receives at least this many bytes per
    /// second, after half a `reassembly_idle` of grace; a slower one gives way
    /// like any other holder (its channel closes, not as a fault, and its
    /// peer resends). A trickle cannot keep the budget; lower it for links
    /// slower than 1 MiB/s. 0: no such deadline.
    pub reassembly_min_rate: u64,
    /// Handler time one turn of a channel's input may take before its actor
    /// lets the other work of its thread run (the rest is handled in the
    /// next turn). Whatever the handlers cost, deliveries pause about
    /// every half of the shorter of this and `ack_delay`, so
    /// acknowledgements and heartbeats go out between handler calls: a
    /// busy node is never taken for dead.
    pub turn_budget: Duration,
    /// When no `SiteRef` to a site is left, nothing is pending and the channel
    /// has been idle this long, it is closed weakly; after the peer rejects a
    /// weak close, none is tried again for this long.
    pub linger: Duration,
    /// A channel that carried no application message for this long, with
    /// nothing pending, shrinks its two ByteBuffers to the minimum (4 KiB);
    /// they grow back to `buffer_size` as soon as traffic needs them.
    pub ring_idle: Duration,
    /// After the peer closed hard (it is short of resources and will come
    /// back when it has something for us), wait this long before
    /// reconnecting ourselves, while we have nothing to send: a site with
    /// messages to send reopens at once, since the peer calls back only
    /// for messages of its own — if the peer acknowledged one of them on
    /// the channel it closed (a peer that acknowledged nothing could
    /// otherwise have us redial it in a loop).
    pub reopen_after_peer_hard_close: Duration,
    /// Longest wait in a peer's line: a peer whose slots are full
    /// tells an opening site to wait and lets it in when a slot frees; a
    /// site waits at most this long (or the peer's own hold time, if
    /// shorter), in `WaitingForCallback`, and then retries after its
    /// backoff. Default 60 s.
    pub line_give_up: Duration,
    /// Who gives a slot up while peers wait in this node's line, and so who
    /// is served next: [`Admission::Share`](sitenet_protocols::slots::Admission::Share)
    /// (short turns in rotation) or
    /// [`Admission::Fifo`](sitenet_protocols::slots::Admission::Fifo)
    /// (first come stays until preempted). A setting of the slot
    /// controller the node uses ([`trans_controller`](Self::trans_controller)),
    /// applied when the node starts: nodes that share a controller (the
    /// process's, by default) share its policy, and the last node started
    /// with one set decides. `None` (the default) leaves the controller's
    /// own, which is `Share` unless its `SlotConfig` says otherwise.
    pub admission: Option<sitenet_protocols::slots::Admission>,
    /// The threads the node's actors run on when no runtime is given
    /// (`NodeBuilder::runtime`): the process-wide pool of that many
    /// ([`Runtime::shared_with_threads`](crate::Runtime::shared_with_threads)),
    /// its sites spread over them. `None` (the default): the caller's actix
    /// arbiter if it runs in one, else the process's default pool, one
    /// thread per core. `Some(1)` keeps a node's whole life on
    /// one thread.
    pub threads: Option<usize>,
    /// A site temporarily failed for this long (its channel lost, every
    /// open since refused or timed out) is declared permanently failed
    /// ([`SiteFailure::GaveUp`](crate::SiteFailure::GaveUp),
    /// [`NodeEvent::SiteDown`](crate::NodeEvent::SiteDown)): what was
    /// queued for it is handed back, and requests waiting on it fail then
    /// rather than at their own timeout. 60 s by default.
    ///
    /// Why a default at all: a peer whose process was killed (SIGKILL, a
    /// crash, a host gone) never says it leaves, and without a give-up its
    /// site is retried for ever, holding its messages, while the runtime
    /// above never learns it is down. Erlang's distribution declares a
    /// node down after its net tick time (60 s by default) for the same
    /// reason. Why 60 s: a peer that restarts, or a network that heals,
    /// within a minute is reconnected with nothing lost (twelve reconnect
    /// backoffs of at most 5 s), and a longer outage is one the runtime
    /// above should hear of and decide about. A restarted peer is a new
    /// incarnation and fails its old site at once, whatever this says.
    ///
    /// `None`: a site is retried for ever (until it is killed, answers as
    /// a new incarnation, or, if it cannot be called back,
    /// [`unreachable_give_up`](Self::unreachable_give_up)): for a runtime
    /// that decides itself when a peer is gone, watching
    /// [`SiteUnreachable`](crate::NodeEvent::SiteUnreachable) events.
    pub give_up_after: Option<Duration>,
    /// Wraps every channel (tests and fault drills: cuts, delays, partitions).
    pub fault_injector: Option<sitenet_transport::FaultInjector>,
    /// The channel slots this node's channels take. `None` (the default):
    /// the process's controller, shared by every node in the process,
    /// with limits from RLIMIT_NOFILE — descriptors are a process resource.
    /// Give a node a [`TransController`] of its own to bound it alone (a
    /// server with 30 descriptors among thousands of in-process clients).
    pub trans_controller: Option<TransController>,
    /// Serve sitenet's own services on their reserved type ids: echo (for
    /// `sitenet ping`) and the sequence-checking sink (for `sitenet send`).
    /// Off by default, so a node answers only the message types its user
    /// registers; `sitenet node` turns them on.
    pub builtin_services: bool,
    /// Sink streams one sender may have open at once (each keeps what it
    /// received beyond its contiguous prefix, at most 64 Ki sequence
    /// numbers); a stream is freed when its verdict is asked or its sender's
    /// entry goes. Data for a stream beyond the cap is refused and counted
    /// (`Metrics::sink_refused`).
    pub sink_streams_per_sender: usize,
    /// A site whose channel was lost and that cannot be called back (it
    /// named no address this node can reach: a client that does not
    /// listen) is declared permanently failed after this long, and what it
    /// was owed (replies, unacknowledged messages) is handed back and its
    /// memory returned. Only it could restore the channel; one that went
    /// for good would pin its queued messages for ever. 15 s by default:
    /// three silence timeouts, and beyond a live peer's longest reconnect
    /// backoff (5 s ± 20 %).
    pub unreachable_give_up: Duration,
    /// Bytes of output the node holds for all sites together (outboxes,
    /// queues and unacknowledged messages): `output_bound` limits one site,
    /// this limits their sum, so sites that never read cannot together
    /// make the node hold more. At the bound `send` waits and a send's `try_now`
    /// fails with [`QueueFull`](crate::SendError::QueueFull). 1 GiB by
    /// default; never less than `output_bound`.
    pub node_output_bound: u64,
    /// Serve the built-in stats service (`sitenet stats`) to sites on other
    /// hosts. Off by default: the stats name every connected site's id and
    /// addresses, which a stranger could use to impersonate them; only
    /// loopback channels (loopback TCP, Unix sockets, in-process) are
    /// answered, others get an error reply (counted in
    /// `Metrics::stats_refused`).
    pub stats_from_anywhere: bool,
    /// Sites one peer may make this node create by naming them as a
    /// forwarded request's origin, at once. Such an entry is a
    /// claim the forwarder holds until the origin's id is proven (a
    /// channel to it works) or the entry is reclaimed; it is tried once
    /// at each address it was named at (a delegated reply), and fails as
    /// `SiteFailure::NotReached` if none answers. A forward beyond the
    /// bound is refused: no entry, no reply, counted in
    /// `Metrics::claims_refused`.
    pub forward_claims_per_peer: u32,
    /// Sites one peer's messages may make this node create through the
    /// `SiteRef`s they carry, at once: a reference to a site the node did
    /// not know is a claim the sender holds until that site's id is
    /// proven or its entry is reclaimed (at the latest `linger` after the
    /// last reference to it goes). A header whose references go beyond the
    /// bound does not decode (counted in `Metrics::claims_refused`).
    pub site_ref_claims_per_peer: u32,
    /// Secrets of site pairs kept after their entries are forgotten (the
    /// reclaim rule), so that this node, contacting such a site again,
    /// still proves the pair's continuity: a peer that kept its entry for
    /// us refuses a claim on our id without that proof (docs/protocol.md
    /// §4.7). Each takes about 64 bytes; the oldest go first. 16,384 by
    /// default; 0 keeps none.
    pub remembered_pairs: usize,
    /// The shared secrets that make a peer a member (the cookie level of
    /// trust; see `sitenet_protocols::connection::handshake::cookie`). Empty (the
    /// default) is the open level: ANYONE WHO REACHES THE PORT IS ANY
    /// SITE. With cookies, every channel's handshake proves the first one
    /// both ways (HMAC-SHA256 over the transcript, once per channel, never
    /// per message) and accepts a peer proving any of them, so a
    /// deployment rotates by listing the new cookie first and the old one
    /// second; a peer that proves none is refused before anything is
    /// allocated for it (`Metrics::auth_refused`) and fails permanently
    /// with `OpenError::AuthenticationFailed`. Load one from a file with
    /// [`crate::cookie_file::load`].
    pub cookies: Vec<sitenet_protocols::Cookie>,
    /// This site's TLS identity (the TLS level of trust): a certificate
    /// signed by the deployment's CA that names the site's id, its key, and
    /// the CA to trust (load it with
    /// [`TlsIdentity::from_pem_files`](sitenet_transport::tls::TlsIdentity::from_pem_files)).
    /// With one, the node takes its site id from the certificate, listens
    /// only on `tls:HOST:PORT` addresses, and every channel both ways runs
    /// mutual TLS: a peer can be only the site its certificate names
    /// (`OpenError::NotCertified`), and one whose certificate is refused
    /// (another CA, expired) fails with `OpenError::Tls`. Combines with
    /// [`cookies`](Self::cookies). `None` (the default): no TLS.
    pub tls: Option<sitenet_transport::tls::TlsIdentity>,
    /// The open level, chosen explicitly: with no [`cookies`](Self::cookies)
    /// and no [`tls`](Self::tls), a node that listens where other hosts
    /// can reach it (a `tcp:` address that is not loopback, such as
    /// `tcp:0.0.0.0:7000`) lets ANYONE WHO REACHES THE PORT BE ANY SITE.
    /// That is refused at start ([`NodeError::OpenToNetwork`](crate::NodeError::OpenToNetwork))
    /// unless this is true, so a node is never open to a network by
    /// accident. Listening on loopback, `unix:` or `mem:` addresses needs
    /// no choice (only this host, or this process, reaches them), and a
    /// plugged transport's addresses are its own to judge.
    /// [`NodeBuilder::open`](crate::NodeBuilder::open) sets it; `sitenet
    /// node --open` too. `false` by default.
    pub allow_open: bool,
    /// Async handler futures ([`Node::handle_async`](crate::Node::handle_async))
    /// the node runs at once, all types together. A peer sending a million
    /// requests must not make the node hold a million futures: at the cap
    /// a request is answered at once with an error its caller sees as
    /// [`RequestError::Busy`](crate::RequestError::Busy) (its handler did
    /// not run: retrying is safe), and a one-way message is dropped and
    /// passed to the `on_unhandled` hook; both are counted in
    /// `Metrics::async_handlers_busy`. Refused rather than paused: pausing
    /// a channel's input would also hold back the replies the running
    /// futures await, which could then never finish. 10,000 by default;
    /// at least 1.
    pub max_async_handlers: usize,
    /// Transports plugged in beyond tcp, tls, unix and mem, by scheme
    /// (see [`sitenet_transport::plug`]): the node parses, dials and
    /// listens at `SCHEME:ADDRESS` through them, and its address books
    /// keep peers' addresses of these schemes (tried after tcp and tls).
    /// They live here, beside [`tls`](Self::tls) and
    /// [`fault_injector`](Self::fault_injector), because they are part of
    /// how the node reaches others: a configuration cloned for several
    /// nodes carries them, and `Node::config` shows them.
    /// [`NodeBuilder::transport`](crate::NodeBuilder::transport) is the
    /// short way to add one. Empty by default.
    pub transports: sitenet_transport::TransportRegistry,
    /// Dials to addresses only a peer named (a forwarded request's origin,
    /// a site a peer's `SiteRef` named, until its id is proven) the node
    /// makes at once, all peers together: without a bound, peers naming
    /// fresh origins at a third party's addresses make the node an
    /// amplifier against it. A dial beyond it is refused at once (the
    /// entry tries its next address, or fails; see
    /// `sitenet_protocols::slots::dial_bound`). 64 by default; at least 1.
    pub peer_word_dials: u32,
    /// Of [`peer_word_dials`](Self::peer_word_dials), the most the peers
    /// from one source address (an IPv4 address, an IPv6 /64) make at
    /// once, so one source never takes the node's whole bound. 16 by
    /// default; at least 1.
    pub peer_word_dials_per_source: u32,
    /// Of [`peer_word_dials`](Self::peer_word_dials), the most the node
    /// makes to one destination host at once (an IP address, an IPv6 /64,
    /// a host name), whoever asked. 4 by default; at least 1.
    pub peer_word_dials_per_host: u32,
    /// Messages of a peer the node refuses (a header that does not
    /// decode, a type nobody handles, a forwarded request refused) that
    /// one channel may send at once before its reading pauses: each takes
    /// a token from the channel's bucket, refilled at
    /// [`refused_input_rate`](Self::refused_input_rate), and a channel in
    /// debt is not read until it has paid it back (at most a second at a
    /// time; see `sitenet_protocols::connection::input_budget`). A peer's junk costs
    /// it its own throughput, not the node's thread and memory. 1,024 by
    /// default; at least 1.
    pub refused_input_burst: u32,
    /// Refused messages per second a channel may send in the long run
    /// (see [`refused_input_burst`](Self::refused_input_burst)). 256 by
    /// default; at least 1.
    pub refused_input_rate: u32,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            buffer_size: 64 * 1024,
            max_message_size: 256 * 1024 * 1024,
            output_bound: 512 * 1024 * 1024,
            reassembly_budget: 1024 * 1024 * 1024,
            ack_bytes: 64 * 1024,
            ack_messages: 100,
            ack_delay: Duration::from_millis(20),
            lane_weights: [1, 2, 4],
            background_promotion: Duration::from_millis(100),
            handshake_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            tcp_receive_buffer: Some(sitenet_transport::channel::TCP_RECEIVE_BUFFER),
            tcp_loopback_receive_buffer: Some(
                sitenet_transport::channel::TCP_LOOPBACK_RECEIVE_BUFFER,
            ),
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_secs(5),
            max_pending_handshakes: sitenet_protocols::slots::admission::handshake_fds(
                sitenet_transport::controller::fd_limit(),
            ),
            max_pending_handshakes_per_source: 8,
            handshake_silence: Duration::from_secs(2),
            heartbeat_interval: Duration::from_secs(1),
            silence_timeout: Duration::from_secs(5),
            close_timeout: Duration::from_secs(5),
            reassembly_idle: Duration::from_secs(30),
            reassembly_min_rate: 1 << 20,
            turn_budget: Duration::from_millis(10),
            linger: Duration::from_secs(10),
            ring_idle: Duration::from_secs(2),
            reopen_after_peer_hard_close: Duration::from_secs(5),
            line_give_up: Duration::from_secs(60),
            admission: None,
            threads: None,
            give_up_after: Some(Duration::from_secs(60)),
            fault_injector: None,
            trans_controller: None,
            builtin_services: false,
            sink_streams_per_sender: 4,
            unreachable_give_up: Duration::from_secs(15),
            node_output_bound: 1024 * 1024 * 1024,
            stats_from_anywhere: false,
            forward_claims_per_peer: 16,
            site_ref_claims_per_peer: 1024,
            remembered_pairs: 16 * 1024,
            cookies: Vec::new(),
            tls: None,
            allow_open: false,
            max_async_handlers: 10_000,
            transports: sitenet_transport::TransportRegistry::new(),
            peer_word_dials: 64,
            peer_word_dials_per_source: 16,
            peer_word_dials_per_host: 4,
            refused_input_burst: sitenet_protocols::connection::input_budget::DEFAULT_BURST,
            refused_input_rate: sitenet_protocols::connection::input_budget::DEFAULT_RATE,
        }
    }
}

impl NodeConfig {
    /// How TCP channels are set up, from [`tcp_receive_buffer`](Self::tcp_receive_buffer)
    /// and [`tcp_loopback_receive_buffer`](Self::tcp_loopback_receive_buffer).
    pub(crate) fn tcp_tuning(&self) -> sitenet_transport::channel::TcpTuning {
        sitenet_transport::channel::TcpTuning {
            receive_buffer: self.tcp_receive_buffer,
            loopback_receive_buffer: self.tcp_loopback_receive_buffer,
        }
    }

    /// Clamps values into their allowed ranges (documented on each field).
    pub(crate) fn normalised(mut self) -> Self {
        // `Duration::MAX` (never) and its kin: a deadline that far from now
        // overflowed the clock, and the node's actors panicked.
        sitenet_protocols::base::timer::bound([
            &mut self.ack_delay,
            &mut self.background_promotion,
            &mut self.handshake_timeout,
            &mut self.connect_timeout,
            &mut self.reconnect_min,
            &mut self.reconnect_max,
            &mut self.handshake_silence,
            &mut self.heartbeat_interval,
            &mut self.silence_timeout,
            &mut self.close_timeout,
            &mut self.reassembly_idle,
            &mut self.turn_budget,
            &mut self.linger,
            &mut self.ring_idle,
            &mut self.reopen_after_peer_hard_close,
            &mut self.line_give_up,
            &mut self.unreachable_give_up,
        ]);
        if let Some(d) = &mut self.give_up_after {
            sitenet_protocols::base::timer::bound([d]);
        }
        self.buffer_size = self
            .buffer_size
            .max(sitenet_protocols::connection::handshake::MIN_BUFFER);
        self.max_message_size = self
            .max_message_size
            .max(sitenet_protocols::PRELUDE_LEN as u64);
        self.output_bound = self
            .output_bound
            .max(self.max_message_size.saturating_mul(2));
        self.node_output_bound = self.node_output_bound.max(self.output_bound);
        self.max_async_handlers = self.max_async_handlers.max(1);
        let d = self.dial_bounds();
        self.peer_word_dials = d.node;
        self.peer_word_dials_per_source = d.per_source;
        self.peer_word_dials_per_host = d.per_host;
        self.refused_input_burst = self.refused_input_burst.max(1);
        self.refused_input_rate = self.refused_input_rate.max(1);
        let a = self.admission();
        self.max_pending_handshakes = a.max_pending;
        self.max_pending_handshakes_per_source = a.max_per_source;
        self.handshake_silence = a.silence;
        self
    }

    /// Refuses, by name, settings no node can work with (after
    /// [`normalised`](Self::normalised)): a zero bound on connecting or on
    /// the open protocol (no channel would ever open, or only by a race),
    /// a zero heartbeat interval (a heartbeat on every turn), and a silence
    /// timeout no longer than the heartbeat interval (an idle channel
    /// declared dead between two heartbeats, again and again).
    pub(crate) fn check(&self) -> Result<(), crate::error::ConfigError> {
        type Get = fn(&NodeConfig) -> Duration;
        let above_zero: [(&str, Get); 5] = [
            ("connect_timeout", |c| c.connect_timeout),
            ("handshake_timeout", |c| c.handshake_timeout),
            ("handshake_silence", |c| c.handshake_silence),
            ("heartbeat_interval", |c| c.heartbeat_interval),
            ("silence_timeout", |c| c.silence_timeout),
        ];
        for (name, get) in above_zero {
            if get(self).is_zero() {
                return Err(crate::error::ConfigError::Zero {
                    field: name,
                    default: get(&Self::default()),
                });
            }
        }
        if self.silence_timeout <= self.heartbeat_interval && self.silence_timeout < MAX_DURATION {
            return Err(crate::error::ConfigError::SilenceWithinHeartbeat {
                silence: self.silence_timeout,
                heartbeat: self.heartbeat_interval,
            });
        }
        Ok(())
    }

    /// The bounds on pending handshakes, for `sitenet_protocols::slots::admission`.
    pub(crate) fn admission(&self) -> sitenet_protocols::slots::admission::AdmissionConfig {
        sitenet_protocols::slots::admission::AdmissionConfig {
            max_pending: self.max_pending_handshakes,
            max_per_source: self.max_pending_handshakes_per_source,
            silence: self.handshake_silence,
            timeout: self.handshake_timeout,
        }
        .normalised()
    }

    /// The bounds on dials on peers' words, for
    /// `sitenet_protocols::slots::dial_bound` (each at least 1).
    pub(crate) fn dial_bounds(&self) -> sitenet_protocols::slots::dial_bound::DialBounds {
        sitenet_protocols::slots::dial_bound::DialBounds {
            node: self.peer_word_dials,
            per_source: self.peer_word_dials_per_source,
            per_host: self.peer_word_dials_per_host,
        }
        .normalised()
    }

    /// The ComObjects' shared configuration for the node with id `local`.
    pub(crate) fn com(&self, local: sitenet_protocols::SiteId) -> sitenet_protocols::ComConfig {
        sitenet_protocols::ComConfig {
            local,
            session: std::sync::Arc::new(self.session()),
            buffer_size: self.buffer_size,
            max_message: self.max_message_size,
            reconnect_min: self.reconnect_min,
            reconnect_max: self.reconnect_max,
            reconnect_jitter: 0.2,
            linger: self.linger,
            ring_idle: self.ring_idle,
            reopen_after_peer_hard_close: self.reopen_after_peer_hard_close,
            line_give_up: self.line_give_up,
            give_up_after: self.give_up_after,
            unreachable_give_up: self.unreachable_give_up,
            plugged: self.plugged_schemes(),
            ..Default::default()
        }
    }

    /// The schemes of [`transports`](Self::transports), for the address
    /// books.
    pub(crate) fn plugged_schemes(&self) -> sitenet_protocols::PluggedSchemes {
        sitenet_protocols::PluggedSchemes::new(self.transports.schemes())
    }

    pub(crate) fn session(&self) -> SessionConfig {
        SessionConfig {
            max_message: self.max_message_size,
            ack_bytes: self.ack_bytes,
            ack_messages: self.ack_messages,
            ack_delay: self.ack_delay,
            scheduler: SchedulerConfig {
                weights: self.lane_weights,
                promote_after: self.background_promotion,
            },
            heartbeat_interval: self.heartbeat_interval,
            silence_timeout: self.silence_timeout,
            close_timeout: self.close_timeout,
            reassembly_idle: self.reassembly_idle,
            reassembly_min_rate: self.reassembly_min_rate,
            turn_budget: Some(self.turn_budget),
        }
    }
}
