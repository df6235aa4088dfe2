//! `sitenet cookie new` and `--cookie-file` (the cookie level),
//! in separate processes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::cli::{fresh_dir, json_of, run, sitenet, start_node_with, Killed};

/// A fresh directory of this test's own.
fn dir(name: &str) -> PathBuf {
    fresh_dir("sitenet-cli-cookie", name)
}

fn new_cookie(path: &Path) {
    let out = run(&["cookie", "new", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sitenet node --cookie-file PATH`: its first line.
fn start_node(cookie: &Path) -> (Killed, String) {
    let (node, v) = start_node_with(&["--cookie-file", cookie.to_str().unwrap()]);
    (node, v["listen"][0].as_str().unwrap().to_string())
}

#[test]
fn cookie_new_writes_a_private_file_and_never_overwrites() {
    let d = dir("new");
    let path = d.join("cookie");
    let out = run(&["cookie", "new", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["key_id"].as_str().unwrap().len(), 16);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {mode:o}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.trim().len(), 64);
    // A second run refuses to overwrite it (exit 2), and the file is kept.
    let again = run(&["cookie", "new", path.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // Two cookies are different.
    let other = d.join("other");
    new_cookie(&other);
    assert_ne!(std::fs::read_to_string(&other).unwrap(), text);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_cookie_file_readable_by_others_is_refused_with_exit_2() {
    let d = dir("open");
    let path = d.join("cookie");
    new_cookie(&path);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = path.to_str().unwrap();
    for args in [
        vec!["node", "--cookie-file", p],
        vec!["ping", "tcp:127.0.0.1:9", "--cookie-file", p],
        vec!["stats", "tcp:127.0.0.1:9", "--cookie-file", p],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("accessible by group or others") && err.contains("chmod 600"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn node_and_ping_with_the_same_cookie_work_and_with_another_exit_1() {
    let d = dir("pair");
    let (good, bad) = (d.join("good"), d.join("bad"));
    new_cookie(&good);
    new_cookie(&bad);
    let (_node, listen) = start_node(&good);
    let ping = |cookie: Option<&Path>| {
        let mut args = vec![
            "ping".to_string(),
            listen.clone(),
            "--count".into(),
            "20".into(),
            "--json".into(),
            "--timeout".into(),
            "60".into(),
        ];
        match cookie {
            Some(c) => args.extend(["--cookie-file".into(), c.to_str().unwrap().into()]),
            None => args.push("--open".into()),
        }
        sitenet().args(&args).output().unwrap()
    };
    let out = ping(Some(&good));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["count"], 20);
    // send and stats with the same cookie reach it too.
    let g = good.to_str().unwrap();
    let v = json_of(&[
        "send",
        &listen,
        "--count",
        "100",
        "--json",
        "--timeout",
        "60",
        "--cookie-file",
        g,
    ]);
    assert_eq!(v["delivered"], 100, "{v}");
    let v = json_of(&[
        "stats",
        &listen,
        "--json",
        "--timeout",
        "60",
        "--cookie-file",
        g,
    ]);
    assert!(v["slots"]["hard"].as_u64().unwrap() >= 2, "{v}");
    for cookie in [Some(bad.as_path()), None] {
        let out = ping(cookie);
        assert_eq!(out.status.code(), Some(1), "{cookie:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refused this client's cookie")
                || err.contains("refused this open client"),
            "{cookie:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}
