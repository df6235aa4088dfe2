//! Site identity.

use serde::{Deserialize, Serialize};

/// A site's globally unique identity: 128 random bits drawn when a node
/// starts, so the id doubles as the incarnation nonce — a process restarted at
/// the same address is a different site, and the old one can be declared
/// permanently failed. Ids compare as big-endian byte strings (the
/// simultaneous-connect tie-break uses this order).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SiteId(pub u128);

impl SiteId {
    /// The id as 16 big-endian bytes (the order ids are compared in).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Parses the 32-hex-digit form printed by `Display`.
    pub fn parse_hex(s: &str) -> Option<Self> {
        if s.len() != 32 {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(Self)
    }
}

impl std::fmt::Display for SiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::fmt::Debug for SiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SiteId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_order() {
        let a = SiteId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        assert_eq!(a.to_string().len(), 32);
        assert_eq!(SiteId::parse_hex(&a.to_string()), Some(a));
        assert_eq!(SiteId::parse_hex("xyz"), None);
        // u128 order equals big-endian byte order.
        let b = SiteId(1 << 120);
        assert_eq!(a < b, a.to_bytes() < b.to_bytes());
    }
}
