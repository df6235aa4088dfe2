//! The cookie level: only members holding a shared secret get
//! past the handshake.
//!
//! A cookie is 32 random bytes shared by every node of a deployment; its
//! key id (a hash of the secret, so it cannot be mistyped) names it on the
//! wire, so a node may hold several while a deployment rotates: it proves
//! with its primary (the first) and accepts any it holds.
//!
//! Erlang's cookie is the anchor and its weaknesses the lesson: a 32-bit
//! challenge, MD5, and a digest that binds neither names nor direction. Here
//! both sides draw a 32-byte nonce (PRESENT's and NEGOTIATE's); each proof
//! is an HMAC-SHA256 keyed by the cookie over the whole transcript (the
//! encoded PRESENT and the encoded NEGOTIATE without its proof: versions,
//! both site ids, both nonces, listen lists, every proposal), the key id,
//! and a role label, so a proof made for one handshake or one direction is
//! worth nothing in another. The **initiator proves first**, in NEGOTIATE:
//! the acceptor checks it, in constant time, before anything is allocated
//! for the peer, and only then computes its own proof, carried by
//! NEGOTIATE_ANS (`Accept`). A scanner that holds no cookie is refused
//! ([`RefuseReason::Unauthenticated`](super::RefuseReason)) and never sees
//! a MAC it could attack offline.
//!
//! With no cookie on either side (the open level) nothing is hashed and
//! both proofs are absent: one nil byte each in NEGOTIATE and
//! NEGOTIATE_ANS.
//!
//! What it does not do: it does not encrypt or authenticate the frames
//! that follow the handshake (a peer that can rewrite the traffic can take
//! the channel over after it opened), and any member can claim any site id.
//! TLS with per-site certificates is the level that stops both.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;
use zeroize::Zeroizing;

use super::messages::{CookieProof, Negotiate};
pub use crate::connection::refusal::AuthFailure;

/// Length of a cookie's secret.
pub const COOKIE_LEN: usize = 32;

/// A shared secret and its key id. Its `Debug` shows the key id, never the
/// secret, which is wiped from memory when the last copy is dropped.
#[derive(Clone)]
pub struct Cookie {
    id: u64,
    secret: Arc<Zeroizing<[u8; COOKIE_LEN]>>,
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cookie {{ id: {:016x}, secret: .. }}", self.id)
    }
}

/// Why a cookie's text was not read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CookieError {
    /// The text is not 64 hexadecimal digits.
    #[error("a cookie is {n} hexadecimal digits (32 bytes), optionally followed by a newline", n = 2 * COOKIE_LEN)]
    Format,
}

impl Cookie {
    /// A cookie with this secret (drawn at random by the caller: nothing
    /// here reads a random source). The key id derives from the secret.
    pub fn new(secret: [u8; COOKIE_LEN]) -> Self {
        let secret = Zeroizing::new(secret);
        let mut h = Sha256::new();
        h.update(b"sitenet cookie key id");
        h.update(&secret[..]);
        let digest = h.finalize();
        let id = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        Self {
            id,
            secret: Arc::new(secret),
        }
    }

    /// The key id NEGOTIATE names it by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cookie as a file holds it: 64 hexadecimal digits and a newline
    /// (wiped when dropped).
    pub fn to_text(&self) -> Zeroizing<String> {
        let mut s = Zeroizing::new(String::with_capacity(2 * COOKIE_LEN + 1));
        for b in self.secret.iter() {
            s.push(char::from_digit(u32::from(b >> 4), 16).expect("a nibble"));
            s.push(char::from_digit(u32::from(b & 0xf), 16).expect("a nibble"));
        }
        s.push('\n');
        s
    }

    /// Reads [`Cookie::to_text`]'s form (surrounding white space ignored).
    pub fn from_text(text: &str) -> Result<Self, CookieError> {
        let t = text.trim().as_bytes();
        if t.len() != 2 * COOKIE_LEN {
            return Err(CookieError::Format);
        }
        let mut secret = Zeroizing::new([0u8; COOKIE_LEN]);
        for (i, pair) in t.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or(CookieError::Format)?;
            let lo = (pair[1] as char).to_digit(16).ok_or(CookieError::Format)?;
            secret[i] = (hi << 4 | lo) as u8;
        }
        Ok(Self::new(*secret))
    }

    fn mac(&self, role: &[u8], transcript: &[u8; 32]) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret[..])
            .expect("HMAC takes any key length");
        m.update(role);
        m.update(&self.id.to_be_bytes());
        m.update(transcript);
        m.finalize().into_bytes().into()
    }
}

/// The cookies a node holds: none (the open level), or a primary it
/// proves with and others it still accepts while a deployment rotates.
/// Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Keyring(Arc<[Cookie]>);

impl Keyring {
    /// A keyring proving with `cookies[0]` and accepting any of them.
    pub fn new(cookies: Vec<Cookie>) -> Self {
        Self(cookies.into())
    }

    /// True at the open level (no cookie): no proof is made or checked.
    pub fn is_open(&self) -> bool {
        self.0.is_empty()
    }

    /// The cookie this node proves with.
    pub fn primary(&self) -> Option<&Cookie> {
        self.0.first()
    }

    fn find(&self, id: u64) -> Option<&Cookie> {
        self.0.iter().find(|c| c.id == id)
    }
}

const INITIATOR: &[u8] = b"sitenet cookie v1 initiator proves";
const ACCEPTOR: &[u8] = b"sitenet cookie v1 acceptor proves";

/// The hash of one handshake's messages, as both sides see them: PRESENT,
/// then NEGOTIATE without its proof, each as encoded on the wire.
#[derive(Clone)]
pub struct Transcript(Sha256);

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transcript(..)")
    }
}

impl Transcript {
    /// Starts the transcript with the acceptor's PRESENT, as its payload
    /// went over the wire: both sides hash the same bytes even when one
    /// side's build knows fields the other's skips.
    pub fn new(present_payload: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(b"sitenet handshake transcript");
        absorb_bytes(&mut h, present_payload);
        Self(h)
    }

    /// The transcript's hash once NEGOTIATE (its proof left out) is added.
    /// NEGOTIATE is hashed re-encoded, as the fields of the version it
    /// chose: the initiator, which chose it, encodes only that version's
    /// fields (a later version must keep to this when it speaks an older
    /// one), so both sides hash the same bytes.
    pub fn with_negotiate(&self, n: &Negotiate) -> [u8; 32] {
        let mut h = self.0.clone();
        let unproven = Negotiate {
            cookie: None,
            ..n.clone()
        };
        absorb(&mut h, &unproven);
        h.finalize().into()
    }
}

fn absorb<T: Serialize>(h: &mut Sha256, m: &T) {
    absorb_bytes(h, &super::encode_control(m));
}

fn absorb_bytes(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// The initiator's proof for NEGOTIATE (`None` at the open level).
pub fn initiator_proof(keys: &Keyring, transcript: &[u8; 32]) -> Option<CookieProof> {
    keys.primary().map(|c| CookieProof {
        key_id: c.id,
        mac: c.mac(INITIATOR, transcript),
    })
}

/// The acceptor's check of NEGOTIATE's proof, before anything is allocated
/// for the peer. On success, the acceptor's own proof for its answer
/// (`None` at the open level); it is computed only once the initiator has
/// proved itself.
pub fn check_initiator(
    keys: &Keyring,
    transcript: &[u8; 32],
    proof: Option<&CookieProof>,
) -> Result<Option<CookieProof>, AuthFailure> {
    let cookie = check(keys, INITIATOR, transcript, proof, None)?;
    Ok(cookie.map(|c| CookieProof {
        key_id: c.id,
        mac: c.mac(ACCEPTOR, transcript),
    }))
}

/// The initiator's check of the answer's proof: the acceptor proves the
/// cookie the initiator proved with.
pub fn check_acceptor(
    keys: &Keyring,
    transcript: &[u8; 32],
    proof: Option<&CookieProof>,
) -> Result<(), AuthFailure> {
    check(
        keys,
        ACCEPTOR,
        transcript,
        proof,
        keys.primary().map(|c| c.id),
    )
    .map(|_| ())
}

fn check<'k>(
    keys: &'k Keyring,
    role: &[u8],
    transcript: &[u8; 32],
    proof: Option<&CookieProof>,
    only: Option<u64>,
) -> Result<Option<&'k Cookie>, AuthFailure> {
    let proof = match (keys.is_open(), proof) {
        (true, None) => return Ok(None),
        (true, Some(_)) => return Err(AuthFailure::NotHeld),
        (false, None) => return Err(AuthFailure::Missing),
        (false, Some(p)) => p,
    };
    let cookie = keys
        .find(proof.key_id)
        .filter(|c| only.is_none_or(|id| id == c.id))
        .ok_or(AuthFailure::UnknownKey(proof.key_id))?;
    let expected = cookie.mac(role, transcript);
    if bool::from(expected.ct_eq(&proof.mac)) {
        Ok(Some(cookie))
    } else {
        Err(AuthFailure::BadProof)
    }
}
