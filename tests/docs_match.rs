//! The docs say what the code does: the protocol version quoted in the
//! docs is the one in force, docs/cli.md describes every command `sitenet`
//! has and every flag a documented `sitenet` command line uses is one that
//! command takes, and nothing cites a design document the repository does
//! not hold.

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

/// Every `"protocol": N` a document quotes (the node's first line), by
/// document.
fn quoted_versions() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (path, text) in documents() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (i, k) in text.match_indices("\"protocol\": ") {
            let rest = &text[i + k.len()..];
            let n = &rest[..rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len())];
            found.push((name.clone(), n.to_string()));
        }
    }
    found
}

#[test]
fn the_documented_protocol_version_is_the_one_in_force() {
    let quoted = quoted_versions();
    for doc in ["README.md", "cli.md"] {
        assert!(
            quoted.iter().any(|(d, _)| d == doc),
            "{doc} quotes no node first line"
        );
    }
    for (doc, q) in quoted {
        assert_eq!(q, PROTOCOL_VERSION.to_string(), "{doc}'s \"protocol\"");
    }
    let protocol = read(&root().join("docs/protocol.md"));
    let first = protocol.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("# sitenet wire protocol (version {PROTOCOL_VERSION})"),
        "docs/protocol.md's title"
    );
}

/// The commands `sitenet --help` lists (its "Commands:" section, `help`
/// aside).
fn commands() -> Vec<String> {
    let out = sitenet().arg("--help").output().expect("sitenet runs");
    assert!(out.status.success(), "sitenet --help failed");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(listed.len() >= 8, "sitenet --help lists {listed:?}");
    listed
}

#[test]
fn docs_cli_describes_every_command() {
    let cli = read(&root().join("docs/cli.md"));
    let readme = read(&root().join("README.md"));
    for cmd in commands() {
        assert!(
            cli.contains(&format!("| `{cmd}` |")),
            "docs/cli.md's table of commands lacks `{cmd}`"
        );
        assert!(
            cli.contains(&format!("cargo run --release -- {cmd}"))
                || cli.contains(&format!("sitenet {cmd} ")),
            "docs/cli.md shows no command line of `sitenet {cmd}`"
        );
        assert!(
            readme.contains(&format!("| `sitenet {cmd}` |")),
            "README.md's table of commands lacks `sitenet {cmd}`"
        );
    }
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
    let in_cli = flags.iter().filter(|(doc, _, _)| doc == "cli.md").count();
    assert!(
        in_cli > 20,
        "only {in_cli} documented flags found in docs/cli.md"
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
