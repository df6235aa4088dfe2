//! The site table: one entry per remote site, found by id and by the
//! address this node contacts it at. An address is bound to a site only when
//! this node connects there itself and finds that site (`bind_site_id`);
//! the listen addresses a peer claims are used only to call it back.

use std::collections::HashMap;
use std::sync::Arc;

use actix::Actor;
use slab::Slab;

use sitenet_protocols::SiteId;
use sitenet_transport::Address;

use super::NodeInner;
use crate::com_object::ComObject;
use crate::site::SiteEntry;

#[derive(Default)]
pub(crate) struct SiteTable {
    pub(crate) entries: Slab<Arc<SiteEntry>>,
    pub(crate) by_id: HashMap<SiteId, usize>,
    pub(crate) by_address: HashMap<String, usize>,
}

impl NodeInner {
    pub(super) fn new_entry(
        self: &Arc<Self>,
        t: &mut SiteTable,
        address: Option<Address>,
    ) -> Arc<SiteEntry> {
        let slot = t.entries.vacant_entry();
        let entry = Arc::new(SiteEntry::new(
            slot.key(),
            address.clone(),
            self.cfg.output_bound,
        ));
        slot.insert(entry.clone());
        let (node, e) = (self.clone(), entry.clone());
        let addr = ComObject::start_in_arbiter(self.rt.arbiter(), move |_| ComObject::new(node, e));
        let _ = entry.addr.set(addr);
        entry
    }

    /// The entry for an address, created (with its ComObject) if new.
    /// A permanently failed site stays failed; the address then names a new
    /// site (for example the restarted process, a new incarnation).
    pub(super) fn entry_for_address(self: &Arc<Self>, a: Address) -> Arc<SiteEntry> {
        let mut t = self.sites.lock();
        if let Some(&k) = t.by_address.get(&a.to_string()) {
            let e = t.entries[k].clone();
            if e.failure().is_none() {
                return e;
            }
        }
        let e = self.new_entry(&mut t, Some(a.clone()));
        t.by_address.insert(a.to_string(), e.key);
        e
    }

    /// The entry for a site that connected to us: by id, else a new one.
    /// The listen addresses the peer claims are not trusted: the new entry
    /// may call the first back (the open protocol then checks who answers),
    /// but no address is bound to a site until we connect there ourselves
    /// and find it (`bind_site_id`), so a peer cannot take over traffic
    /// meant for the site at an address it lists.
    pub(super) fn entry_for_accept(
        self: &Arc<Self>,
        id: SiteId,
        listen: &[String],
    ) -> Arc<SiteEntry> {
        let mut t = self.sites.lock();
        if let Some(&k) = t.by_id.get(&id) {
            return t.entries[k].clone();
        }
        let address = listen.iter().find_map(|l| l.parse::<Address>().ok());
        let e = self.new_entry(&mut t, address);
        let _ = e.id.set(id);
        t.by_id.insert(id, e.key);
        e
    }

    /// Records that `entry` is site `id`; if another entry already is, returns
    /// that one (the caller merges into it).
    pub(crate) fn bind_site_id(
        &self,
        entry: &Arc<SiteEntry>,
        id: SiteId,
    ) -> Result<(), Arc<SiteEntry>> {
        let mut t = self.sites.lock();
        match t.by_id.get(&id) {
            Some(&k) if k == entry.key => Ok(()),
            Some(&k) => {
                let other = t.entries[k].clone();
                if let Some(a) = &entry.address {
                    t.by_address.insert(a.to_string(), k);
                }
                Err(other)
            }
            None => {
                let _ = entry.id.set(id);
                t.by_id.insert(id, entry.key);
                Ok(())
            }
        }
    }

    pub(super) fn all_entries(&self) -> Vec<Arc<SiteEntry>> {
        self.sites
            .lock()
            .entries
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }
}
