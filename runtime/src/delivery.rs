//! Delivery futures (BMI's post and test): [`TrackedSend`]
//! returns a [`Delivery`] that completes when the peer has acknowledged
//! that very message — not when it was queued — or fails with the site's
//! permanent failure, saying whether the message was never sent or may
//! have been delivered.
//!
//! The session reports the acknowledged tracked messages by their `corr`
//! (a token from the node's request-id series, never sent on the wire for a
//! one-way message; `Session::take_delivered`); messages handed back when
//! the site fails carry the same token. The node keeps one completion per
//! tracked message, until it completes.
//!
//! This file is a leaf of the runtime's layers (the completions and the
//! future); the sending side, `SendBuilder::tracked`, is in `site/send.rs`
//! and `site/tracked.rs`, with the rest of the public API.
//!
//! [`TrackedSend`]: crate::TrackedSend

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use sitenet_protocols::OutMessage;

use crate::error::DeliveryError;

type Done = oneshot::Sender<Result<(), DeliveryError>>;

/// The completions of a node's tracked messages, by token.
#[derive(Default)]
pub(crate) struct Deliveries(Mutex<HashMap<u64, Done, foldhash::fast::RandomState>>);

impl Deliveries {
    /// A new tracked message with token `corr`: its handle.
    pub(crate) fn track(&self, corr: u64) -> Delivery {
        let (tx, rx) = oneshot::channel();
        self.0.lock().insert(corr, tx);
        Delivery { rx, outcome: None }
    }

    /// The tracked message `corr` was acknowledged, or will never be.
    pub(crate) fn complete(&self, corr: u64, outcome: Result<(), DeliveryError>) {
        if let Some(tx) = self.0.lock().remove(&corr) {
            // A handle dropped meanwhile wants nothing.
            let _ = tx.send(outcome);
        }
    }

    /// Drops the completion of `corr` (its message was not queued after
    /// all: the caller got the error).
    /// Fails `m`'s delivery with `e` if `m` is tracked (`e` is made only
    /// then).
    pub(crate) fn fail(&self, m: &OutMessage, e: impl FnOnce() -> DeliveryError) {
        if m.tracked {
            self.complete(m.corr, Err(e()));
        }
    }

    pub(crate) fn forget(&self, corr: u64) {
        self.0.lock().remove(&corr);
    }

    /// Fails every tracked message still pending (the node stopped).
    pub(crate) fn fail_all(&self, e: DeliveryError) {
        for (_, tx) in self.0.lock().drain() {
            let _ = tx.send(Err(e.clone()));
        }
    }
}

/// The outcome of one tracked message (see
/// [`SendBuilder::tracked`](crate::SendBuilder::tracked)): a future, and
/// [`test`](Delivery::test) to ask without waiting. Blocking code waits
/// with `futures::executor::block_on(delivery)` — off the node's own
/// runtime thread, where the acknowledgement is processed.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use sitenet_runtime::{DeliveryError, Message, Node};
/// #[derive(Serialize, Deserialize)]
/// struct Chunk(u32);
/// impl Message for Chunk { const ID: u32 = 13; }
///
/// let server = Node::builder().listen("tcp:127.0.0.1:0").start()?;
/// server.handle(|_ctx, _: Chunk| {})?;
/// let client = Node::builder().start()?;
/// let site = client.site(&server.listen_addresses()[0])?;
/// // Post many, then test them in turn (BMI): each completes on its own.
/// let mut posted: Vec<_> = (0..10)
///     .map(|i| site.send(&Chunk(i)).tracked().try_now())
///     .collect::<Result<_, _>>()?;
/// while !posted.is_empty() {
///     posted.retain_mut(|d| match d.test() {
///         None => true, // on its way
///         Some(outcome) => { outcome.expect("acknowledged"); false }
///     });
///     std::thread::yield_now();
/// }
/// # let _: Option<DeliveryError> = None;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a Delivery does nothing unless awaited or tested"]
pub struct Delivery {
    rx: oneshot::Receiver<Result<(), DeliveryError>>,
    /// Kept once known, so `test` and the future agree.
    outcome: Option<Result<(), DeliveryError>>,
}

impl Delivery {
    /// The outcome if it is known now (BMI's test), without waiting: `Some(Ok(()))`
    /// once the peer acknowledged the message, `Some(Err(_))` if it never
    /// will, `None` while it is on its way.
    pub fn test(&mut self) -> Option<Result<(), DeliveryError>> {
        if self.outcome.is_none() {
            self.outcome = match self.rx.try_recv() {
                Ok(o) => Some(o),
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => Some(Err(DeliveryError::Shutdown)),
            };
        }
        self.outcome.clone()
    }
}

impl Future for Delivery {
    type Output = Result<(), DeliveryError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(o) = &self.outcome {
            return Poll::Ready(o.clone());
        }
        let o = match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(o)) => o,
            Poll::Ready(Err(_)) => Err(DeliveryError::Shutdown),
        };
        self.outcome = Some(o.clone());
        Poll::Ready(o)
    }
}
