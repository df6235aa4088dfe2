//! The docs say what the code does (issue 20, item 8): the protocol
//! version quoted in README.md and docs/protocol.md is the one in force,
//! every flag a documented `sitenet` command line uses is one that command
//! takes, and nothing cites a design document the repository does not
//! hold. These drifted before (the version given as 1 or 2 in seven
//! places when it was 3; 19 references to a design document outside the
//! repository).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::cli::sitenet;
use sitenet_protocols::PROTOCOL_VERSION;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            paths.push(p);
        }
    }
    paths.into_iter().map(|p| (p.clone(), read(&p))).collect()
}

#[test]
fn the_documented_protocol_version_is_the_one_in_force() {
    let readme = read(&root().join("README.md"));
    let quoted: Vec<&str> = readme
        .match_indices("\"protocol\": ")
        .map(|(i, k)| {
            let rest = &readme[i + k.len()..];
            &rest[..rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len())]
        })
        .collect();
    assert!(!quoted.is_empty(), "README.md quotes no node first line");
    for q in quoted {
        assert_eq!(q, PROTOCOL_VERSION.to_string(), "README.md's \"protocol\"");
    }
    let protocol = read(&root().join("docs/protocol.md"));
    let first = protocol.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("# sitenet wire protocol (version {PROTOCOL_VERSION})"),
        "docs/protocol.md's title"
    );
}

/// The `--flags` of every `cargo run --release -- CMD …` line in the docs
/// (continuation lines included), by command.
fn documented_flags() -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for (path, text) in documents() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(at) = line.find("cargo run --release -- ") else {
                continue;
            };
            let mut command = line[at + "cargo run --release -- ".len()..].to_string();
            while command.trim_end().ends_with('\\') {
                command = command.trim_end().trim_end_matches('\\').to_string();
                command.push(' ');
                command.push_str(lines.next().unwrap_or_default());
            }
            let mut words = command.split_whitespace();
            let Some(cmd) = words.next() else { continue };
            let cmd = cmd.trim_matches('`').to_string();
            for w in words {
                let w = w.trim_start_matches('[').trim_start_matches('`');
                if let Some(flag) = w.strip_prefix("--") {
                    let flag: String = flag
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    if !flag.is_empty() {
                        found.push((name.clone(), cmd.clone(), flag));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_documented_flag_is_one_the_command_takes() {
    let flags = documented_flags();
    assert!(
        flags.len() > 20,
        "only {} documented flags found",
        flags.len()
    );
    let commands: BTreeSet<&str> = flags.iter().map(|(_, c, _)| c.as_str()).collect();
    for cmd in commands {
        let out = sitenet()
            .args([cmd, "--help"])
            .output()
            .expect("sitenet runs");
        assert!(out.status.success(), "sitenet {cmd} --help failed");
        let help = String::from_utf8_lossy(&out.stdout);
        // Flags as whole words: `--count` is not `--counts`.
        let listed = |flag: &str| {
            let word = format!("--{flag}");
            help.match_indices(&word).any(|(i, _)| {
                help[i + word.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
            })
        };
        for (doc, _, flag) in flags.iter().filter(|(_, c, _)| c == cmd) {
            assert!(
                listed(flag),
                "{doc} shows `sitenet {cmd} --{flag}`, which `sitenet {cmd} --help` does not list"
            );
        }
    }
}

#[test]
fn nothing_cites_a_design_document_outside_the_repository() {
    let mut offenders = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    stack.push(p);
                }
            } else if (name.ends_with(".rs") || name.ends_with(".md"))
                && p != root().join("tests/docs_match.rs")
                && read(&p).contains(concat!("DESIGN", ".md"))
            {
                offenders.push(p.display().to_string());
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "cite docs/architecture.md instead: {offenders:?}"
    );
}
