//! Registering handlers on a node: typed (`handle`, `handle_mut`,
//! `handle_result`, `handle_async`), replaced or removed at run time, and
//! the hook for what no handler takes. Dispatch is in the parent module.

use std::sync::Arc;

use super::*;

/// Registering handlers (here, not in `node/`: the node is a layer below).
impl crate::Node {
    /// Registers the handler for message type `M`. Registering a type id twice
    /// is an error, as is an id in sitenet's reserved range.
    ///
    /// Why `Sync`: a handler is only ever called on the node's runtime
    /// thread (one actix arbiter: every channel's actor and the local
    /// site's deliveries run there), one call at a time. But the handler
    /// table lives in the node, which every `Node` handle shares across
    /// threads — registering, replacing and removing handlers happen on
    /// the caller's thread — so Rust requires what the table holds to be
    /// `Sync`. State a handler mutates needs no `Arc<Mutex<…>>` of the
    /// user's: [`handle_mut`](Self::handle_mut) takes an `FnMut` that is
    /// only `Send` and puts it behind a mutex of sitenet's, never
    /// contended.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, NodeError};
    /// #[derive(Serialize, Deserialize)]
    /// struct Ping(u64);
    /// impl Message for Ping { const ID: u32 = 1; }
    ///
    /// let node = Node::builder().start()?;
    /// node.handle(|ctx, Ping(n): Ping| {
    ///     // One-way or request: a request is answered with `reply`.
    ///     if ctx.is_request() {
    ///         let _ = ctx.reply(&Ping(n + 1));
    ///     }
    /// })?;
    /// // One handler per type.
    /// assert!(matches!(node.handle(|_ctx, _: Ping| {}), Err(NodeError::DuplicateHandler(1))));
    /// # Ok::<(), NodeError>(())
    /// ```
    pub fn handle<M, F>(&self, f: F) -> Result<(), NodeError>
    where
        M: Message,
        F: Fn(&mut Ctx<'_>, M) + Send + Sync + 'static,
    {
        check_user_id(M::ID)?;
        self.inner.handlers().insert(M::ID, erase(f))
    }

    /// Registers `f` as the handler of message type `M`, like
    /// [`handle`](Self::handle), for a handler that owns mutable state: an
    /// `FnMut` that is `Send` but need not be `Sync` (a `Vec`, a
    /// `HashMap`, a `Cell` or `RefCell`, captured by move), without an
    /// `Arc<Mutex<…>>` of the caller's.
    ///
    /// The sites of a node run on the threads of its runtime (one per core
    /// by default), so handlers may run at once on several, which is why
    /// [`handle`](Self::handle) asks for `Sync` (see there). Here sitenet
    /// keeps `f` behind a mutex of its own: calls of `f` take turns. The
    /// cost is a lock and unlock per message (two atomic operations while
    /// uncontended); should a handler ever be re-entered on its own thread
    /// while it runs, the message fails (its request gets an error)
    /// instead of deadlocking. State shared by several handlers,
    /// or with other threads, still needs its own `Arc`.
    ///
    /// ```
    /// # use std::collections::HashMap;
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Count(String);
    /// impl Message for Count { const ID: u32 = 51; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Seen(u64);
    /// impl Message for Seen { const ID: u32 = 52; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let mut seen: HashMap<String, u64> = HashMap::new(); // owned by the handler
    /// server.handle_mut(move |ctx, Count(word): Count| {
    ///     let n = seen.entry(word).or_default();
    ///     *n += 1;
    ///     let _ = ctx.reply(&Seen(*n));
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let count = |w: &str| site.request::<Count, Seen>(&Count(w.into())).timeout(Duration::from_secs(30)).blocking().map(|r| r.msg.0);
    /// assert_eq!((count("a")?, count("a")?, count("b")?), (1, 2, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_mut<M, F>(&self, f: F) -> Result<(), NodeError>
    where
        M: Message,
        F: FnMut(&mut Ctx<'_>, M) + Send + 'static,
    {
        check_user_id(M::ID)?;
        self.inner.handlers().insert(M::ID, erase_mut(f))
    }

    /// Registers the handler of request type `Q` that returns its answer
    /// instead of calling [`Ctx::reply`]: a reply, or `Result<R, E>` whose
    /// error is a value of the application's own type `E` (any
    /// `Serialize`) that the caller gets back as its type with
    /// [`RequestBuilder::or_error`](crate::RequestBuilder::or_error) and
    /// matches — "not found", "no permission", "retry at that site" —
    /// rather than parse a reason string. See [`Outcome`] for every output
    /// it takes; `()` or `None` answers nothing (the handler forwarded the
    /// request, or took its responder). A plain `request` caller sees the
    /// error as [`RequestError::Remote`](crate::RequestError::Remote), the
    /// value rendered in its reason.
    ///
    /// The error travels as sitenet's error reply, the value in its body:
    /// no wire change, and a caller running an older sitenet sees the
    /// reason. For a one-way message the output is dropped.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, RequestError, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Withdraw(u64);
    /// impl Message for Withdraw { const ID: u32 = 53; }
    /// #[derive(Debug, Serialize, Deserialize)]
    /// struct Balance(u64);
    /// impl Message for Balance { const ID: u32 = 54; }
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// enum BankError { Insufficient { balance: u64 }, Frozen }
    ///
    /// let bank = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// bank.handle_result(|_ctx, Withdraw(n): Withdraw| {
    ///     let balance = 100;
    ///     if n > balance {
    ///         return Err(BankError::Insufficient { balance });
    ///     }
    ///     Ok(Balance(balance - n))
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&bank.listen_addresses()[0])?;
    /// let t = Duration::from_secs(30);
    /// let ok = site.request::<Withdraw, Balance>(&Withdraw(30)).timeout(t).or_error::<BankError>().blocking()?;
    /// assert_eq!(ok.map(|r| r.msg.0), Ok(70));
    /// let refused = site.request::<Withdraw, Balance>(&Withdraw(500)).timeout(t).or_error::<BankError>().blocking()?;
    /// assert_eq!(refused.err(), Some(BankError::Insufficient { balance: 100 }));
    /// // A caller that does not ask for the value reads it in the reason.
    /// let plain = site.request::<Withdraw, Balance>(&Withdraw(500)).timeout(t).blocking().unwrap_err();
    /// assert!(matches!(plain, RequestError::Remote { reason: ref r, .. } if r.contains("Insufficient")), "{plain}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_result<Q, O, F>(&self, f: F) -> Result<(), NodeError>
    where
        Q: Message,
        O: Outcome,
        F: Fn(&mut Ctx<'_>, Q) -> O + Send + Sync + 'static,
    {
        check_user_id(Q::ID)?;
        self.inner.handlers().insert(Q::ID, erase_result(f))
    }

    /// Registers an async handler of message type `Q`: `f` makes, for each
    /// message, a future that runs on the node's runtime, and its output
    /// answers the request when it completes ([`Outcome`]: a reply, a
    /// `Result<R, E>` with a typed error as for
    /// [`handle_result`](Self::handle_result), or `()`). A one-way
    /// message's output is dropped. The future may await anything —
    /// another site's answer, a tokio timer (`tokio::time::sleep`), a channel — while the node goes on
    /// delivering; `f` itself runs on the node's thread and must not block.
    ///
    /// The future owns its context, an [`AsyncCtx`] (the sender, the
    /// node, the priority; it can [`forward`](AsyncCtx::forward) the
    /// request or take its [`Responder`](AsyncCtx::responder)). Every
    /// request gets one answer: a future that panics is caught, counted
    /// in `Metrics::handler_panics` and answered as an error
    /// ([`RequestError::Remote`](crate::RequestError::Remote)); one whose
    /// output answers nothing answers "no reply".
    ///
    /// Bounded: at most `NodeConfig::max_async_handlers` futures (10,000
    /// by default) run at once, all types together. Beyond, a request is
    /// refused at once, unrun — its caller gets
    /// [`RequestError::Busy`](crate::RequestError::Busy), safe to retry —
    /// and a one-way message is dropped and passed to the
    /// [`on_unhandled`](Self::on_unhandled) hook (both counted in
    /// `Metrics::async_handlers_busy`). Refused rather than paused:
    /// pausing a channel's input would also hold back the replies the
    /// running futures await.
    ///
    /// Ended with the node: a future still running when the node stops is
    /// dropped, and its caller gets what a stopping site's callers get
    /// (the request fails with the site, or — the node's own — with
    /// [`RequestError::Shutdown`](crate::RequestError::Shutdown)).
    /// [`shutdown`](Self::shutdown) first waits for the running ones to
    /// answer, within its deadline.
    ///
    /// Futures run concurrently: the order in which their answers leave
    /// is not the order the requests came in. State they share goes in an
    /// `Arc` (each future owns what it holds, across its awaits).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{AsyncCtx, Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Price(String);
    /// impl Message for Price { const ID: u32 = 55; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Cents(u64);
    /// impl Message for Cents { const ID: u32 = 56; }
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// enum ShopError { Unknown(String), Backend(String) }
    ///
    /// // The back end knows the prices.
    /// let back = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// back.handle(|ctx, Price(item): Price| {
    ///     let _ = ctx.reply(&Cents(if item == "tea" { 250 } else { 0 }));
    /// })?;
    /// // The front end awaits the back end before it answers, with tax.
    /// let front = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let to_back = front.site(&back.listen_addresses()[0])?;
    /// front.handle_async(move |_ctx: AsyncCtx, Price(item): Price| {
    ///     let to_back = to_back.clone();
    ///     async move {
    ///         let r = to_back
    ///             .request::<Price, Cents>(&Price(item.clone())).timeout(Duration::from_secs(30))
    ///             .await
    ///             .map_err(|e| ShopError::Backend(e.to_string()))?;
    ///         match r.msg.0 {
    ///             0 => Err(ShopError::Unknown(item)),
    ///             cents => Ok(Cents(cents * 110 / 100)),
    ///         }
    ///     }
    /// })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&front.listen_addresses()[0])?;
    /// let price = |item: &str| site.request::<Price, Cents>(&Price(item.into())).timeout(Duration::from_secs(30)).or_error::<ShopError>().blocking();
    /// assert_eq!(price("tea")?.map(|r| r.msg.0), Ok(275));
    /// assert_eq!(price("gold")?.err(), Some(ShopError::Unknown("gold".into())));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_async<Q, O, F, Fut>(&self, f: F) -> Result<(), NodeError>
    where
        Q: Message,
        O: Outcome,
        F: Fn(AsyncCtx, Q) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = O> + Send + 'static,
    {
        check_user_id(Q::ID)?;
        self.inner
            .handlers()
            .insert(Q::ID, async_handlers::erase_async(f))
    }

    /// Registers the handler for message type `M`, or replaces the one it
    /// has, at run time (a cooperation reply declaration for `M` too);
    /// true if one was replaced. A language runtime reloading code swaps
    /// its handlers while messages keep arriving.
    ///
    /// The swap is one write under the handler table's lock: a message
    /// arriving meanwhile runs the old handler or the new one, never none
    /// (never `on_unhandled`). A message whose handler was looked up
    /// before the swap finishes with the old one; every message looked up
    /// after this returns gets the new one. (Removing a handler and
    /// registering another leaves a moment without any: replace instead.)
    ///
    /// Fails for an id in sitenet's reserved range, and for a type with a
    /// streaming handler ([`remove_handler`](Self::remove_handler) it
    /// first).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Version;
    /// impl Message for Version { const ID: u32 = 1; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Is(u32);
    /// impl Message for Is { const ID: u32 = 2; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|ctx, _: Version| { let _ = ctx.reply(&Is(1)); })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let ask = || site.request::<Version, Is>(&Version).timeout(Duration::from_secs(30)).blocking();
    /// assert_eq!(ask()?.msg.0, 1);
    /// // Code reloaded: version 2 answers from now on.
    /// assert!(server.replace_handler(|ctx, _: Version| { let _ = ctx.reply(&Is(2)); })?);
    /// assert_eq!(ask()?.msg.0, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replace_handler<M, F>(&self, f: F) -> Result<bool, NodeError>
    where
        M: Message,
        F: Fn(&mut Ctx<'_>, M) + Send + Sync + 'static,
    {
        check_user_id(M::ID)?;
        self.inner.handlers().replace(M::ID, erase(f))
    }

    /// [`replace_handler`](Self::replace_handler) with a handler that
    /// mutates its state ([`handle_mut`](Self::handle_mut)'s kind): a
    /// handler reloaded at run time keeps working without `Sync`.
    pub fn replace_handler_mut<M, F>(&self, f: F) -> Result<bool, NodeError>
    where
        M: Message,
        F: FnMut(&mut Ctx<'_>, M) + Send + 'static,
    {
        check_user_id(M::ID)?;
        self.inner.handlers().replace(M::ID, erase_mut(f))
    }

    /// [`replace_handler`](Self::replace_handler) with a handler whose
    /// return value is the answer ([`handle_result`](Self::handle_result)'s
    /// kind).
    pub fn replace_handler_result<Q, O, F>(&self, f: F) -> Result<bool, NodeError>
    where
        Q: Message,
        O: Outcome,
        F: Fn(&mut Ctx<'_>, Q) -> O + Send + Sync + 'static,
    {
        check_user_id(Q::ID)?;
        self.inner.handlers().replace(Q::ID, erase_result(f))
    }

    /// [`replace_handler`](Self::replace_handler) with an async handler
    /// ([`handle_async`](Self::handle_async)'s kind). Futures the old
    /// handler started run to their answers; requests arriving after this
    /// returns start the new one's.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Version;
    /// impl Message for Version { const ID: u32 = 1; }
    /// #[derive(Serialize, Deserialize)]
    /// struct Is(u32);
    /// impl Message for Is { const ID: u32 = 2; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle_async(|_ctx, _: Version| async { Is(1) })?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// let ask = || site.request::<Version, Is>(&Version).timeout(Duration::from_secs(30)).blocking();
    /// assert_eq!(ask()?.msg.0, 1);
    /// assert!(server.replace_handler_async(|_ctx, _: Version| async { Is(2) })?);
    /// assert_eq!(ask()?.msg.0, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replace_handler_async<Q, O, F, Fut>(&self, f: F) -> Result<bool, NodeError>
    where
        Q: Message,
        O: Outcome,
        F: Fn(AsyncCtx, Q) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = O> + Send + 'static,
    {
        check_user_id(Q::ID)?;
        self.inner
            .handlers()
            .replace(Q::ID, async_handlers::erase_async(f))
    }

    /// Removes what takes message type `M` — its handler, streaming
    /// handler or cooperation reply declaration — at run time; true if
    /// there was one. A message of the type arriving after this returns
    /// goes to a raw handler whose range holds its id, else to the raw
    /// fallback, else to the [`on_unhandled`](Self::on_unhandled) hook
    /// (a request is answered with an error). One already handed to the
    /// handler finishes with it, and a stream already open keeps its sink
    /// to its end. Sitenet's own (reserved) types cannot be removed:
    /// false.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node};
    /// #[derive(Serialize, Deserialize)]
    /// struct Ping;
    /// impl Message for Ping { const ID: u32 = 1; }
    ///
    /// let node = Node::builder().start()?;
    /// node.handle(|_ctx, _: Ping| {})?;
    /// assert!(node.remove_handler::<Ping>());
    /// assert!(!node.remove_handler::<Ping>()); // nothing left to remove
    /// node.handle(|_ctx, _: Ping| {})?;         // registered afresh
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn remove_handler<M: Message>(&self) -> bool {
        check_user_id(M::ID).is_ok() && self.inner.handlers().remove(M::ID)
    }

    /// Sets the hook that sees every message no handler took (no handler for
    /// its type, or a header that did not decode). Such messages are still
    /// acknowledged — an application fault never closes a channel — and
    /// counted in `Metrics::unhandled`. Replaces any earlier hook.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node};
    /// #[derive(Serialize, Deserialize)]
    /// struct Unknown;
    /// impl Message for Unknown { const ID: u32 = 99; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// server.on_unhandled(move |u| { let _ = tx.lock().unwrap().send((u.type_id, u.reason)); });
    /// let client = Node::builder().start()?;
    /// client.site(&server.listen_addresses()[0])?.send(&Unknown).try_now()?;
    /// let (type_id, reason) = rx.recv_timeout(Duration::from_secs(30))?;
    /// assert_eq!(type_id, 99);
    /// assert!(reason.contains("no handler"), "{reason}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_unhandled(&self, f: impl Fn(Unhandled) + Send + Sync + 'static) {
        *self.inner.handlers().unhandled.write() = Some(Arc::new(f));
    }
}
