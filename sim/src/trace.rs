//! The run's event trace: every event and decision, hashed into one
//! SHA-256 digest (the same seed gives the same digest on every run and
//! every machine), and printed line by line on request (`--trace`).

use std::fmt::Write as _;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::Ev;

/// Where trace lines go.
type Sink = Box<dyn FnMut(&str)>;

/// Hashes the trace, and prints it when a sink is set.
pub(crate) struct Trace {
    hasher: Sha256,
    /// Records not hashed yet (hashed in bulk: a call per event costs
    /// more than the bytes).
    pending: Vec<u8>,
    sink: Option<Sink>,
    line: String,
}

impl Trace {
    pub(crate) fn new() -> Self {
        Self {
            hasher: Sha256::new(),
            pending: Vec::with_capacity(1 << 16),
            sink: None,
            line: String::new(),
        }
    }

    pub(crate) fn set_sink(&mut self, sink: Sink) {
        self.sink = Some(sink);
    }

    /// Prints `line` if a sink is set, without hashing it (what the
    /// reader needs to follow the trace, such as which node is which site).
    pub(crate) fn note(&mut self, line: &str) {
        if let Some(sink) = &mut self.sink {
            sink(line);
        }
    }

    /// Records one event: its time, a kind and up to four numbers. The
    /// digest covers exactly these values, in this order.
    pub(crate) fn event(&mut self, step: u64, at: Duration, kind: &str, values: &[u128]) {
        let p = &mut self.pending;
        p.extend_from_slice(&(at.as_nanos() as u64).to_le_bytes());
        p.extend_from_slice(kind.as_bytes());
        p.push(values.len() as u8);
        for v in values {
            // Small values (indexes, counts) take their significant bytes
            // only; a site id all 16.
            let bytes = v.to_le_bytes();
            let len = 16 - (v.leading_zeros() / 8) as usize;
            p.push(len as u8);
            p.extend_from_slice(&bytes[..len]);
        }
        if p.len() >= 1 << 16 {
            self.hasher.update(&self.pending);
            self.pending.clear();
        }
        if let Some(sink) = &mut self.sink {
            self.line.clear();
            let _ = write!(self.line, "{step:>9} {:>12.6}s {kind}", at.as_secs_f64());
            for v in values {
                let _ = write!(self.line, " {v:x}");
            }
            sink(&self.line);
        }
    }

    /// The digest of everything recorded, in hex.
    pub(crate) fn digest(&self) -> String {
        let mut h = self.hasher.clone();
        h.update(&self.pending);
        let d = h.finalize();
        d.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

impl crate::Sim {
    /// Puts a popped event on the trace: its kind and what it names.
    pub(crate) fn trace_event(&mut self, ev: &Ev) {
        let (kind, n, values): (&str, usize, [u128; 3]) = match *ev {
            Ev::ComTimer { node, peer, .. } => ("timer", node, [peer.0, 0, 0]),
            Ev::SlotTimer { node, .. } => ("slot_timer", node, [0; 3]),
            Ev::Grant {
                node, peer, holder, ..
            } => ("grant", node, [peer.0, holder as u128, 0]),
            Ev::LineTurn {
                node,
                ticket,
                holder,
                ..
            } => ("line_turn", node, [ticket as u128, holder as u128, 0]),
            Ev::Syn { conn } => ("syn", 0, [conn as u128, 0, 0]),
            Ev::Arrive { conn, dir } => ("arrive", 0, [conn as u128, dir as u128, 0]),
            Ev::Read { conn, end } => ("read", 0, [conn as u128, end as u128, 0]),
            Ev::Writable { conn, end } => ("writable", 0, [conn as u128, end as u128, 0]),
            Ev::HsTimeout { conn, end } => ("hs_timeout", 0, [conn as u128, end as u128, 0]),
            Ev::Tick { node, .. } => ("tick", node, [0; 3]),
            Ev::Fault => ("fault", 0, [0; 3]),
            Ev::Heal => ("heal", 0, [0; 3]),
            Ev::Restart { node } => ("restart", node, [0; 3]),
            Ev::Resume { node, .. } => ("resume", node, [0; 3]),
            Ev::Requests { node, .. } => ("request_timer", node, [0; 3]),
            Ev::Admission { node, .. } => ("admission_timer", node, [0; 3]),
            Ev::Audit => ("audit", 0, [0; 3]),
            Ev::Drain { node, peer, .. } => ("drain", node, [peer.0, 0, 0]),
            Ev::Adopt { node, id, .. } => ("adopt", node, [id as u128, 0, 0]),
        };
        self.trace(n, kind, &values);
    }
}
