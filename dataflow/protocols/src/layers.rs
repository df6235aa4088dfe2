//! The layers of `sitenet-dataflow-protocols`, checked
//! (`sitenet_layers::check`): what the protocols name, their messages,
//! what they tell the driver, and the site machine over all three.

/// Each module and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[("entity", 0), ("wire", 1), ("outcome", 2), ("site", 3)];

#[test]
fn every_module_imports_only_layers_below_it() {
    sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
}
