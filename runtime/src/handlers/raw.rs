//! Registering raw handlers: a range of type ids, or every user id no
//! other handler takes, handled as bytes ([`RawMessage`]) without serde —
//! a language runtime's own marshaler and dispatch behind one handler.
//! The table is `node/handler_table.rs`'s; dispatch (`handlers::dispatch`)
//! looks a raw handler up only for a message whose type has no typed one.

use std::ops::{Bound, RangeBounds};

use super::{erase_raw, Ctx};
use crate::error::NodeError;
use crate::message::{RawMessage, RESERVED_IDS};

/// `range` as its first and last id: user ids (an unbounded end stops
/// below [`RESERVED_IDS`]), at least one.
fn id_range(range: impl RangeBounds<u32>) -> Result<(u32, u32), NodeError> {
    let first = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1).ok_or(NodeError::EmptyRange)?,
        Bound::Unbounded => 0,
    };
    let last = match range.end_bound() {
        Bound::Included(&e) => e,
        Bound::Excluded(&e) => e.checked_sub(1).ok_or(NodeError::EmptyRange)?,
        Bound::Unbounded => RESERVED_IDS - 1,
    };
    if first > last {
        return Err(NodeError::EmptyRange);
    }
    super::check_user_id(first)?;
    super::check_user_id(last)?;
    Ok((first, last))
}

/// Raw handlers: messages as a type id and bytes.
impl crate::Node {
    /// Registers `f` as the raw handler of every type id in `range`: it gets
    /// each message of those ids as a [`RawMessage`] (type id and bytes,
    /// no serde) — the dispatch of a language runtime that marshals its own
    /// terms and cannot declare a serde type per message. It runs as a
    /// typed handler does (on the node's I/O thread; it must not block) and
    /// answers a request with [`Ctx::reply_raw`], a typed
    /// [`Ctx::reply`], or the [`Ctx::responder`].
    ///
    /// Which handler a message goes to: the typed (or streaming) handler
    /// of its exact id, else the raw handler whose range holds the id,
    /// else the raw fallback ([`handle_raw_fallback`](Self::handle_raw_fallback)),
    /// else the [`on_unhandled`](Self::on_unhandled) hook. A typed
    /// message's dispatch is unchanged: a raw handler is looked up only
    /// when its type has no typed one.
    ///
    /// The range's ids must be user ids (below
    /// [`RESERVED_IDS`](crate::RESERVED_IDS); an open end stops there) and
    /// it may not overlap a registered raw range
    /// ([`NodeError::OverlappingRange`]) or be empty
    /// ([`NodeError::EmptyRange`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::{Node, NodeError};
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// server.handle_raw(1000..2000, move |_ctx, m| {
    ///     let _ = tx.lock().unwrap().send((m.type_id, m.body));
    /// })?;
    /// // Each id has at most one raw handler.
    /// assert!(matches!(server.handle_raw(1500..=3000, |_, _| {}),
    ///     Err(NodeError::OverlappingRange { .. })));
    ///
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.send_raw(1234, &b"the runtime's own bytes"[..]).try_now()?;
    /// let (type_id, body) = rx.recv_timeout(Duration::from_secs(30))?;
    /// assert_eq!((type_id, &body[..]), (1234, &b"the runtime's own bytes"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_raw<F>(&self, range: impl RangeBounds<u32>, f: F) -> Result<(), NodeError>
    where
        F: Fn(&mut Ctx<'_>, RawMessage) + Send + Sync + 'static,
    {
        let (first, last) = id_range(range)?;
        self.inner
            .handlers()
            .insert_raw(first, last, erase_raw(f), false)
            .map(|_| ())
    }

    /// Registers the raw handler of `range`, or replaces the one registered
    /// for exactly that range, at run time; true if one was replaced. As
    /// with [`replace_handler`](Self::replace_handler), the swap is one
    /// write under the table's lock: a message arriving meanwhile runs the
    /// old handler or the new one, never none. A range that overlaps a
    /// registered range other than itself is refused
    /// ([`NodeError::OverlappingRange`]).
    pub fn replace_raw<F>(&self, range: impl RangeBounds<u32>, f: F) -> Result<bool, NodeError>
    where
        F: Fn(&mut Ctx<'_>, RawMessage) + Send + Sync + 'static,
    {
        let (first, last) = id_range(range)?;
        self.inner
            .handlers()
            .insert_raw(first, last, erase_raw(f), true)
    }

    /// Removes the raw handler registered for exactly `range`; true if
    /// there was one. Messages of its ids arriving after this returns go to
    /// the raw fallback, or to the `on_unhandled` hook; one already handed
    /// to the handler finishes with it.
    ///
    /// ```
    /// # let node = sitenet_runtime::Node::builder().start()?;
    /// node.handle_raw(10..20, |_ctx, _m| {})?;
    /// assert!(!node.remove_raw(10..15)); // not a registered range
    /// assert!(node.remove_raw(10..=19));  // the same range, written otherwise
    /// node.handle_raw(10..15, |_ctx, _m| {})?;
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn remove_raw(&self, range: impl RangeBounds<u32>) -> bool {
        match id_range(range) {
            Ok((first, last)) => self.inner.handlers().remove_raw(first, last),
            Err(_) => false,
        }
    }

    /// Registers the raw fallback: the handler of every message of a user
    /// type id that no typed handler and no raw range takes (in the lookup
    /// order of [`handle_raw`](Self::handle_raw), before `on_unhandled`).
    /// A runtime whose dispatch owns the whole id space registers this
    /// alone. One at most ([`NodeError::DuplicateFallback`];
    /// [`replace_raw_fallback`](Self::replace_raw_fallback) replaces it).
    ///
    /// A message whose typed header does not decode is not passed on to a
    /// raw handler: it goes to `on_unhandled`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use sitenet_runtime::Node;
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_raw_fallback(|ctx, m| {
    ///     // Every id, answered with its own number.
    ///     let _ = ctx.reply_raw(m.type_id, m.type_id.to_le_bytes().to_vec());
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let r = site.request_raw(77, Vec::new()).timeout(Duration::from_secs(30)).blocking()?;
    /// assert_eq!(&r.body[..], &77u32.to_le_bytes()[..]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_raw_fallback<F>(&self, f: F) -> Result<(), NodeError>
    where
        F: Fn(&mut Ctx<'_>, RawMessage) + Send + Sync + 'static,
    {
        self.inner
            .handlers()
            .set_raw_fallback(erase_raw(f), false)
            .map(|_| ())
    }

    /// Sets the raw fallback, replacing any (true if one was replaced): a
    /// message arriving meanwhile runs the old or the new one, never none.
    pub fn replace_raw_fallback<F>(&self, f: F) -> bool
    where
        F: Fn(&mut Ctx<'_>, RawMessage) + Send + Sync + 'static,
    {
        // Replacing never fails.
        self.inner
            .handlers()
            .set_raw_fallback(erase_raw(f), true)
            .unwrap_or(true)
    }

    /// Removes the raw fallback; true if there was one. Messages it would
    /// have taken go to the `on_unhandled` hook.
    pub fn remove_raw_fallback(&self) -> bool {
        self.inner.handlers().remove_raw_fallback()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_become_first_and_last_user_ids() {
        assert_eq!(id_range(5..10).unwrap(), (5, 9));
        assert_eq!(id_range(5..=10).unwrap(), (5, 10));
        assert_eq!(id_range(..).unwrap(), (0, RESERVED_IDS - 1));
        assert_eq!(id_range(7..).unwrap(), (7, RESERVED_IDS - 1));
        assert!(matches!(
            id_range((Bound::Excluded(4), Bound::Included(4))),
            Err(NodeError::EmptyRange)
        ));
        assert!(matches!(id_range(5..5), Err(NodeError::EmptyRange)));
        assert!(matches!(id_range(..0), Err(NodeError::EmptyRange)));
        assert!(matches!(
            id_range((Bound::Excluded(u32::MAX), Bound::Unbounded)),
            Err(NodeError::EmptyRange)
        ));
        assert!(matches!(
            id_range(..=u32::MAX),
            Err(NodeError::ReservedId(u32::MAX))
        ));
        assert!(matches!(
            id_range(RESERVED_IDS..RESERVED_IDS + 2),
            Err(NodeError::ReservedId(RESERVED_IDS))
        ));
    }

    #[test]
    fn raw_ranges_never_overlap_and_are_found_by_id() {
        let h = crate::node::Handlers::default();
        let f = || erase_raw(|_, _| {});
        let kind = sitenet_protocols::MessageKind::OneWay;
        assert!(h.get_raw(kind, 15).is_none(), "nothing registered");
        assert!(!h.insert_raw(10, 19, f(), false).unwrap());
        assert!(!h.insert_raw(30, 39, f(), false).unwrap());
        for (first, last) in [(5, 10), (19, 25), (15, 16), (0, 100), (39, 39), (25, 30)] {
            match h.insert_raw(first, last, f(), false) {
                Err(NodeError::OverlappingRange { range, .. }) => assert_eq!(range, first..=last),
                other => panic!("{first}..={last}: {other:?}"),
            }
        }
        assert!(
            !h.insert_raw(20, 29, f(), false).unwrap(),
            "between the two"
        );
        assert!(!h.insert_raw(0, 9, f(), false).unwrap(), "before the first");
        for id in [0, 9, 10, 19, 20, 29, 30, 39] {
            assert!(h.get_raw(kind, id).is_some(), "{id}");
        }
        assert!(h.get_raw(kind, 40).is_none());
        assert!(
            h.get_raw(sitenet_protocols::MessageKind::Reply, 10)
                .is_none(),
            "a reply takes no handler"
        );
        // Replacing names a range exactly; another overlapping one is refused.
        assert!(h.insert_raw(10, 19, f(), true).unwrap());
        assert!(h.insert_raw(12, 14, f(), true).is_err());
        assert!(h.remove_raw(10, 19));
        assert!(!h.remove_raw(10, 19));
        assert!(h.get_raw(kind, 15).is_none());
        // The fallback takes user ids only.
        assert!(!h.set_raw_fallback(f(), false).unwrap());
        assert!(matches!(
            h.set_raw_fallback(f(), false),
            Err(NodeError::DuplicateFallback)
        ));
        assert!(h.get_raw(kind, 15).is_some());
        assert!(h.get_raw(kind, RESERVED_IDS + 3).is_none());
        assert!(h.remove_raw_fallback());
        assert!(h.get_raw(kind, 15).is_none());
    }
}
