//! The site a command talks to: an address or a site descriptor, checked
//! before anything starts, and the client-only node that reaches it.

use std::process::ExitCode;

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

/// A client-only node and the site at `addr` (exit codes as documented).
/// `addr` is an address or a site descriptor (`ID@ADDR,ADDR,…`, the
/// node's `site_id` and `listen` joined): with a descriptor the best
/// transport the node lists is used (unix on this host before tcp).
pub(crate) fn client(
    addr: &str,
    configure: impl FnOnce(&mut sitenet::NodeConfig),
) -> Result<(Node, sitenet::SiteRef), ExitCode> {
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
    Ok((node, site))
}
