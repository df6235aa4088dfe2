//! An accepted peer that presented itself (NEGOTIATE) while every channel
//! slot was in use waits in the slot controller's line instead
//! of being refused into a reconnect storm: its connection stays parked on
//! the small rings of its handshake (no slot, no site entry, no
//! ComObject), it is told to wait (a `WAIT` frame), and when its turn comes
//! the connection is adopted as any other — the site's ComObject answers
//! the NEGOTIATE, and that answer is the grant. The rule (bounds, order,
//! turns) is `sitenet_protocols::slots`; this drives one entry.
//!
//! A place ends with the slot, with the line's hold time or a newer
//! connection of the same site ([`LineEnd`]), when the peer closes or
//! sends anything (an initiator sends nothing while it waits), or when the
//! node stops; the connection is then closed and the place given back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sitenet_protocols::connection::handshake::{write_wait, Wait};
use sitenet_protocols::slots::Source;
use sitenet_protocols::Capabilities;
use sitenet_transport::{AcceptOrWait, Lane, LineEnd, LineTicket, SlotLease};
use tokio::sync::oneshot;

use super::{NodeInner, PeerRefusal};
use crate::channel_io::Accepted;
use crate::com_object::{Adopt, ComObject};
use crate::metrics::Counters;
use crate::site_entry::SiteEntry;
use crate::trans_object::TransObject;

/// One place in line: what `accept_or_wait` gave, and where its turn comes.
struct Place {
    ticket: LineTicket,
    position: usize,
    hold: Duration,
    turn: oneshot::Receiver<Result<SlotLease, LineEnd>>,
}

/// Why a place ended without the channel being adopted (for the log).
#[derive(Debug, thiserror::Error)]
enum Left {
    #[error(transparent)]
    Line(#[from] LineEnd),
    #[error("the peer closed its connection while waiting")]
    Closed,
    #[error("the peer sent bytes while told to wait (an initiator sends nothing until answered)")]
    Spoke,
    #[error("the connection failed while waiting: {0}")]
    Io(std::io::Error),
    #[error("the WAIT frame could not be written")]
    Unwritable,
    #[error("the node stops")]
    Stopping,
}

impl NodeInner {
    /// The thread an accepted channel's work will run on, as the slot
    /// controller counts it (`Lane`): a channel from this pool's thread
    /// (in-process) runs where it was connected (see `Runtime::worker_of`);
    /// any other on the thread of its site's entry, if the site is `known`
    /// (a peer back for another turn); a new site's thread is chosen when
    /// its entry is made, after its turn: not known yet.
    fn lane_of(&self, trans: &TransObject, known: Option<&SiteEntry>) -> Option<Lane> {
        let connector = trans.connector_thread();
        if let Some(th) = connector.filter(|th| self.rt().worker_of(*th).is_some()) {
            return Some(Lane::of(th));
        }
        let index = ComObject::worker_of(self, known?);
        self.rt().thread_at(index).map(Lane::of)
    }

    /// An accepted channel whose peer presented itself: its slot now, and
    /// it is routed to its site's ComObject; or, past the hard limit, a
    /// place in line for a peer that can wait (the `line` capability); or,
    /// the line full (or the peer unable to wait), the connection is
    /// closed at once, not left hanging: the peer retries after its
    /// backoff. The slot or place is charged to the peer's source address
    /// (`peer`'s IP; an IPv6 /64), so one address cannot keep others out
    /// by presenting fresh site ids (`sitenet_protocols::slots`).
    pub(super) async fn adopt_or_wait(
        self: Arc<Self>,
        mut trans: TransObject,
        accepted: Accepted,
        peer: String,
    ) {
        let neg = &accepted.neg;
        let can_wait = neg.caps.contains(Capabilities::LINE).then_some(neg.site);
        let known = can_wait.and_then(|site| self.known(site));
        let served = known
            .as_ref()
            .and_then(|e| ComObject::site_stats(e))
            .map_or(0, |s| s.served());
        let lane = self.lane_of(&trans, known.as_deref());
        // Charged to the peer's address, not to the site id it chose.
        let source = Source::of(crate::channel_io::peer_ip(&peer));
        let (tx, turn) = oneshot::channel();
        match self
            .slots()
            .accept_or_wait_from(can_wait, served, lane, source, move |t| {
                let _ = tx.send(t);
            }) {
            AcceptOrWait::Slot(lease) => {
                trans.lease = Some(lease);
                self.adopt(trans, accepted);
            }
            AcceptOrWait::Wait {
                ticket,
                position,
                hold,
            } => {
                let place = Place {
                    ticket,
                    position,
                    hold,
                    turn,
                };
                self.wait_in_line(trans, accepted, place, peer).await;
            }
            AcceptOrWait::Refused => {
                Counters::add(&self.counters().accepts_refused, 1);
                tracing::debug!(%peer, "no channel slot and no room in line: connection closed");
                self.peer_refused(&peer, PeerRefusal::NoSlot);
            }
        }
    }

    /// Routes an accepted channel holding its slot to its site's ComObject.
    fn adopt(self: &Arc<Self>, trans: TransObject, accepted: Accepted) {
        let Accepted {
            neg,
            nonce,
            cookie,
            certificate,
        } = accepted;
        self.route_accepted(Adopt {
            trans,
            neg,
            nonce,
            cookie,
            certificate,
        });
    }

    /// Tells the peer of `trans` to wait, waits for its turn, and adopts
    /// the channel then; on any other end, gives the place back and closes
    /// the connection.
    async fn wait_in_line(
        self: Arc<Self>,
        mut trans: TransObject,
        accepted: Accepted,
        place: Place,
        peer: String,
    ) {
        let c = &self.counters();
        Counters::add(&c.line_told_to_wait, 1);
        c.line_waiting.fetch_add(1, Ordering::Relaxed);
        // A site the node knows is calling: kept (not given up, not
        // forgotten) while it waits.
        let known = self.waiting_in_line(accepted.neg.site);
        let end = self.wait_for_turn(&mut trans, place).await;
        c.line_waiting.fetch_sub(1, Ordering::Relaxed);
        if let Some(e) = known {
            self.left_line(&e);
        }
        match end {
            Ok(lease) if !self.signals().is_shut_down() => {
                Counters::add(&c.line_granted, 1);
                tracing::debug!(%peer, site = %accepted.neg.site, "let in from the line");
                trans.lease = Some(lease);
                self.adopt(trans, accepted);
            }
            // Shutting down: the lease and the connection go with `trans`.
            Ok(_) => {}
            Err(why) => {
                tracing::debug!(%peer, reason = %why, "left the waiting line: connection closed");
            }
        }
    }

    async fn wait_for_turn(
        &self,
        trans: &mut TransObject,
        place: Place,
    ) -> Result<SlotLease, Left> {
        let Place {
            ticket,
            position,
            hold,
            turn,
        } = place;
        let wait = Wait {
            position: u32::try_from(position).unwrap_or(u32::MAX),
            hold_ms: u32::try_from(hold.as_millis()).unwrap_or(u32::MAX),
        };
        let mut stop = self.stop_listeners.subscribe();
        let r = async {
            if !write_wait(&mut trans.outb, &wait) {
                return Err(Left::Unwritable);
            }
            match tokio::time::timeout(self.identity().cfg().handshake_timeout, trans.flush()).await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(Left::Io(e)),
                Err(_) => return Err(Left::Io(std::io::ErrorKind::TimedOut.into())),
            }
            let mut turn = turn;
            loop {
                tokio::select! {
                    t = &mut turn => return match t {
                        Ok(r) => r.map_err(Left::Line),
                        // The controller dropped the place (it cannot, but
                        // a closed connection is the answer either way).
                        Err(_) => Err(Left::Line(LineEnd::Expired)),
                    },
                    r = trans.fill() => match r {
                        Ok(false) => return Err(Left::Closed),
                        // A TLS record that carried no bytes for us.
                        Ok(true) if trans.inb.is_empty() => {}
                        Ok(true) => return Err(Left::Spoke),
                        Err(e) => return Err(Left::Io(e)),
                    },
                    _ = super::accept::stopped(&mut stop) => return Err(Left::Stopping),
                }
            }
        }
        .await;
        if r.is_err() {
            // Gone before its turn: the place goes back (a turn that raced
            // with this is dropped with the receiver, its slot with it).
            self.slots().leave_line(ticket);
        }
        r
    }
}
