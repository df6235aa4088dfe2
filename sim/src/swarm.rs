//! Swarm testing: settings drawn per seed ([`Swarm`]).
//!
//! One configuration, however good, leaves some decisions of the machines
//! unreached: the default workload never half-sends a message when a
//! channel drops, and roomy slot limits rarely preempt a channel twice. A
//! search whose every seed also draws its settings — sites, slot limits,
//! tick, the workload's options, output bounds, how long references are
//! held, faults and their kinds (half-open cuts, orderly leaves), the
//! give-up time — reaches them
//! without anyone choosing the flags, and each feature is absent with a
//! fair chance, so that what one feature hides another can reach (as the
//! simulators of FoundationDB and TigerBeetle draw their configuration per
//! run).
//!
//! The settings come from random streams of their own, one per [`Knob`],
//! derived from the seed and apart from the run's own stream: a run with
//! drawn settings is the run of those settings typed by hand, event for
//! event, and pinning one knob (or adding a knob) leaves what the others
//! draw unchanged.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Faults, SimConfig};

/// A setting [`Swarm`] draws per seed (unless it is pinned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Knob {
    /// [`SimConfig::sites`]: 2 to [`Swarm::max_sites`], log-uniform (small
    /// runs are fast), fewer with a short tick (see
    /// [`Swarm::MAX_TICKS_PER_SECOND`]).
    Sites,
    /// [`SimConfig::faults`]: none, light or heavy, a third each.
    Faults,
    /// [`SimConfig::weak_slots`] and [`SimConfig::hard_slots`]: the
    /// defaults half the time, else 1 to 6 weak and 1 to 4 more hard
    /// (crowded limits such as 2 and 3, where preemption is frequent).
    Slots,
    /// [`SimConfig::tick`]: the default (1 s) a third of the time, else
    /// 10 ms to 1 s, log-uniform, in whole milliseconds.
    Tick,
    /// [`SimConfig::address_sends`]: off half the time, else 0.05 to 0.95.
    AddressSends,
    /// [`SimConfig::peer_claims`]: off (`None`) half the time, else 1, 2,
    /// 4 or 16 claims.
    PeerClaims,
    /// [`SimConfig::cooperations`]: off half the time, else 0.05 to 0.5.
    Cooperations,
    /// [`SimConfig::site_refs`]: off half the time, else 0.05 to 0.5.
    SiteRefs,
    /// [`SimConfig::batches`]: off half the time, else 0.05 to 0.8.
    Batches,
    /// [`SimConfig::output_bound`] and [`SimConfig::node_output_bound`]:
    /// the defaults half the time, else an entry's bound of 96 KiB (the
    /// smallest, which bursts fill: senders wait) half the time, or 96 KiB
    /// to 4 MiB, log-uniform in whole KiB, and a node's bound of the
    /// default (twice the entry's) or one to four times the entry's.
    OutputBounds,
    /// [`SimConfig::bursts`]: off half the time, else 0.05 to 0.6.
    Bursts,
    /// [`SimConfig::outbox_queue`]: on half the time.
    OutboxQueue,
    /// [`SimConfig::adopt_hop`]: on half the time.
    AdoptHop,
    /// [`SimConfig::hold_references`]: the default (5 s) half the time,
    /// else 0.1 s to 1,000 s, log-uniform, in whole milliseconds: short
    /// holds make entries unneeded (their reclaim races accepted channels),
    /// long ones keep more sites referenced than there are slots.
    HoldReferences,
    /// [`SimConfig::half_open`]: off half the time, else 0.05 to 0.8 of
    /// cuts reach one end only.
    HalfOpen,
    /// [`SimConfig::leaves`]: off half the time, else 0.05 to 1 of crashes
    /// are orderly shutdowns.
    Leaves,
    /// [`SimConfig::give_up`]: off (the machine's default) half the time,
    /// else 1 s to 30 s, log-uniform, in whole milliseconds: partitions
    /// make live sites give up on each other.
    GiveUp,
}

impl Knob {
    /// Every knob, in the order of their streams.
    pub const ALL: [Knob; 17] = [
        Knob::Sites,
        Knob::Faults,
        Knob::Slots,
        Knob::Tick,
        Knob::AddressSends,
        Knob::PeerClaims,
        Knob::Cooperations,
        Knob::SiteRefs,
        Knob::Batches,
        Knob::OutputBounds,
        Knob::Bursts,
        Knob::OutboxQueue,
        Knob::AdoptHop,
        Knob::HoldReferences,
        Knob::HalfOpen,
        Knob::Leaves,
        Knob::GiveUp,
    ];

    /// The knob's random stream for `seed`: the seed's ChaCha8 generator
    /// (the run's own is stream 0) on a stream of the knob's own.
    fn rng(self, seed: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(Swarm::STREAM + self as u64);
        rng
    }
}

/// Settings drawn per seed from a base configuration: every [`Knob`] not
/// pinned is drawn from the seed ([`config`](Self::config)); pinned knobs
/// and what no knob covers (the phases' lengths, the buffer, the links)
/// keep the base's values. Every drawn
/// configuration passes [`SimConfig::check`] when the base does.
///
/// ```
/// use sitenet_sim::{Faults, Knob, SimConfig, Swarm};
///
/// let base = SimConfig { faults: Faults::Heavy, ..SimConfig::default() };
/// let swarm = Swarm::new(base).pin(Knob::Faults);
/// let drawn = swarm.config(7);
/// assert_eq!((drawn.seed, drawn.faults), (7, Faults::Heavy));
/// assert!(drawn.check().is_ok());
/// // The same seed draws the same settings.
/// assert_eq!(format!("{:?}", swarm.config(7)), format!("{drawn:?}"));
/// ```
#[derive(Debug, Clone)]
pub struct Swarm {
    /// What pinned knobs and the settings no knob covers take.
    pub base: SimConfig,
    /// The most sites drawn ([`Knob::Sites`]); [`DEFAULT_MAX_SITES`](Self::DEFAULT_MAX_SITES)
    /// unless set, at least 2.
    pub max_sites: usize,
    pinned: BTreeSet<Knob>,
}

impl Swarm {
    /// The first stream of the knobs' generators: the run's own is stream
    /// 0 of the same seed, so no draw takes from it.
    const STREAM: u64 = 0x5357_4152_4d00; // "SWARM"

    /// The most sites drawn by default: 64, so that a seed runs in about
    /// a second (release build) and a search tries many.
    pub const DEFAULT_MAX_SITES: usize = 64;

    /// The most application ticks a drawn configuration makes per
    /// simulated second, sites over tick (the default configuration's is
    /// 50): a 10 ms tick is drawn with at most 4 sites, 50 ms with at most
    /// 20. A run's cost grows with it; the decisions a short tick reaches
    /// (crowded slots, waiting lines) need only a few sites.
    pub const MAX_TICKS_PER_SECOND: f64 = 400.0;

    /// Every knob drawn, from `base`.
    pub fn new(base: SimConfig) -> Self {
        Self {
            base,
            max_sites: Self::DEFAULT_MAX_SITES,
            pinned: BTreeSet::new(),
        }
    }

    /// `knob` keeps the base's value(s).
    pub fn pin(mut self, knob: Knob) -> Self {
        self.pinned.insert(knob);
        self
    }

    /// Whether `knob` keeps the base's value(s).
    pub fn is_pinned(&self, knob: Knob) -> bool {
        self.pinned.contains(&knob)
    }

    /// The knobs pinned, in [`Knob::ALL`]'s order.
    pub fn pinned(&self) -> impl Iterator<Item = Knob> + '_ {
        self.pinned.iter().copied()
    }

    /// Seed `seed`'s configuration: the base with `seed` and every knob not
    /// pinned drawn from the seed's streams. A function of the seed, the
    /// base, [`max_sites`](Self::max_sites) and the pins only.
    pub fn config(&self, seed: u64) -> SimConfig {
        let b = &self.base;
        let mut c = SimConfig { seed, ..b.clone() };
        let drawn = |knob: Knob| !self.is_pinned(knob);
        if drawn(Knob::Faults) {
            c.faults = match Knob::Faults.rng(seed).gen_range(0..3) {
                0 => Faults::None,
                1 => Faults::Light,
                _ => Faults::Heavy,
            };
        }
        if drawn(Knob::Slots) {
            let mut r = Knob::Slots.rng(seed);
            let d = SimConfig::default();
            (c.weak_slots, c.hard_slots) = if r.gen_bool(0.5) {
                (d.weak_slots, d.hard_slots)
            } else {
                let weak = r.gen_range(1..=6);
                (weak, weak + r.gen_range(1..=4))
            };
        }
        if drawn(Knob::Tick) {
            let mut r = Knob::Tick.rng(seed);
            c.tick = if r.gen_bool(1.0 / 3.0) {
                SimConfig::default().tick
            } else {
                Duration::from_millis(log_uniform(&mut r, 10.0, 1000.0).round() as u64)
            };
        }
        // After the tick, which bounds it.
        if drawn(Knob::Sites) {
            let by_load = (Self::MAX_TICKS_PER_SECOND * c.tick.as_secs_f64()).floor();
            let most = (self.max_sites.max(2) as f64).min(by_load).max(2.0);
            let mut r = Knob::Sites.rng(seed);
            c.sites =
                (log_uniform(&mut r, 2.0, most + 1.0).floor() as usize).clamp(2, most as usize);
        }
        if drawn(Knob::AddressSends) {
            c.address_sends = chance(&mut Knob::AddressSends.rng(seed), 0.05, 0.95);
        }
        if drawn(Knob::PeerClaims) {
            let mut r = Knob::PeerClaims.rng(seed);
            c.peer_claims = r.gen_bool(0.5).then(|| [1, 2, 4, 16][r.gen_range(0..4)]);
        }
        if drawn(Knob::Cooperations) {
            c.cooperations = chance(&mut Knob::Cooperations.rng(seed), 0.05, 0.5);
        }
        if drawn(Knob::SiteRefs) {
            c.site_refs = chance(&mut Knob::SiteRefs.rng(seed), 0.05, 0.5);
        }
        if drawn(Knob::Batches) {
            c.batches = chance(&mut Knob::Batches.rng(seed), 0.05, 0.8);
        }
        if drawn(Knob::OutputBounds) {
            let mut r = Knob::OutputBounds.rng(seed);
            (c.output_bound, c.node_output_bound) = if r.gen_bool(0.5) {
                (None, None)
            } else {
                let kib = match r.gen_bool(0.5) {
                    true => 96,
                    false => log_uniform(&mut r, 96.0, 4096.0).round() as u64,
                };
                let entry = kib.max(96) << 10;
                let node = r.gen_bool(0.5).then(|| entry * r.gen_range(1..=4));
                (Some(entry), node)
            };
        }
        if drawn(Knob::Bursts) {
            c.bursts = chance(&mut Knob::Bursts.rng(seed), 0.05, 0.6);
        }
        if drawn(Knob::OutboxQueue) {
            c.outbox_queue = Knob::OutboxQueue.rng(seed).gen_bool(0.5);
        }
        if drawn(Knob::AdoptHop) {
            c.adopt_hop = Knob::AdoptHop.rng(seed).gen_bool(0.5);
        }
        if drawn(Knob::HoldReferences) {
            let mut r = Knob::HoldReferences.rng(seed);
            c.hold_references = match r.gen_bool(0.5) {
                true => SimConfig::default().hold_references,
                false => Duration::from_millis(log_uniform(&mut r, 100.0, 1e6).round() as u64),
            };
        }
        if drawn(Knob::HalfOpen) {
            c.half_open = chance(&mut Knob::HalfOpen.rng(seed), 0.05, 0.8);
        }
        if drawn(Knob::Leaves) {
            c.leaves = chance(&mut Knob::Leaves.rng(seed), 0.05, 1.0);
        }
        if drawn(Knob::GiveUp) {
            let mut r = Knob::GiveUp.rng(seed);
            c.give_up = r.gen_bool(0.5).then(|| {
                Duration::from_millis(log_uniform(&mut r, 1000.0, 30_000.0).round() as u64)
            });
        }
        c
    }
}

impl SimConfig {
    /// This configuration with seed `seed` and every [`Knob`] drawn from it
    /// ([`Swarm::new`]`(self.clone()).config(seed)`; [`Swarm`] pins knobs).
    pub fn swarm(&self, seed: u64) -> SimConfig {
        Swarm::new(self.clone()).config(seed)
    }
}

/// Log-uniform between `lo` and `hi`.
fn log_uniform(r: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    (lo.ln() + r.gen::<f64>() * (hi.ln() - lo.ln())).exp()
}

/// Off (0) half the time, else `lo` to `hi` in hundredths: a value a
/// command line gives back exactly (`0.35` is the `f64` 35 / 100).
fn chance(r: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    if r.gen_bool(0.5) {
        return 0.0;
    }
    let lo = (lo * 100.0).round() as u32;
    let hi = (hi * 100.0).round() as u32;
    f64::from(r.gen_range(lo..=hi)) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every drawn configuration passes the check, from the default base
    /// and from an extreme one.
    #[test]
    fn every_drawn_configuration_passes_the_check() {
        let tiny = SimConfig {
            sites: 2,
            tick: crate::MIN_TICK,
            ..SimConfig::default()
        };
        for base in [SimConfig::default(), tiny] {
            for max_sites in [0, 2, 64, 1_000] {
                let swarm = Swarm {
                    max_sites,
                    ..Swarm::new(base.clone())
                };
                for seed in 0..300 {
                    let c = swarm.config(seed);
                    assert_eq!(c.check(), Ok(()), "seed {seed}: {c:?}");
                    assert!(c.sites <= max_sites.max(2), "seed {seed}: {c:?}");
                }
            }
        }
    }

    /// A pinned knob keeps the base's value; the others draw what they
    /// draw without the pin.
    #[test]
    fn a_pin_keeps_the_base_and_changes_no_other_knob() {
        let base = SimConfig {
            faults: Faults::Heavy,
            bursts: 0.25,
            ..SimConfig::default()
        };
        let free = Swarm::new(base.clone());
        let pinned = Swarm::new(base).pin(Knob::Faults).pin(Knob::Bursts);
        for seed in 0..50 {
            let (a, b) = (free.config(seed), pinned.config(seed));
            assert_eq!((b.faults, b.bursts), (Faults::Heavy, 0.25));
            let a = SimConfig {
                faults: b.faults,
                bursts: b.bursts,
                ..a
            };
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }

    /// A short tick is drawn with few sites.
    #[test]
    fn a_short_tick_is_drawn_with_few_sites() {
        let swarm = Swarm::new(SimConfig::default());
        for seed in 0..300 {
            let c = swarm.config(seed);
            let load = c.sites as f64 / c.tick.as_secs_f64();
            assert!(
                load <= Swarm::MAX_TICKS_PER_SECOND || c.sites == 2,
                "seed {seed}: {c:?}"
            );
        }
    }

    /// What a swarm draws, a command line gives back exactly: a time in
    /// whole milliseconds printed in seconds and read back, and a chance
    /// in hundredths.
    #[test]
    fn a_drawn_setting_typed_back_is_the_same_setting() {
        let typed_back = |d: Duration| {
            let typed: f64 = d.as_secs_f64().to_string().parse().unwrap();
            Duration::from_secs_f64(typed)
        };
        for ms in 1..=1000 {
            let tick = Duration::from_millis(ms);
            assert_eq!(typed_back(tick), tick, "{ms} ms");
        }
        let swarm = Swarm::new(SimConfig::default());
        for seed in 0..1000 {
            let c = swarm.config(seed);
            assert_eq!(typed_back(c.hold_references), c.hold_references, "{c:?}");
        }
        for k in 0..=100u32 {
            let c = f64::from(k) / 100.0;
            assert_eq!(c.to_string().parse::<f64>().unwrap(), c);
        }
    }
}
