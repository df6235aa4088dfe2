//! The cookie level of the open protocol: the
//! initiator proves first, the acceptor checks before it returns NEGOTIATE
//! to its driver, then proves itself in its answer.

use sitenet_protocols::connection::handshake::MIN_BUFFER;
use sitenet_protocols::connection::handshake::{
    read_frame, write_answer, LocalInfo, MAX_HANDSHAKE_PAYLOAD,
};
use sitenet_protocols::{
    Acceptor, AuthFailure, ByteBuffer, Cookie, FrameKind, Initiator, Keyring, Negotiate,
    NegotiateAns, OpenError, Opened, RefuseReason, SiteId,
};

fn info(site: u128) -> LocalInfo {
    LocalInfo {
        site: SiteId(site),
        listen: vec![format!("tcp:10.0.0.{site}:7000")],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    }
}

fn keys(secrets: &[u8]) -> Keyring {
    Keyring::new(secrets.iter().map(|&b| Cookie::new([b; 32])).collect())
}

fn accept() -> NegotiateAns {
    NegotiateAns::Accept {
        buffer_size: 65_536,
        max_message: 1 << 20,
        last_received: 0,
        generation: 1,
        fresh: true,
        rekey: true,
        cookie: None,
        session: 0,
    }
}

/// What one handshake came to on each side, and what the acceptor wrote
/// after PRESENT.
struct Run {
    acceptor: Result<Option<Negotiate>, OpenError>,
    answer_written: Vec<u8>,
    initiator: Result<Option<Opened>, OpenError>,
}

/// Runs A (0xA, initiator, holding `a`) against B (0xB, acceptor, holding
/// `b`); `tamper` may rewrite NEGOTIATE on its way, `answer_tamper` the
/// answer. On success B answers Accept with its proof.
fn run(
    a: Keyring,
    b: Keyring,
    tamper: impl FnOnce(&mut Negotiate),
    answer_tamper: impl FnOnce(&mut NegotiateAns),
) -> Run {
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::with_keys(&info(0xB), [0xB0; 32], b, &mut to_a);
    let mut ini = Initiator::new(info(0xA), Some(SiteId(0xB)), 0, 0, [0xA0; 32]).with_keys(a);
    assert_eq!(ini.handle_input(&mut to_a, &mut to_b).unwrap(), None);
    // NEGOTIATE on the wire, possibly rewritten.
    let (_, payload) = read_frame(&mut to_b, MAX_HANDSHAKE_PAYLOAD)
        .unwrap()
        .unwrap();
    let mut n: Negotiate = rmp_serde::from_slice(&payload).unwrap();
    tamper(&mut n);
    assert!(sitenet_protocols::connection::handshake::write_control(
        &mut to_b,
        FrameKind::Negotiate,
        &n
    ));
    let acceptor = acc.handle_input(&mut to_b, &mut to_a);
    let answer_written: Vec<u8> = {
        let mut v = vec![0u8; to_a.len()];
        assert!(to_a.peek(0, &mut v));
        v
    };
    if acceptor.as_ref().is_ok_and(|n| n.is_some()) {
        let mut ans = accept().with_cookie(acc.answer_proof());
        answer_tamper(&mut ans);
        assert!(write_answer(&mut to_a, &ans));
    }
    let initiator = ini.handle_input(&mut to_a, &mut to_b);
    Run {
        acceptor,
        answer_written,
        initiator,
    }
}

fn no_tamper(_: &mut Negotiate) {}
fn no_answer_tamper(_: &mut NegotiateAns) {}

/// The acceptor refused: it wrote exactly one answer, a refusal, and no
/// MAC of its own (the initiator proves first).
fn assert_refused_without_mac(r: &Run, why: AuthFailure) {
    match &r.acceptor {
        Err(OpenError::AuthenticationFailed(w)) => assert_eq!(*w, why),
        other => panic!("acceptor: {other:?}"),
    }
    let mut wire = ByteBuffer::new(MIN_BUFFER as usize);
    wire.push(&r.answer_written);
    let (h, payload) = read_frame(&mut wire, MAX_HANDSHAKE_PAYLOAD)
        .unwrap()
        .unwrap();
    assert_eq!(h.kind, FrameKind::NegotiateAns);
    let ans: NegotiateAns = rmp_serde::from_slice(&payload).unwrap();
    assert_eq!(ans, NegotiateAns::Refuse(RefuseReason::Unauthenticated));
    assert!(wire.is_empty(), "nothing follows the refusal");
    match &r.initiator {
        Err(e @ OpenError::AuthenticationFailed(AuthFailure::Refused)) => {
            assert!(e.is_permanent());
            assert!(e.to_string().contains("authentication failed"), "{e}");
        }
        other => panic!("initiator: {other:?}"),
    }
}

#[test]
fn the_same_cookie_opens_and_both_sides_prove_it() {
    let r = run(keys(&[1]), keys(&[1]), no_tamper, no_answer_tamper);
    let n = r.acceptor.unwrap().unwrap();
    assert_eq!(n.cookie.unwrap().key_id, Cookie::new([1; 32]).id());
    let opened = r.initiator.unwrap().unwrap();
    assert_eq!(opened.present.site, SiteId(0xB));
}

#[test]
fn open_on_both_sides_is_as_before_no_proof_either_way() {
    let r = run(
        Keyring::default(),
        Keyring::default(),
        no_tamper,
        no_answer_tamper,
    );
    assert_eq!(r.acceptor.unwrap().unwrap().cookie, None);
    assert!(r.initiator.unwrap().is_some());
}

#[test]
fn a_wrong_cookie_is_refused_before_the_acceptor_proves_anything() {
    let r = run(keys(&[1]), keys(&[2]), no_tamper, no_answer_tamper);
    assert_refused_without_mac(&r, AuthFailure::UnknownKey(Cookie::new([1; 32]).id()));
}

#[test]
fn a_forged_mac_under_a_held_key_id_is_refused() {
    let r = run(
        keys(&[1]),
        keys(&[1]),
        |n| n.cookie.as_mut().unwrap().mac[0] ^= 1,
        no_answer_tamper,
    );
    assert_refused_without_mac(&r, AuthFailure::BadProof);
}

#[test]
fn the_proof_binds_the_whole_transcript() {
    // A proof made for one NEGOTIATE does not cover another site id, listen
    // list or proposal: a peer on the path cannot rewrite them.
    let r = run(
        keys(&[1]),
        keys(&[1]),
        |n| n.site = SiteId(0xC),
        no_answer_tamper,
    );
    assert_refused_without_mac(&r, AuthFailure::BadProof);
    let r = run(
        keys(&[1]),
        keys(&[1]),
        |n| n.listen = vec!["tcp:6.6.6.6:1".into()],
        no_answer_tamper,
    );
    assert_refused_without_mac(&r, AuthFailure::BadProof);
    let r = run(
        keys(&[1]),
        keys(&[1]),
        |n| n.nonce[31] ^= 1,
        no_answer_tamper,
    );
    assert_refused_without_mac(&r, AuthFailure::BadProof);
}

#[test]
fn a_missing_cookie_is_refused_both_ways() {
    // The acceptor holds one, the initiator none.
    let r = run(Keyring::default(), keys(&[1]), no_tamper, no_answer_tamper);
    assert_refused_without_mac(&r, AuthFailure::Missing);
    // The initiator holds one, the acceptor none: the acceptor could never
    // prove itself, so it refuses at once.
    let r = run(keys(&[1]), Keyring::default(), no_tamper, no_answer_tamper);
    assert_refused_without_mac(&r, AuthFailure::NotHeld);
}

#[test]
fn an_acceptor_that_does_not_prove_the_cookie_fails_the_initiator() {
    for (tamper, why) in [
        (
            Box::new(|a: &mut NegotiateAns| *a = a.clone().with_cookie(None))
                as Box<dyn FnOnce(&mut NegotiateAns)>,
            AuthFailure::Missing,
        ),
        (
            Box::new(|a: &mut NegotiateAns| {
                if let NegotiateAns::Accept {
                    cookie: Some(c), ..
                } = a
                {
                    c.mac[5] ^= 0x80;
                }
            }),
            AuthFailure::BadProof,
        ),
    ] {
        let r = run(keys(&[1]), keys(&[1]), no_tamper, tamper);
        assert!(r.acceptor.unwrap().is_some());
        match r.initiator {
            Err(e @ OpenError::AuthenticationFailed(_)) => {
                assert_eq!(e, OpenError::AuthenticationFailed(why));
                assert!(e.is_permanent());
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn rotation_two_cookies_are_valid_at_once() {
    // The acceptor proves with its new cookie (2) and still accepts the
    // old one (1); initiators holding either get in, and each is answered
    // with the cookie it proved.
    for initiator in [keys(&[1]), keys(&[2]), keys(&[2, 1]), keys(&[1, 2])] {
        let r = run(initiator, keys(&[2, 1]), no_tamper, no_answer_tamper);
        assert!(r.acceptor.unwrap().is_some());
        assert!(r.initiator.unwrap().is_some());
    }
    // Once the old one is dropped, a node still proving it is refused.
    let r = run(keys(&[1]), keys(&[2]), no_tamper, no_answer_tamper);
    assert_refused_without_mac(&r, AuthFailure::UnknownKey(Cookie::new([1; 32]).id()));
}

#[test]
fn the_acceptor_never_proves_to_an_initiator_that_failed() {
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::with_keys(&info(0xB), [0xB0; 32], keys(&[1]), &mut to_a);
    let mut ini =
        Initiator::new(info(0xA), Some(SiteId(0xB)), 0, 0, [0xA0; 32]).with_keys(keys(&[9]));
    ini.handle_input(&mut to_a, &mut to_b).unwrap();
    assert!(acc.handle_input(&mut to_b, &mut to_a).is_err());
    assert_eq!(acc.answer_proof(), None, "no MAC computed for a stranger");
}

#[test]
fn the_mac_is_compared_in_constant_time() {
    // The check goes through subtle's ConstantTimeEq, never `==` on the
    // MAC bytes (an early exit would leak how many leading bytes a forger
    // got right).
    let src = include_str!("../src/connection/handshake/cookie.rs");
    let check = &src[src.find("fn check<").expect("the check")..];
    assert!(check.contains(".ct_eq(&proof.mac)"));
    assert!(!check.contains("== proof.mac") && !check.contains("proof.mac =="));
}

#[test]
fn a_cookie_round_trips_through_its_text_and_never_prints_its_secret() {
    let c = Cookie::new([0xAB; 32]);
    let text = c.to_text();
    assert_eq!(text.trim(), "ab".repeat(32));
    assert_eq!(Cookie::from_text(&text).unwrap().id(), c.id());
    assert!(Cookie::from_text("abc").is_err());
    assert!(Cookie::from_text(&"zz".repeat(32)).is_err());
    let shown = format!("{c:?} {:?}", Keyring::new(vec![c.clone()]));
    assert!(!shown.to_lowercase().contains("abab"), "{shown}");
    assert_ne!(Cookie::new([1; 32]).id(), Cookie::new([2; 32]).id());
}
