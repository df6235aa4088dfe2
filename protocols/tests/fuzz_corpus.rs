//! Replays every committed fuzz input through the fuzz targets' own checks
//! (`fuzz/checks/`): the corpus each target has built (`fuzz/corpus/`) and
//! the inputs that once crashed it (`fuzz/regressions/`). A check that
//! fails here is a regression of a decoder; the fuzz crate itself is built
//! by CI (`.ci/run`).

#[path = "../../fuzz/checks/mod.rs"]
mod checks;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                files.push(e.path());
            }
        }
    }
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "no committed inputs for fuzz target {target} (fuzz/corpus/{target}/)"
    );
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{target}: input {} fails its check", f.display());
    }
    eprintln!("{target}: {} inputs replayed", files.len());
}

#[test]
fn frame_header_inputs_replay() {
    replay("frame_header", checks::frame_header::check);
}

#[test]
fn handshake_inputs_replay() {
    replay("handshake", checks::handshake::check);
}

#[test]
fn prelude_inputs_replay() {
    replay("prelude", checks::prelude::check);
}

#[test]
fn session_input_inputs_replay() {
    replay("session_input", checks::session_input::check);
}

#[test]
fn packed_inputs_replay() {
    replay("packed", checks::packed::check);
}

#[test]
fn origin_inputs_replay() {
    replay("origin", checks::origin::check);
}
