//! What a ComObject tells others about its site: its faults (the node's
//! fault history) and events (the node's subscribers); at most every
//! [`SLOT_REPORT_EVERY`], the slot controller's picture of its channel (for
//! the preemption policy) and the site's counters (for `Node::stats`); on
//! every turn, the acknowledged bytes its outbox gets back and the
//! counters it adds to the node's metrics (`account`).

use std::time::Instant;

use super::{ComObject, FaultReport, SLOT_REPORT_EVERY};
use crate::metrics::Counters;

impl ComObject {
    /// Records a fault of this site in the node's fault history.
    pub(super) fn report_fault(&self, peer: String, reason: String, permanent: bool) {
        self.node.record_fault(FaultReport {
            site: self.entry.id(),
            peer,
            reason,
            permanent,
        });
    }

    /// Tells the node's event subscribers, if there are any (the event is
    /// built only then).
    pub(super) fn publish(
        &self,
        make: impl FnOnce(Option<sitenet_protocols::SiteId>, Option<String>) -> crate::NodeEvent,
    ) {
        if self.node.signals().events().wanted() {
            let address = self.entry.address().map(str::to_string);
            self.node
                .signals()
                .events()
                .publish(make(self.entry.id(), address));
        }
    }

    /// Tells the slot controller what the live channel is doing, and
    /// publishes the site's counters (at most every [`SLOT_REPORT_EVERY`]:
    /// the policy and `Node::stats` need a recent picture, not one per
    /// event).
    pub(super) fn report(&mut self, now: Instant) {
        if self.report_next.is_some_and(|t| now < t) {
            // Reported moments ago: report again once the interval is
            // over, so the last changes before a quiet spell are not lost.
            // The actor's one timer is re-armed to it (a second timer would
            // be polled on every event).
            self.report_pending = true;
            return;
        }
        self.report_pending = false;
        self.report_next = Some(now + SLOT_REPORT_EVERY);
        self.publish_stats();
        self.report_slot();
    }

    fn report_slot(&self) {
        if let Some(live) = &self.live {
            self.node
                .slots()
                .report(&live.slot_info, &self.slot_report(live));
        }
    }

    /// Gives the channel's slot up, as a preemption does (CLOSE_HARD),
    /// on the first turn that finds it must (`SlotLease::must_give_way`):
    /// the slot table chose it, or its turn's work is done while peers
    /// wait in line — not when the tick thread's message arrives.
    pub(super) fn give_way_if_due(&mut self, now: Instant) {
        let Some(live) = &self.live else {
            return;
        };
        let Some(lease) = live
            .t
            .lease
            .as_ref()
            .filter(|l| self.gave_way != Some(l.id()))
        else {
            return;
        };
        let served = self.com.session().stats_ref().served();
        if !lease.must_give_way(&live.slot_info, served, || self.slot_report(live)) {
            return;
        }
        tracing::debug!(site = ?self.entry.id(), "channel slot given up");
        self.gave_way = Some(lease.id());
        if self.com.close_hard(now) {
            Counters::add(&self.node.counters().preemptions, 1);
            self.preempted = self.preempted.saturating_add(1);
        }
    }

    /// The slot controller's picture of the live channel.
    fn slot_report(&self, live: &super::Live) -> sitenet_transport::SlotReport {
        let session = self.com.session();
        sitenet_transport::SlotReport {
            closeable: self.com.state() == sitenet_protocols::ComState::Working,
            last_active: self.com.last_activity(),
            mid_message: session.mid_message(),
            replies_expected: self.entry.holds().pending_requests() > 0,
            buffers_empty: live.t.inb.is_empty() && !live.t.out_pending(),
            queues_empty: session.queued_bytes() == 0,
            callable: self.com.addresses().can_open(),
            served: session.stats_ref().served(),
            served_from: None,
            in_peer_line_since: None,
            line_yields: 0,
        }
    }

    /// Publishes the site's counters for `Node::stats`.
    pub(super) fn publish_stats(&self) {
        let s = self.com.session().stats();
        let mut published = self.entry.stats().lock();
        let st = published.get_or_insert_with(Box::default);
        fill_identity(st, &self.entry, self.com.addresses());
        let peer = self.live.as_ref().map(|l| l.t.peer());
        if st.channel.as_deref() != peer {
            st.channel = peer.map(str::to_owned);
        }
        let caps = self.com.session().channel_caps();
        if caps.map(|c| c.bits()) != st.capabilities_bits {
            st.capabilities_bits = caps.map(|c| c.bits());
            st.capabilities = caps.map(|c| c.to_string());
        }
        st.connected = self.live.is_some();
        fill_counters(st, &s, self.channels_opened, self.preempted);
        st.queue_depth = self.com.session().pending_messages() as u64;
    }

    pub(super) fn account(&mut self, now: Instant) {
        self.report(now);
        for corr in self.com.take_delivered() {
            self.node.deliveries().complete(corr, Ok(()));
        }
        let freed = self.com.take_freed(now);
        self.entry.outbox().release_freed(&freed);
        if freed.messages > 0 {
            self.node.signals().acked();
        }
        let now_seen = Reported::of(&self.com);
        let r = match &mut self.reported {
            Some(last) => std::mem::replace(&mut **last, now_seen),
            // Nothing happened yet: nothing to add, and no room taken.
            None if now_seen == Reported::default() => return,
            None => {
                self.reported = Some(Box::new(now_seen));
                Reported::default()
            }
        };
        let n = &now_seen;
        let c = &self.node.counters();
        Counters::add(&c.messages_sent, n.sent - r.sent);
        Counters::add(&c.messages_retransmitted, n.retransmitted - r.retransmitted);
        Counters::add(&c.duplicates, n.duplicates - r.duplicates);
        Counters::add(&c.peers_forgot, n.peer_forgot - r.peer_forgot);
        Counters::add(&c.weak_closes_started, n.weak_started - r.weak_started);
        Counters::add(&c.weak_closes_rejected, n.weak_rejected - r.weak_rejected);
        Counters::add(&c.hard_closes_started, n.hard_started - r.hard_started);
        Counters::add(&c.data_frames_sent, n.data_frames - r.data_frames);
        Counters::add(&c.ack_frames_sent, n.ack_frames - r.ack_frames);
        if n.delivered != r.delivered || n.sent != r.sent || n.weak_rejected != r.weak_rejected {
            // Once per batch (a read, a flush), not per message: whoever
            // waits on the node's metrics re-checks.
            self.node.signals().changed();
        }
    }
}

/// The site's counters in `st`, from its session's and the actor's own:
/// what a running actor publishes and a parked site's stats are made of
/// alike (`slot.rs`).
pub(super) fn fill_counters(
    st: &mut crate::stats::SiteStats,
    s: &sitenet_protocols::SessionStats,
    channels_opened: u32,
    preempted: u32,
) {
    st.messages_sent = s.sent_by_level;
    st.bytes_sent = s.bytes_by_level;
    st.messages_received = s.delivered_by_level;
    st.retransmitted = s.retransmitted;
    st.reconnects = u64::from(channels_opened.saturating_sub(1));
    st.preemptions = u64::from(preempted);
}

/// The site's id, the address it was asked for and the addresses in
/// `book`, in `st` (each rebuilt only if it changed).
pub(super) fn fill_identity(
    st: &mut crate::stats::SiteStats,
    entry: &crate::site_entry::SiteEntry,
    book: &sitenet_protocols::AddressBook,
) {
    st.site = entry.id().map(|id| id.to_string());
    if st.address.as_deref() != entry.address() {
        st.address = entry.address().map(str::to_owned);
    }
    if !st.addresses.iter().map(String::as_str).eq(book.addresses()) {
        st.addresses = book.addresses().map(str::to_owned).collect();
    }
}

/// The session and ComObject counters a ComObject last added to the
/// node's metrics (the node adds differences).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reported {
    sent: u64,
    delivered: u64,
    retransmitted: u64,
    duplicates: u64,
    peer_forgot: u64,
    weak_started: u64,
    weak_rejected: u64,
    hard_started: u64,
    data_frames: u64,
    ack_frames: u64,
}

impl Reported {
    /// What `com`'s counters add up to now.
    pub(super) fn of(com: &sitenet_protocols::ComObject) -> Self {
        let s = com.session().stats_ref();
        let k = com.stats();
        Reported {
            sent: s.sent,
            delivered: s.delivered,
            retransmitted: s.retransmitted,
            duplicates: s.duplicates,
            peer_forgot: s.peer_forgot,
            weak_started: k.weak_closes_started,
            weak_rejected: k.weak_closes_rejected,
            hard_started: k.hard_closes_started,
            data_frames: s.data_frames_out,
            ack_frames: s.acks_out,
        }
    }
}

impl ComObject {
    /// Logs a permanent failure of this site: at WARN with what was handed
    /// back, except a peer that left in order (its node's graceful
    /// shutdown) with nothing handed back, which is news, not a fault, at
    /// INFO — a run of 10,000 clients ending would otherwise print 10,000
    /// warnings. Either goes through the node's log limits: a stream of
    /// throw-away sites, each failing once, is a few lines per window and
    /// a summary, not a line each.
    pub(super) fn log_failure(
        &self,
        failure: &sitenet_protocols::SiteFailure,
        reason: &str,
        back: &crate::site_entry::Returned,
    ) {
        use crate::peer_logs::LogKind;
        let site = self.entry.id();
        let (not_sent, maybe_delivered) = (back.not_sent.len(), back.maybe_delivered.len());
        let (logs, counters) = (&self.node.peer_logs(), &self.node.counters());
        if *failure == sitenet_protocols::SiteFailure::ShutDown && not_sent + maybe_delivered == 0 {
            if let Some(suppressed) = logs.site(&self.entry, LogKind::SiteLeft, counters) {
                tracing::info!(?site, %reason, suppressed, "site left (shut down in order)");
            }
        } else if let Some(suppressed) = logs.site(&self.entry, LogKind::SiteFailed, counters) {
            tracing::warn!(
                ?site,
                %reason,
                not_sent,
                maybe_delivered,
                suppressed,
                "site failed permanently"
            );
        }
    }
}
