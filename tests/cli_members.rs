//! Members by default: `sitenet node`, `ping`, `send` and `stats` given
//! neither `--cookie-file` nor `--cert` prove the user's own cookie file
//! (made on first use), `--open` chooses the open level on either side, a
//! client at one level refuses a node at the other with an error naming
//! both; a library node open to the network needs that choice made
//! explicitly; and TLS refusals say which side does not trust which CA.
//!
//! Every process here gets its cookie file from `SITENET_COOKIE_FILE` (or
//! `XDG_CONFIG_HOME`/`HOME` pointed at a temporary directory): nothing is
//! ever written under the real `~/.config`.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::cli::{fresh_dir, json_of, Killed, BIN};
use sitenet::{Node, NodeError};

/// A fresh directory of this test's own.
fn dir(name: &str) -> PathBuf {
    fresh_dir("sitenet-cli-members", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The binary with an environment that names no real cookie file: no
/// `SITENET_COOKIE_FILE`, and `XDG_CONFIG_HOME` and `HOME` inside `home`.
fn sitenet_in(home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("SITENET_COOKIE_FILE")
        .env("XDG_CONFIG_HOME", home.join("xdg"))
        .env("HOME", home.join("home"))
        .env("NO_COLOR", "1");
    c
}

/// The binary proving the cookie in `cookie` by default.
fn sitenet_with(cookie: &Path) -> Command {
    let mut c = sitenet_in(cookie.parent().unwrap());
    c.env("SITENET_COOKIE_FILE", cookie);
    c
}

/// Starts `cmd node ARGS`: the node, its listen address and everything it
/// wrote to stderr up to its first stdout line (the stderr file's path).
fn node(mut cmd: Command, args: &[&str], log: &Path) -> (Killed, String) {
    let mut child = cmd
        .arg("node")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("sitenet node starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let killed = Killed(child);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "first line {line:?}: {e}; stderr: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    });
    (killed, v["listen"][0].as_str().unwrap().to_string())
}

fn ping(mut cmd: Command, addr: &str, extra: &[&str]) -> Output {
    cmd.args(["ping", addr, "--count", "5", "--json", "--timeout", "60"])
        .args(extra)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_node_without_flags_makes_its_cookie_file_and_admits_only_holders() {
    let d = dir("default");
    // Parent directories that do not exist yet.
    let cookie = d.join("config/sitenet/cookie");
    let log = d.join("node.log");
    let (_node, listen) = node(sitenet_with(&cookie), &[], &log);
    // The node made the cookie: private, in private directories, and said
    // where in one line.
    assert_eq!(mode(&cookie), 0o600);
    assert_eq!(mode(&d.join("config/sitenet")), 0o700);
    assert_eq!(mode(&d.join("config")), 0o700);
    let said = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = said.lines().filter(|l| l.contains(s(&cookie))).collect();
    assert_eq!(lines.len(), 1, "one line names the new cookie file: {said}");
    assert!(
        !said.contains("ANYONE WHO REACHES"),
        "a members-only node gives no open-level warning: {said}"
    );
    let text = std::fs::read_to_string(&cookie).unwrap();

    // The same user's commands prove it and get in; nothing is rewritten.
    let out = ping(sitenet_with(&cookie), &listen, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains(s(&cookie)),
        "an existing cookie file is used silently: {}",
        stderr(&out)
    );
    let v: serde_json::Value = serde_json::from_slice(
        &sitenet_with(&cookie)
            .args([
                "send",
                &listen,
                "--count",
                "50",
                "--json",
                "--timeout",
                "60",
            ])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(v["delivered"], 50, "{v}");
    let out = sitenet_with(&cookie)
        .args(["stats", &listen, "--json", "--timeout", "60"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&cookie).unwrap(), text);

    // Another user's cookie does not get in: exit 1, one clear error
    // naming the cookie it proved, printed once.
    let other = d.join("other/cookie");
    let out = ping(sitenet_with(&other), &listen, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("refused this client's cookie ({})", s(&other))),
        "{err}"
    );
    assert!(err.contains("holds another cookie"), "{err}");
    assert!(!err.contains("WARN"), "the refusal is printed once: {err}");
    assert_eq!(
        err.matches("refused").count(),
        1,
        "the refusal is printed once: {err}"
    );

    // An open client does not get in either, told what the node wants.
    let out = ping(sitenet_with(&other), &listen, &["--open"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("refused this open client (no cookie)")
            && err.contains("members only")
            && err.contains("--cookie-file"),
        "{err}"
    );
    assert!(!err.contains("WARN"), "the refusal is printed once: {err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_on_both_sides_works_and_a_cookie_client_refuses_an_open_node() {
    let d = dir("open");
    let cookie = d.join("cookie");
    let log = d.join("node.log");
    let (_node, listen) = node(sitenet_with(&cookie), &["--open"], &log);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("ANYONE WHO REACHES"), "{said}");
    assert!(!cookie.exists(), "an open node makes no cookie file");

    let out = ping(sitenet_with(&cookie), &listen, &["--open"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["count"], 5);

    // A client at the cookie level requires the node to prove its cookie:
    // an open node cannot, and the client says so, naming both levels.
    for cmd in [
        vec!["ping", &listen, "--count", "1", "--timeout", "60"],
        vec!["stats", &listen, "--timeout", "60"],
        vec!["send", &listen, "--count", "3", "--timeout", "60"],
    ] {
        let out = sitenet_with(&cookie).args(&cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("refused this client's cookie ({})", s(&cookie)))
                && err.contains("open (no cookie)")
                && err.contains("--open"),
            "{cmd:?}: {err}"
        );
        assert!(!err.contains("WARN"), "{cmd:?}: printed once: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_default_cookie_file_is_under_xdg_config_home_else_home() {
    let d = dir("where");
    let xdg = d.join("xdg/sitenet/cookie");
    let home = d.join("home/.config/sitenet/cookie");
    let (n, _) = node(sitenet_in(&d), &[], &d.join("a.log"));
    drop(n);
    assert!(xdg.exists() && !home.exists());
    assert_eq!(mode(&xdg), 0o600);
    let mut cmd = sitenet_in(&d);
    cmd.env_remove("XDG_CONFIG_HOME");
    let (n, _) = node(cmd, &[], &d.join("b.log"));
    drop(n);
    assert!(home.exists());
    assert_eq!(mode(&home), 0o600);
    assert_eq!(mode(&d.join("home/.config/sitenet")), 0o700);
    // A default cookie file that others can read is refused as an explicit
    // one is (exit 2).
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = sitenet_in(&d);
    cmd.env_remove("XDG_CONFIG_HOME");
    let out = cmd.args(["stats", "tcp:127.0.0.1:9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_with_a_cookie_file_or_a_certificate_is_a_usage_error() {
    let d = dir("conflict");
    let cookie = d.join("cookie");
    for args in [
        vec![
            "ping",
            "tcp:127.0.0.1:9",
            "--open",
            "--cookie-file",
            s(&cookie),
        ],
        vec!["node", "--open", "--cookie-file", s(&cookie)],
        vec![
            "stats",
            "tcp:127.0.0.1:9",
            "--open",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
            "--ca",
            "ca.pem",
        ],
    ] {
        let out = sitenet_with(&cookie).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--open"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!cookie.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_node_open_to_the_network_needs_the_open_level_chosen() {
    // Every address of the host, no cookie, no certificate: refused before
    // anything listens, naming the three ways out.
    let e = Node::builder()
        .listen("tcp:0.0.0.0:0")
        .start()
        .expect_err("an open node on 0.0.0.0");
    assert!(matches!(e, NodeError::OpenToNetwork { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("tcp:0.0.0.0:")
            && text.contains("cookies")
            && text.contains("tls")
            && text.contains("open()"),
        "{text}"
    );
    // Chosen explicitly, or with a cookie: it starts.
    let open = Node::builder()
        .listen("tcp:0.0.0.0:0")
        .open()
        .start()
        .unwrap();
    assert!(open.config().allow_open);
    let member = Node::builder()
        .listen("tcp:0.0.0.0:0")
        .configure(|c| c.cookies = vec![sitenet_protocols::Cookie::new([7; 32])])
        .start()
        .unwrap();
    // Loopback, unix: and mem: need no choice.
    let d = dir("library");
    let local = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .listen(format!("unix:{}", d.join("n.sock").display()))
        .listen(sitenet_transport::Address::unique_mem("members").to_string())
        .start()
        .unwrap();
    for n in [open, member, local] {
        n.shutdown(std::time::Duration::from_secs(1)).await;
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `sitenet cert site --ca CA DIR`.
fn new_site(ca: &Path, dir: &Path) {
    json_of(&["cert", "site", "--ca", s(ca), s(dir)]);
}

fn tls_flags(cert_dir: &Path, ca_file: &Path) -> Vec<String> {
    [
        "--cert",
        s(&cert_dir.join("site.pem")),
        "--key",
        s(&cert_dir.join("site.key")),
        "--ca",
        s(ca_file),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn tls_refusals_say_which_side_does_not_trust_which_ca() {
    let d = dir("tls");
    let (ca, other) = (d.join("ca"), d.join("other"));
    json_of(&["cert", "ca", s(&ca)]);
    json_of(&["cert", "ca", s(&other)]);
    new_site(&ca, &d.join("server"));
    new_site(&other, &d.join("stranger"));
    let flags = tls_flags(&d.join("server"), &ca.join("ca.pem"));
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_node, listen) = node(sitenet_in(&d), &args, &d.join("node.log"));

    // The client trusts only its own CA: the node's certificate is not
    // signed by it.
    let stranger_ca = other.join("ca.pem");
    let flags = tls_flags(&d.join("stranger"), &stranger_ca);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = ping(sitenet_in(&d), &listen, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "this node's certificate is not signed by your --ca ({})",
            s(&stranger_ca)
        )),
        "{err}"
    );
    assert!(!err.contains("BadSignature"), "{err}");

    // The client trusts both CAs, but its own certificate is of the other:
    // the node refuses it, and the client is told so.
    let both = d.join("both.pem");
    std::fs::write(
        &both,
        std::fs::read_to_string(&stranger_ca).unwrap()
            + &std::fs::read_to_string(ca.join("ca.pem")).unwrap(),
    )
    .unwrap();
    let flags = tls_flags(&d.join("stranger"), &both);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = ping(sitenet_in(&d), &listen, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the node does not trust your certificate's CA"),
        "{err}"
    );
    assert!(!err.contains("DecryptError"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
