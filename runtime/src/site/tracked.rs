//! Tracked sends (BMI's post): the marking and settling of a tracked
//! message, for [`TrackedSend`](crate::TrackedSend) and a batch's sends.
//! The completions and the future are in `delivery.rs`, a leaf layer.

use sitenet_protocols::OutMessage;

use super::SiteRef;
use crate::delivery::Delivery;
use crate::error::SendError;

impl SiteRef {
    /// Queues the encoded one-way message `m`, tracked (waiting for room
    /// like `send`): a batch's tracked sends.
    pub(crate) async fn post_tracked(&self, mut m: OutMessage) -> Result<Delivery, SendError> {
        let delivery = self.track(&mut m);
        let corr = m.corr;
        let queued = self.post(m).await;
        self.settle(corr, queued, delivery)
    }

    /// The handle of a tracked message, once queued; if it was not, its
    /// completion is dropped and the caller gets the error.
    pub(crate) fn settle(
        &self,
        corr: u64,
        queued: Result<(), SendError>,
        delivery: Delivery,
    ) -> Result<Delivery, SendError> {
        if queued.is_err() {
            self.node.deliveries().forget(corr);
        }
        queued.map(|()| delivery)
    }

    /// Marks `m` tracked under a fresh token; its handle.
    pub(crate) fn track(&self, m: &mut OutMessage) -> Delivery {
        m.corr = self.node.next_corr();
        m.tracked = true;
        self.node.deliveries().track(m.corr)
    }
}
