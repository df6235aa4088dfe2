//! Tracked sends (BMI's post): the public API's side of
//! [`Delivery`](crate::Delivery). The completions and the future are in
//! `delivery.rs`, a leaf layer; this is the top layer, next to `SiteRef`'s
//! other sends.

use sitenet_protocols::{MessageKind, OutMessage};

use crate::delivery::Delivery;
use crate::error::SendError;
use crate::message::{Message, SendOptions};
use crate::site::SiteRef;

impl SiteRef {
    /// Queues `msg` like [`send_with`](Self::send_with), and returns a
    /// [`Delivery`](Delivery) that completes when the peer has
    /// acknowledged this message — it was delivered to the peer's handler —
    /// or fails with the site's permanent failure, telling whether the
    /// message was never sent or may have been delivered (BMI's post and
    /// test). Many can be in flight at once.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Put { key: u32 }
    /// impl Message for Put { const ID: u32 = 7; }
    ///
    /// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
    /// server.handle(|_ctx, p: Put| println!("stored {}", p.key))?;
    /// let node = Node::builder().start()?;
    /// let site = node.site(&server.listen_addresses()[0])?;
    /// futures::executor::block_on(async {
    ///     let mut d = site.send_tracked(&Put { key: 1 }).await?;
    ///     if d.test().is_none() {
    ///         // Still on its way: do other work, then wait. Once it
    ///         // completes, the server's handler has returned.
    ///         d.await?;
    ///     }
    ///     Ok::<(), Box<dyn std::error::Error>>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn send_tracked<M: Message>(&self, msg: &M) -> Result<Delivery, SendError> {
        self.send_tracked_with(msg, SendOptions::new()).await
    }

    /// [`send_tracked`](Self::send_tracked) with options: a priority and a
    /// body.
    pub async fn send_tracked_with<M: Message>(
        &self,
        msg: &M,
        opts: SendOptions,
    ) -> Result<Delivery, SendError> {
        let m = self.encode(msg, opts, MessageKind::OneWay, 0)?;
        self.post_tracked(m).await
    }

    /// [`send_tracked`](Self::send_tracked) that never waits: fails with
    /// [`SendError::QueueFull`] at the bound (use it from handlers).
    pub fn try_send_tracked<M: Message>(&self, msg: &M) -> Result<Delivery, SendError> {
        self.try_send_tracked_with(msg, SendOptions::new())
    }

    /// [`try_send_tracked`](Self::try_send_tracked) with options: a
    /// priority and a body.
    pub fn try_send_tracked_with<M: Message>(
        &self,
        msg: &M,
        opts: SendOptions,
    ) -> Result<Delivery, SendError> {
        let mut m = self.encode(msg, opts, MessageKind::OneWay, 0)?;
        let delivery = self.track(&mut m);
        let corr = m.corr;
        let queued = self.try_post(m);
        self.settle(corr, queued, delivery)
    }

    /// Queues the encoded one-way message `m`, tracked (waiting for room
    /// like `send`): the common part of `send_tracked` and a batch's sends.
    pub(crate) async fn post_tracked(&self, mut m: OutMessage) -> Result<Delivery, SendError> {
        let delivery = self.track(&mut m);
        let corr = m.corr;
        let queued = self.post(m).await;
        self.settle(corr, queued, delivery)
    }

    /// The handle of a tracked message, once queued; if it was not, its
    /// completion is dropped and the caller gets the error.
    fn settle(
        &self,
        corr: u64,
        queued: Result<(), SendError>,
        delivery: Delivery,
    ) -> Result<Delivery, SendError> {
        if queued.is_err() {
            self.node.deliveries.forget(corr);
        }
        queued.map(|()| delivery)
    }

    /// Marks `m` tracked under a fresh token; its handle.
    fn track(&self, m: &mut OutMessage) -> Delivery {
        m.corr = self.node.next_corr();
        m.tracked = true;
        self.node.deliveries.track(m.corr)
    }
}
