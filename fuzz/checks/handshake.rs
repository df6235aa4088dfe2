//! Arbitrary bytes into both open-protocol machines (Initiator and
//! Acceptor), in chunks: never panics, never stalls, and what they accept
//! passed every check.

use sitenet_protocols::connection::handshake::{LocalInfo, MAX_GENERATION, MAX_LISTEN, MIN_BUFFER};
use sitenet_protocols::{
    decide, Acceptor, ByteBuffer, Cookie, Decision, Initiator, Keyring, LinkView, OpenError,
    SiteId, Speaks, PROTOCOL_VERSION,
};

fn local(site: u128) -> LocalInfo {
    LocalInfo {
        site: SiteId(site),
        listen: vec!["tcp:127.0.0.1:7000".into()],
        buffer_size: 65_536,
        max_message: 1 << 28,
        speaks: sitenet_protocols::Speaks::CURRENT,
    }
}

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let (ctl, stream) = data.split_at(1);
    let chunk = 1 + ctl[0] as usize * 8;
    let expected = if ctl[0] & 1 == 0 {
        None
    } else {
        Some(SiteId(1))
    };

    // Initiator (local site 2), expecting PRESENT, any number of WAIT (the
    // acceptor's waiting line, while its slots are full), then NEGOTIATE_ANS.
    let mut ini = Initiator::new(local(2), expected, 0, 0, [0x1A; 32]);
    let mut input = ByteBuffer::new(MIN_BUFFER as usize);
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    let mut off = 0;
    while off < stream.len() {
        assert!(input.free() > 0, "initiator stalled");
        let n = chunk.min(input.free()).min(stream.len() - off);
        input.push(&stream[off..off + n]);
        off += n;
        let r = ini.handle_input(&mut input, &mut output);
        // A WAIT taken is a place counted from 1, told once.
        if let Some(w) = ini.take_wait() {
            assert!(w.position >= 1, "{w:?}");
            assert!(ini.take_wait().is_none());
        }
        match r {
            Ok(Some(o)) => {
                assert!(o.buffer_size >= MIN_BUFFER && o.buffer_size <= 65_536);
                assert!(o.generation > 0 && o.generation <= MAX_GENERATION);
                // A fresh acceptor has received nothing.
                assert!(!o.peer_fresh || o.peer_last_received == 0);
                // With no secret to prove, an accepted channel agrees one.
                assert!(o.pair_secret.is_some());
                // Whatever the acceptor offered, the channel uses a
                // version and capabilities this side has.
                assert!(Speaks::CURRENT.check_choice(o.agreed).is_ok());
                assert!(o.present.versions.contains(o.agreed.version));
                assert_ne!(o.present.site, SiteId(2));
                if let Some(e) = expected {
                    assert_eq!(o.present.site, e);
                }
                break;
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }

    // Acceptor (local site 1), expecting NEGOTIATE.
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::new(&local(1), [0xAC; 32], &mut output);
    let mut input = ByteBuffer::new(MIN_BUFFER as usize);
    let mut off = 0;
    while off < stream.len() {
        assert!(input.free() > 0, "acceptor stalled");
        let n = chunk.min(input.free()).min(stream.len() - off);
        input.push(&stream[off..off + n]);
        off += n;
        match acc.handle_input(&mut input, &mut output) {
            Ok(Some(n)) => {
                assert_eq!(n.version, PROTOCOL_VERSION);
                assert_ne!(n.site, SiteId(1));
                assert!(n.buffer_size >= MIN_BUFFER);
                assert!(n.listen.len() <= MAX_LISTEN);
                assert!(n.last_generation < MAX_GENERATION);
                // Whatever the acceptor's own view, the link decision never
                // overflows and never answers outside last + 1 ..= MAX.
                for (working, last_generation, opening) in [
                    (None, 0, false),
                    (Some(MAX_GENERATION - 1), MAX_GENERATION - 1, false),
                    (Some(1), 1, true),
                    (None, MAX_GENERATION, true),
                ] {
                    let view = LinkView {
                        local: SiteId(1),
                        working,
                        working_from: None,
                        last_generation,
                        opening,
                        closing: false,
                    };
                    if let Decision::Accept { generation, .. } = decide(view, &n) {
                        assert!(generation > n.last_generation.max(last_generation));
                        assert!(generation <= MAX_GENERATION);
                    }
                }
                break;
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }

    // The same bytes into an acceptor holding a cookie: it never
    // returns a NEGOTIATE that did not prove the cookie, and never computes
    // its own proof for one that failed.
    let mut output = ByteBuffer::new(MIN_BUFFER as usize);
    let keys = Keyring::new(vec![Cookie::new([0x5C; 32])]);
    let mut acc = Acceptor::with_keys(&local(1), [0xAC; 32], keys, &mut output);
    let mut input = ByteBuffer::new(MIN_BUFFER as usize);
    let mut off = 0;
    while off < stream.len() {
        assert!(input.free() > 0, "keyed acceptor stalled");
        let n = chunk.min(input.free()).min(stream.len() - off);
        input.push(&stream[off..off + n]);
        off += n;
        match acc.handle_input(&mut input, &mut output) {
            Ok(Some(n)) => {
                assert!(n.cookie.is_some() && acc.answer_proof().is_some());
                break;
            }
            Ok(None) => {}
            Err(e) => {
                assert!(acc.answer_proof().is_none());
                assert!(!matches!(e, OpenError::AuthenticationFailed(_)) || e.is_permanent());
                break;
            }
        }
    }
}
