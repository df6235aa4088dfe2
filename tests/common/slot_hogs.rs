//! (Included by the tests that use it with `#[path]`, beside `mod common`.)
//!
//! Raw peers that hold a node's channel slots and waiting-line places from
//! one source address (tests/hostile/slots.rs), and an honest raw peer
//! that pings the node from another loopback address.
//!
//! Each peer runs the initiator's open protocol by hand over a tokio
//! socket, with a fresh site id per connection: what a node sees as many
//! sites behind one address.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sitenet_protocols::wire::frame::{FrameHeader, FrameKind};
use sitenet_protocols::{ByteBuffer, Initiator, Keyring, MessageKind, SiteId, HEADER_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::raw::{initiator, Wire};

/// Where a raw peer stands after its open protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stand {
    /// Its channel was adopted: it holds a slot.
    Slot,
    /// The node told it to wait: it holds a place in line.
    InLine,
}

/// Connects to `target` (`tcp:HOST:PORT`) from `source` (port 0).
pub async fn connect_from(source: IpAddr, target: &str) -> std::io::Result<TcpStream> {
    let to: SocketAddr = target
        .strip_prefix("tcp:")
        .expect("tcp address")
        .parse()
        .expect("a socket address");
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(source, 0))?;
    s.connect(to).await
}

/// Runs `hs` on `s` until the node adopts the channel or, if `stop_at_wait`,
/// tells it to wait. `Err` with why the open ended otherwise.
async fn open(s: &mut TcpStream, mut hs: Initiator, stop_at_wait: bool) -> Result<Stand, String> {
    let mut inb = ByteBuffer::new(65_536);
    let mut outb = ByteBuffer::new(65_536);
    let mut buf = [0u8; 4096];
    let mut waited = false;
    loop {
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the node closed the channel during the handshake".into());
        }
        inb.push(&buf[..n]);
        let done = hs
            .handle_input(&mut inb, &mut outb)
            .map_err(|e| e.to_string())?;
        let (a, b) = outb.chunks();
        let out = [a, b].concat();
        outb.clear();
        if !out.is_empty() {
            s.write_all(&out).await.map_err(|e| e.to_string())?;
        }
        if done.is_some() {
            return Ok(if waited { Stand::InLine } else { Stand::Slot });
        }
        if hs.take_wait().is_some() {
            waited = true;
            if stop_at_wait {
                return Ok(Stand::InLine);
            }
        }
    }
}

/// Counts of what a [`Hogs`] swarm holds and did.
#[derive(Debug, Default)]
pub struct HogCounts {
    /// Connections adopted (each took a slot).
    pub slots: AtomicU64,
    /// Connections told to wait (each took a place in line).
    pub places: AtomicU64,
    /// Connections refused or closed during their handshake.
    pub refused: AtomicU64,
}

/// A swarm of `n` raw peers from `source`, each with a fresh site id per
/// connection: each opens a channel, holds its slot or its place in line
/// (reading and discarding whatever the node sends, answering nothing)
/// until the node closes it, and opens another at once — until dropped.
pub struct Hogs {
    stop: Arc<AtomicBool>,
    pub counts: Arc<HogCounts>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Hogs {
    /// Starts the swarm (on the calling tokio runtime).
    pub fn start(n: usize, source: IpAddr, target: &str, keys: Keyring) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(HogCounts::default());
        let tasks = (0..n)
            .map(|_| {
                let (stop, counts, keys) = (stop.clone(), counts.clone(), keys.clone());
                let target = target.to_string();
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        hog_once(source, &target, keys.clone(), &counts).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            counts,
            tasks,
        }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One connection of a hog: opened, held until the node closes it.
async fn hog_once(source: IpAddr, target: &str, keys: Keyring, counts: &HogCounts) {
    let Ok(mut s) = connect_from(source, target).await else {
        tokio::time::sleep(Duration::from_millis(5)).await;
        return;
    };
    let id = SiteId(rand::random::<u128>());
    match open(&mut s, initiator(id, Vec::new(), keys), true).await {
        Ok(Stand::Slot) => counts.slots.fetch_add(1, Ordering::Relaxed),
        Ok(Stand::InLine) => counts.places.fetch_add(1, Ordering::Relaxed),
        Err(_) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            // Refused at once: a short pause, then again.
            tokio::time::sleep(Duration::from_millis(5)).await;
            return;
        }
    };
    let mut buf = [0u8; 16 * 1024];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// An honest raw site: connects from `source`, completes its open
/// protocol (waiting in line if told to), asks the node's echo service
/// for one echo and reads the reply. `Err` says where it failed.
pub async fn ping_from(source: IpAddr, target: &str, keys: Keyring) -> Result<Stand, String> {
    use sitenet::services::Echo;
    use sitenet::Message;
    let mut s = connect_from(source, target)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let id = SiteId(rand::random::<u128>());
    let stand = open(&mut s, initiator(id, Vec::new(), keys), false).await?;
    let mut w = Wire::default();
    let header = rmp_serde::to_vec(&Echo { seq: 7 }).unwrap();
    w.message(Echo::ID, MessageKind::Request, 1, &header, &[]);
    s.write_all(&w.bytes)
        .await
        .map_err(|e| format!("send the echo: {e}"))?;
    loop {
        let mut hb = [0u8; HEADER_LEN];
        s.read_exact(&mut hb)
            .await
            .map_err(|e| format!("read the reply: {e}"))?;
        let h = FrameHeader::decode(&hb, 1 << 20).map_err(|e| e.to_string())?;
        let mut payload = vec![0u8; h.payload_len as usize];
        s.read_exact(&mut payload)
            .await
            .map_err(|e| format!("read the reply: {e}"))?;
        if matches!(h.kind, FrameKind::Data | FrameKind::Packed) {
            return Ok(stand);
        }
    }
}
