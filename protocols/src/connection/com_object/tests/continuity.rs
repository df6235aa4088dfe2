//! A claim on the peer's id must prove the pair's continuity:
//! forged claims leave the genuine pair's session, numbering, queues and
//! channel untouched, and no claim hands out a generation without a
//! successor.

use super::*;
use crate::connection::handshake::MAX_GENERATION;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};

/// A heartbeat from the peer, as bytes on its channel.
pub(super) fn heartbeat() -> ByteBuffer {
    let mut input = ByteBuffer::new(4096);
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(FrameKind::Heartbeat, 0, 0).encode(&mut hb);
    input.push(&hb);
    input
}

/// The NEGOTIATE of the genuine peer holding `secret`, on a handshake
/// whose PRESENT carried `nonce`.
fn genuine(
    last_generation: u64,
    last_received: u64,
    secret: &PairSecret,
    nonce: Nonce,
) -> Negotiate {
    let hs = HandshakeNonces {
        acceptor_nonce: nonce,
        ..from_peer()
    };
    Negotiate {
        last_received,
        proof: Some(hs.proof(secret)),
        ..negotiate(last_generation, Attempt { opener: 5, seq: 2 })
    }
}

fn generation_of(out: &AcceptOutcome) -> u64 {
    match out {
        AcceptOutcome::Accept {
            answer: NegotiateAns::Accept { generation, .. },
            ..
        } => *generation,
        other => panic!("not accepted: {other:?}"),
    }
}

/// A site that cannot be called back (a client) connected to us for the
/// first time, was heard from, and was sent three messages it has not
/// acknowledged. Returns the channel and the secret its handshake agreed.
fn client_with_three_unacknowledged(h: &mut H) -> (ChannelId, PairSecret) {
    let first = Negotiate {
        proof: None,
        ..negotiate(0, Attempt { opener: 5, seq: 1 })
    };
    let out = h.com.accepted(&first, NONCE, h.now);
    let AcceptOutcome::Accept { id, answer } = out else {
        panic!("{out:?}")
    };
    assert!(matches!(
        answer,
        NegotiateAns::Accept {
            fresh: true,
            generation: 1,
            ..
        }
    ));
    let secret = from_peer().pair_secret();
    assert_eq!(
        h.com.continuity().map(|c| (c.current, c.confirmed)),
        Some((secret, false))
    );
    assert!(h.com.handle_input(id, h.now, &mut heartbeat(), &mut |_| {}));
    assert_eq!(
        h.com.continuity().map(|c| c.confirmed),
        Some(true),
        "the peer read our answer"
    );
    for _ in 0..3 {
        h.com.queue(msg(10)).unwrap();
    }
    let mut wire = ByteBuffer::new(1 << 16);
    h.com.poll_transmit(h.now, &mut wire);
    assert_eq!(h.com.session().last_sent(), 3);
    h.actions();
    (id, secret)
}

/// The refusal of a forged claim: typed, counted, put on record.
fn assert_refused_on_record(h: &mut H, out: AcceptOutcome, refused_so_far: u64) {
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Unproven)),
        "{out:?}"
    );
    assert_eq!(h.com.stats().unproven_claims_refused, refused_so_far);
    let a = h.actions();
    assert!(matches!(&a[..], [Action::ClaimRefused { .. }]), "{a:?}");
}

#[test]
fn a_forged_claim_during_backoff_leaves_the_pair_untouched() {
    let mut h = H::new(cfg(), false);
    let (id, secret) = client_with_three_unacknowledged(&mut h);
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let state = h.com.state();
    // A stranger read the client's id and claims it, as a site that never
    // worked with us (generation 0), while the client is away.
    let forged_claim = h.com.accepted(&forged(0), NONCE, h.now);
    assert!(
        !matches!(forged_claim, AcceptOutcome::Accept { .. }),
        "a forged claim was accepted: {forged_claim:?}"
    );
    assert_refused_on_record(&mut h, forged_claim, 1);
    assert_eq!(h.com.state(), state);
    assert_eq!(h.com.working_channel(), None);
    assert_eq!(h.com.session().last_sent(), 3, "numbering reset");
    assert_eq!(
        h.com.session().pending_messages(),
        3,
        "messages handed back"
    );
    assert_eq!(h.com.continuity().map(|c| c.current), Some(secret));
    // With a proof that does not hold, or a generation claimed high: the same.
    let mut wrong = genuine(1, 0, &PairSecret([9; 16]), NONCE);
    wrong.site = PEER;
    let out = h.com.accepted(&wrong, NONCE, h.now);
    assert_refused_on_record(&mut h, out, 2);
    let out = h.com.accepted(&forged(MAX_GENERATION - 1), NONCE, h.now);
    assert_refused_on_record(&mut h, out, 3);
    // A proof replayed from another handshake (another PRESENT nonce).
    let replayed = genuine(1, 0, &secret, [0x77; 32]);
    let out = h.com.accepted(&replayed, NONCE, h.now);
    assert_refused_on_record(&mut h, out, 4);

    // The client comes back: it proves the secret and resumes where it
    // was — nothing acknowledged yet, all three resent after generation 1.
    let back = h
        .com
        .accepted(&genuine(1, 0, &secret, [0x33; 32]), [0x33; 32], h.now);
    let AcceptOutcome::Accept { answer, .. } = &back else {
        panic!("{back:?}")
    };
    assert!(
        matches!(
            answer,
            NegotiateAns::Accept {
                fresh: false,
                generation: 2,
                ..
            }
        ),
        "{answer:?}"
    );
    assert_eq!(h.com.session().last_sent(), 3);
    assert_eq!(h.com.session().pending_messages(), 3);
    let mut wire = ByteBuffer::new(1 << 16);
    h.com.poll_transmit(h.now, &mut wire);
    assert!(!wire.is_empty(), "the three are resent to the client");
}

#[test]
fn a_forged_claim_cannot_replace_a_working_channel() {
    let mut h = H::new(cfg(), false);
    let (id, secret) = client_with_three_unacknowledged(&mut h);
    // It claims to have lost generation 1.
    let forged_claim = h.com.accepted(&forged(1), NONCE, h.now);
    assert!(
        !matches!(forged_claim, AcceptOutcome::Accept { .. }),
        "a forged claim replaced the working channel: {forged_claim:?}"
    );
    assert_refused_on_record(&mut h, forged_claim, 1);
    // Claiming an attempt that supersedes the one the channel came from
    // (the opener's rule for an abandoned attempt) does not help either.
    let mut later_attempt = forged(0);
    later_attempt.attempt = Attempt { opener: 5, seq: 9 };
    let out = h.com.accepted(&later_attempt, NONCE, h.now);
    assert_refused_on_record(&mut h, out, 2);
    // Nor does a generation beyond ours: judged as having seen no channel,
    // it is stale.
    let out = h.com.accepted(&forged(7), NONCE, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::Stale)),
        "{out:?}"
    );
    assert_eq!(h.com.working_channel(), Some(id));
    assert_eq!(h.com.session().pending_messages(), 3);
    // The genuine peer, which did lose it, replaces it.
    let out = h
        .com
        .accepted(&genuine(1, 2, &secret, [0x44; 32]), [0x44; 32], h.now);
    assert_eq!(generation_of(&out), 2);
    let a = h.actions();
    assert!(
        matches!(&a[..], [Action::CloseChannel { id: old, end: ChannelEnd::Replaced }, ..] if *old == id),
        "{a:?}"
    );
    assert_eq!(
        h.com.session().pending_messages(),
        1,
        "two acknowledged by the handshake"
    );
}

#[test]
fn a_claimed_generation_never_leaves_the_pair_without_a_successor() {
    // A claim of 2^63 - 2 on a site that never worked with us.
    let mut h = H::new(cfg(), false);
    let out = h.com.accepted(&forged(MAX_GENERATION - 1), NONCE, h.now);
    if let AcceptOutcome::Accept {
        answer: NegotiateAns::Accept { generation, .. },
        ..
    } = out
    {
        assert!(
            generation < MAX_GENERATION - 1,
            "generation {generation} handed out on a claim"
        );
    }
    // It is a new session, numbered by us from 1, and the pair goes on.
    assert_eq!(generation_of(&out), 1);
    let AcceptOutcome::Accept { id, .. } = out else {
        unreachable!()
    };
    let secret = HandshakeNonces {
        initiator_nonce: [0xF0; 32],
        ..from_peer()
    }
    .pair_secret();
    h.com.channel_lost(id, Loss::Eof, h.now);
    let out = h
        .com
        .accepted(&genuine(1, 0, &secret, [0x55; 32]), [0x55; 32], h.now);
    assert_eq!(generation_of(&out), 2);
}

#[test]
fn a_claim_on_an_unconfirmed_pair_is_taken_as_before_and_agrees_a_new_secret() {
    // Our answer may never have reached the peer (the channel broke right
    // after it): its next claim has no proof of the secret we agreed. With
    // no confirmed secret held, it is taken on its numbers (here: it saw
    // no channel, so we number afresh) and agrees a new secret.
    let mut h = H::new(cfg(), false);
    let first = Negotiate {
        proof: None,
        ..negotiate(0, Attempt { opener: 5, seq: 1 })
    };
    let AcceptOutcome::Accept { id, .. } = h.com.accepted(&first, NONCE, h.now) else {
        panic!()
    };
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let again = Negotiate {
        nonce: [0x21; 32],
        ..first.clone()
    };
    let out = h.com.accepted(&again, [0x22; 32], h.now);
    let AcceptOutcome::Accept { answer, .. } = &out else {
        panic!("{out:?}")
    };
    assert!(
        matches!(
            answer,
            NegotiateAns::Accept {
                rekey: true,
                generation: 2,
                ..
            }
        ),
        "{answer:?}"
    );
    let agreed = HandshakeNonces {
        acceptor_nonce: [0x22; 32],
        initiator_nonce: [0x21; 32],
        ..from_peer()
    }
    .pair_secret();
    assert_eq!(h.com.continuity().map(|c| c.current), Some(agreed));

    // Still unconfirmed, with a message sent and not acknowledged: a
    // claim that saw no channel is taken the same way, and the message is
    // handed back as maybe delivered (the peer cannot tell a resend).
    let AcceptOutcome::Accept { id, .. } = out else {
        unreachable!()
    };
    h.com.queue(msg(10)).unwrap();
    let mut wire = ByteBuffer::new(1 << 16);
    h.com.poll_transmit(h.now, &mut wire);
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let out = h.com.accepted(&forged(0), NONCE, h.now);
    assert!(
        matches!(
            out,
            AcceptOutcome::Accept {
                answer: NegotiateAns::Accept { rekey: true, .. },
                ..
            }
        ),
        "{out:?}"
    );
    let a = h.actions();
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::HandBack {
                error: Refusal::PeerForgot { .. },
                ..
            }
        )),
        "{a:?}"
    );
    assert_eq!(h.com.session().pending_messages(), 0);
}

#[test]
fn a_genuine_reconnect_after_a_refused_forger_resumes_the_session() {
    // We called the peer (we are the initiator): the answer agreed PAIR.
    let mut h = H::new(cfg(), true);
    let id = h.working();
    assert_eq!(
        h.com.continuity().map(|c| (c.current, c.confirmed)),
        Some((PAIR, true))
    );
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let out = h.com.accepted(&forged(0), NONCE, h.now);
    assert_refused_on_record(&mut h, out, 1);
    // The peer calls, proving PAIR: the session resumes.
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert_eq!(generation_of(&out), 2);
    assert_eq!(
        h.com.session().pending_messages(),
        1,
        "our message still queued"
    );
    assert_eq!(h.com.continuity().map(|c| c.current), Some(PAIR));
    // Lost again: our own next open proves PAIR.
    let id = h.com.working_channel().unwrap();
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    h.run_to_next_deadline();
    h.actions();
    h.com.slot_granted();
    let a = h.actions();
    let [Action::Open(req)] = &a[..] else {
        panic!("{a:?}")
    };
    assert_eq!(req.secret, Some(PAIR));
}

#[test]
fn a_secret_kept_across_a_forgotten_entry_still_protects_the_pair() {
    // The entry was forgotten and made again: the driver recalls the
    // secret it kept. A stranger's claim is refused although the new
    // session is fresh; the peer proving it is accepted.
    let mut h = H::new(cfg(), false);
    h.com.recall(Continuity {
        current: PAIR,
        confirmed: true,
        source: crate::slots::admission::Source::UNADDRESSED,
    });
    let out = h.com.accepted(&forged(0), NONCE, h.now);
    assert_refused_on_record(&mut h, out, 1);
    let out = h
        .com
        .accepted(&negotiate(0, Attempt::UNKNOWN), NONCE, h.now);
    let AcceptOutcome::Accept { answer, .. } = &out else {
        panic!("{out:?}")
    };
    assert!(
        matches!(
            answer,
            NegotiateAns::Accept {
                fresh: true,
                generation: 1,
                ..
            }
        ),
        "{answer:?}"
    );
    // Proven: the secret stays (no rekey), confirmed.
    assert!(matches!(answer, NegotiateAns::Accept { rekey: false, .. }));
    assert_eq!(
        h.com.continuity().map(|c| (c.current, c.confirmed)),
        Some((PAIR, true))
    );
}

#[test]
fn a_simultaneous_connect_of_a_pair_with_a_secret_still_keeps_one_channel() {
    // Both sides open at once after a loss; both prove PAIR. The channel
    // initiated by the smaller id wins on both sides.
    let mut h = H::new(cfg(), true); // LOCAL 0x10 < PEER 0x20
    let id = h.working();
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    h.run_to_next_deadline();
    h.actions();
    h.com.slot_granted();
    h.actions();
    assert_eq!(h.com.state(), ComState::Opening);
    // The peer's channel loses the tie here: refused, not as unproven.
    let out = h
        .com
        .accepted(&negotiate(1, Attempt { opener: 9, seq: 1 }), NONCE, h.now);
    assert!(
        matches!(out, AcceptOutcome::Refuse(RefuseReason::LostTie)),
        "{out:?}"
    );
    assert_eq!(h.com.stats().unproven_claims_refused, 0);
    // Ours is accepted by the peer (it resumes: not fresh).
    let attempt = h.com.opening().unwrap();
    let id = h.com.open_succeeded(attempt, &opened(2, 1 << 20), h.now);
    assert!(id.is_some());
    assert_eq!(h.com.continuity().map(|c| c.current), Some(PAIR));
}

/// Under TLS a node takes its id from its certificate, so a
/// site restarted with its certificate claims its old id without the
/// pair's secret. Its verified certificate proves it is that site: the
/// claim starts a new session instead of being refused. Without a
/// certificate, or with one naming another site, the same claim is
/// refused as a forgery.
#[test]
fn a_certified_claim_without_the_secret_is_the_site_restarted() {
    use crate::connection::handshake::PeerCertificate;
    let mut h = H::new(cfg(), false);
    let (id, _) = client_with_three_unacknowledged(&mut h);
    h.com.channel_lost(id, Loss::Eof, h.now);
    h.actions();
    let out = h.com.accepted(&forged(0), NONCE, h.now);
    assert_refused_on_record(&mut h, out, 1);
    let other = PeerCertificate::Names(SiteId(0xC0FFEE));
    let out = h.com.accepted_as(&forged(0), NONCE, other, h.now);
    assert_refused_on_record(&mut h, out, 2);
    let out = h
        .com
        .accepted_as(&forged(0), NONCE, PeerCertificate::Names(PEER), h.now);
    assert!(matches!(out, AcceptOutcome::Accept { .. }), "{out:?}");
    assert_eq!(h.com.stats().unproven_claims_refused, 2);
}
