//! What the dataflow examples (and the benchmark and tests) share: nodes on
//! loopback, and children of this process running one site each
//! (`--processes`), talking to the parent by lines on their standard input
//! and output.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use sitenet::{Node, NodeConfig};

/// A node on a free loopback port that gives up on an unreachable site
/// after `give_up`.
pub fn node(give_up: Duration) -> Node {
    let mut cfg = NodeConfig::default();
    cfg.give_up_after = Some(give_up);
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .config(cfg)
        .start()
        .expect("a node on loopback")
}

/// A child process running this example with `args`: one site.
pub struct Site {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Site {
    pub fn spawn(args: &[String]) -> Site {
        let exe = std::env::current_exe().expect("this example's path");
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a child site");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Site {
            child,
            stdin,
            stdout,
        }
    }

    /// The child's next line (without its newline).
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).expect("the child's output");
        s.trim_end().to_string()
    }

    /// Sends the child one line.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the child's input is open");
        writeln!(stdin, "{line}").expect("the child reads");
        stdin.flush().expect("the child reads");
    }

    /// Tells the child to end (closes its input) and waits for it.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }

    /// Kills the child abruptly (no goodbye to its peers).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In a child: prints one line for the parent.
pub fn tell(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("the parent reads");
    out.flush().expect("the parent reads");
}

/// In a child: the parent's next line (`None` once it closed our input).
pub fn hear() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().read_line(&mut s) {
        Ok(n) if n > 0 => Some(s.trim_end().to_string()),
        _ => None,
    }
}

/// In a child: waits until the parent closes our input.
pub fn wait_for_parent() {
    let mut s = String::new();
    while std::io::stdin()
        .read_line(&mut s)
        .map(|n| n > 0)
        .unwrap_or(false)
    {
        s.clear();
    }
}
