//! Replays every committed input of the fuzz target `dataflow_wire`
//! (`fuzz/corpus/dataflow_wire/`, `fuzz/regressions/dataflow_wire/`)
//! through its check (`fuzz/checks/dataflow_wire.rs`).

#[path = "../../../fuzz/checks/dataflow_wire.rs"]
mod check;

use std::path::Path;

use sitenet_dataflow_protocols::{EntityId, Kind, OpId, Value, Wire};
use sitenet_protocols::SiteId;

#[test]
fn dataflow_wire_inputs_replay() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir).join("dataflow_wire")) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no committed inputs for dataflow_wire");
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| check::check(&data));
        assert!(
            r.is_ok(),
            "dataflow_wire: input {} fails its check",
            f.display()
        );
    }
}

/// Writes the seed corpus: a few well-formed message lists (run with
/// `--ignored` after changing `Wire`, then minimise with `cargo fuzz cmin`).
#[test]
#[ignore]
fn write_the_seed_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dataflow_wire");
    std::fs::create_dir_all(&dir).unwrap();
    let mine = |serial, kind| EntityId {
        home: SiteId(1),
        serial,
        kind,
    };
    let theirs = EntityId {
        home: SiteId(2),
        serial: 1,
        kind: Kind::Var,
    };
    let v = Value {
        bytes: b"x".to_vec().into(),
        refs: vec![theirs],
    };
    let lists: Vec<Vec<(u8, Wire)>> = vec![
        vec![(
            1,
            Wire::Register {
                var: mine(1, Kind::Var),
            },
        )],
        vec![(
            1,
            Wire::Bind {
                var: mine(1, Kind::Var),
                op: OpId(1),
                value: v.clone(),
            },
        )],
        vec![(
            2,
            Wire::PortSend {
                port: mine(3, Kind::Port),
                value: v.clone(),
                op: Some(OpId(2)),
            },
        )],
        vec![
            (
                1,
                Wire::Get {
                    cell: mine(4, Kind::MobileCell),
                },
            ),
            (
                1,
                Wire::Got {
                    cell: mine(4, Kind::MobileCell),
                },
            ),
            (
                1,
                Wire::Return {
                    cell: mine(4, Kind::MobileCell),
                    content: v.clone(),
                },
            ),
        ],
        vec![
            (
                2,
                Wire::Dirty {
                    entity: mine(1, Kind::Var),
                    home_copies: 1,
                },
            ),
            (
                3,
                Wire::Release {
                    entity: mine(1, Kind::Var),
                },
            ),
            (
                2,
                Wire::Clean {
                    entity: mine(1, Kind::Var),
                },
            ),
            (
                1,
                Wire::Bound {
                    var: theirs,
                    value: v,
                },
            ),
        ],
    ];
    for (i, l) in lists.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), rmp_serde::to_vec(l).unwrap()).unwrap();
    }
}
