//! The layer check every sitenet crate runs as a test: each module of the
//! crate's `src/` has a layer, and a module may import (`crate::…`) only
//! modules of strictly lower layers. A strict order leaves no room for an
//! import circle, and a new module without a layer fails the check, so the
//! layering stays written down as the code grows.
//!
//! Granularity: a module is named by a path (`node`, or `wire::frame` in a
//! crate whose top-level folders are layers); a source file belongs to the
//! longest listed path that prefixes its own (`connection/handshake/
//! cookie.rs` is `connection::handshake`), and an import to the longest
//! listed path that prefixes it. `super::` stays inside a module; an item
//! the crate root re-exports (`crate::Node`) counts as an import of the
//! module it comes from, and an item the root defines itself (the
//! simulator's `Sim`, which its modules extend with `impl` blocks) belongs
//! to no layer; a module's `#[cfg(test)]` part is not read (tests may
//! reach anywhere).
//!
//! ```no_run
//! // In a crate's src/layers.rs, behind #[cfg(test)]:
//! const LAYERS: &[(&str, u8)] = &[("error", 0), ("config", 1), ("node", 2)];
//! #[test]
//! fn every_module_imports_only_layers_below_it() {
//!     sitenet_layers::check(env!("CARGO_MANIFEST_DIR"), LAYERS);
//! }
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Checks the crate at `manifest_dir` against `layers` (module path,
/// layer): panics naming every module without a layer and every import
/// that does not run to a strictly lower layer.
pub fn check(manifest_dir: &str, layers: &[(&str, u8)]) {
    check_dir(&Path::new(manifest_dir).join("src"), layers);
}

/// [`check`] for the crate whose root (`lib.rs` or `main.rs`) is in `src`:
/// a binary's folder (`src/bin/NAME`), for one. A library's check leaves
/// `src/bin/` out: each binary there is a crate of its own.
pub fn check_dir(src: &Path, layers: &[(&str, u8)]) {
    let edges = imports(src, layers);
    let layer = |m: &str| layers.iter().find(|(n, _)| *n == m).map(|&(_, l)| l);
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (from, to) in &edges {
        match (layer(from), layer(to)) {
            (Some(a), Some(b)) if b < a => {}
            (Some(_), Some(_)) => upward.push(format!("{from} -> {to}")),
            (None, _) => {
                unplaced.insert(from.clone());
            }
            (_, None) => {
                unplaced.insert(to.clone());
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules without a layer (add them to the crate's LAYERS): {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that do not run to a lower layer (move the shared item down, or the \
         importer up): {upward:?}"
    );
}

/// `(importer, imported)` for every import between two modules of `src`.
pub fn imports(src: &Path, layers: &[(&str, u8)]) -> BTreeSet<(String, String)> {
    let reexported = reexports(src);
    let own = root_items(src);
    let mut edges = BTreeSet::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).expect("under src/");
        let segments = module_path(rel);
        if segments.is_empty()
            || segments == ["layers"]
            || segments[0] == "bin"
            || is_test_file(&segments)
        {
            continue; // the crate root re-exports every layer; tests may reach anywhere
        }
        let Some(module) = owner(&segments, layers) else {
            edges.insert((segments.join("::"), segments.join("::")));
            continue;
        };
        let source = std::fs::read_to_string(&path).expect("a readable source file");
        for import in imported(&code(&source)) {
            if own.contains(&import[0]) {
                continue; // the root's own items: every module may extend them
            }
            let import = match reexported.iter().find(|(item, _)| *item == import[0]) {
                Some((_, from)) if !is_module(src, &from[0]) => continue, // another crate's
                Some((_, from)) => from.clone(),
                None => import,
            };
            let target = owner(&import, layers).unwrap_or_else(|| import[0].clone());
            if target != module {
                edges.insert((module.clone(), target));
            }
        }
    }
    edges
}

/// True if `name` is a module of the crate at `src` (a file or a folder).
fn is_module(src: &Path, name: &str) -> bool {
    src.join(format!("{name}.rs")).exists() || src.join(name).is_dir()
}

/// The listed module that owns `path`: the longest listed prefix.
fn owner(path: &[String], layers: &[(&str, u8)]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|p| layers.iter().any(|(m, _)| m == p))
}

/// A module of tests in a file of its own: `tests.rs`, `x_tests.rs`, or
/// anything under a `tests/` folder.
fn is_test_file(segments: &[String]) -> bool {
    segments
        .iter()
        .any(|s| s == "tests" || s.ends_with("_tests"))
}

/// `a/b/mod.rs` and `a/b.rs` are `a::b`; `lib.rs` is the root (empty).
fn module_path(rel: &Path) -> Vec<String> {
    let mut out: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(out.last().map(String::as_str), Some("mod" | "lib" | "main")) && out.len() == 1
        || out.last().is_some_and(|l| l == "mod")
    {
        out.pop();
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("src/ is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The path (its leading lowercase segments) of every `crate::` path in
/// `src`, grouped `crate::{a::X, b}` imports included.
pub fn imported(src: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = closing(group);
            for item in split_top(&group[..end]) {
                out.push(segments(item));
            }
            rest = &group[end..];
        } else {
            out.push(segments(after));
            rest = after;
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The index of the `}` that closes a group opened just before `group`.
fn closing(group: &str) -> usize {
    let mut depth = 0usize;
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return k,
            '}' => depth -= 1,
            _ => {}
        }
    }
    group.len()
}

/// The items of a group split at its top-level commas.
fn split_top(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&group[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    out.push(&group[start..]);
    out
}

/// The leading path segments of `path`: module names, then the first
/// item (a name that starts upper-case, or the last segment) ends it.
fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seg in path.trim_start().split("::") {
        let name: String = seg
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        let item = name.starts_with(|c: char| c.is_ascii_uppercase());
        out.push(name);
        if item
            || !seg
                .trim()
                .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            break;
        }
    }
    out
}

/// The source without line comments and without its `#[cfg(test)]` part.
fn code(src: &str) -> String {
    without_comments(src.split("\n#[cfg(test)]").next().unwrap_or(""))
}

fn without_comments(src: &str) -> String {
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate root's source: `lib.rs`, or a binary's `main.rs`.
fn root_source(src: &Path) -> Option<String> {
    std::fs::read_to_string(src.join("lib.rs"))
        .or_else(|_| std::fs::read_to_string(src.join("main.rs")))
        .ok()
}

/// The names of the items the root defines itself (not re-exports).
fn root_items(src: &Path) -> BTreeSet<String> {
    let Some(lib) = root_source(src) else {
        return BTreeSet::new();
    };
    let mut out = BTreeSet::new();
    for line in without_comments(&lib).lines() {
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub"));
        if let (Some(kind), Some(name)) = (words.next(), words.next()) {
            if ["struct", "enum", "const", "fn", "type", "trait", "static"].contains(&kind) {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        }
    }
    out
}

/// The module each item `lib.rs` re-exports comes from (`crate::Node` is
/// an import of `node`): `(item, module path)`.
fn reexports(src: &Path) -> Vec<(String, Vec<String>)> {
    let Some(lib) = root_source(src) else {
        return Vec::new();
    };
    let lib = without_comments(&lib).replace('\n', " ");
    let mut out = Vec::new();
    let mut rest = lib.as_str();
    while let Some(i) = rest.find("use ") {
        let stmt = &rest[i + "use ".len()..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        let stmt = &stmt[..end];
        rest = &rest[i + 1..];
        let Some((module, items)) = stmt.split_once("::{").or_else(|| stmt.rsplit_once("::"))
        else {
            continue;
        };
        let module: Vec<String> = module
            .split("::")
            .map(|s| s.trim().to_string())
            .filter(|s| s != "self" && s != "crate")
            .collect();
        for item in items.trim_end_matches('}').split(',') {
            let item: String = item
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !item.is_empty() {
                out.push((item, module.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_import_parser_reads_grouped_and_inline_paths() {
        let src = "use crate::a::X;\nuse crate::{b::{Y, Z}, c};\nlet _ = crate::d::e::f();\n// crate::g\n";
        let got: Vec<Vec<String>> = imported(&code(src));
        let want: Vec<Vec<&str>> = vec![vec!["a", "X"], vec!["b"], vec!["c"], vec!["d", "e", "f"]];
        assert_eq!(got, want);
    }

    #[test]
    fn a_file_belongs_to_the_longest_listed_prefix() {
        let layers = [("wire", 1), ("connection", 2), ("connection::handshake", 3)];
        let p = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
        assert_eq!(
            owner(&p("connection::handshake::cookie"), &layers).as_deref(),
            Some("connection::handshake")
        );
        assert_eq!(
            owner(&p("connection::session"), &layers).as_deref(),
            Some("connection")
        );
        assert_eq!(owner(&p("other"), &layers), None);
    }
}
