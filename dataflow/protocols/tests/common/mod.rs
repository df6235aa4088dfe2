//! A virtual network of dataflow sites for the protocol tests: FIFO links
//! between every pair, delivered in an order a seeded generator picks.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sitenet_dataflow_protocols::{Action, Answer, EntityId, OpError, OpId, Site, Value, Wire};
use sitenet_protocols::{FaultState, SiteId};

pub struct Net {
    pub sites: Vec<Site>,
    pub links: BTreeMap<(usize, usize), VecDeque<Wire>>,
    pub done: HashMap<(usize, OpId), Result<Answer, OpError>>,
    pub needs: Vec<(usize, EntityId)>,
    pub reclaimed: Vec<EntityId>,
    pub rng: ChaCha8Rng,
    next_op: u64,
    pub dead: Vec<bool>,
    /// `Register` messages sent.
    pub registers: usize,
}

pub fn id(i: usize) -> SiteId {
    SiteId(i as u128 + 1)
}

pub fn index(s: SiteId) -> usize {
    s.0 as usize - 1
}

impl Net {
    pub fn new(n: usize, seed: u64) -> Net {
        Net {
            sites: (0..n).map(|i| Site::new(id(i))).collect(),
            links: BTreeMap::new(),
            done: HashMap::new(),
            needs: Vec::new(),
            reclaimed: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_op: 1,
            dead: vec![false; n],
            registers: 0,
        }
    }

    pub fn op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    /// Moves every site's actions onto the links and into the books.
    pub fn pump(&mut self) {
        for i in 0..self.sites.len() {
            while let Some(a) = self.sites[i].poll_action() {
                match a {
                    Action::Send { to, msg } => {
                        if matches!(msg, Wire::Register { .. }) {
                            self.registers += 1;
                        }
                        if !self.dead[i] {
                            self.links.entry((i, index(to))).or_default().push_back(msg)
                        }
                    }
                    Action::Done { op, outcome } => {
                        assert!(
                            self.done.insert((i, op), outcome).is_none(),
                            "operation {op:?} ended twice"
                        );
                    }
                    Action::Need { var } => self.needs.push((i, var)),
                    Action::Reclaimed { entity } => self.reclaimed.push(entity),
                    Action::HomeUnused { .. } => {}
                }
            }
        }
    }

    /// Delivers one message on a random non-empty link; false if none.
    pub fn step(&mut self) -> bool {
        self.pump();
        let busy: Vec<(usize, usize)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&k, _)| k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[self.rng.gen_range(0..busy.len())];
        let msg = self
            .links
            .get_mut(&(from, to))
            .unwrap()
            .pop_front()
            .unwrap();
        if self.dead[to] {
            return true;
        }
        self.sites[to].received(id(from), msg);
        self.pump();
        true
    }

    /// Delivers everything in flight.
    pub fn run(&mut self) {
        let mut steps = 0;
        while self.step() {
            steps += 1;
            assert!(steps < 10_000_000, "the protocols never go quiet");
        }
    }

    /// Site `i` fails for good: everyone else learns it.
    pub fn kill(&mut self, i: usize) {
        self.dead[i] = true;
        self.links.retain(|&(a, b), _| a != i && b != i);
        for j in 0..self.sites.len() {
            if j != i && !self.dead[j] {
                self.sites[j].site_fault(id(i), FaultState::PermFailed);
            }
        }
        self.pump();
    }

    /// A copy of `e` sent from site `from` to site `to` inside a message of
    /// the application's own (pinned for `to`, then received and acquired
    /// at `to`).
    pub fn pass(&mut self, e: EntityId, from: usize, to: usize) {
        self.sites[from].lend(e, id(to));
        self.sites[from].settle_now();
        self.pump();
        // The application's message: delivered now.
        self.sites[to].receive(e, id(from));
        self.sites[to].acquire(e);
        self.sites[to].settle_now();
        self.pump();
    }

    pub fn drop_handle(&mut self, site: usize, e: EntityId) {
        self.sites[site].release(e);
        self.sites[site].settle_now();
        self.pump();
    }

    pub fn value(&mut self, site: usize, bytes: &[u8]) -> Value {
        self.sites[site].make_value(bytes.to_vec(), Vec::new())
    }

    pub fn answer(&self, site: usize, op: OpId) -> Option<&Result<Answer, OpError>> {
        self.done.get(&(site, op))
    }

    pub fn empty(&self) -> bool {
        self.sites
            .iter()
            .zip(&self.dead)
            .all(|(s, &d)| d || (s.homes() == 0 && s.proxies() == 0))
    }

    pub fn books(&self) -> String {
        self.sites
            .iter()
            .map(|s| format!("{:?}: {} homes, {} proxies", s.id(), s.homes(), s.proxies()))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
