//! The hostile-peer suite's siege: one node under every attack
//! at once — sockets that never speak, garbage, oversized and truncated
//! frames, wrong versions, malformed messages, readers that never read,
//! partial messages that stall, forwarded requests naming fresh origins,
//! floods of references to unknown sites, strangers claiming the
//! legitimate site's id — while a legitimate site streams numbered
//! messages and request/replies through it. Nothing of the legitimate
//! site's is lost, reordered or delayed into a failure, its channel is never
//! closed, the process's resident memory stays under the bound stated
//! with it (tests/common/siege.rs), and once the attackers go everything they cost is returned.
//!
//! The single attacks, each with its own bound, are in tests/hostile/peers.rs
//! and tests/hostile/bad_input.rs; this test is about them together.

use crate::common;
use crate::common::hostile::Level;

/// The siege at the open level (its body, bounds and stated memory bound:
/// tests/common/siege.rs).
#[test]
fn a_node_under_every_attack_at_once_serves_its_legitimate_site() {
    common::siege::siege(&Level::open());
}
