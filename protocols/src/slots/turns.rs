//! Who is served when slots are short and peers wait in line: the named
//! admission policies.
//!
//! The Mozart paper: "different applications might favor clients getting
//! done fast, while others might want to let clients use resources
//! fairly". Both are offered:
//!
//! * [`Admission::Fifo`] — *getting done fast.* A freed slot goes to the
//!   first in line; whoever holds a slot keeps it until the preemption
//!   policy takes it back (one channel per tick while the slots are past
//!   the weak limit, the quietest first). A client that got in finishes
//!   its work before the next one starts; the last in line wait longest.
//! * [`Admission::Share`] — *using resources fairly*, the default. While
//!   anyone waits in line, slots are served in short turns in rotation: a
//!   holder that has had its turn ([`SlotConfig::turn`](super::SlotConfig::turn))
//!   gives way, and so does one that has gone quiet for
//!   [`SlotConfig::turn_idle`](super::SlotConfig::turn_idle) — as many per
//!   tick as there are peers waiting — so a peer done with its work does
//!   not sit on a slot others wait for. A long line shortens the turns
//!   ([`SlotTable::turn_now`](super::SlotTable::turn_now): the whole line
//!   served within about [`SlotConfig::rotation`](super::SlotConfig::rotation),
//!   no turn below [`SlotConfig::turn_min`](super::SlotConfig::turn_min)),
//!   and the freed slot goes to the peer in line this node has served
//!   least (messages exchanged so far), so what is shared is the work
//!   done, not only the time held: a turn also ends once the holder has
//!   exchanged [`SlotConfig::turn_work`](super::SlotConfig::turn_work)
//!   messages, and a peer that moves ten times the messages per turn
//!   waits while the others catch up. No peer waits
//!   longer than [`SlotConfig::max_wait`](super::SlotConfig::max_wait)
//!   for others to go first. With nobody in line
//!   the preemption policy rules, as with `Fifo`.
//!
//! `Share` is the default because sitenet serves many sites on few
//! descriptors as its defining trick: under `Fifo` the sites that got a
//! slot are served again and again while the rest wait for the
//! preemption policy's one channel per tick (with thousands of waiting
//! sites, minutes); under `Share` the line moves at the pace of the work.
//! Preempting costs a reconnect and nothing else (CLOSE_HARD; nothing is
//! lost, unacknowledged messages are resent), and a holder in the middle
//! of a message is spared until four turns have passed.

use std::time::{Duration, Instant};

use super::{Candidate, PreemptReason};

/// Who gets a freed slot while peers wait, and how long a holder keeps
/// it: see the module documentation. Chosen per slot controller
/// (`NodeConfig::admission`, `--admission fifo|share`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Admission {
    /// First come stays until preempted: the preemption policy alone
    /// decides who gives a slot back; the first in line gets it.
    Fifo,
    /// Short turns in rotation while anyone waits (the default).
    #[default]
    Share,
}

impl Admission {
    /// Both policies, by name.
    pub const ALL: [Admission; 2] = [Admission::Fifo, Admission::Share];

    /// Its name in configuration, reports and the CLI: `fifo` or `share`.
    pub fn name(self) -> &'static str {
        match self {
            Admission::Fifo => "fifo",
            Admission::Share => "share",
        }
    }

    /// The policy named `name` (`fifo` or `share`).
    ///
    /// ```
    /// use sitenet_protocols::slots::Admission;
    /// assert_eq!(Admission::by_name("share"), Some(Admission::Share));
    /// assert_eq!(Admission::by_name("fifo").map(Admission::name), Some("fifo"));
    /// assert_eq!(Admission::by_name("lifo"), None);
    /// ```
    pub fn by_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl std::fmt::Display for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A holder in the middle of a message is spared this many turns: a
/// multi-MiB transfer restarted at every turn would never finish.
const MID_MESSAGE_TURNS: u32 = 4;

/// `Share`'s choice while peers wait: up to `want` holders, those gone
/// quiet first (least recently active first), then our open attempts that
/// have waited `line_yield` in a peer's line ([`line_waiters`]), then those
/// past their turn (longest held first, whether its turn's time or its
/// `turn_work` messages are over), a holder in the middle of a message only
/// past [`MID_MESSAGE_TURNS`] turns of time. A holder is never chosen
/// within `turn_idle` (or its turn, if shorter) of its grant — it has not
/// started yet — unless it has done its turn's work already.
pub(super) fn share(
    now: Instant,
    candidates: &[Candidate],
    want: usize,
    (turn, turn_idle, turn_work): (Duration, Duration, u64),
    line_yield: Duration,
) -> Vec<(u64, PreemptReason)> {
    let held = |c: &Candidate| now.saturating_duration_since(c.granted_at);
    let started = turn_idle.min(turn);
    let worked = |c: &Candidate| !c.channel.mid_message && c.moved >= turn_work;
    let eligible = || {
        candidates
            .iter()
            .filter(|c| c.channel.closeable && (held(c) >= started || worked(c)))
    };
    let quiet = |c: &Candidate| {
        let r = &c.channel;
        !r.mid_message
            && !r.replies_expected
            && r.buffers_empty
            && r.queues_empty
            && now.saturating_duration_since(r.last_active) >= turn_idle
    };
    let mut idle: Vec<&Candidate> = eligible().filter(|c| quiet(c)).collect();
    idle.sort_by_key(|c| (c.channel.last_active, c.granted_at, c.holder));
    let mut over: Vec<&Candidate> = eligible()
        .filter(|c| !quiet(c))
        .filter(|c| {
            let t = if c.channel.mid_message {
                turn.saturating_mul(MID_MESSAGE_TURNS)
            } else {
                turn
            };
            held(c) >= t || worked(c)
        })
        .collect();
    over.sort_by_key(|c| (c.granted_at, c.holder));
    idle.iter()
        .map(|c| (c.holder, PreemptReason::TurnIdle))
        .chain(line_waiters(now, candidates, line_yield))
        .chain(over.iter().map(|c| (c.holder, PreemptReason::TurnOver)))
        .take(want)
        .collect()
}

/// The most a site's attempts in a row double their patience in a peer's
/// line (`line_yield` × 2^5: 32 s at the default, past the line's own
/// 30 s hold).
const MAX_YIELD_DOUBLINGS: u8 = 5;

/// Our open attempts that have waited `line_yield` or more in a peer's line
/// ([`ChannelReport::in_peer_line_since`](super::ChannelReport::in_peer_line_since)),
/// doubled for each attempt to the same site that gave way before it
/// ([`ChannelReport::line_yields`](super::ChannelReport::line_yields)),
/// the longest waiting first, as [`PreemptReason::LineWait`] victims: they
/// hold a slot and move nothing, so they give way after the quiet holders
/// and before the working ones.
pub(super) fn line_waiters(
    now: Instant,
    candidates: &[Candidate],
    line_yield: Duration,
) -> impl Iterator<Item = (u64, PreemptReason)> {
    let patience = |c: &Candidate| {
        let doublings = c.channel.line_yields.min(MAX_YIELD_DOUBLINGS);
        line_yield.saturating_mul(1 << doublings)
    };
    let mut waiting: Vec<(Instant, u64)> = candidates
        .iter()
        .filter_map(|c| Some((c.channel.in_peer_line_since?, c)))
        .filter(|(since, c)| now.saturating_duration_since(*since) >= patience(c))
        .map(|(since, c)| (since, c.holder))
        .collect();
    waiting.sort_unstable();
    waiting
        .into_iter()
        .map(|(_, h)| (h, PreemptReason::LineWait))
}
