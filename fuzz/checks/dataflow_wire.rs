//! The dataflow protocols' messages as a hostile peer sends them: bytes
//! decoded as a list of (sender, `Wire`) the way the driver decodes its
//! messages (rmp-serde), then fed to a site that has entities of its own
//! and operations under way. Neither the decoder nor the site may panic,
//! and made-up entities make no home.
//!
//! Not part of `mod.rs`: it needs `sitenet-dataflow-protocols`, which the
//! core's replay test does not depend on; the dataflow crate's own test
//! (`dataflow/protocols/tests/fuzz_corpus.rs`) replays its inputs.

use sitenet_dataflow_protocols::{FailMode, OpId, Site, Value, Wire};
use sitenet_protocols::SiteId;

pub fn check(data: &[u8]) {
    let Ok(msgs) = rmp_serde::from_slice::<Vec<(u8, Wire)>>(data) else {
        return;
    };
    let mut site = Site::new(SiteId(1));
    let v = site.new_var(true);
    let (_p, s) = site.new_port();
    let _c = site.new_cell(true, Value::plain(b"c".to_vec()));
    site.wait(OpId(1), s, FailMode::Wait);
    site.wait(OpId(2), v, FailMode::Wait);
    let n = msgs.len();
    for (from, w) in msgs {
        site.received(SiteId(u128::from(from % 4) + 1), w);
        while site.poll_action().is_some() {}
    }
    // Three entities of its own, plus a stream cell per message at most.
    assert!(
        site.homes() <= 4 + 2 * n,
        "{} homes from {n} messages",
        site.homes()
    );
}
