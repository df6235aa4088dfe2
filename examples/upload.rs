//! # upload — a body larger than memory, taken as a stream
//!
//! Madeleine's deferred receive: the server registers a *streaming* handler
//! (`Node::handle_stream`) for `Upload`. It runs as soon as the typed
//! header has arrived and returns a `BodySink`, which takes the body as
//! chunks, in order, as their frames arrive, and answers the request at the
//! end. The client sends one message whose body is many references to one
//! 1 MiB buffer (BMI's list I/O: the parts go to the socket by vectored
//! writes, never copied), so neither side ever holds the whole body.
//!
//! It prints the size, chunks, time and rate, and how much the process's
//! resident memory grew (Linux).
//!
//! ```text
//! cargo run --release --example upload [-- --mib 1024]
//! ```

use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use serde::{Deserialize, Serialize};
use sitenet::{BodySink, Ctx, Message, Node};

#[derive(Parser)]
#[command(about = "Streams one large message to a streaming handler")]
struct Cli {
    /// Body size in MiB.
    #[arg(long, default_value_t = 256)]
    mib: u64,
}

/// The upload's typed header: what the handler sees first.
#[derive(Serialize, Deserialize)]
struct Upload {
    name: String,
    size: u64,
}
impl Message for Upload {
    const ID: u32 = 1;
}

/// The server's answer, from the sink's end.
#[derive(Serialize, Deserialize)]
struct Stored {
    bytes: u64,
    chunks: u64,
    checksum: u64,
}
impl Message for Stored {
    const ID: u32 = 2;
}

/// Takes an upload's body without keeping it: counts and checksums it.
struct Store {
    bytes: u64,
    chunks: u64,
    checksum: u64,
}

impl BodySink for Store {
    fn chunk(&mut self, _offset: u64, data: Bytes) {
        self.bytes += data.len() as u64;
        self.chunks += 1;
        // A byte sum: cheap enough not to slow the stream down.
        self.checksum = data
            .iter()
            .fold(self.checksum, |h, &b| h.wrapping_add(b as u64));
    }

    fn end(self: Box<Self>, ctx: &mut Ctx<'_>) {
        let _ = ctx.reply(&Stored {
            bytes: self.bytes,
            chunks: self.chunks,
            checksum: self.checksum,
        });
    }
}

/// Resident memory of this process, in MiB (0 where /proc is missing).
fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib / 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let size = cli.mib << 20;
    let big = |c: &mut sitenet::NodeConfig| {
        c.max_message_size = c.max_message_size.max(size + 4096);
        c.output_bound = c.output_bound.max(2 * c.max_message_size);
    };
    let server = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(big)
        .start()?;
    server.handle_stream(|_ctx: &mut Ctx<'_>, u: Upload| -> Box<dyn BodySink> {
        println!(
            "server: receiving {:?}, {} MiB announced",
            u.name,
            u.size >> 20
        );
        Box::new(Store {
            bytes: 0,
            chunks: 0,
            checksum: 0,
        })
    })?;
    let client = Node::builder().configure(big).start()?;
    let site = client.site(&server.listen_addresses()[0])?;

    let part: Bytes = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let part_sum: u64 = part.iter().map(|&b| b as u64).sum();
    let rss_before = rss_mib();
    let t = Instant::now();
    let reply = site
        .request::<Upload, Stored>(&Upload {
            name: "dataset".into(),
            size,
        })
        .parts(std::iter::repeat_n(part, cli.mib as usize))
        .timeout(Duration::from_secs(600))
        .blocking()?;
    let took = t.elapsed();
    let s = reply.msg;
    let expected = part_sum.wrapping_mul(cli.mib);
    println!(
        "client: {} MiB stored in {} chunks (byte sum {}, {}) in {:.2} s: {:.0} MB/s",
        s.bytes >> 20,
        s.chunks,
        s.checksum,
        if s.checksum == expected {
            "as sent"
        } else {
            "NOT as sent"
        },
        took.as_secs_f64(),
        s.bytes as f64 / took.as_secs_f64() / 1e6
    );
    println!(
        "resident memory: {rss_before} MiB before, {} MiB after (the body never had to fit)",
        rss_mib()
    );
    Ok(())
}
