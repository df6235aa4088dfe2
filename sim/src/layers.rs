//! The simulator's layers, checked (`sitenet_layers::check`): every module
//! has a layer and imports only modules of strictly lower layers, so the
//! crate has no import circle. The root (`lib.rs`) holds `Sim` and its
//! event enum, which the modules extend with `impl` blocks; those belong to
//! no layer.

const LAYERS: &[(&str, u8)] = &[
    // Plain parts: the queue, the trace, the network, the outbox bounds.
    ("builds", 0),
    ("envelope", 0),
    ("queue", 0),
    ("trace", 0),
    ("panics", 0),
    ("net", 0),
    ("ops", 0),
    ("coops", 0),
    ("outbox", 0),
    // A node's view of one peer; applications; connections and faults.
    ("peer", 1),
    ("app", 1),
    ("conns", 1),
    ("faults", 1),
    // The world's events: opening, adopting, reading, the slot table,
    // draining outboxes, batches; the checkers and the configuration.
    ("adopt", 2),
    ("io", 2),
    ("slots", 2),
    ("drain", 2),
    ("sites", 2),
    ("make", 2),
    ("check", 2),
    ("audit", 2),
    ("batches", 2),
    ("config", 2),
    ("traffic", 3),
    // The dataflow protocols as an application.
    ("dataflow_app", 3),
    ("workload", 3),
    // Settings drawn per seed.
    ("swarm", 3),
    // A node's turn, and running, searching and shrinking whole runs.
    ("node", 4),
    ("report", 4),
    ("search", 4),
    ("shrink", 4),
];

#[test]
fn every_module_imports_only_layers_below_it() {
    sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
}
