//! Continuity of a site pair: a site id is a claim anyone can
//! make, so a NEGOTIATE naming a site this node already has a session with
//! must prove that it comes from the same peer.
//!
//! The first channel of a session (the acceptor answers `fresh`) agrees a
//! per-pair secret from two nonces, one from each side's handshake message
//! (PRESENT's and NEGOTIATE's); both sides keep it with the session. Every
//! later NEGOTIATE carries a proof: a MAC of the secret over the fresh
//! handshake's nonces and both site ids, so a reader of one handshake's
//! proof cannot replay it on another. Nonces are drawn by the driver and
//! passed in: nothing here reads a random source.
//!
//! The MAC is SipHash-2-4 with its 128-bit output (Aumasson & Bernstein), a
//! keyed PRF made for short inputs: no dependency, 16-byte keys. Against a
//! peer that reads the handshakes this proves nothing (the secret derives
//! from nonces sent in the clear); it stops anyone who learnt a site's id
//! (from the stats service, a descriptor, a log) from taking its session
//! over. Authentication comes next.

use serde::{Deserialize, Serialize};

use crate::base::site::SiteId;
use crate::slots::admission::Source;

/// 32 random bytes one side contributes to a handshake (drawn by the
/// driver for each handshake, never reused). 32 since wire version 5: the
/// cookie proof is bound to both sides' nonces, and 2^256 leaves no room
/// for a precomputed table of answers.
pub type Nonce = [u8; 32];

/// A MAC of a pair's secret over one handshake (see the module
/// documentation).
pub type Proof = [u8; 16];

/// The secret a site pair agreed in the first handshake of its session.
/// Its `Debug` shows no byte of it.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairSecret(pub [u8; 16]);

impl std::fmt::Debug for PairSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairSecret(..)")
    }
}

/// One handshake, as both sides see it: who accepts and who initiates,
/// with each side's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeNonces {
    /// The acceptor's site id.
    pub acceptor: SiteId,
    /// The nonce of the acceptor's PRESENT.
    pub acceptor_nonce: Nonce,
    /// The initiator's site id.
    pub initiator: SiteId,
    /// The nonce of the initiator's NEGOTIATE.
    pub initiator_nonce: Nonce,
}

impl HandshakeNonces {
    fn message(&self, label: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(label.len() + 64);
        m.extend_from_slice(label);
        m.extend_from_slice(&self.acceptor.to_bytes());
        m.extend_from_slice(&self.acceptor_nonce);
        m.extend_from_slice(&self.initiator.to_bytes());
        m.extend_from_slice(&self.initiator_nonce);
        m
    }

    /// The secret this handshake agrees if it starts the pair's session.
    pub fn pair_secret(&self) -> PairSecret {
        // Both 32-byte nonces folded into the 16-byte key; the message
        // carries them whole.
        let mut key = [0u8; 16];
        for (i, (a, b)) in self
            .acceptor_nonce
            .iter()
            .zip(&self.initiator_nonce)
            .enumerate()
        {
            key[i % 16] ^= a ^ b;
        }
        PairSecret(siphash24_128(&key, &self.message(b"sitenet pair secret")))
    }

    /// The tag of the numbering this handshake starts, if either side
    /// numbers afresh after it (see
    /// [`SessionTag`](super::SessionTag)): both sides compute the same
    /// from the two nonces, never 0 (the tag of a pair's first numbering).
    /// Not a secret: it names a session, the proof authenticates it.
    pub fn session_tag(&self) -> super::SessionTag {
        let mac = siphash24_128(&[0; 16], &self.message(b"sitenet session tag"));
        let tag = u64::from_le_bytes(mac[..8].try_into().expect("8 bytes"));
        tag.max(1)
    }

    /// The initiator's proof that it holds `secret`, bound to this
    /// handshake.
    pub fn proof(&self, secret: &PairSecret) -> Proof {
        siphash24_128(&secret.0, &self.message(b"sitenet continuity proof"))
    }

    /// True if `proof` proves `secret` for this handshake (compared
    /// without an early exit).
    pub fn proves(&self, proof: &Proof, secret: &PairSecret) -> bool {
        let expected = self.proof(secret);
        expected
            .iter()
            .zip(proof)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// What a side holds for a pair: the secret of its session, and whether
/// the peer has shown that it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continuity {
    /// The secret of the session's current numbering.
    pub current: PairSecret,
    /// The peer has shown it holds `current`: it proved it in a
    /// handshake, it sent anything on the channel whose handshake agreed
    /// it (an initiator writes nothing before it has read the answer), or
    /// this side learnt it as initiator (from the answer itself). Until
    /// then the answer that agreed it may have been lost.
    pub confirmed: bool,
    /// Where the pair's latest channel came from (its peer's address, by
    /// [`Source`]): the [`PairMemory`](super::PairMemory) charges the
    /// secret to it once the site's entry is forgotten, so what one
    /// address makes the node remember never pushes out what others did.
    /// [`Source::UNADDRESSED`] until the driver says
    /// ([`ComObject::channel_from`](crate::connection::com_object::ComObject::channel_from)).
    pub source: Source,
}

/// What a NEGOTIATE's proof shows, given what this side holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// It proves the current secret: the session's peer.
    Proven,
    /// It proves nothing this side holds. `pair_confirmed` tells whether
    /// a confirmed secret is held (a claim that does not prove it is
    /// refused).
    Unproven {
        /// See [`Continuity::confirmed`].
        pair_confirmed: bool,
    },
}

impl Continuity {
    /// Judges a claim's `proof` for the handshake `hs`, against what this
    /// side holds (`None`: no session secret).
    pub fn judge(this: Option<&Continuity>, hs: &HandshakeNonces, proof: Option<&Proof>) -> Claim {
        match (this, proof) {
            (Some(c), Some(p)) if hs.proves(p, &c.current) => Claim::Proven,
            _ => Claim::Unproven {
                pair_confirmed: this.is_some_and(|c| c.confirmed),
            },
        }
    }
}

/// Nonces, proofs and MACs on the wire: an N-byte bin (as a site id is),
/// not an array of N numbers.
pub(crate) mod bytes16 {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<const N: usize, S: Serializer>(
        v: &[u8; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(crate) fn deserialize<'de, const N: usize, D: Deserializer<'de>>(
        d: D,
    ) -> Result<[u8; N], D::Error> {
        d.deserialize_bytes(Fixed::<N>)
    }

    pub(crate) struct Fixed<const N: usize>;

    impl<'de, const N: usize> Visitor<'de> for Fixed<N> {
        type Value = [u8; N];

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{N} bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<[u8; N], E> {
            v.try_into().map_err(|_| E::invalid_length(v.len(), &self))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; N], A::Error> {
            let mut out = [0u8; N];
            for (i, b) in out.iter_mut().enumerate() {
                *b = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(i, &self))?;
            }
            if seq.next_element::<u8>()?.is_some() {
                return Err(A::Error::invalid_length(N + 1, &self));
            }
            Ok(out)
        }
    }

    /// The same for an optional value (nil when absent).
    pub(crate) mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        pub(crate) fn serialize<const N: usize, S: Serializer>(
            v: &Option<[u8; N]>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => s.serialize_some(&Wrap(*v)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, const N: usize, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<[u8; N]>, D::Error> {
            Ok(Option::<Wrap<N>>::deserialize(d)?.map(|w| w.0))
        }

        struct Wrap<const N: usize>([u8; N]);

        impl<const N: usize> serde::Serialize for Wrap<N> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                super::serialize(&self.0, s)
            }
        }

        impl<'de, const N: usize> Deserialize<'de> for Wrap<N> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                super::deserialize(d).map(Wrap)
            }
        }
    }
}

/// SipHash-2-4 with 128-bit output, keyed by `key` (little-endian k0, k1).
pub fn siphash24_128(key: &[u8; 16], data: &[u8]) -> [u8; 16] {
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let m = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        v[3] ^= m;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let rest = words.remainder();
    last[..rest.len()].copy_from_slice(rest);
    let b = u64::from_le_bytes(last) | ((data.len() as u64) << 56);
    v[3] ^= b;
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^= b;
    v[2] ^= 0xee;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    let first = v[0] ^ v[1] ^ v[2] ^ v[3];
    v[1] ^= 0xdd;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    let second = v[0] ^ v[1] ^ v[2] ^ v[3];
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&first.to_le_bytes());
    out[8..].copy_from_slice(&second.to_le_bytes());
    out
}

fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_128_matches_the_reference_vectors() {
        // vectors_sip128 of the reference implementation: key 00..0f,
        // message 00..(len-1).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let expected: [[u8; 16]; 3] = [
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93,
            ],
            [
                0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22,
                0xfc, 0x45,
            ],
            [
                0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a,
                0xff, 0xe4,
            ],
        ];
        for (len, want) in expected.iter().enumerate() {
            let msg: Vec<u8> = (0..len as u8).collect();
            assert_eq!(&siphash24_128(&key, &msg), want, "length {len}");
        }
        // Longer messages (whole words and a tail) differ per length.
        let outs: std::collections::HashSet<_> = (0..40u8)
            .map(|n| siphash24_128(&key, &(0..n).collect::<Vec<_>>()))
            .collect();
        assert_eq!(outs.len(), 40);
    }

    fn hs(a: u8, i: u8) -> HandshakeNonces {
        HandshakeNonces {
            acceptor: SiteId(0xB),
            acceptor_nonce: [a; 32],
            initiator: SiteId(0xA),
            initiator_nonce: [i; 32],
        }
    }

    #[test]
    fn a_proof_holds_for_its_secret_and_handshake_only() {
        let secret = hs(1, 2).pair_secret();
        let other = hs(1, 3).pair_secret();
        assert_ne!(secret, other);
        let p = hs(5, 6).proof(&secret);
        assert!(hs(5, 6).proves(&p, &secret));
        assert!(!hs(5, 6).proves(&p, &other), "another secret");
        assert!(
            !hs(7, 6).proves(&p, &secret),
            "replayed on another handshake"
        );
        assert_eq!(format!("{secret:?}"), "PairSecret(..)");
    }

    #[test]
    fn judging() {
        let held = Continuity {
            current: hs(1, 2).pair_secret(),
            confirmed: true,
            source: crate::slots::admission::Source::UNADDRESSED,
        };
        let other = hs(3, 4).pair_secret();
        let now = hs(9, 9);
        let judge =
            |c: Option<&Continuity>, p: Option<Proof>| Continuity::judge(c, &now, p.as_ref());
        assert_eq!(
            judge(Some(&held), Some(now.proof(&held.current))),
            Claim::Proven
        );
        let unproven = Claim::Unproven {
            pair_confirmed: true,
        };
        assert_eq!(judge(Some(&held), Some(now.proof(&other))), unproven);
        assert_eq!(judge(Some(&held), None), unproven);
        let fresh = Claim::Unproven {
            pair_confirmed: false,
        };
        assert_eq!(judge(None, Some(now.proof(&other))), fresh);
        let unconfirmed = Continuity {
            confirmed: false,
            ..held
        };
        assert_eq!(judge(Some(&unconfirmed), None), fresh);
        assert_eq!(
            judge(Some(&unconfirmed), Some(now.proof(&held.current))),
            Claim::Proven
        );
    }
}
