//! The contexts of typed headers: the node and the sending site lent to a
//! typed header's decode on this thread (what a `SiteRef` inside a message
//! decodes with), the node and the destination site lent to its encode,
//! and what a reference to a site says of it (`describe`). Here, in the
//! node's layer, so delivery (`handlers`) and the `SiteRef` API lend them
//! without importing `site/serialize.rs`, which holds `SiteRef`'s
//! `Serialize` and `Deserialize` a layer above, or `context.rs`, which
//! shows them to users.

use std::cell::Cell;
use std::sync::Arc;

use sitenet_protocols::SiteDescriptor;

use super::NodeInner;
use crate::site_entry::SiteEntry;

thread_local! {
    /// The node decoding a typed header on this thread, if one is, and the
    /// entry of the site whose message it is: pointers to the caller's
    /// `Arc`s, valid while [`decoding_on`] runs (this runs for every
    /// message delivered: no reference count is touched, no allocation
    /// made).
    static DECODING: Cell<(*const Arc<NodeInner>, *const Arc<SiteEntry>)> =
        const { Cell::new((std::ptr::null(), std::ptr::null())) };
}

/// Runs `f` (which decodes a typed header that site `from` delivered) with
/// `node` lent to the `SiteRef`s it may decode. A reference to a site the
/// node does not know makes an entry `from` holds a claim on (bounded by
/// `NodeConfig::site_ref_claims_per_peer`; see `Named::ByPeer`).
#[inline]
pub(crate) fn decoding_on<T>(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    f: impl FnOnce() -> T,
) -> T {
    let before = DECODING.with(|d| d.replace((node, from)));
    // Restored even if `f` panics (a handler's decode is caught).
    struct Restore((*const Arc<NodeInner>, *const Arc<SiteEntry>));
    impl Drop for Restore {
        fn drop(&mut self) {
            DECODING.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// The node lent by [`decoding_on`] on this thread, and the site whose
/// message it decodes, if any.
pub(crate) fn with_decoding_node<T>(
    f: impl FnOnce(Option<(&Arc<NodeInner>, &Arc<SiteEntry>)>) -> T,
) -> T {
    let (node, from) = DECODING.with(Cell::get);
    // SAFETY: non-null pointers were set by `decoding_on` from references
    // that outlive its call, and are reset before that call returns
    // (`Restore`, also on unwinding); this runs inside it, on its thread.
    f(unsafe { node.as_ref().zip(from.as_ref()) })
}

thread_local! {
    /// The node encoding a typed header on this thread, if one is, and the
    /// entry of the site it goes to (null where it goes to no one site):
    /// pointers to the caller's `Arc`s, valid while [`encoding_on`] runs
    /// (this runs for every message sent: no reference count is touched,
    /// no allocation made).
    static ENCODING: Cell<(*const Arc<NodeInner>, *const Arc<SiteEntry>)> =
        const { Cell::new((std::ptr::null(), std::ptr::null())) };
}

/// Runs `f` (which encodes a typed header for site `to`, or for no one
/// site if `None`) with `node` and `to` lent to the user types it encodes
/// (`sitenet_runtime::context::encoding`).
#[inline]
pub(crate) fn encoding_on<T>(
    node: &Arc<NodeInner>,
    to: Option<&Arc<SiteEntry>>,
    f: impl FnOnce() -> T,
) -> T {
    let to = to.map_or(std::ptr::null(), |t| t as *const Arc<SiteEntry>);
    let before = ENCODING.with(|e| e.replace((node, to)));
    // Restored even if `f` panics (a user's `Serialize` may).
    struct Restore((*const Arc<NodeInner>, *const Arc<SiteEntry>));
    impl Drop for Restore {
        fn drop(&mut self) {
            ENCODING.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// The node lent by [`encoding_on`] on this thread, if any, and the site
/// the header it encodes goes to (`None` for no one site).
pub(crate) fn with_encoding_node<T>(
    f: impl FnOnce(Option<(&Arc<NodeInner>, Option<&Arc<SiteEntry>>)>) -> T,
) -> T {
    let (node, to) = ENCODING.with(Cell::get);
    // SAFETY: as in `with_decoding_node`: non-null pointers were set by
    // `encoding_on` from references that outlive its call, and are reset
    // before it returns (`Restore`, also on unwinding); this runs inside
    // it, on its thread.
    f(unsafe { node.as_ref().map(|n| (n, to.as_ref())) })
}

impl NodeInner {
    /// What [`SiteRef::descriptor`] says of `entry`: what a reference to it
    /// in a message, or the origin of a request forwarded from it, carries.
    pub(crate) fn describe(&self, entry: &SiteEntry) -> Option<SiteDescriptor> {
        if entry.is_local() {
            return Some(SiteDescriptor {
                id: self.identity().id(),
                addresses: self.identity().listen_addresses(),
            });
        }
        let mut d = entry.learned_descriptor()?;
        if d.addresses.is_empty() {
            d.addresses.extend(entry.address().map(str::to_owned));
        }
        Some(d)
    }
}

/// Decodes a reply of type `type_id` as `R`, or says why not (another
/// type, or a header that does not decode).
pub(crate) fn decode_reply<R: crate::message::Message>(
    node: &Arc<NodeInner>,
    from: &Arc<SiteEntry>,
    type_id: u32,
    header: &bytes::Bytes,
) -> Result<R, crate::error::DecodeError> {
    if type_id != R::ID {
        return Err(crate::error::DecodeError::WrongType {
            expected: R::ID,
            got: type_id,
        });
    }
    decoding_on(node, from, || rmp_serde::from_slice(header)).map_err(|e| {
        crate::error::DecodeError::Header {
            type_id,
            reason: e.to_string(),
        }
    })
}
