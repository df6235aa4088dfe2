//! Replays every committed input of the `tls_input` fuzz target
//! (`fuzz/corpus/tls_input/`, `fuzz/regressions/tls_input/`) through the
//! target's own check, and a few inputs built here that reach the deep
//! paths (a member's NEGOTIATE inside TLS, claiming its own site and
//! another's).

#[path = "../../fuzz/checks/tls_input.rs"]
mod tls_input;

use std::path::Path;

use sitenet_protocols::connection::handshake::{LocalInfo, MIN_BUFFER};
use sitenet_protocols::{ByteBuffer, Initiator, SiteId};

#[test]
fn tls_input_corpus_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir).join("tls_input")) else {
            continue;
        };
        for e in rd.flatten() {
            let data = std::fs::read(e.path()).unwrap();
            let r = std::panic::catch_unwind(|| tls_input::check(&data));
            assert!(
                r.is_ok(),
                "tls_input: {} fails its check",
                e.path().display()
            );
            n += 1;
        }
    }
    assert!(n > 0, "no committed inputs for tls_input");
}

/// The bytes of the NEGOTIATE an initiator claiming `site` writes.
fn negotiate_from(site: u128) -> Vec<u8> {
    let local = |s| LocalInfo {
        site: SiteId(s),
        listen: vec![],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    };
    let mut present = ByteBuffer::new(MIN_BUFFER as usize);
    let _acc = sitenet_protocols::Acceptor::new(&local(0xB), [0; 32], &mut present);
    let mut out = ByteBuffer::new(MIN_BUFFER as usize);
    let mut ini = Initiator::new(local(site), None, 0, 0, [7; 32]);
    ini.handle_input(&mut present, &mut out).unwrap();
    let (a, b) = out.chunks();
    let v = [a, b].concat();
    assert!(!v.is_empty());
    v
}

#[test]
fn a_members_own_claim_inside_tls_is_accepted_and_another_is_not() {
    for (site, chunk) in [(0xA, 0u8), (0xA, 3), (0xC, 0), (0xC, 127)] {
        let mut data = vec![(chunk << 1) | 1];
        data.extend(negotiate_from(site));
        let accepted = tls_input::run(&data);
        let expected = (site == 0xA).then_some(SiteId(0xA));
        assert_eq!(accepted, expected, "claim {site:x}, chunk {chunk}");
        // Kept as seeds of the fuzz corpus.
        let seed = format!("seed-inside-{site:x}-{chunk}");
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/tls_input")
            .join(seed);
        if std::env::var_os("SITENET_WRITE_SEEDS").is_some() {
            std::fs::write(path, &data).unwrap();
        }
    }
}

#[test]
fn raw_bytes_and_a_bare_client_hello_certify_nobody() {
    tls_input::check(&[0, 0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]);
    tls_input::check(&[0xFE; 300]);
}
