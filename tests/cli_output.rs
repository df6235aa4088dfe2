//! What the `sitenet` commands leave on stderr: a short client's visit is
//! news for the node it asked, not a fault; log lines carry no colour codes
//! when stderr is not a terminal; a client's error is printed once, with
//! its cause.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;

use common::cli::{announcement, run, sitenet, Killed};
use common::{closed_port_address, PATIENCE};

/// `sitenet node` logging at INFO to a pipe, its stderr lines sent to the
/// receiver as they come, and its first listen address.
fn logging_node() -> (Killed, mpsc::Receiver<String>, String) {
    let mut child = sitenet()
        .args(["node", "--listen", "tcp:127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sitenet node starts");
    let v = announcement(&mut child);
    let listen = v["listen"][0].as_str().unwrap().to_string();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (Killed(child), rx, listen)
}

/// The node's next line that says how a site ended: "site left" (an
/// orderly leave) or "failed permanently" (a fault). Every line read on
/// the way must be free of ANSI escapes (stderr is a pipe).
fn next_end_of_a_site(lines: &mpsc::Receiver<String>) -> String {
    loop {
        let l = lines
            .recv_timeout(PATIENCE)
            .expect("the node says how the client's site ended");
        assert!(
            !l.contains('\x1b'),
            "a log line to a pipe carries ANSI escapes: {l:?}"
        );
        if l.contains("site left") || l.contains("failed permanently") {
            return l;
        }
    }
}

/// `sitenet stats` and `sitenet ping` end by leaving in order: the node
/// logs each visit as a site that left, never as a site that failed with a
/// message maybe delivered (a client that exited before acknowledging the
/// reply made every `stats` call a warning 15 s later). The node's log
/// lines to a pipe carry no colour codes.
#[test]
fn short_clients_leave_in_order_and_logs_to_a_pipe_are_plain() {
    let (_node, lines, listen) = logging_node();
    for args in [
        vec!["stats", listen.as_str(), "--json"],
        vec!["ping", listen.as_str(), "--count", "3"],
        vec!["send", listen.as_str(), "--count", "3"],
    ] {
        let out = run(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let end = next_end_of_a_site(&lines);
        assert!(
            end.contains("site left") && !end.contains("maybe_delivered"),
            "{args:?} left the node a false alarm: {end}"
        );
    }
}

/// The lines of `stderr` that are the command's own errors ("sitenet: …"),
/// the notice of a cookie file made for the test aside.
fn errors(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.contains("made your cookie file"))
        .map(str::to_string)
        .collect()
}

/// `sitenet send` to a port nobody listens on says why, once: whether it
/// gives up on the site (`--give-up`) or its first flush times out
/// (`--timeout`), the one line it prints names the refused connection.
#[test]
fn send_to_a_closed_port_prints_one_error_with_its_cause() {
    for (give_up, timeout) in [("1", "30"), ("60", "1")] {
        let closed = closed_port_address();
        let out = run(&[
            "send",
            &closed,
            "--count",
            "1",
            "--give-up",
            give_up,
            "--timeout",
            timeout,
        ]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let errors = errors(&out.stderr);
        assert_eq!(errors.len(), 1, "one error line: {errors:#?}");
        assert!(
            errors[0].to_lowercase().contains("connection refused"),
            "--give-up {give_up} --timeout {timeout}: the cause is lost: {}",
            errors[0]
        );
        assert!(!errors[0].contains('\x1b'), "{:?}", errors[0]);
    }
}
