//! The delay queue of a wrapped channel: received bytes waiting for the
//! instant they become readable (delay mode), and how the inbound stream
//! ended. Bounded by [`DELAY_QUEUE_LIMIT`](super::DELAY_QUEUE_LIMIT): while
//! it is full the wrapper stops reading the socket.

use std::collections::VecDeque;
use std::io;

use tokio::time::Instant;

/// Received bytes not yet surfaced to the reader (delay mode), and how the
/// inbound stream ended.
#[derive(Default)]
pub(super) struct ReadSide {
    /// Chunks with the instant they become readable, in stream order.
    pub(super) queue: VecDeque<(Instant, Vec<u8>)>,
    /// Bytes of the front chunk already handed out.
    pub(super) head: usize,
    /// Bytes in `queue` not yet handed out (≤ [`DELAY_QUEUE_LIMIT`]).
    pub(super) queued: usize,
    /// The socket reported end of stream or an error; surfaced at that
    /// instant, after every queued byte.
    pub(super) end: Option<(Instant, End)>,
}

pub(super) enum End {
    Eof,
    Error(io::ErrorKind, String),
}

impl ReadSide {
    pub(super) fn clear_queue(&mut self) -> usize {
        let dropped = self.queued;
        self.queue.clear();
        self.head = 0;
        self.queued = 0;
        dropped
    }

    /// True when nothing is queued, so reads may go straight to the socket.
    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.end.is_none()
    }

    /// True when a `try_read` at `now` makes progress.
    pub(super) fn ready(&self, now: Instant) -> bool {
        match (self.queue.front(), &self.end) {
            (Some((at, _)), _) => *at <= now,
            (None, Some((at, _))) => *at <= now,
            (None, None) => false,
        }
    }

    /// When the next queued item becomes readable.
    pub(super) fn next_due(&self) -> Option<Instant> {
        match (self.queue.front(), &self.end) {
            (Some((at, _)), _) => Some(*at),
            (None, Some((at, _))) => Some(*at),
            (None, None) => None,
        }
    }

    /// Hands out due bytes (or the due end of stream); `None` if nothing is
    /// due yet.
    pub(super) fn take(&mut self, now: Instant, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let mut n = 0;
        while n < buf.len() {
            let Some((at, chunk)) = self.queue.front() else {
                break;
            };
            if *at > now {
                break;
            }
            let avail = &chunk[self.head..];
            let k = avail.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&avail[..k]);
            n += k;
            self.head += k;
            self.queued -= k;
            if self.head == chunk.len() {
                self.queue.pop_front();
                self.head = 0;
            }
        }
        if n > 0 || buf.is_empty() {
            return Some(Ok(n));
        }
        match (&self.end, self.queue.is_empty()) {
            (Some((at, End::Eof)), true) if *at <= now => Some(Ok(0)),
            (Some((at, End::Error(kind, msg))), true) if *at <= now => {
                Some(Err(io::Error::new(*kind, msg.clone())))
            }
            _ => None,
        }
    }
}
