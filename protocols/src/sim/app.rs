//! Application logic plugged into a simulated site: what a runtime author
//! writes to simulate their own protocol on top of sitenet's network layer.
//!
//! An [`Application`] is called like the runtime's handlers: when its site
//! starts (or restarts as a new incarnation), on a periodic tick, for each
//! message received, and for each message handed back after a permanent
//! failure. It sends through [`AppCtx::send`], which goes through the same
//! ComObject machine a real node's send goes through, and every message it
//! sends is watched by the simulator's checkers (FIFO per priority,
//! exactly once, delivered or handed back).

use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::priority::Priority;
use crate::site::SiteId;

/// What a simulated site's application may see and do during a callback.
pub struct AppCtx<'a> {
    /// This site (its current incarnation).
    pub me: SiteId,
    /// Simulated time since the start of the run.
    pub now: Duration,
    /// The sites that are up now (the current incarnation of each), in a
    /// fixed order; `me` among them.
    pub sites: &'a [SiteId],
    /// The run's random source: every random choice of an application
    /// must come from here, or the run stops being reproducible.
    pub rng: &'a mut ChaCha8Rng,
    pub(super) out: &'a mut Vec<(SiteId, Priority, Bytes)>,
}

impl AppCtx<'_> {
    /// Sends `body` to `to` at `priority`, once the callback returns (as a
    /// handler's sends leave after it). Sending to a site that failed hands
    /// the message back through [`Application::handed_back`].
    pub fn send(&mut self, to: SiteId, priority: Priority, body: impl Into<Bytes>) {
        self.out.push((to, priority, body.into()));
    }

    /// The `k`-th site after this one in the directory, wrapping around
    /// (`None` if alone, or if that is this site).
    pub fn neighbour(&self, k: usize) -> Option<SiteId> {
        let me = self.sites.iter().position(|s| *s == self.me)?;
        let to = self.sites[(me + k) % self.sites.len()];
        (to != self.me).then_some(to)
    }

    /// A random site that is up, other than this one (`None` if alone).
    pub fn random_peer(&mut self) -> Option<SiteId> {
        let others = self.sites.len().saturating_sub(1);
        if others == 0 {
            return None;
        }
        let i = self.rng.gen_range(0..others);
        // The i-th site that is not this one.
        match self.sites.iter().position(|s| *s == self.me) {
            Some(k) if i >= k => self.sites.get(i + 1).copied(),
            _ => self.sites.get(i).copied(),
        }
    }
}

/// A site's application logic in the simulator. Every method has a default
/// that does nothing, so an application implements only what it uses.
pub trait Application {
    /// The site started (first incarnation or a restart: the application
    /// starts from nothing, as a restarted process would).
    fn start(&mut self, _ctx: &mut AppCtx<'_>) {}
    /// The periodic tick ([`SimConfig::tick`](super::SimConfig::tick));
    /// ticks stop when the fault phase ends, so that the run can settle.
    fn tick(&mut self, _ctx: &mut AppCtx<'_>) {}
    /// A message from `from` arrived (delivered once, in order per priority).
    fn received(&mut self, _ctx: &mut AppCtx<'_>, _from: SiteId, _body: &[u8]) {}
    /// A message sent to `to` was handed back: `maybe_delivered` says it
    /// was sent and never acknowledged (it may have arrived), otherwise it
    /// never arrived.
    fn handed_back(
        &mut self,
        _ctx: &mut AppCtx<'_>,
        _to: SiteId,
        _body: &[u8],
        _maybe_delivered: bool,
    ) {
    }
    /// The application's own invariant, checked on every live site once
    /// the run has settled (after the simulator's checkers held): an
    /// `Err` is a violation, reported with the seed like the others.
    fn check(&self, _ctx: &AppCtx<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// Makes the application of a site when it starts (again).
pub type AppFactory = Box<dyn FnMut(SiteId) -> Box<dyn Application>>;

/// The default workload: on each tick, with probability `rate`, one to
/// three messages at random priorities, each to one of the site's
/// `neighbours` (the next sites in the directory, as a runtime's traffic
/// mostly goes to the few sites it works with) or, with probability
/// `stray`, to any site; most small, some several frames long (fragmented
/// and reassembled).
#[derive(Debug, Clone)]
pub struct Workload {
    /// Chance of sending on a tick.
    pub rate: f64,
    /// How many sites a site mostly talks to.
    pub neighbours: usize,
    /// Chance that a message goes to a random site instead.
    pub stray: f64,
    /// Largest body of a "large" message (at least 16 bytes).
    pub large: usize,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            rate: 0.5,
            neighbours: 3,
            stray: 0.2,
            large: 40 * 1024,
        }
    }
}

impl Workload {
    fn body(rng: &mut ChaCha8Rng, large: usize) -> Bytes {
        let len = if rng.gen_ratio(1, 20) {
            rng.gen_range(16..large.max(17))
        } else {
            rng.gen_range(16..256)
        };
        let fill: u8 = rng.gen();
        let mut v = vec![fill; len];
        v[..8].copy_from_slice(&(len as u64).to_le_bytes());
        Bytes::from(v)
    }
}

impl Application for Workload {
    fn tick(&mut self, ctx: &mut AppCtx<'_>) {
        if !ctx.rng.gen_bool(self.rate.clamp(0.0, 1.0)) {
            return;
        }
        for _ in 0..ctx.rng.gen_range(1..=3) {
            let to = if ctx.rng.gen_bool(self.stray.clamp(0.0, 1.0)) {
                ctx.random_peer()
            } else {
                let k = ctx.rng.gen_range(1..=self.neighbours.max(1));
                ctx.neighbour(k)
            };
            let Some(to) = to else { return };
            let p = Priority::ALL[ctx.rng.gen_range(0..Priority::ALL.len())];
            let body = Self::body(ctx.rng, self.large);
            ctx.send(to, p, body);
        }
    }
}
