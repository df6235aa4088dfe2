//! sitenet as a library: a runtime that depends on it
//! with `default-features = false` gets the three crates re-exported and
//! none of the command's dependencies — no clap, indicatif or plotters, no
//! stress or bench engine. (.ci/run also builds it so.)

use std::process::Command;

/// The packages `cargo tree` lists for sitenet's normal dependencies with
/// `features` (from the lock file, offline).
fn packages(features: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args([
            "--manifest-path",
            concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
        ])
        .args(["-p", "sitenet"])
        .args(features)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_library_alone_pulls_in_none_of_the_commands_dependencies() {
    let alone = packages(&["--no-default-features"]);
    let with_cli = packages(&[]);
    for cli_only in [
        "clap",
        "indicatif",
        "plotters",
        "tracing-subscriber",
        "hdrhistogram",
    ] {
        assert!(
            with_cli.iter().any(|p| p == cli_only),
            "{cli_only} is no dependency of the command either: update this test"
        );
        assert!(
            !alone.iter().any(|p| p == cli_only),
            "the library alone depends on {cli_only}"
        );
    }
    for crate_ in ["sitenet-protocols", "sitenet-transport", "sitenet-runtime"] {
        assert!(alone.iter().any(|p| p == crate_), "{crate_} missing");
    }
    eprintln!(
        "packages: {} for the library alone, {} with the command",
        alone.len(),
        with_cli.len()
    );
}
