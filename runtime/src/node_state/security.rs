//! [`Security`]: the secrets a node's handshakes use.

use parking_lot::Mutex;
use sitenet_protocols::{Continuity, Keyring, PairMemory, SiteId};

/// The cookies a node proves and accepts, and the pairs' secrets it keeps
/// for sites whose entries were forgotten.
pub(crate) struct Security {
    /// The cookies this node proves and accepts (empty: the open level),
    /// from `NodeConfig::cookies`; shared by every handshake.
    keys: Keyring,
    /// The pairs' secrets kept when their entries were forgotten
    /// (`NodeConfig::remembered_pairs`).
    pairs: Mutex<PairMemory>,
}

impl Security {
    /// `keys`, and a memory of at most `remembered_pairs` pairs' secrets.
    pub(crate) fn new(keys: Keyring, remembered_pairs: usize) -> Self {
        Self {
            keys,
            pairs: Mutex::new(PairMemory::new(remembered_pairs)),
        }
    }

    /// The cookies this node proves and accepts (empty: the open level).
    pub(crate) fn keys(&self) -> &Keyring {
        &self.keys
    }

    /// Keeps the pair's secret of `site`, whose entry is forgotten: coming
    /// back, this node still proves the pair to a peer that kept its own
    /// entry.
    pub(crate) fn remember_pair(&self, site: SiteId, continuity: Continuity) {
        self.pairs.lock().keep(site, continuity);
    }

    /// The pair's secret kept for `site`, if any (it leaves the memory:
    /// the site's new entry holds it now).
    pub(crate) fn recall_pair(&self, site: SiteId) -> Option<Continuity> {
        self.pairs.lock().take(site)
    }
}
