//! The `sitenet` crate's layers, checked (`sitenet_layers::check`): the
//! library's modules (the guide, the bench and stress engines, the metrics
//! endpoint) import none of each other, and the `sitenet` command's
//! modules (`src/bin/sitenet/`) import only lower ones: the plot under the
//! stress report, the target and its authentication under the clients.

const LIB: &[(&str, u8)] = &[
    ("guide", 0),
    ("bench", 0),
    ("metrics_http", 0),
    ("stress", 0),
];

const BIN: &[(&str, u8)] = &[
    ("plot", 0),
    ("auth", 1),
    ("bench", 1),
    ("cert", 1),
    ("cookie", 1),
    ("demo", 1),
    ("sim", 1),
    ("target", 2),
    ("ping", 3),
    ("send", 3),
    ("stats", 3),
    ("stress", 3),
];

#[test]
fn every_module_imports_only_layers_below_it() {
    let root = env!("CARGO_MANIFEST_DIR");
    sitenet_layers::check(root, LIB);
    sitenet_layers::check_dir(&std::path::Path::new(root).join("src/bin/sitenet"), BIN);
}
