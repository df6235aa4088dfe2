//! What each seed of `sitenet sim` runs — the options as given, or
//! settings drawn per seed (`--swarm`) — and the commands that run it
//! again: a swarm's replay (`--seed S --swarm` and the pinned options) and
//! the same run with every setting typed.

use sitenet_sim::{Dataflow, Knob, Sim, SimConfig, Swarm};

use super::figures::Settings;

/// Which application every simulated site runs (`--app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum App {
    /// The node's random workload (`sitenet_sim::Workload`).
    Node,
    /// The dataflow protocols (`sitenet_sim::Dataflow`).
    Dataflow,
}

impl App {
    /// Its name, as `--app` takes it and the JSON's `app` key says.
    pub(super) fn name(self) -> &'static str {
        match self {
            App::Node => "node",
            App::Dataflow => "dataflow",
        }
    }

    /// What a command that replays a run of it adds (nothing for the
    /// default).
    pub(super) fn flag(self) -> &'static str {
        match self {
            App::Node => "",
            App::Dataflow => " --app dataflow",
        }
    }
}

/// What every seed of this command runs: the options as given, or
/// settings drawn per seed (`--swarm`), and the application.
pub(super) struct Runs {
    pub(super) cfg: SimConfig,
    pub(super) swarm: Option<Swarm>,
    pub(super) app: App,
}

impl Runs {
    /// The simulation of `cfg` with this command's application.
    pub(super) fn make(&self, cfg: SimConfig) -> Sim {
        match self.app {
            App::Node => Sim::new(cfg),
            App::Dataflow => Sim::with_app(cfg, Dataflow::new().factory()),
        }
    }

    /// Seed `seed`'s configuration.
    pub(super) fn config(&self, seed: u64) -> SimConfig {
        match &self.swarm {
            Some(swarm) => swarm.config(seed),
            None => SimConfig {
                seed,
                ..self.cfg.clone()
            },
        }
    }

    /// What seed `seed` ran with, and the commands that replay it.
    pub(super) fn settings(&self, seed: u64) -> Settings {
        let c = self.config(seed);
        let (replay, pinned) = match &self.swarm {
            Some(swarm) => {
                let pins = pinned_flags(swarm);
                let mut replay = format!("sitenet sim --seed {seed} --swarm");
                let d = SimConfig::default();
                if c.duration != d.duration {
                    replay += &format!(" --duration {}", c.duration.as_secs_f64());
                }
                if c.settle != d.settle {
                    replay += &format!(" --settle {}", c.settle.as_secs_f64());
                }
                for (flag, value) in &pins {
                    // A boolean option takes its value after `=`.
                    let sep = match *flag {
                        "--outbox-queue" | "--adopt-hop" => '=',
                        _ => ' ',
                    };
                    replay += &format!(" {flag}{sep}{value}");
                }
                replay += self.app.flag();
                let names = pins.iter().map(|(f, _)| f.to_string()).collect();
                (replay, names)
            }
            None => (typed(&c) + self.app.flag(), Vec::new()),
        };
        let command = typed(&c) + self.app.flag();
        Settings::new(&c, self.swarm.is_some(), pinned, replay, command)
    }
}

/// The options of the knobs `swarm` pins, with the base's values.
fn pinned_flags(swarm: &Swarm) -> Vec<(&'static str, String)> {
    let b = &swarm.base;
    let mut out = Vec::new();
    for knob in swarm.pinned() {
        match knob {
            Knob::Sites => out.push(("--sites", b.sites.to_string())),
            Knob::Faults => out.push(("--faults", b.faults.name().into())),
            Knob::Tick => out.push(("--tick", b.tick.as_secs_f64().to_string())),
            Knob::Slots => {
                out.push(("--weak-slots", b.weak_slots.to_string()));
                out.push(("--hard-slots", b.hard_slots.to_string()));
            }
            Knob::AddressSends => out.push(("--address-sends", b.address_sends.to_string())),
            Knob::PeerClaims => {
                if let Some(n) = b.peer_claims {
                    out.push(("--peer-claims", n.to_string()));
                }
            }
            Knob::Cooperations => out.push(("--cooperations", b.cooperations.to_string())),
            Knob::SiteRefs => out.push(("--site-refs", b.site_refs.to_string())),
            Knob::Batches => out.push(("--batches", b.batches.to_string())),
            Knob::OutputBounds => {
                if let Some(n) = b.output_bound {
                    out.push(("--output-bound", n.to_string()));
                }
                if let Some(n) = b.node_output_bound {
                    out.push(("--node-output-bound", n.to_string()));
                }
            }
            Knob::Bursts => out.push(("--bursts", b.bursts.to_string())),
            Knob::OutboxQueue => out.push(("--outbox-queue", b.outbox_queue.to_string())),
            Knob::AdoptHop => out.push(("--adopt-hop", b.adopt_hop.to_string())),
            Knob::HoldReferences => out.push((
                "--hold-references",
                b.hold_references.as_secs_f64().to_string(),
            )),
            Knob::HalfOpen => out.push(("--half-open", b.half_open.to_string())),
            Knob::Leaves => out.push(("--leaves", b.leaves.to_string())),
            Knob::GiveUp => {
                if let Some(t) = b.give_up {
                    out.push(("--give-up", t.as_secs_f64().to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

/// The command that runs `c` with every setting typed (no drawing): the
/// same run as a swarm's seed that drew them.
pub(super) fn typed(c: &SimConfig) -> String {
    format!(
        "sitenet sim --seed {} --sites {} --faults {} --duration {} --settle {} --tick {} \
         --weak-slots {} --hard-slots {} --address-sends {} --cooperations {} --site-refs {} \
         --batches {} --bursts {} --hold-references {} --half-open {} --leaves {}{}{}{}{}{}",
        c.seed,
        c.sites,
        c.faults.name(),
        c.duration.as_secs_f64(),
        c.settle.as_secs_f64(),
        c.tick.as_secs_f64(),
        c.weak_slots,
        c.hard_slots,
        c.address_sends,
        c.cooperations,
        c.site_refs,
        c.batches,
        c.bursts,
        c.hold_references.as_secs_f64(),
        c.half_open,
        c.leaves,
        c.give_up
            .map_or(String::new(), |t| format!(" --give-up {}", t.as_secs_f64())),
        c.peer_claims
            .map_or(String::new(), |b| format!(" --peer-claims {b}")),
        c.output_bound.map_or(String::new(), |b| format!(
            " --output-bound {b} --node-output-bound {}",
            c.node_output_bound()
        )),
        if c.outbox_queue {
            " --outbox-queue"
        } else {
            ""
        },
        if c.adopt_hop { " --adopt-hop" } else { "" }
    )
}
