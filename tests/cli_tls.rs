//! `sitenet cert ca`, `sitenet cert site` and `--cert/--key/--ca`
//! (the TLS level), in separate processes: TLS in two commands.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::cli::{fresh_dir, json_of, run, start_node_with, Killed};

/// A fresh directory of this test's own.
fn dir(name: &str) -> PathBuf {
    fresh_dir("sitenet-cli-tls", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `sitenet cert site --ca CA DIR`: its JSON.
fn new_site(ca: &Path, dir: &Path) -> serde_json::Value {
    json_of(&["cert", "site", "--ca", s(ca), s(dir)])
}

/// The three flags for the site in `site_dir`, trusting the CA in `ca`.
fn flags(ca: &Path, site_dir: &Path) -> Vec<String> {
    [
        "--cert",
        s(&site_dir.join("site.pem")),
        "--key",
        s(&site_dir.join("site.key")),
        "--ca",
        s(&ca.join("ca.pem")),
    ]
    .map(String::from)
    .to_vec()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn cert_ca_and_cert_site_write_private_keys_and_never_overwrite() {
    let d = dir("files");
    let ca = d.join("ca");
    let v = json_of(&["cert", "ca", s(&ca)]);
    assert_eq!(v["ca_cert"], s(&ca.join("ca.pem")));
    assert_eq!(mode(&ca.join("ca.key")), 0o600);
    let a = new_site(&ca, &d.join("a"));
    let b = new_site(&ca, &d.join("b"));
    assert_eq!(a["site_id"].as_str().unwrap().len(), 32);
    assert_ne!(a["site_id"], b["site_id"], "a fresh site id each time");
    assert_eq!(mode(&d.join("a/site.key")), 0o600);
    // Never overwritten (exit 2), the files kept.
    let key = std::fs::read(ca.join("ca.key")).unwrap();
    assert_eq!(run(&["cert", "ca", s(&ca)]).status.code(), Some(2));
    assert_eq!(std::fs::read(ca.join("ca.key")).unwrap(), key);
    let again = run(&["cert", "site", "--ca", s(&ca), s(&d.join("a"))]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("refusing to overwrite"));
    // A site needs a CA that exists.
    let none = run(&[
        "cert",
        "site",
        "--ca",
        s(&d.join("nowhere")),
        s(&d.join("c")),
    ]);
    assert_eq!(none.status.code(), Some(2));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_node_with_a_certificate_is_its_site_and_ping_send_stats_reach_it_over_tls() {
    let d = dir("pair");
    let ca = d.join("ca");
    json_of(&["cert", "ca", s(&ca)]);
    let server = new_site(&ca, &d.join("server"));
    new_site(&ca, &d.join("client"));
    let node_flags = flags(&ca, &d.join("server"));
    let args: Vec<&str> = node_flags.iter().map(String::as_str).collect();
    let (_node, v): (Killed, _) = start_node_with(&args);
    // Its site id is its certificate's; it listens on tls: by default.
    assert_eq!(v["site_id"], server["site_id"]);
    let listen = v["listen"][0].as_str().unwrap().to_string();
    assert!(listen.starts_with("tls:127.0.0.1:"), "{listen}");
    let client = flags(&ca, &d.join("client"));
    let with = |cmd: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = cmd.iter().map(|x| x.to_string()).collect();
        a.extend(client.iter().cloned());
        a
    };
    let json_with =
        |cmd: &[&str]| json_of(&with(cmd).iter().map(String::as_str).collect::<Vec<_>>());
    let v = json_with(&[
        "ping",
        &listen,
        "--count",
        "20",
        "--json",
        "--timeout",
        "60",
    ]);
    assert_eq!(v["count"], 20);
    let v = json_with(&[
        "send",
        &listen,
        "--count",
        "100",
        "--json",
        "--timeout",
        "60",
    ]);
    assert_eq!(v["delivered"], 100, "{v}");
    let v = json_with(&["stats", &listen, "--json", "--timeout", "60"]);
    assert!(v.is_object(), "{v}");
    // Without a certificate: it fails (exit 1), saying why.
    let out = run(&["ping", &listen, "--count", "1", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no certificate"), "{err}");
    // A certificate of another CA: refused (exit 1).
    let other = d.join("other");
    json_of(&["cert", "ca", s(&other)]);
    new_site(&other, &d.join("stranger"));
    let mut a = vec!["ping", &listen, "--count", "1", "--timeout", "60"];
    let stranger = flags(&other, &d.join("stranger"));
    a.extend(stranger.iter().map(String::as_str));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TLS refused"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_key_readable_by_others_and_half_the_flags_are_usage_errors() {
    let d = dir("usage");
    let ca = d.join("ca");
    json_of(&["cert", "ca", s(&ca)]);
    new_site(&ca, &d.join("a"));
    let f = flags(&ca, &d.join("a"));
    let key = d.join("a/site.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut args = vec!["ping", "tls:127.0.0.1:9"];
    args.extend(f.iter().map(String::as_str));
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
    // --cert without --key and --ca.
    let out = run(&["ping", "tls:127.0.0.1:9", "--cert", &f[1]]);
    assert_eq!(out.status.code(), Some(2));
    // A node with a certificate listens on nothing but tls:.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut args = vec!["node", "--listen", "tcp:127.0.0.1:0"];
    args.extend(f.iter().map(String::as_str));
    let out = run(&args);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listens only on tls:"), "{err}");
    // stress makes its own certificates.
    let mut args = vec!["stress", "--duration", "1"];
    args.extend(f.iter().map(String::as_str));
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--transport tls"));
    std::fs::remove_dir_all(&d).unwrap();
}
