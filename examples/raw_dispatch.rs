//! # raw_dispatch — a dynamic language's messages, without serde
//!
//! A language runtime has its own terms, its own marshaler and its own
//! dispatch: it cannot declare a serde type per message. Here a tiny one
//! (integers, atoms and tuples, marshalled by hand below) sends its terms
//! as raw messages — a type id and bytes. The type id names the receiving
//! process (ids `0x1000..0x1100`: processes 0 to 255); one raw handler
//! for the whole range decodes each term and dispatches on its tag, as an
//! interpreter's `receive` would, answering requests with terms of its own.
//! The bytes come from the network: the decoder checks every length and
//! bounds the nesting, and a term that does not decode is refused, never a
//! panic.
//!
//! ```text
//! cargo run --release --example raw_dispatch [-- --count 10000]
//! ```

use std::fmt;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;
use sitenet::{Node, RequestError};

#[derive(Parser)]
#[command(about = "A dynamic language's terms as raw messages, dispatched on their tag")]
struct Cli {
    /// Additions sent at once, each to a process of its own.
    #[arg(long, default_value_t = 1000)]
    count: u32,
}

/// The type id of process 0; process `n` is `PROCESS_IDS + n`.
const PROCESS_IDS: u32 = 0x1000;
/// Processes of the runtime (and type ids of the range).
const PROCESSES: u32 = 256;
/// How long a request waits for its answer.
const PATIENCE: Duration = Duration::from_secs(30);

/// The language's values.
#[derive(Debug, Clone, PartialEq)]
enum Term {
    Int(i64),
    Atom(String),
    Tuple(Vec<Term>),
}

use Term::{Atom, Int, Tuple};

fn atom(name: &str) -> Term {
    Atom(name.into())
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Int(n) => write!(f, "{n}"),
            Atom(a) => write!(f, "{a}"),
            Tuple(items) => {
                write!(f, "{{")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// The runtime's own marshaler: a tag byte, then an integer (8 bytes,
/// little-endian), an atom (a length byte and UTF-8) or a tuple (an arity
/// byte and its elements).
mod marshal {
    use super::Term;

    const INT: u8 = 1;
    const ATOM: u8 = 2;
    const TUPLE: u8 = 3;
    /// Deeper terms are refused: a peer may not make the decoder recurse
    /// without end.
    const MAX_DEPTH: usize = 32;

    pub fn encode(t: &Term) -> Vec<u8> {
        let mut out = Vec::new();
        put(t, &mut out);
        out
    }

    fn put(t: &Term, out: &mut Vec<u8>) {
        match t {
            Term::Int(n) => {
                out.push(INT);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Term::Atom(a) => {
                let bytes = &a.as_bytes()[..a.len().min(255)];
                out.push(ATOM);
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
            Term::Tuple(items) => {
                out.push(TUPLE);
                out.push(items.len().min(255) as u8);
                for item in items.iter().take(255) {
                    put(item, out);
                }
            }
        }
    }

    /// The term `bytes` hold, whole, or why not.
    pub fn decode(bytes: &[u8]) -> Result<Term, String> {
        let mut rest = bytes;
        let t = take(&mut rest, 0)?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the term", rest.len()));
        }
        Ok(t)
    }

    fn take(rest: &mut &[u8], depth: usize) -> Result<Term, String> {
        if depth > MAX_DEPTH {
            return Err("nested too deep".into());
        }
        let (&tag, tail) = rest.split_first().ok_or("truncated term")?;
        *rest = tail;
        match tag {
            INT => {
                let n = bytes(rest, 8)?;
                Ok(Term::Int(i64::from_le_bytes(
                    n.try_into().expect("8 bytes"),
                )))
            }
            ATOM => {
                let len = bytes(rest, 1)?[0] as usize;
                let name = std::str::from_utf8(bytes(rest, len)?).map_err(|e| e.to_string())?;
                Ok(Term::Atom(name.into()))
            }
            TUPLE => {
                let arity = bytes(rest, 1)?[0];
                (0..arity)
                    .map(|_| take(rest, depth + 1))
                    .collect::<Result<_, _>>()
                    .map(Term::Tuple)
            }
            other => Err(format!("unknown tag {other}")),
        }
    }

    fn bytes<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if rest.len() < n {
            return Err("truncated term".into());
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head)
    }
}

/// What process `pid` answers to `msg`: the interpreter's dispatch on the
/// term's tag.
fn eval(pid: u32, msg: &Term) -> Term {
    let Tuple(items) = msg else {
        return Tuple(vec![atom("error"), atom("not_a_tuple")]);
    };
    match items.as_slice() {
        [Atom(op), Int(a), Int(b)] if op == "add" => Int(a.wrapping_add(*b)),
        [Atom(op), Atom(a), Atom(b)] if op == "concat" => Atom(format!("{a}{b}")),
        [Atom(op), t] if op == "echo" => t.clone(),
        [Atom(op)] if op == "self" => Int(i64::from(pid)),
        [Atom(op), ..] => Tuple(vec![
            atom("error"),
            Tuple(vec![atom("unknown_op"), Atom(op.clone())]),
        ]),
        _ => Tuple(vec![atom("error"), atom("badarg")]),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    // One-way messages the processes received, for main to show.
    let (logged, log) = mpsc::channel::<(u32, Term)>();
    let logged = Mutex::new(logged);
    server.handle_raw(PROCESS_IDS..PROCESS_IDS + PROCESSES, move |ctx, m| {
        let pid = m.type_id - PROCESS_IDS;
        let msg = match marshal::decode(&m.body) {
            Ok(t) => t,
            Err(why) => {
                // Untrusted bytes: refused, said to a caller that waits.
                if let Some(r) = ctx.responder() {
                    let _ = r.fail(format!("bad term: {why}"));
                }
                return;
            }
        };
        if ctx.is_request() {
            let answer = eval(pid, &msg);
            let _ = ctx.reply_raw(m.type_id, marshal::encode(&answer));
        } else {
            let _ = logged.lock().unwrap().send((pid, msg));
        }
    })?;

    let client = Node::builder().start()?;
    let site = client.site(&server.listen_addresses()[0])?;
    let ask = |pid: u32, t: &Term| -> Result<Term, Box<dyn std::error::Error>> {
        let r = site
            .request_raw(PROCESS_IDS + pid, marshal::encode(t))
            .timeout(PATIENCE)
            .blocking()?;
        Ok(marshal::decode(&r.body)?)
    };

    for (pid, t) in [
        (1, Tuple(vec![atom("add"), Int(1), Int(2)])),
        (2, Tuple(vec![atom("concat"), atom("hello"), atom("world")])),
        (
            3,
            Tuple(vec![
                atom("echo"),
                Tuple(vec![atom("nested"), Tuple(vec![Int(-1)])]),
            ]),
        ),
        (42, Tuple(vec![atom("self")])),
        (7, Tuple(vec![atom("frobnicate")])),
    ] {
        println!("pid {pid} {t} => {}", ask(pid, &t)?);
    }

    // Bytes that are no term: refused by the receiver, not a crash.
    match site
        .request_raw(PROCESS_IDS, vec![3u8, 9, 1])
        .timeout(PATIENCE)
        .blocking()
    {
        Err(RequestError::Remote { reason, .. }) => println!("garbage => refused: {reason}"),
        other => return Err(format!("garbage answered {other:?}").into()),
    }

    // One-way: the process gets it, nobody answers.
    let note = Tuple(vec![atom("log"), atom("started")]);
    site.send_raw(PROCESS_IDS + 9, marshal::encode(&note))
        .try_now()?;
    let (pid, t) = log.recv_timeout(PATIENCE)?;
    println!("one-way {t} seen by pid {pid}");

    // Many requests in flight at once, each to a process of its own.
    let requests: Vec<_> = (0..cli.count)
        .map(|i| {
            let t = Tuple(vec![atom("add"), Int(i64::from(i)), Int(i64::from(i))]);
            site.request_raw(PROCESS_IDS + i % PROCESSES, marshal::encode(&t))
                .timeout(PATIENCE)
        })
        .collect();
    let mut sum = 0;
    for r in futures::executor::block_on(futures::future::join_all(requests)) {
        match marshal::decode(&r?.body)? {
            Int(n) => sum += n,
            other => return Err(format!("an addition answered {other}").into()),
        }
    }
    let expected = i64::from(cli.count) * (i64::from(cli.count) - 1);
    println!(
        "{} additions in flight: sum {sum} (expected {expected})",
        cli.count
    );
    if sum != expected {
        return Err("wrong sum".into());
    }
    Ok(())
}
