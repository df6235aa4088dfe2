//! The layers of `sitenet-dataflow`, checked (`sitenet_layers::check`):
//! the errors; the node's layer driving the protocols (`runtime`); the
//! handle every typed entity holds, and how it travels; the typed
//! entities (a port's stream is a variable); tickets over all of them.

/// Each module and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("runtime", 1),
    ("handle", 2),
    ("var", 3),
    ("cell", 3),
    ("port", 4),
    ("ticket", 5),
];

#[test]
fn every_module_imports_only_layers_below_it() {
    sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
}
