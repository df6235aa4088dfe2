//! The runtime's layers, checked: every module of `src/` has a
//! layer, and a module may import (`crate::…`) only modules of lower
//! layers — except the upward imports listed in [`UPWARD`], the ones left
//! to remove. A new upward import fails the test, and so does a listed
//! one that is gone (the list only shrinks). docs/architecture.md, "The
//! runtime's layers", describes the order.
//!
//! Granularity: a module is a top-level file or directory of `src/`
//! (`node/site_table.rs` is `node`); `super::` is the module itself; a
//! module's `#[cfg(test)]` part is not read (tests may reach anywhere).

/// Each module and its layer, lowest first (docs/architecture.md names
/// them): (a) leaves 0-2; (b) the site entry 3 and the ComObject actor 4;
/// (c) the node's state and tables 5 (`NodeInner`: its site table,
/// requests, accept, watch, the decoding context, the counted `SiteRef`
/// handle, the handler table, the open cooperations seen through `Coop`;
/// and the `Node` handle); `SiteRef`'s sends 6; (d) delivery to handlers, streams,
/// cooperations, services 7-9; (e) the rest of the public API built on
/// them 10.
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
    ("site_entry", 3),
    ("com_object", 4),
    ("node", 5),
    ("site", 6),
    ("handlers", 7),
    ("streams", 8),
    ("cooperation", 9),
    ("services", 9),
    ("site_serde", 10),
    ("start", 10),
    ("tracked", 10),
    ("batch", 10),
    ("local", 10),
    ("raw", 10),
    ("test_hooks", 10),
];

/// The upward imports still there: `(importer, imported)`. Remove a line
/// when its import goes; never add one.
const UPWARD: &[(&str, &str)] = &[];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

/// The first path segment of every `crate::` path in `src` (grouped
/// `crate::{a::X, b}` imports included).
fn imported(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // Balanced braces: split the top level by commas.
            let (mut depth, mut start) = (0usize, 0usize);
            let mut end = group.len();
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = k;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(first_segment(&group[start..k]));
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            out.push(first_segment(&group[start..end]));
            rest = &group[end..];
        } else {
            out.push(first_segment(after));
            rest = after;
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The source without line comments and without its `#[cfg(test)]` part.
fn code(src: &str) -> String {
    let src = src.split("\n#[cfg(test)]").next().unwrap_or("");
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module each item `lib.rs` re-exports comes from (`crate::Node` is
/// an import of `node`).
fn reexports(root: &std::path::Path) -> Vec<(String, String)> {
    let lib = std::fs::read_to_string(root.join("lib.rs")).expect("lib.rs");
    let mut out = Vec::new();
    for line in lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub use "))
    {
        let Some((module, items)) = line.trim_end_matches(';').split_once("::") else {
            continue;
        };
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            out.push((first_segment(item), module.to_string()));
        }
    }
    out
}

/// `(importer, imported)` for every module import of `src/`, sorted.
fn imports() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let reexported = reexports(&root);
    let mut edges = std::collections::BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("src/ is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&root).expect("under src/");
            let first = rel.components().next().expect("a path");
            let module = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if module == "lib" || module == "layers" {
                continue; // the crate root re-exports every layer; this file is a test
            }
            let src = std::fs::read_to_string(&p).expect("a source file");
            for m in imported(&code(&src)) {
                let m = reexported
                    .iter()
                    .find(|(item, _)| *item == m)
                    .map_or(m, |(_, from)| from.clone());
                if m != module {
                    edges.insert((module.clone(), m));
                }
            }
        }
    }
    edges.into_iter().collect()
}

#[test]
fn every_module_imports_only_layers_below_it() {
    let edges = imports();
    let mut unplaced = Vec::new();
    let mut upward = Vec::new();
    for (from, to) in &edges {
        match (layer(from), layer(to)) {
            (Some(a), Some(b)) if b < a => {}
            (Some(_), Some(_)) => upward.push((from.as_str(), to.as_str())),
            (None, _) => unplaced.push(from.clone()),
            (_, None) => unplaced.push(to.clone()),
        }
    }
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in LAYERS: {unplaced:?}"
    );
    let new: Vec<_> = upward.iter().filter(|e| !UPWARD.contains(e)).collect();
    let gone: Vec<_> = UPWARD.iter().filter(|e| !upward.contains(e)).collect();
    assert!(
        new.is_empty(),
        "imports against the layer order (docs/architecture.md, \"The runtime's layers\"): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "no longer upward, remove from UPWARD: {gone:?}"
    );
}

#[test]
fn the_import_parser_reads_grouped_and_inline_paths() {
    let src = "use crate::a::X;\nuse crate::{b::{Y, Z}, c};\nlet _ = crate::d::f();\n// crate::e\n";
    assert_eq!(imported(&code(src)), ["a", "b", "c", "d"]);
}
