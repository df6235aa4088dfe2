//! The node as its ComObjects see it: the state they share with it
//! ([`NodeShared`]) and the node's tables they ask ([`ComHost`]).
//!
//! The ComObject actor is a layer below the node: the node starts it,
//! sends it messages and drops it, so the actor may not name the node's
//! type. What it needs from above is a handful of questions to the site
//! table, the request table and the parked sites' timers — "is this entry
//! site X, or is another one?", "may I be reclaimed?", "fail the requests
//! this site owed" — and those are the [`ComHost`] trait, which the node
//! (`NodeInner`) implements. Everything else it reads — counters,
//! configuration, the slot controller, the reassembly budget, the
//! notifications — is plain shared state, kept here in [`NodeShared`]
//! (in small parts by concern, `node_state/`) and reached through
//! `Deref` from both sides, so neither side's code says which half an
//! accessor lives in.

use std::any::Any;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use sitenet_protocols::node::site_index::Adoption;
use sitenet_protocols::slots::dial_bound::{DialRefused, DialTicket};
use sitenet_protocols::{ReassemblyBudget, SiteFailure, SiteId};

use super::{Adopt, Inbox};
use crate::metrics::Counters;
use crate::node_state::{Identity, Security, Signals};
use crate::runtime::Runtime;
use crate::site_entry::SiteEntry;

/// A fault observed by the node: a channel closed because its peer broke the
/// protocol, or a site that failed permanently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultReport {
    /// The site, if it had identified itself.
    pub site: Option<SiteId>,
    /// The peer's address.
    pub peer: String,
    /// What went wrong.
    pub reason: String,
    /// True if the site is gone for good.
    pub permanent: bool,
}

/// What a node shares with its ComObjects: read by both, owned by the
/// node (see the module documentation). The node's own tables are not
/// here; the ComObjects reach them through [`ComHost`]. Its parts by
/// concern ([`Identity`], [`Signals`], [`Security`]) live in
/// `node_state/`; the rest is read through the accessors below.
pub(crate) struct NodeShared {
    identity: Identity,
    signals: Signals,
    security: Security,
    rt: Runtime,
    /// The completions of tracked messages (`SendBuilder::tracked`).
    deliveries: crate::delivery::Deliveries,
    counters: Counters,
    /// The channel slots (shared with the other nodes of the process unless
    /// configured otherwise).
    slots: sitenet_transport::TransController,
    /// The ComObjects' tunables, one copy for all of them.
    com_cfg: Arc<sitenet_protocols::ComConfig>,
    budget: ReassemblyBudget,
    /// Per-peer budgets of log lines about bad input.
    peer_logs: crate::peer_logs::PeerLogs,
    /// What its parked sites keep, in one table (`com_object/slot.rs`).
    parked_forms: Arc<super::slot::ParkedForms>,
}

impl NodeShared {
    /// The shared state of a node that starts: `budget` wakes the channels
    /// waiting for it ([`Signals::when_budget_released`]) whenever it is
    /// given back.
    pub(crate) fn new(
        identity: Identity,
        security: Security,
        rt: Runtime,
        slots: sitenet_transport::TransController,
        com_cfg: Arc<sitenet_protocols::ComConfig>,
        budget: ReassemblyBudget,
    ) -> Self {
        let signals = Signals::default();
        budget.set_release_hook(signals.budget_release_hook());
        Self {
            identity,
            signals,
            security,
            rt,
            deliveries: Default::default(),
            counters: Counters::default(),
            slots,
            com_cfg,
            budget,
            peer_logs: Default::default(),
            parked_forms: Default::default(),
        }
    }

    /// Who the node is: its id, configuration, listen addresses.
    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The node's notifications, shutdown flags and event subscribers.
    pub(crate) fn signals(&self) -> &Signals {
        &self.signals
    }

    /// The cookies and the remembered pairs' secrets.
    pub(crate) fn security(&self) -> &Security {
        &self.security
    }

    /// The runtime the node's actors run on.
    pub(crate) fn rt(&self) -> &Runtime {
        &self.rt
    }

    /// The completions of tracked messages (`SendBuilder::tracked`).
    pub(crate) fn deliveries(&self) -> &crate::delivery::Deliveries {
        &self.deliveries
    }

    /// The node's counters (`Node::metrics`).
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The channel slots (shared with the other nodes of the process unless
    /// configured otherwise).
    pub(crate) fn slots(&self) -> &sitenet_transport::TransController {
        &self.slots
    }

    /// The ComObjects' tunables, one copy for all of them.
    pub(crate) fn com_cfg(&self) -> &Arc<sitenet_protocols::ComConfig> {
        &self.com_cfg
    }

    /// The reassembly budget all the node's channels share.
    pub(crate) fn budget(&self) -> &ReassemblyBudget {
        &self.budget
    }

    /// Per-peer budgets of log lines about bad input.
    pub(crate) fn peer_logs(&self) -> &crate::peer_logs::PeerLogs {
        &self.peer_logs
    }

    /// What the node's parked sites keep, in one table.
    pub(crate) fn parked_forms(&self) -> &Arc<super::slot::ParkedForms> {
        &self.parked_forms
    }
}

/// The node's tables, as a ComObject asks them (see the module
/// documentation). Implemented by the node; the ComObject holds an
/// `Arc<dyn ComHost>` and reads the shared state through `Deref`.
pub(crate) trait ComHost: Deref<Target = NodeShared> + Send + Sync + 'static {
    /// Records that `entry` is site `id`; if another entry already is,
    /// returns that one (the caller merges into it).
    fn bind_site_id(&self, entry: &Arc<SiteEntry>, id: SiteId) -> Result<(), Arc<SiteEntry>>;

    /// Whether `entry` (`merged`: it merged into another) adopts an
    /// accepted channel naming site `claimed`, or routes it again.
    fn adoption(&self, entry: &SiteEntry, merged: bool, claimed: SiteId) -> Adoption;

    /// A channel accepted for a site another entry turned out to be:
    /// hands it to the entry that is the site.
    fn route_accepted(self: Arc<Self>, adopt: Adopt);

    /// The entry's claimed identity was proven by a handshake.
    fn claim_proven(&self, entry: &Arc<SiteEntry>);

    /// Forgets `entry` if nothing holds it any more (re-checked under the
    /// table's lock); false if it must stay.
    fn reclaim(&self, entry: &Arc<SiteEntry>) -> bool;

    /// `entry`'s site failed for good and came back under the same id (a
    /// restart proven by its certificate): the entry no longer names the
    /// site, so the next contact makes a new entry; it lives on, failed,
    /// for whoever holds it.
    fn retire(&self, entry: &Arc<SiteEntry>);

    /// Whether `entry` may dial `address` now: the bounds on dials on a
    /// peer's word (`sitenet_protocols::slots::dial_bound`). `Ok(Some(ticket))`:
    /// counted until [`dial_ended`](Self::dial_ended); `Ok(None)`: not on
    /// a peer's word.
    fn dial_on_word(
        &self,
        entry: &SiteEntry,
        address: &str,
    ) -> Result<Option<DialTicket>, DialRefused>;

    /// A dial counted by [`dial_on_word`](Self::dial_on_word) ended.
    fn dial_ended(&self, key: usize, ticket: DialTicket);

    /// `entry`'s site failed for good: the dials of the forwarded origins
    /// it named are abandoned.
    fn asker_gone(&self, entry: &Arc<SiteEntry>);

    /// Fails every request still waiting for a reply from `site`.
    fn fail_requests(&self, site: &Arc<SiteEntry>, failure: &SiteFailure);

    /// Keeps `f` for `Node::faults`.
    fn record_fault(&self, f: FaultReport);

    /// A parked site's deadline (called under its slot's lock).
    fn park_deadline(&self, key: usize, at: Instant);

    /// The deadline of a site that starts again (under its slot's lock).
    fn unpark_deadline(&self, key: usize, at: Instant);

    /// Wakes `entry`'s ComObject (started or unparked if need be) to drain
    /// its outbox: what a merged entry does for the one it merged into.
    fn wake(self: Arc<Self>, entry: &Arc<SiteEntry>);

    /// Starts the ComObject of an entry that never had one.
    fn start_unstarted(self: Arc<Self>, entry: &Arc<SiteEntry>);

    /// Makes the [`Inbox`] of `entry`'s ComObject (the handlers and stream
    /// sinks above the actor).
    fn inbox(self: Arc<Self>, entry: Arc<SiteEntry>) -> Box<dyn Inbox>;

    /// A counted reference to `entry` (a `SiteRef`), held while a merged
    /// ComObject still routes to it; dropping it gives the count back.
    fn hold(self: Arc<Self>, entry: Arc<SiteEntry>) -> Box<dyn Any + Send>;
}
