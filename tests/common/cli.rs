//! The `sitenet` binary in a process of its own, for the CLI tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sitenet");

/// The binary, proving by default a cookie file of this test process's own
/// (`SITENET_COOKIE_FILE` under the target's temporary directory, made by
/// the first command that needs it): the commands a test runs are members
/// of each other's nodes, and nothing is written under the real
/// `~/.config`.
pub fn sitenet() -> Command {
    let mut c = Command::new(BIN);
    c.env("SITENET_COOKIE_FILE", cookie_file());
    c
}

/// The cookie file [`sitenet`] commands prove by default.
pub fn cookie_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cli-cookies")
        .join(std::process::id().to_string())
        .join("cookie")
}

/// The cookie [`sitenet`] commands prove by default, for a library node
/// that talks to them.
pub fn cookie() -> sitenet_protocols::Cookie {
    sitenet::cookie_file::load_or_create(&cookie_file())
        .expect("the test's cookie file")
        .0
}

/// A child process, killed and reaped when dropped (a failing test leaves
/// no node running).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `sitenet node ARGS` and parses its first stdout line
/// (`{"site_id", "listen", "protocol"}`).
pub fn start_node_with(args: &[&str]) -> (Killed, serde_json::Value) {
    let mut child = sitenet()
        .arg("node")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sitenet node starts");
    let v = announcement(&mut child);
    (Killed(child), v)
}

/// The first stdout line of a started `sitenet node` (`{"site_id",
/// "listen", "protocol"}`), parsed; the rest of stdout is dropped.
pub fn announcement(child: &mut std::process::Child) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("first line {line:?}: {e}"))
}

/// Runs the binary with `args`, which must succeed, and parses its JSON.
pub fn json_of(args: &[&str]) -> serde_json::Value {
    let out = sitenet().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A fresh, empty directory for one CLI test (`prefix`: the test file's).
pub fn fresh_dir(prefix: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary with `args`, whatever its exit.
pub fn run(args: &[&str]) -> std::process::Output {
    sitenet().args(args).output().unwrap()
}
