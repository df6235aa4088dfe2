//! Remote sites as the user holds them: `SiteRef`, its sends and
//! requests, and what a failed site hands back. The entry a `SiteRef`
//! shares with the site table and the ComObject is in `site_entry`; the
//! handle itself (its counting, equality, hashing) is `node/site_ref.rs`,
//! in the node's layer, which hands references out.
//!
//! `SiteRef`'s methods are all in this folder:
//! - `mod.rs`: [`send`](SiteRef::send) and the encoding, checks and
//!   queueing every send goes through;
//! - `send.rs`: the [`SendBuilder`] and [`TrackedSend`] it returns;
//! - `requests.rs`: [`request`](SiteRef::request) and its
//!   [`RequestBuilder`];
//! - `raw.rs`: [`send_raw`](SiteRef::send_raw),
//!   [`request_raw`](SiteRef::request_raw), [`resend`](SiteRef::resend);
//! - `tracked.rs`: the marking and settling of tracked sends;
//! - `queries.rs`: what it tells of its site (fault state, id, address,
//!   failure, pending bytes), [`same_site`](SiteRef::same_site),
//!   [`flush`](SiteRef::flush) and [`prepare`](SiteRef::prepare);
//! - `serialize.rs`: [`descriptor`](SiteRef::descriptor) and its serde (a
//!   `SiteRef` inside a message);
//! - `returned.rs`: what a failed site hands back;
//! - `test_hooks.rs` (feature `test-hooks`): `hold_busy`.

use std::sync::Arc;

use sitenet_protocols::{MessageKind, OutMessage};

use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::metrics::Counters;
pub use crate::node::SiteRef;
use crate::outbox::Pushed;
mod queries;
pub use queries::Flush;
mod raw;
mod requests;
mod returned;
mod send;
mod serialize;
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod tracked;
use crate::site_entry::SiteEntry;
pub use crate::site_entry::{FaultEvent, NOT_CONTACTED};
pub use requests::{RequestBuilder, DEFAULT_REQUEST_TIMEOUT};
pub use returned::{HandedBack, ReturnedMessage};
pub use send::{SendBuilder, TrackedSend};
#[cfg(feature = "test-hooks")]
pub use test_hooks::BusyGuard;

/// A site's fault state, as `Node::monitor` reports it (decided by the
/// ComObject state machine in `sitenet-protocols`).
pub use sitenet_protocols::FaultState;

impl SiteRef {
    pub(crate) fn encode<M: Message>(
        &self,
        msg: &M,
        opts: SendOptions,
        kind: MessageKind,
        corr: u64,
    ) -> Result<OutMessage, SendError> {
        let header = crate::node::encoding_on(&self.node, Some(&self.entry), || {
            crate::message::encode_header(msg)
        })
        .map_err(|e| SendError::Encode {
            type_id: M::ID,
            reason: e.to_string(),
        })?;
        let (priority, body) = opts.into_parts(sitenet_protocols::Priority::default());
        let m = OutMessage {
            priority,
            type_id: M::ID,
            kind,
            corr,
            header,
            body,
            tracked: false,
        };
        Ok(m)
    }

    pub(super) fn check(&self, entry: &Arc<SiteEntry>, m: &OutMessage) -> Result<(), SendError> {
        let reply = matches!(m.kind, MessageKind::Reply | MessageKind::DelegatedReply);
        if self.node.signals().is_shut_down() || (self.node.is_closing() && !reply) {
            return Err(SendError::Shutdown);
        }
        // Nothing can run the site's ComObject if the node's runtime
        // stopped under it (or the entry was forgotten). (The local site
        // has none.) Read without a lock: this runs on every send.
        if !entry.is_local() && !self.node.can_run(entry) {
            return Err(SendError::RuntimeStopped);
        }
        if let Some(reason) = entry.failure() {
            return Err(SendError::SiteFailed {
                site: entry.id(),
                reason,
            });
        }
        let max = self.node.max_message_to(entry);
        if m.wire_len() > max {
            return Err(SendError::TooLarge {
                size: m.wire_len(),
                max,
            });
        }
        Ok(())
    }

    /// Queues `m` in the site's outbox, waking its actor if needed; true if
    /// a batch is now waiting for it (see [`Pushed::Queued`]).
    pub(super) fn push(&self, entry: &Arc<SiteEntry>, mut m: OutMessage) -> bool {
        Counters::add(&self.node.counters().messages_queued, 1);
        let mut entry = entry;
        loop {
            match entry.outbox().push(m) {
                Pushed::Queued { wake, batch_full } => {
                    if wake {
                        self.node.wake_site(entry);
                    }
                    return batch_full;
                }
                // The entry merged into another while this send ran: follow
                // it, with the bytes reserved here (the merge moved what was
                // queued before, so this message still comes after them).
                Pushed::Sealed(back) => {
                    m = back;
                    let next = entry.resolved();
                    let mut by_class = [0; sitenet_protocols::connection::output_share::CLASSES];
                    by_class[m.share_class()] = m.footprint();
                    entry.outbox().move_bytes_to(next.outbox(), &by_class);
                    entry = next;
                }
            }
        }
    }

    pub(crate) fn try_post(&self, m: OutMessage) -> Result<(), SendError> {
        let entry = self.entry.resolved();
        self.check(entry, &m)?;
        let (class, n) = (m.share_class(), m.footprint());
        if !entry.outbox().try_reserve(class, n) {
            return Err(SendError::QueueFull {
                bound: entry.outbox().full_bound(class, n),
            });
        }
        let _ = self.push(entry, m);
        Ok(())
    }

    pub(crate) async fn post(&self, m: OutMessage) -> Result<(), SendError> {
        let entry = self.entry.resolved();
        self.check(entry, &m)?;
        let (class, n) = (m.share_class(), m.footprint());
        if !entry.outbox().try_reserve(class, n) {
            // Waited for acknowledgements: the site may have failed, or the
            // node shut down, meanwhile (the outbox is then closed).
            if entry.outbox().reserve(class, n).await.is_err() {
                return Err(self.check(entry, &m).err().unwrap_or(SendError::Shutdown));
            }
            if let Err(e) = self.check(entry, &m) {
                entry.outbox().release(class, n);
                return Err(e);
            }
        }
        // A loop of sends that never has to wait (the bound is far) would
        // otherwise starve a ComObject on the same thread: it yields once a
        // batch is queued for the actor to write. An actor on another
        // thread drains the outbox before a batch fills, so the task's
        // cooperative budget is spent too, every few sends, to let the
        // other tasks of this thread run (a no-op outside tokio).
        if self.push(entry, m) {
            tokio::task::yield_now().await;
        } else if spend_budget_now() {
            tokio::task::consume_budget().await;
        }
        Ok(())
    }

    /// A one-way message to this site: `msg`, encoded now (the builder
    /// borrows only this `SiteRef`), at medium priority. Set options on
    /// the [`SendBuilder`] it returns, then `.await` it (waits while the
    /// site's output bound is reached), [`try_now`](SendBuilder::try_now)
    /// it (never waits: from handlers) or [`blocking`](SendBuilder::blocking)
    /// it (a plain thread). Each returns once the message is queued;
    /// delivery is asynchronous, and [`tracked`](SendBuilder::tracked)
    /// tells when the peer acknowledged it.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, Priority};
    /// #[derive(Serialize, Deserialize)]
    /// struct Tick(u64);
    /// impl Message for Tick { const ID: u32 = 4; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|_ctx, _: Tick| {})?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.send(&Tick(1)).try_now()?;
    /// site.send(&Tick(2)).priority(Priority::High).blocking()?;
    /// futures::executor::block_on(async { site.send(&Tick(3)).await })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send<M: Message>(&self, msg: &M) -> SendBuilder<'_> {
        SendBuilder::new(
            self,
            self.encode(msg, SendOptions::new(), MessageKind::OneWay, 0),
        )
    }
}

/// True on every 8th send of this thread: the cooperative budget is spent
/// then, so a send loop that never waits still yields to the other tasks
/// of its thread (after 1,024 sends), without making every 128th send
/// yield to the site's actor with a small batch.
pub(super) fn spend_budget_now() -> bool {
    thread_local! {
        static SENDS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    }
    SENDS.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n % 8 == 0
    })
}
