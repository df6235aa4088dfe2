//! The `SiteRef` handle itself: the counted reference to an entry of the
//! site table, which keeps it (and its channel) alive, and whose last drop
//! lets the site go. Here, in the node's layer, because the table and the
//! ComObject hand them out and hold them. Its methods, sends, requests,
//! flushes and queries, are in `site/`, a layer above (`site/mod.rs` says
//! which file holds what).

use std::sync::Arc;

use super::NodeInner;
use crate::site_entry::{ActorState, SiteEntry};

/// A handle to a remote site: cheap to clone, `Send + Sync`. Sending through
/// it encodes the message on the caller's thread and queues it in the site's
/// bounded outbox; the site's ComObject is woken only when that outbox goes
/// from empty to non-empty.
///
/// There is one way to send: [`send`](Self::send) (or
/// [`send_raw`](Self::send_raw), [`resend`](Self::resend)) and
/// [`request`](Self::request) (or [`request_raw`](Self::request_raw))
/// return a builder on which a priority, body parts, a timeout or tracked
/// delivery are set; it is then awaited, tried without waiting
/// (`try_now`) or blocked on (`blocking`).
///
/// ```
/// # use std::time::Duration;
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{Message, Node, Priority};
/// #[derive(Serialize, Deserialize)]
/// struct Log(String);
/// impl Message for Log { const ID: u32 = 2; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|_ctx, Log(line): Log| println!("{line}"))?;
/// let client = Node::builder().start()?;
/// // Cheap: no channel until the first message. Clone it freely.
/// let site = client.site(&server.listen_addresses()[0])?;
/// // Non-blocking (fails with `QueueFull` at the site's output bound)...
/// site.send(&Log("hello".into())).try_now()?;
/// // ...waiting for room, from async code...
/// futures::executor::block_on(site.send(&Log("again".into())))?;
/// // ...or from a plain thread, with a priority and a body.
/// site.send(&Log("urgent".into())).priority(Priority::High).body(vec![0u8; 64]).blocking()?;
/// site.flush(Duration::from_secs(30)).blocking()?; // all acknowledged
/// assert_eq!(site.id(), Some(server.id()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SiteRef {
    pub(crate) entry: Arc<SiteEntry>,
    pub(crate) node: Arc<NodeInner>,
}

impl Clone for SiteRef {
    /// The same entry (a clone equals its original, merges or not).
    fn clone(&self) -> Self {
        self.entry.holds().add_ref();
        Self {
            entry: self.entry.clone(),
            node: self.node.clone(),
        }
    }
}

impl Drop for SiteRef {
    fn drop(&mut self) {
        // SeqCst pairs with the ComObject's store of `poke_on_unref` and its
        // re-read of `refs`: one of the two sees the other, so the last
        // reference going is never missed.
        if self.entry.holds().drop_ref() {
            match self.entry.actor_state() {
                // Never used: nothing to linger for. (The table re-checks
                // under its lock; a reference handed out meanwhile keeps it.)
                ActorState::Never => self.node.reclaim_unused(&self.entry),
                // Running or parked, idle: the reclaim rule's clock starts
                // (a parked site starts again to start it, and parks).
                ActorState::Running | ActorState::Parked
                    if self.entry.liveness().poke_on_unref() =>
                {
                    crate::com_object::ComObject::send(
                        &self.node,
                        &self.entry,
                        crate::com_object::Poke,
                    );
                }
                _ => {}
            }
        }
    }
}

/// Two references are equal when they were handed out for the same entry
/// of the site table, so the same ordered queues; equality and the hash
/// never change, so a `SiteRef` keys a `HashMap` or `BTreeSet`-like index
/// safely.
///
/// The table may learn later that two entries are one site — a reference
/// by address whose handshake proves the id of a site another reference
/// named by descriptor — and merges them: the older entry's messages
/// follow it into the one that stays. References handed out after that
/// (`Node::site`, `Ctx::sender`, a decoded `SiteRef`) are all for the
/// entry that stays and equal each other; one kept from before the merge
/// still reaches the site, in order, but stays unequal to them, since an
/// equality that changed would corrupt every map that holds it.
/// [`same_site`](SiteRef::same_site) answers "the same site now".
///
/// (Clippy's `mutable_key_type` lint flags a map keyed by `SiteRef`, since
/// the entry behind it holds queues; the hash and `==` read only the
/// entry's address, so `#[allow(clippy::mutable_key_type)]` is sound.)
impl PartialEq for SiteRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.entry, &other.entry)
    }
}

impl Eq for SiteRef {}

impl std::hash::Hash for SiteRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The entry's address: fixed while this reference keeps it alive.
        std::ptr::hash(Arc::as_ptr(&self.entry), state)
    }
}

impl std::fmt::Debug for SiteRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteRef")
            .field("id", &self.id())
            .field("address", &self.entry.address())
            .finish()
    }
}

impl SiteRef {
    /// A new counted reference (the site table counts `SiteRef`s to decide
    /// when a channel is no longer needed).
    /// A new reference is for the entry that stays once merges are
    /// followed, so references handed out after a merge are equal.
    pub(crate) fn counted(entry: Arc<SiteEntry>, node: Arc<NodeInner>) -> Self {
        let entry = entry.resolved().clone();
        entry.holds().add_ref();
        Self { entry, node }
    }

    /// A new counted reference to `entry` itself, merges not followed: it
    /// equals the reference `entry` was lent from (the encoding context's
    /// destination, `context::encoding`).
    pub(crate) fn to_entry(entry: &Arc<SiteEntry>, node: &Arc<NodeInner>) -> Self {
        entry.holds().add_ref();
        Self {
            entry: entry.clone(),
            node: node.clone(),
        }
    }
}
