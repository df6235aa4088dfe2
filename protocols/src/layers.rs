//! The crate's layers, checked (`sitenet_layers::check`): every module has
//! a layer and imports only modules of strictly lower layers, so the crate
//! has no import circle. The folders are the layers — `base` (the leaf),
//! `wire`, `slots`, `connection`, `node` — and the numbers order the
//! modules inside them; docs/architecture.md, "Layers", gives the reasons.

const LAYERS: &[(&str, u8)] = &[
    // base: the shared vocabulary and bounds; imports nothing of the crate.
    ("base", 1),
    ("base::limits", 0),
    ("base::priority", 0),
    ("base::planted", 0),
    ("base::timer", 0),
    ("base::class", 1),
    ("base::site", 1),
    // wire: bytes and their encoding.
    ("wire", 4),
    ("wire::byte_buffer", 2),
    ("wire::frame", 2),
    ("wire::varint", 2),
    ("wire::version", 3),
    ("wire::message", 3),
    ("wire::marshal", 4),
    // slots: the slot table, the waiting line, handshake admission.
    ("slots::admission", 5),
    ("slots::dial_bound", 6),
    ("slots", 6),
    // connection: one remote site's channel, session and ComObject.
    ("connection", 12),
    ("connection::refusal", 7),
    ("connection::lane_slots", 7),
    ("connection::input_budget", 7),
    ("connection::scheduler", 7),
    ("connection::error", 8),
    ("connection::address_book", 9),
    ("connection::negotiate", 9),
    ("connection::handshake", 9),
    ("connection::reassembly", 9),
    ("connection::deliver", 9),
    ("connection::output_share", 9),
    ("connection::link", 10),
    ("connection::ledger", 10),
    ("connection::packed", 10),
    ("connection::session", 11),
    ("connection::com_object", 12),
    // node: many sites.
    ("node", 14),
    ("node::claims", 13),
    ("node::idle_spin", 13),
    ("node::log_limit", 13),
    ("node::batch", 13),
    ("node::cooperation", 13),
    ("node::requests", 13),
    ("node::turns", 13),
    ("node::delegation", 13),
    ("node::site_index", 14),
];

#[test]
fn every_module_imports_only_layers_below_it() {
    sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
}
