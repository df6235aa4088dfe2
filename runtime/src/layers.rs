//! The runtime's layers, checked (`sitenet_layers::check`): every module
//! of `src/` has a layer, and a module may import (`crate::…`) only
//! modules of lower layers, so the crate has no import circle.
//! docs/architecture.md, "Layers", describes the order. A module is a
//! top-level file or directory of `src/` (`node/site_table.rs` is `node`).

/// Each module and its layer, lowest first (docs/architecture.md names
/// them): (a) leaves 0-2; (b) the site entry and the node's
/// shared state by concern (`node_state`) 3, and the ComObject actor 4;
/// (c) the node's state and tables 5 (`NodeInner`: its site table,
/// requests, accept, watch, the decoding context, the counted `SiteRef`
/// handle, the handler table, the open cooperations seen through `Coop`;
/// and the `Node` handle); `SiteRef`'s sends 6; (d) delivery to handlers, streams,
/// cooperations, services, the local site's drain 7-9; (e) the rest of the public API built on
/// them (batches, the start, the encoding and decoding context) 10.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("message", 0),
    ("metrics", 0),
    ("cookie_file", 0),
    ("idle_spin", 0),
    ("runtime", 1),
    ("stats", 0),
    ("outbox", 0),
    ("trans_object", 1),
    ("config", 1),
    ("delivery", 1),
    ("openmetrics", 1),
    ("peer_logs", 1),
    ("channel_io", 2),
    ("events", 2),
    ("node_state", 3),
    ("site_entry", 3),
    ("com_object", 4),
    ("node", 5),
    ("site", 6),
    ("handlers", 7),
    ("streams", 8),
    ("cooperation", 9),
    ("services", 9),
    ("start", 10),
    ("batch", 10),
    ("context", 10),
    ("local", 9),
];

#[test]
fn every_module_imports_only_layers_below_it() {
    sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
}
