//! The transport crate's layers, checked: every module of `src/` has a
//! layer, and a module may import (`crate::…`, `super::…`) only modules of
//! lower layers. A new upward import fails the test, so no import circle
//! can form.
//!
//! The order, lowest first: (a) leaves that import nothing of the crate:
//! TCP tuning, in-process pipes (`mem`), the channel slots (`controller`),
//! the plugged transport's interface (`plug/transport`) and the fault
//! injector's switches and delay queue; (b) addresses, then the boxed
//! plugged channel and listener (`plug/boxed`); (c) `channel`, the
//! [`Channel`](crate::Channel) enum of the built-in kinds; (d) what is
//! built on channels: the transport registry (`plug/registry`), TLS, the
//! fault-injecting wrapper (`fault/channel`) and, above it, the
//! [`FaultInjector`](crate::FaultInjector) (`fault/injector`).
//!
//! Granularity: a module is a top-level file or directory of `src/`
//! (`mem/lanes.rs` is `mem`), except that a directory whose files are
//! listed one by one in [`LAYERS`] (`plug/boxed`) is read file by file;
//! such a directory's `mod.rs` only declares its files and re-exports
//! their items (checked too), so a file of it never imports its own
//! `mod.rs`. An import through a re-export (`crate::FaultInjector`,
//! `crate::plug::TransportChannel`) counts as an import of the file that
//! defines the item. A module's `#[cfg(test)]` items and its `tests.rs`
//! are not read (tests may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module and its layer, lowest first (see the module doc).
const LAYERS: &[(&str, u8)] = &[
    ("tcp_tuning", 0),
    ("mem", 0),
    ("controller", 0),
    ("plug/transport", 0),
    ("fault/controls", 0),
    ("fault/delay", 0),
    ("address", 1),
    ("plug/stream", 1),
    ("plug/boxed", 2),
    ("channel", 3),
    ("plug/registry", 4),
    ("tls", 4),
    ("fault/channel", 4),
    ("fault/injector", 5),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

/// Directories read file by file: those with files of their own in
/// [`LAYERS`].
fn split_dirs() -> BTreeSet<&'static str> {
    LAYERS
        .iter()
        .filter_map(|(m, _)| m.split_once('/').map(|(d, _)| d))
        .collect()
}

fn src_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source without `//` comments and without its `#[cfg(test)]` items
/// (a `mod tests;` line or a braced block).
fn code(src: &str) -> String {
    let src: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        rest = skip_item(&rest[i + "#[cfg(test)]".len()..]);
    }
    out.push_str(rest);
    out
}

/// What follows the item at the start of `s`: up to its `;`, or its
/// balanced braces (string and char literals skipped).
fn skip_item(s: &str) -> &str {
    let b = s.as_bytes();
    let (mut depth, mut k) = (0usize, 0usize);
    while k < b.len() {
        match b[k] {
            b';' if depth == 0 => return &s[k + 1..],
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return &s[k + 1..];
                }
            }
            b'"' => {
                k += 1;
                while k < b.len() && b[k] != b'"' {
                    k += if b[k] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(k + 2) == Some(&b'\'') => k += 2,
            _ => {}
        }
        k += 1;
    }
    ""
}

/// Every path that starts at `root` (`crate::` or `super::`) in `src`,
/// as its segments after the root; groups are expanded
/// (`crate::{a::X, b}` is `[a, X]` and `[b]`).
fn paths(src: &str, root: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find(root) {
        let before = rest[..i].chars().next_back();
        let after = &rest[i + root.len()..];
        rest = after;
        // `foo_crate::` and `self::super::` are not roots (`$crate::` is).
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        expand(after, Vec::new(), &mut out);
    }
    out
}

/// The path at the start of `s` after `prefix`, expanded into `out`.
fn expand(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut segs = prefix;
    let mut s = s.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, 0usize);
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(&group[start..k], segs.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&group[start..k], segs.clone(), out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = s
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        s = s[name.len()..].trim_start();
        segs.push(name);
        match s.strip_prefix("::") {
            Some(more) => s = more.trim_start(),
            None => break,
        }
    }
    if !segs.is_empty() {
        out.push(segs);
    }
}

/// Item name → the path it is re-exported from, for `pub use` and
/// `pub(crate) use` in the file at `path`.
fn reexports(path: &Path) -> BTreeMap<String, Vec<String>> {
    let src = code(&std::fs::read_to_string(path).expect("a readable source file"));
    let mut out = BTreeMap::new();
    for stmt in src.split(';').map(str::trim) {
        let Some(used) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let mut found = Vec::new();
        expand(used, Vec::new(), &mut found);
        for p in found {
            if let Some(item) = p.last() {
                out.insert(item.clone(), p);
            }
        }
    }
    out
}

/// The file of a directory module: `d/mod.rs` or `d.rs`.
fn dir_root(root: &Path, dir: &str) -> PathBuf {
    let inside = root.join(dir).join("mod.rs");
    if inside.exists() {
        inside
    } else {
        root.join(format!("{dir}.rs"))
    }
}

/// The module that `crate::` + `segs` names: re-exports (of `lib.rs` and
/// of the split directories' roots) followed to the defining file.
fn resolve(root: &Path, segs: &[String]) -> String {
    let Some(first) = segs.first() else {
        return String::new();
    };
    let lib = reexports(&root.join("lib.rs"));
    if let Some(p) = lib.get(first).filter(|p| p.len() > 1) {
        return resolve(root, p);
    }
    if split_dirs().contains(first.as_str()) {
        if let Some(second) = segs.get(1) {
            let child = format!("{first}/{second}");
            if layer(&child).is_some() {
                return child;
            }
            if let Some(p) = reexports(&dir_root(root, first)).get(second) {
                let mut full = vec![first.clone()];
                full.extend(p.iter().cloned());
                return resolve(root, &full);
            }
        }
    }
    first.clone()
}

/// The module a file of `src/` belongs to; `None` for the crate root,
/// this test, `tests.rs` files and the root of a directory read file by
/// file.
fn module_of(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    let first = parts.first()?.clone();
    if first == "lib" || first == "layers" || parts.last()? == "tests" {
        return None;
    }
    let split = split_dirs().contains(first.as_str());
    if split && parts.get(1).is_none_or(|c| c == "mod") {
        return None; // only declares and re-exports: checked below
    }
    match parts.get(1) {
        Some(child) if split => Some(format!("{first}/{child}")),
        _ => Some(first),
    }
}

/// Every `.rs` file under `dir`, relative to it.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("src/ is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p.strip_prefix(dir).expect("under src/").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// `(importer, imported)` for every module import of `src/`, sorted.
fn imports() -> Vec<(String, String)> {
    let root = src_root();
    let mut edges = BTreeSet::new();
    for rel in sources(&root) {
        let Some(module) = module_of(&rel) else {
            continue;
        };
        let src = code(&std::fs::read_to_string(root.join(&rel)).expect("a source file"));
        let mut found = paths(&src, "crate::");
        // `super::` in a file of a directory is that directory's path.
        if let Some(dir) = rel.parent().filter(|d| !d.as_os_str().is_empty()) {
            let is_root = rel.file_name().is_some_and(|f| f == "mod.rs");
            let base: Vec<String> = if is_root {
                Vec::new() // `super::` of a `mod.rs` is the crate root
            } else {
                dir.components()
                    .map(|c| c.as_os_str().to_string_lossy().to_string())
                    .collect()
            };
            for p in paths(&src, "super::") {
                let mut full = base.clone();
                full.extend(p);
                found.push(full);
            }
        }
        for p in found {
            let m = resolve(&root, &p);
            if !m.is_empty() && m != module {
                edges.insert((module.clone(), m));
            }
        }
    }
    edges.into_iter().collect()
}

#[test]
fn every_module_imports_only_layers_below_it() {
    let edges = imports();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (from, to) in &edges {
        match (layer(from), layer(to)) {
            (Some(a), Some(b)) if b < a => {}
            (Some(_), Some(_)) => upward.push((from.as_str(), to.as_str())),
            (None, _) => drop(unplaced.insert(from.clone())),
            (_, None) => drop(unplaced.insert(to.clone())),
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules without a layer in LAYERS: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "imports against the layer order (see transport/src/layers.rs): {upward:?}"
    );
}

/// Every file of `src/` is in a module of [`LAYERS`], so none escapes the
/// check above.
#[test]
fn every_source_file_has_a_layer() {
    let unplaced: Vec<_> = sources(&src_root())
        .iter()
        .filter_map(|rel| module_of(rel))
        .filter(|m| layer(m).is_none())
        .collect();
    assert!(unplaced.is_empty(), "files without a layer: {unplaced:?}");
}

/// The `mod.rs` of a directory read file by file only declares its files
/// and re-exports their items: code there would be a module its own
/// files import, and so a circle.
#[test]
fn a_split_directory_root_only_declares_and_reexports() {
    let root = src_root();
    for dir in split_dirs() {
        let src = code(&std::fs::read_to_string(dir_root(&root, dir)).expect("mod.rs"));
        for stmt in src.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let stmt = stmt.trim_start_matches("#[cfg(test)]").trim();
            let declares = ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .any(|p| stmt.starts_with(p));
            let reexports = ["pub use ", "pub(crate) use "]
                .iter()
                .any(|p| stmt.starts_with(p));
            assert!(
                declares || reexports,
                "{dir}/mod.rs holds more than declarations and re-exports: {stmt:?}"
            );
        }
    }
}

#[test]
fn the_import_parser_reads_grouped_and_inline_paths() {
    let src = "use crate::a::X;\nuse crate::{b::{Y, Z}, c};\nlet _ = crate::d::f();\n// crate::e\n\
               pub(crate) fn g() {}\nlet _ = $crate::h;\n#[cfg(test)]\nmod tests { use crate::t; \"}\"; }\n\
               #[cfg(test)]\nuse crate::u;\nuse crate::v;\n";
    let got = paths(&code(src), "crate::");
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::X", "b::Y", "b::Z", "c", "d::f", "h", "v"]);
}
