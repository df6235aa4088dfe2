//! The site a command talks to: an address or a site descriptor, checked
//! before anything starts, and the client-only node that reaches it.

use std::process::ExitCode;
use std::time::Duration;

use sitenet::{Address, Node};

use crate::{failure, usage};

/// Checks a command's target before anything starts: an address, or a site
/// descriptor (`ID@ADDR,ADDR,…`) whose addresses all parse.
pub(crate) fn check_target(addr: &str) -> Result<(), String> {
    if addr.contains('@') {
        let d: sitenet::SiteDescriptor = addr.parse().map_err(|e| format!("{e}"))?;
        for a in &d.addresses {
            a.parse::<Address>().map_err(|e| e.to_string())?;
        }
        Ok(())
    } else {
        addr.parse::<Address>().map(drop).map_err(|e| e.to_string())
    }
}

/// A command's client-only node, which leaves in order when the command
/// ends, however it ends: its node's graceful shutdown acknowledges what
/// it received and says LEAVING. A client that exited without it left the
/// node it asked holding an unacknowledged reply, and that node, unable to
/// call a client back, declared it failed 15 s later with the reply "maybe
/// delivered": a warning for every `sitenet stats`.
pub(crate) struct Client {
    node: Node,
    site: sitenet::SiteRef,
}

/// How long a leaving client waits for its last messages to be
/// acknowledged, if its site is reachable (one that is not has nothing
/// coming: the client leaves at once).
const LEAVE_WITHIN: Duration = Duration::from_secs(1);

impl std::ops::Deref for Client {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let wait = if self.site.fault_state() == sitenet::FaultState::Ok {
            LEAVE_WITHIN
        } else {
            Duration::ZERO
        };
        // On the main thread, never the node's own: it cannot deadlock.
        let _ = self.node.shutdown_blocking(wait);
    }
}

/// A client-only node and the site at `addr` (exit codes as documented).
/// `addr` is an address or a site descriptor (`ID@ADDR,ADDR,…`, the
/// node's `site_id` and `listen` joined): with a descriptor the best
/// transport the node lists is used (unix on this host before tcp).
pub(crate) fn client(
    addr: &str,
    configure: impl FnOnce(&mut sitenet::NodeConfig),
) -> Result<(Client, sitenet::SiteRef), ExitCode> {
    let node = Node::builder()
        .configure(configure)
        .start()
        .map_err(failure)?;
    let site = if addr.contains('@') {
        let d: sitenet::SiteDescriptor = addr.parse().map_err(usage)?;
        node.site_from_descriptor(&d)
    } else {
        node.site(addr)
    }
    .map_err(usage)?;
    let client = Client {
        node,
        site: site.clone(),
    };
    Ok((client, site))
}
