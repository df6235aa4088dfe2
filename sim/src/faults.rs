//! The faults of the fault phase: what happens, how often, and how each is
//! done to the virtual network and the sites.

use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use sitenet_protocols::base::site::SiteId;

use crate::net::{Role, Seg};
use crate::{Ev, Sim};

/// How many faults a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Faults {
    /// None: only preemption (from the slot limits) disturbs the channels.
    None,
    /// A few: a cut every couple of seconds per 50 sites, a partition a
    /// minute, a crash every half minute, some slow readers.
    #[default]
    Light,
    /// Many: cuts every 0.2 s per 50 sites, partitions every few seconds,
    /// a crash and restart every two seconds, slow readers.
    Heavy,
}

impl Faults {
    /// The level's name, as `--faults` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Faults::None => "none",
            Faults::Light => "light",
            Faults::Heavy => "heavy",
        }
    }

    /// Rates per simulated second for 50 sites: cut, partition, crash,
    /// slow reader.
    fn rates(self) -> [f64; 4] {
        match self {
            Faults::None => [0.0; 4],
            Faults::Light => [0.5, 1.0 / 60.0, 1.0 / 30.0, 0.2],
            Faults::Heavy => [5.0, 0.2, 0.5, 1.0],
        }
    }
}

impl FromStr for Faults {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Faults::None),
            "light" => Ok(Faults::Light),
            "heavy" => Ok(Faults::Heavy),
            other => Err(format!(
                "unknown fault level {other:?}: use none, light or heavy"
            )),
        }
    }
}

const CUT: usize = 0;
const PARTITION: usize = 1;
const CRASH: usize = 2;
const SLOW: usize = 3;

impl Sim {
    /// Rates scaled to the number of sites (cuts, crashes and slow readers
    /// grow with it; partitions do not).
    fn scaled_rates(&self) -> [f64; 4] {
        let scale = (self.cfg.sites as f64 / 50.0).max(1.0);
        let mut r = self.cfg.faults.rates();
        for k in [CUT, CRASH, SLOW] {
            r[k] *= scale;
        }
        r
    }

    /// Schedules the next fault (exponential gaps), if the fault phase
    /// has time left.
    pub(crate) fn schedule_fault(&mut self) {
        let total: f64 = self.scaled_rates().iter().sum();
        if total <= 0.0 {
            return;
        }
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let gap = Duration::from_secs_f64(-u.ln() / total);
        if self.now + gap < self.cfg.duration {
            self.at(self.now + gap, Ev::Fault);
        }
    }

    pub(crate) fn fault(&mut self) {
        let rates = self.scaled_rates();
        let total: f64 = rates.iter().sum();
        let mut x = self.rng.gen_range(0.0..total);
        let mut kind = CUT;
        for (k, r) in rates.iter().enumerate() {
            if x < *r {
                kind = k;
                break;
            }
            x -= r;
        }
        match kind {
            CUT => self.cut(),
            PARTITION => self.partition(),
            CRASH => self.crash(),
            SLOW => self.slow_reader(),
            _ => unreachable!("four kinds"),
        }
        self.schedule_fault();
    }

    fn heavy(&self) -> bool {
        self.cfg.faults == Faults::Heavy
    }

    /// Resets a random connection at a random byte of what it has in flight.
    fn cut(&mut self) {
        let Some((lo, hi)) = self.conns.span() else {
            return;
        };
        let pick = self.rng.gen_range(lo..=hi);
        let Some(c) = self.conns.at_or_after(pick) else {
            return;
        };
        let conn = self.conns.get(&c).expect("picked");
        let flight = [conn.in_flight(0), conn.in_flight(1)];
        let keep = [
            self.rng.gen_range(0..=flight[0]),
            self.rng.gen_range(0..=flight[1]),
        ];
        // Drawn only when half-open cuts are asked for: a seed without them
        // runs as it always did.
        let half_open = self.cfg.half_open;
        let reset = if half_open > 0.0 && self.rng.gen_bool(half_open.min(1.0)) {
            let deaf = self.rng.gen_range(0..2);
            self.counts.half_open_cuts += 1;
            [deaf != 0, deaf != 1]
        } else {
            [true; 2]
        };
        let now = self.now;
        let at = self
            .conns
            .get_mut(&c)
            .expect("picked")
            .cut(keep, now, reset);
        self.counts.cuts += 1;
        self.trace(0, "cut", &[c as u128, keep[0] as u128, keep[1] as u128]);
        self.at(at[0], Ev::Arrive { conn: c, dir: 0 });
        self.at(at[1], Ev::Arrive { conn: c, dir: 1 });
    }

    /// Splits the sites into two sets that cannot reach each other until
    /// the partition heals (bytes in flight wait; connects time out).
    fn partition(&mut self) {
        if self.partition.is_some() || self.nodes.len() < 2 {
            return;
        }
        let n = self.nodes.len();
        let size = self.rng.gen_range(1..=n / 2);
        let mut side = vec![false; n];
        for _ in 0..size {
            let i = self.rng.gen_range(0..n);
            side[i] = true;
        }
        let secs = if self.heavy() { 0.5..8.0 } else { 0.5..3.0 };
        let heal = self.now + Duration::from_secs_f64(self.rng.gen_range(secs));
        let heal = heal.min(self.cfg.duration);
        self.partition = Some((side, heal));
        self.counts.partitions += 1;
        self.trace(0, "partition", &[size as u128]);
        self.at(heal, Ev::Heal);
    }

    pub(crate) fn heal(&mut self) {
        if self.partition.as_ref().is_some_and(|(_, h)| *h <= self.now) {
            self.partition = None;
            self.trace(0, "heal", &[]);
        }
    }

    /// While a partition separates `a` and `b`: when it heals.
    pub(crate) fn blocked(&self, a: usize, b: usize) -> Option<Duration> {
        let (side, heal) = self.partition.as_ref()?;
        (side[a] != side[b]).then_some(*heal)
    }

    /// A random site's process dies: its connections are reset, everything
    /// it held is gone; it restarts as a new incarnation at its address.
    fn crash(&mut self) {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|n| self.nodes[*n].up)
            .collect();
        if up.len() <= 2 {
            return;
        }
        let n = up[self.rng.gen_range(0..up.len())];
        // Drawn only when leaves are asked for: a seed without them runs
        // as it always did.
        let leaves = self.cfg.leaves;
        if leaves > 0.0 && self.rng.gen_bool(leaves.min(1.0)) {
            self.leave(n);
        }
        let index = self.new_index();
        let node = &mut self.nodes[n];
        node.up = false;
        let (id, inc) = (node.id, node.incarnation);
        node.peers.clear();
        node.keys.clear();
        node.index = index;
        node.holders.clear();
        node.waiters.clear();
        node.line.clear();
        node.turning.clear();
        node.adopting = Default::default();
        self.oracle.crashed(id);
        self.directory.retain(|s| *s != id);
        self.trace(n, "crash", &[id.0]);
        let now = self.now;
        let mut resets = Vec::new();
        for (c, conn) in self.conns.iter_mut() {
            for e in 0..2 {
                let end = &mut conn.ends[e];
                if end.node == n && end.incarnation == inc && end.is_open() {
                    end.role = Role::Closed;
                    end.holder = None;
                    end.rx.clear();
                    resets.push((c, e, conn.put(e, now, 0, Seg::Rst)));
                }
            }
        }
        for (c, e, at) in resets {
            self.at(at, crate::Ev::Arrive { conn: c, dir: e });
        }
        let down = Duration::from_secs_f64(self.rng.gen_range(0.1..3.0));
        let back = (self.now + down).min(self.cfg.duration);
        self.at(back, Ev::Restart { node: n });
    }

    /// Node `n` shuts down in order before it goes: every ComObject says
    /// LEAVING and writes its last words (a final acknowledgement, a
    /// CLOSE_HARD) on its working channel, then closes it — what the
    /// runtime's `Node::shutdown` does. Its peers fail the site for good
    /// at once (`SiteFailure::ShutDown`), and hand back what it held.
    fn leave(&mut self, n: usize) {
        self.counts.leaves += 1;
        self.trace(n, "leave", &[self.nodes[n].id.0]);
        let now = self.instant();
        let keys: Vec<SiteId> = self.nodes[n].peers.keys().copied().collect();
        for peer in keys {
            let Some(mut p) = self.take_peer(n, peer) else {
                continue;
            };
            p.com.shutdown_as(true, now);
            self.drive_peer(n, peer, &mut p);
            // The crash that follows clears the node's table.
            self.nodes[n].peers.insert(peer, p);
        }
    }

    pub(crate) fn restart(&mut self, n: usize) {
        if self.nodes[n].up {
            return;
        }
        let inc = self.nodes[n].incarnation + 1;
        let address = self.nodes[n].address.clone();
        let node = self.new_node(inc, address);
        let gone = std::mem::replace(&mut self.nodes[n], node);
        self.counts.output_peak = self.counts.output_peak.max(gone.out.peak);
        self.counts.waiting_peak = self.counts.waiting_peak.max(gone.out.waiting_peak as u64);
        self.counts.restarts += 1;
        self.directory = self.nodes.iter().filter(|n| n.up).map(|n| n.id).collect();
        self.start_node(n);
    }

    /// A random site stops reading for a while.
    fn slow_reader(&mut self) {
        let n = self.rng.gen_range(0..self.nodes.len());
        if !self.nodes[n].up {
            return;
        }
        let secs = if self.heavy() { 0.2..4.0 } else { 0.2..1.0 };
        let until = self.now + Duration::from_secs_f64(self.rng.gen_range(secs));
        self.nodes[n].paused_until = until;
        let inc = self.nodes[n].incarnation;
        self.trace(n, "slow", &[]);
        self.at(until, Ev::Resume { node: n, inc });
    }

    /// A slow reader reads again: every end of its site.
    pub(crate) fn resume(&mut self, n: usize, inc: u32) {
        if !self.nodes[n].up
            || self.nodes[n].incarnation != inc
            || self.nodes[n].paused_until > self.now
        {
            return;
        }
        let ends: Vec<(u64, usize)> = self
            .conns
            .iter()
            .flat_map(|(c, conn)| {
                (0..2).filter_map(move |e| {
                    let end = &conn.ends[e];
                    (end.node == n && end.incarnation == inc && end.is_open()).then_some((c, e))
                })
            })
            .collect();
        for (c, e) in ends {
            self.read(c, e);
        }
    }
}
