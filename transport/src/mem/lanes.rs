//! Accept lanes: a mem listener's connections accepted on the thread that
//! made them.
//!
//! Why: a runtime's threads are actix arbiters, each a tokio `LocalSet`,
//! and a task woken from another thread waits in the set's remote queue,
//! which the set serves once in about thirty polls while its own thread's
//! tasks are ready. With 10,000 in-process clients on two threads, the
//! clients' connects woke the server's accept loop from the other thread
//! for half a second after the first holders' pairs kept its own thread
//! busy: the loop ran at +1 ms, then at +207 ms and +500 ms, each time
//! finding the backlog full (947 waiting), while the clients' connects
//! were refused; the holders' first turns ran all that while with nobody
//! in line to take a turn. Accepted on the connector's own thread, the
//! connect wakes a task of that thread, and the handshake runs where the
//! ComObject for that peer will live (`MemChannel::connector_thread`).
//!
//! A lane is opened by the thread's acceptor ([`MemLanes::acceptor_here`])
//! and closed when the last acceptor of that thread is dropped: what it
//! still queued goes back to the listener's own queue, so nothing is
//! lost. Connections from a thread without a lane go to the listener's
//! [`accept`](super::MemListener::accept), as before. The backlog
//! ([`MEM_BACKLOG`](super::MEM_BACKLOG)) bounds all the lanes and the
//! listener's queue together.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::ThreadId;

use tokio::sync::Notify;

use super::{wait_until, ListenerShared, MemChannel, MemListener};

/// One thread's queue of connections not yet accepted.
pub(super) struct Lane {
    pub(super) pending: VecDeque<MemChannel>,
    /// Wakes that thread's acceptors.
    pub(super) notify: Arc<Notify>,
    /// The thread's live acceptors: the lane closes with the last.
    acceptors: usize,
}

impl super::AcceptQueue {
    /// Connections queued and not yet accepted, in every lane.
    pub(super) fn queued(&self) -> usize {
        self.pending.len() + self.lanes.values().map(|l| l.pending.len()).sum::<usize>()
    }
}

/// A listener's lanes, to open one on another thread (cheap to clone, and
/// `Send`: hand it to a task spawned there).
#[derive(Clone)]
pub struct MemLanes {
    shared: Arc<ListenerShared>,
}

impl std::fmt::Debug for MemLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemLanes")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl MemListener {
    /// A handle to open accept lanes with (see the module documentation of
    /// `mem`'s lanes): a runtime with several threads opens one on each,
    /// so that a connect made on a thread is accepted there.
    ///
    /// ```
    /// use sitenet_transport::{MemChannel, MemListener};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// let listener = MemListener::bind("lanes-doc")?;
    /// let here = listener.lanes().acceptor_here();
    /// // A connect made on this thread is queued for this thread's acceptor …
    /// let _client = MemChannel::connect("lanes-doc")?;
    /// let server = rt.block_on(here.accept())?;
    /// assert!(server.peer().starts_with("mem:(client "));
    /// // … and once it is dropped, for the listener again.
    /// drop(here);
    /// let _other = MemChannel::connect("lanes-doc")?;
    /// let _accepted = rt.block_on(listener.accept())?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn lanes(&self) -> MemLanes {
        MemLanes {
            shared: self.shared.clone(),
        }
    }
}

impl MemLanes {
    /// Opens the calling thread's lane (or joins it, if another acceptor
    /// of this thread has it open): from now on, connects made on this
    /// thread are accepted by the returned acceptor.
    pub fn acceptor_here(&self) -> MemAcceptor {
        let thread = std::thread::current().id();
        let mut q = self.shared.queue.lock();
        let lane = q.lanes.entry(thread).or_insert_with(|| Lane {
            pending: VecDeque::new(),
            notify: Arc::new(Notify::new()),
            acceptors: 0,
        });
        lane.acceptors += 1;
        let notify = lane.notify.clone();
        drop(q);
        MemAcceptor {
            shared: self.shared.clone(),
            thread,
            notify,
        }
    }
}

/// Accepts the connections made on one thread (see [`MemLanes`]). Dropping
/// the last of a thread's acceptors closes the lane; what it queued goes
/// to the listener's [`accept`](MemListener::accept).
pub struct MemAcceptor {
    shared: Arc<ListenerShared>,
    thread: ThreadId,
    notify: Arc<Notify>,
}

impl std::fmt::Debug for MemAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemAcceptor")
            .field("name", &self.shared.name)
            .field("thread", &self.thread)
            .finish()
    }
}

impl MemAcceptor {
    /// Waits for the next connection made on this acceptor's thread.
    /// `ConnectionAborted` once the listener is dropped.
    pub async fn accept(&self) -> io::Result<MemChannel> {
        let mut got = None;
        let mut closed = false;
        wait_until(&self.notify, || {
            let mut q = self.shared.queue.lock();
            closed = q.closed;
            got = q
                .lanes
                .get_mut(&self.thread)
                .and_then(|l| l.pending.pop_front());
            closed || got.is_some()
        })
        .await;
        got.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("the listener at mem:{} was closed", self.shared.name),
            )
        })
    }
}

impl Drop for MemAcceptor {
    fn drop(&mut self) {
        let mut q = self.shared.queue.lock();
        let last = q.lanes.get_mut(&self.thread).is_some_and(|l| {
            l.acceptors -= 1;
            l.acceptors == 0
        });
        if !last {
            return;
        }
        if let Some(lane) = q.lanes.remove(&self.thread) {
            let moved = !lane.pending.is_empty();
            q.pending.extend(lane.pending);
            drop(q);
            if moved {
                self.shared.notify.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::MEM_BACKLOG;

    fn fresh(tag: &str) -> (String, MemListener) {
        let crate::Address::Mem { name } = crate::Address::unique_mem(tag) else {
            unreachable!()
        };
        let l = MemListener::bind(&name).unwrap();
        (name, l)
    }

    use crate::test_runtime as rt;

    /// A connect made on a thread with a lane is that lane's: the
    /// listener's own accept does not see it, and a connect from a thread
    /// without one is the listener's, not the lane's.
    #[test]
    fn a_connect_is_accepted_on_the_lane_of_the_thread_that_made_it() {
        let (name, l) = fresh("lane-routing");
        let here = l.lanes().acceptor_here();
        let rt = rt();
        let _mine = MemChannel::connect(&name).unwrap();
        let elsewhere = {
            let name = name.clone();
            std::thread::spawn(move || MemChannel::connect(&name).unwrap())
                .join()
                .unwrap()
        };
        let lane = rt.block_on(here.accept()).unwrap();
        assert_eq!(lane.connector_thread(), Some(std::thread::current().id()));
        let other = rt.block_on(l.accept()).unwrap();
        assert_ne!(other.connector_thread(), Some(std::thread::current().id()));
        // Nothing more for either.
        rt.block_on(async {
            let wait = Duration::from_millis(20);
            assert!(tokio::time::timeout(wait, here.accept()).await.is_err());
            assert!(tokio::time::timeout(wait, l.accept()).await.is_err());
        });
        drop(elsewhere);
    }

    /// The last acceptor of a thread closing its lane gives what the lane
    /// still queued to the listener: no connection is lost with it.
    #[test]
    fn a_closed_lanes_queued_connections_go_to_the_listener() {
        let (name, l) = fresh("lane-close");
        let first = l.lanes().acceptor_here();
        let second = l.lanes().acceptor_here();
        let _a = MemChannel::connect(&name).unwrap();
        drop(first);
        // The thread's other acceptor still holds the lane.
        let _b = MemChannel::connect(&name).unwrap();
        drop(second);
        let rt = rt();
        rt.block_on(async {
            for _ in 0..2 {
                let c = tokio::time::timeout(Duration::from_secs(5), l.accept());
                c.await.expect("given to the listener").unwrap();
            }
        });
        // The lane is closed: a new connect is the listener's at once.
        let _c = MemChannel::connect(&name).unwrap();
        rt.block_on(l.accept()).unwrap();
    }

    /// A dropped listener wakes its lanes' acceptors with an error, and its
    /// lanes' connections see end of stream.
    #[test]
    fn a_dropped_listener_ends_its_lanes() {
        let (name, l) = fresh("lane-drop");
        let here = l.lanes().acceptor_here();
        let queued = MemChannel::connect(&name).unwrap();
        let rt = rt();
        let waiting = rt.block_on(async {
            let r = here.accept().await;
            assert!(r.is_ok(), "the queued connection first");
            // Now nothing is queued: the acceptor waits until the drop.
            let accept = here.accept();
            tokio::pin!(accept);
            let wait = Duration::from_millis(20);
            assert!(tokio::time::timeout(wait, accept.as_mut()).await.is_err());
            drop(l);
            accept.await
        });
        assert_eq!(
            waiting.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(queued);
    }

    /// The backlog bounds the lanes and the listener's queue together.
    #[test]
    fn the_backlog_counts_every_lane() {
        let (name, l) = fresh("lane-backlog");
        let _here = l.lanes().acceptor_here();
        let half = MEM_BACKLOG / 2;
        let mine: Vec<_> = (0..half)
            .map(|_| MemChannel::connect(&name).unwrap())
            .collect();
        let theirs = {
            let name = name.clone();
            std::thread::spawn(move || {
                let ok: Vec<_> = (0..MEM_BACKLOG - half)
                    .map(|_| MemChannel::connect(&name).unwrap())
                    .collect();
                let refused = MemChannel::connect(&name).unwrap_err();
                (ok, refused.kind())
            })
            .join()
            .unwrap()
        };
        assert_eq!(theirs.1, io::ErrorKind::ConnectionRefused);
        assert_eq!(
            MemChannel::connect(&name).unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
        drop((mine, theirs));
    }
}
