//! The TLS level of the open protocol: once TLS verified the
//! peer's certificate, the handshake machines bind the site it names to
//! the site the peer claims. A member can be only the site its certificate
//! names; a channel that proved no certificate to a node that requires one
//! gets nowhere.

use sitenet_protocols::connection::handshake::{
    read_frame, LocalInfo, MAX_HANDSHAKE_PAYLOAD, MIN_BUFFER,
};
use sitenet_protocols::{
    Acceptor, ByteBuffer, FrameKind, Initiator, Keyring, NegotiateAns, OpenError, PeerCertificate,
    RefuseReason, SiteId,
};

fn info(site: u128) -> LocalInfo {
    LocalInfo {
        site: SiteId(site),
        listen: vec![format!("tls:10.0.0.{site}:7000")],
        buffer_size: 65_536,
        max_message: 1 << 20,
        speaks: sitenet_protocols::Speaks::CURRENT,
    }
}

/// The answer the acceptor wrote, decoded.
fn answer(out: &mut ByteBuffer) -> NegotiateAns {
    let (h, payload) = read_frame(out, MAX_HANDSHAKE_PAYLOAD).unwrap().unwrap();
    assert_eq!(h.kind, FrameKind::NegotiateAns);
    rmp_serde::from_slice(&payload).unwrap()
}

/// Initiator `claims` (its NEGOTIATE names it) against an acceptor that
/// requires certificates and was told the peer's names `certified`.
fn acceptor_run(
    claims: u128,
    certified: Option<u128>,
) -> (
    Result<Option<sitenet_protocols::Negotiate>, OpenError>,
    ByteBuffer,
) {
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    let mut acc = Acceptor::with_keys(&info(0xB), [0xB0; 32], Keyring::default(), &mut to_a)
        .require_certificate();
    let mut ini = Initiator::new(info(claims), None, 0, 0, [0xA0; 32]);
    assert_eq!(ini.handle_input(&mut to_a, &mut to_b).unwrap(), None);
    if let Some(c) = certified {
        acc.certified(SiteId(c));
    }
    (acc.handle_input(&mut to_b, &mut to_a), to_a)
}

#[test]
fn an_acceptor_refuses_a_claim_its_certificate_does_not_name() {
    // Site 0xA's certificate, a NEGOTIATE claiming 0xC.
    let (r, mut out) = acceptor_run(0xC, Some(0xA));
    let e = r.unwrap_err();
    assert_eq!(
        e,
        OpenError::NotCertified {
            claimed: SiteId(0xC),
            certified: Some(SiteId(0xA)),
        }
    );
    assert!(e.is_permanent());
    assert!(e.to_string().contains("certificate names site"), "{e}");
    // Refused on the wire, as any unauthenticated peer is.
    assert_eq!(
        answer(&mut out),
        NegotiateAns::Refuse(RefuseReason::Unauthenticated)
    );
    assert!(out.is_empty());
}

#[test]
fn an_acceptor_that_requires_a_certificate_refuses_a_channel_that_proved_none() {
    let (r, mut out) = acceptor_run(0xA, None);
    assert_eq!(
        r.unwrap_err(),
        OpenError::NotCertified {
            claimed: SiteId(0xA),
            certified: None,
        }
    );
    assert_eq!(
        answer(&mut out),
        NegotiateAns::Refuse(RefuseReason::Unauthenticated)
    );
}

#[test]
fn an_acceptor_returns_the_claim_its_certificate_names() {
    let (r, out) = acceptor_run(0xA, Some(0xA));
    let n = r.unwrap().expect("NEGOTIATE");
    assert_eq!(n.site, SiteId(0xA));
    assert!(out.is_empty(), "no answer yet: the ComObject decides");
}

/// The initiator against acceptor `presents` whose certificate names
/// `certified`.
fn initiator_run(presents: u128, certified: Option<u128>) -> Result<(), OpenError> {
    let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
    let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
    let _acc = Acceptor::new(&info(presents), [0xB0; 32], &mut to_a);
    let mut ini = Initiator::new(info(0xA), None, 0, 0, [0xA0; 32]).require_certificate();
    if let Some(c) = certified {
        ini.certified(SiteId(c));
    }
    let r = ini.handle_input(&mut to_a, &mut to_b).map(|_| ());
    if r.is_err() {
        assert!(to_b.is_empty(), "no NEGOTIATE to a refused acceptor");
    }
    r
}

#[test]
fn an_initiator_refuses_a_present_its_certificate_does_not_name() {
    assert_eq!(
        initiator_run(0xC, Some(0xB)),
        Err(OpenError::NotCertified {
            claimed: SiteId(0xC),
            certified: Some(SiteId(0xB)),
        })
    );
    assert_eq!(
        initiator_run(0xB, None),
        Err(OpenError::NotCertified {
            claimed: SiteId(0xB),
            certified: None,
        })
    );
    assert_eq!(initiator_run(0xB, Some(0xB)), Ok(()));
}

#[test]
fn without_tls_claims_are_not_bound_to_certificates() {
    // A node that does not require certificates ignores what it is told.
    let mut c = PeerCertificate::NotRequired;
    c.certify(SiteId(1));
    assert_eq!(c, PeerCertificate::NotRequired);
    assert!(c.check(SiteId(2)).is_ok());
    assert!(!c.proves(SiteId(1)));
    let mut r = PeerCertificate::Required;
    assert!(!r.proves(SiteId(1)));
    r.certify(SiteId(1));
    assert!(r.proves(SiteId(1)));
    assert!(!r.proves(SiteId(2)));
}
