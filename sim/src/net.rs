//! The virtual network: connections between simulated sites, each a pair
//! of ends with the rings a TransObject holds, joined by two one-way wires
//! that carry bytes in order (a stream transport reorders nothing within a
//! connection) with the link's latency and bandwidth, and a socket buffer
//! that bounds what is in flight. A connection ends with a FIN after the
//! last byte (an orderly close) or a reset (a crash, a cut mid-frame).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use sitenet_protocols::base::site::SiteId;
use sitenet_protocols::connection::com_object::ChannelId;
use sitenet_protocols::connection::handshake::{Acceptor, Initiator, Nonce};
use sitenet_protocols::wire::byte_buffer::ByteBuffer;

/// Bytes a direction holds in flight and unread at the receiver (the two
/// socket buffers of a real connection).
pub(crate) const SOCKET_BUFFER: usize = 128 * 1024;

/// What a wire carries.
#[derive(Debug, Clone)]
pub(crate) enum Seg {
    Data(Bytes),
    /// The sender closed its end after the bytes before this.
    Fin,
    /// The connection was reset.
    Rst,
}

/// What an end is doing.
pub(crate) enum Role {
    /// The acceptor's end before the connection request arrived.
    NotYet,
    /// Our open attempt `attempt` to `peer`: the initiator's handshake
    /// (`waiting`: the acceptor put it in its line; the
    /// ComObject's give-up deadline bounds it, not the handshake's).
    Initiator {
        peer: SiteId,
        attempt: u64,
        hs: Box<Initiator>,
        waiting: bool,
    },
    /// An accepted connection in its handshake (anonymous until NEGOTIATE),
    /// with its admission ticket and whether its peer has spoken yet.
    Acceptor {
        hs: Box<Acceptor>,
        nonce: Nonce,
        ticket: u64,
        spoke: bool,
    },
    /// An accepted connection whose peer presented itself while every slot
    /// was in use: told to wait, it waits in the slot table's line with
    /// `ticket`, parked on its handshake rings.
    InLine {
        neg: Box<sitenet_protocols::connection::handshake::Negotiate>,
        nonce: Nonce,
        ticket: u64,
    },
    /// An accepted connection on its way to its site's ComObject
    /// ([`SimConfig::adopt_hop`](crate::SimConfig::adopt_hop)): it holds
    /// its slot, and nothing is read until the ComObject answers.
    Adopting,
    /// A working channel of the site's ComObject for `peer`.
    Working { peer: SiteId, id: ChannelId },
    /// Closed by this side (or by the crash of its site).
    Closed,
}

/// One end of a connection: the rings of a TransObject and the socket's
/// receive side.
pub(crate) struct End {
    pub(crate) node: usize,
    /// The incarnation of `node` that owns this end.
    pub(crate) incarnation: u32,
    pub(crate) role: Role,
    pub(crate) inb: ByteBuffer,
    pub(crate) outb: ByteBuffer,
    /// Arrived, not yet read into `inb`.
    pub(crate) rx: VecDeque<Seg>,
    /// The channel slot this end holds at its node.
    pub(crate) holder: Option<u64>,
}

impl End {
    pub(crate) fn new(node: usize, incarnation: u32, ring: usize, role: Role) -> Self {
        Self {
            node,
            incarnation,
            role,
            inb: ByteBuffer::new(ring),
            outb: ByteBuffer::new(ring),
            rx: VecDeque::new(),
            holder: None,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.role, Role::Closed)
    }

    /// Ring bytes this end holds (the transport memory checker's measure).
    pub(crate) fn ring_bytes(&self) -> usize {
        if self.is_open() {
            self.inb.capacity() + self.outb.capacity()
        } else {
            0
        }
    }
}

/// A connection between two sites: end 0 dialed, end 1 accepted.
pub(crate) struct Conn {
    pub(crate) ends: [End; 2],
    /// Wire `d` carries from end `d` to the other: (arrival, segment).
    pub(crate) wire: [VecDeque<(Duration, Seg)>; 2],
    /// Bytes of direction `d` in flight or unread.
    pub(crate) used: [usize; 2],
    /// When the link of direction `d` is free to send again (bandwidth).
    pub(crate) link_free: [Duration; 2],
    pub(crate) latency: Duration,
    /// Bytes per second.
    pub(crate) bandwidth: u64,
    /// End `e` found its wire full with bytes left to write: it is told
    /// when the receiver makes room.
    pub(crate) blocked: [bool; 2],
    /// Wire `d` carries nothing any more: a half-open cut reset its sender
    /// only, whose socket is gone ([`cut`](Self::cut)); what it writes is
    /// lost, its reset and FIN too.
    pub(crate) mute: [bool; 2],
    /// The attempt the initiator's NEGOTIATE named, once the acceptor read
    /// it: a later attempt of the same opener proves this channel
    /// abandoned (the link rule).
    pub(crate) attempt: Option<sitenet_protocols::connection::handshake::Attempt>,
}

impl Conn {
    /// Moves what fits of end `e`'s output ring onto its wire; returns the
    /// arrival time of the new segment, if any.
    pub(crate) fn send_out(&mut self, e: usize, now: Duration) -> Option<Duration> {
        let room = SOCKET_BUFFER.saturating_sub(self.used[e]);
        let end = &mut self.ends[e];
        let n = end.outb.len().min(room);
        self.blocked[e] = end.outb.len() > room;
        if n == 0 || !end.is_open() {
            return None;
        }
        if self.mute[e] {
            end.outb.consume(n);
            return None;
        }
        let mut v = Vec::with_capacity(n);
        let (a, b) = end.outb.chunks();
        let ta = a.len().min(n);
        v.extend_from_slice(&a[..ta]);
        v.extend_from_slice(&b[..n - ta]);
        end.outb.consume(n);
        self.used[e] += n;
        Some(self.put(e, now, n as u64, Seg::Data(Bytes::from(v))))
    }

    /// Puts a segment of `len` bytes on wire `d`; returns its arrival.
    pub(crate) fn put(&mut self, d: usize, now: Duration, len: u64, seg: Seg) -> Duration {
        if self.mute[d] {
            return now;
        }
        let start = self.link_free[d].max(now);
        let tx = Duration::from_nanos(len.saturating_mul(1_000_000_000) / self.bandwidth.max(1));
        self.link_free[d] = start + tx;
        let at = start + tx + self.latency;
        self.wire[d].push_back((at, seg));
        at
    }

    /// Moves the segments of wire `d` that have arrived by `now` into the
    /// receiving end's socket buffer. False if none had.
    pub(crate) fn arrive(&mut self, d: usize, now: Duration) -> bool {
        let mut any = false;
        while self.wire[d].front().is_some_and(|(at, _)| *at <= now) {
            let (_, seg) = self.wire[d].pop_front().expect("front exists");
            let to = &mut self.ends[1 - d];
            if to.is_open() {
                to.rx.push_back(seg);
            } else if let Seg::Data(b) = seg {
                // Nobody reads it any more.
                self.used[d] -= b.len();
            }
            any = true;
        }
        any
    }

    /// Reads end `e`'s socket buffer into its input ring, as much as fits.
    /// Returns (bytes read, the FIN or reset reached with nothing before it).
    pub(crate) fn read_in(&mut self, e: usize) -> (usize, Option<Seg>) {
        let d = 1 - e;
        let end = &mut self.ends[e];
        let mut n = 0;
        while let Some(seg) = end.rx.front_mut() {
            match seg {
                Seg::Data(b) => {
                    let take = b.len().min(end.inb.free());
                    if take == 0 {
                        break;
                    }
                    end.inb.push(&b[..take]);
                    if take == b.len() {
                        end.rx.pop_front();
                    } else {
                        let _ = b.split_to(take);
                    }
                    n += take;
                }
                Seg::Fin | Seg::Rst => {
                    let seg = end.rx.pop_front().expect("front exists");
                    self.used[d] -= n;
                    return (n, Some(seg));
                }
            }
        }
        self.used[d] -= n;
        (n, None)
    }

    /// Cuts the connection at a random point of what is in flight: wire
    /// `d` keeps only its first `keep[d]` bytes (a frame may be cut in the
    /// middle), then the ends learn of a reset.
    ///
    /// Only the ends `reset` says learn of the reset (their wire carries
    /// it): an end that does not learn stays open on a connection whose
    /// other end is gone — a half-open connection, found dead only by its
    /// silence or replaced by the peer's new channel. What it sends
    /// meanwhile is lost.
    pub(crate) fn cut(
        &mut self,
        keep: [usize; 2],
        now: Duration,
        reset: [bool; 2],
    ) -> [Duration; 2] {
        let mut at = [now; 2];
        for d in 0..2 {
            let mut kept = 0;
            let mut out = VecDeque::new();
            for (t, seg) in self.wire[d].drain(..) {
                if let Seg::Data(mut b) = seg {
                    let left = keep[d].saturating_sub(kept);
                    if left == 0 {
                        self.used[d] -= b.len();
                        continue;
                    }
                    if b.len() > left {
                        self.used[d] -= b.len() - left;
                        b.truncate(left);
                    }
                    kept += b.len();
                    out.push_back((t, Seg::Data(b)));
                } else {
                    out.push_back((t, seg));
                }
            }
            self.wire[d] = out;
            // Wire `d` carries the reset to end `1 - d`.
            if reset[1 - d] {
                at[d] = self.put(d, now, 0, Seg::Rst);
            } else {
                self.mute[d] = true;
            }
        }
        at
    }

    /// Bytes in flight on wire `d`.
    pub(crate) fn in_flight(&self, d: usize) -> usize {
        self.wire[d]
            .iter()
            .map(|(_, s)| match s {
                Seg::Data(b) => b.len(),
                _ => 0,
            })
            .sum()
    }
}

impl crate::Sim {
    /// A link's latency and bandwidth: fixed per pair of sites for the
    /// run, drawn from the seed and the pair (not from the run's generator,
    /// so that a link's draw does not depend on when it is first used).
    pub(crate) fn link(&self, a: usize, b: usize) -> (Duration, u64) {
        let (lo, hi) = (a.min(b) as u64, a.max(b) as u64);
        let mut r = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ (lo << 32 | hi).rotate_left(17));
        let (min, max) = self.cfg.latency;
        let latency = if max > min {
            r.gen_range(min..=max)
        } else {
            min
        };
        (latency, self.cfg.bandwidth)
    }
}
