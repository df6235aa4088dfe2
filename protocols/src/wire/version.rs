//! Protocol versions and capabilities: what two nodes of different builds
//! agree to speak (docs/protocol.md §4.11).
//!
//! Up to version 6 two nodes had to speak exactly the same version, so a
//! cluster could only be upgraded all at once. From version 7 on, each node
//! announces in its handshake a *range* of versions it speaks and a set of
//! *capabilities* (optional features such as packed frames), and the pair
//! uses the highest version both speak and the capabilities both have. A
//! node one version apart from its peers then keeps working with them while
//! the cluster is upgraded node by node; a feature one side lacks is simply
//! not used on that channel.
//!
//! The handshake's own messages are encoded with named fields from version
//! 7 on, so a later version can add fields an older node skips; the frame
//! header keeps its layout (byte 0 is [`FRAME_FORMAT`](crate::wire::frame::FRAME_FORMAT)).
//!
//! # Example
//!
//! ```
//! use sitenet_protocols::{Capabilities, Speaks, VersionRange};
//!
//! let this = Speaks::CURRENT;
//! // A newer build speaks 7 and 8 and has a feature this one never heard of.
//! let newer = Speaks {
//!     versions: VersionRange::new(7, 8),
//!     caps: Capabilities::ALL.union(Capabilities::from_bits(1 << 40)),
//! };
//! let agreed = this.agree(&newer).expect("a common version");
//! assert_eq!(agreed.version, 7);
//! assert_eq!(agreed.caps, Capabilities::ALL); // the unknown feature is not used
//!
//! // A build that only speaks 9 has nothing in common with this one.
//! let far = Speaks { versions: VersionRange::new(9, 9), caps: Capabilities::ALL };
//! assert!(this.agree(&far).is_err());
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::wire::frame::PROTOCOL_VERSION;

/// The oldest protocol version this build speaks: the first with version
/// ranges (older nodes demand an exact match and cannot be spoken to).
pub const MIN_PROTOCOL_VERSION: u8 = 7;

/// A range of protocol versions, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VersionRange {
    /// The oldest version spoken.
    pub min: u8,
    /// The newest version spoken.
    pub max: u8,
}

impl VersionRange {
    /// The versions `min..=max`.
    pub const fn new(min: u8, max: u8) -> Self {
        Self { min, max }
    }

    /// One version only (a peer that told a single version).
    pub const fn exactly(v: u8) -> Self {
        Self { min: v, max: v }
    }

    /// True if `v` is in the range.
    pub fn contains(&self, v: u8) -> bool {
        self.min <= v && v <= self.max
    }

    /// The highest version both ranges hold, if any.
    pub fn highest_common(&self, other: &VersionRange) -> Option<u8> {
        let v = self.max.min(other.max);
        (v >= self.min.max(other.min)).then_some(v)
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..={}", self.min, self.max)
        }
    }
}

/// Optional features a node has, as bits; a channel uses those both of its
/// ends have. Bits this build does not know are kept (a newer peer's) and
/// drop out of every intersection with this build's own set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Capabilities(u64);

impl Capabilities {
    /// `PACKED` frames: several small messages of one lane in one frame
    /// (`packed.rs`). Without it every message goes in `DATA` frames.
    pub const PACKED: Self = Self(1 << 0);
    /// The `LEAVING` frame: a graceful shutdown is announced, so the peer
    /// fails the site at once as shut down. Without it the peer sees the
    /// channel close and retries as after a crash.
    pub const LEAVING: Self = Self(1 << 1);
    /// The waiting line: an acceptor whose channel slots are
    /// full answers a NEGOTIATE with a `WAIT` frame and keeps the
    /// connection in a bounded line until a slot frees, then answers.
    /// Without it such a connection is closed at once (the initiator
    /// retries after its backoff), as before.
    pub const LINE: Self = Self(1 << 2);
    /// No capability.
    pub const NONE: Self = Self(0);
    /// Every capability this build has.
    pub const ALL: Self = Self(Self::PACKED.0 | Self::LEAVING.0 | Self::LINE.0);

    const NAMES: [(Self, &'static str); 3] = [
        (Self::PACKED, "packed"),
        (Self::LEAVING, "leaving"),
        (Self::LINE, "line"),
    ];

    /// The set with exactly these bits (unknown ones included).
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// True if every capability of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The capabilities both sets have.
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The capabilities either set has.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// `self` without `other`'s capabilities.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl fmt::Display for Capabilities {
    /// Names of the known capabilities, then unknown bits in hex:
    /// `packed,leaving`, `packed,0x10000000000`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { "," };
            first = false;
            f.write_str(s)
        };
        for (cap, name) in Self::NAMES {
            if self.contains(cap) {
                sep(f)?;
                f.write_str(name)?;
                rest &= !cap.0;
            }
        }
        if rest != 0 {
            sep(f)?;
            write!(f, "{rest:#x}")?;
        }
        if self.0 == 0 {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// What one node speaks: its versions and its capabilities. Announced in
/// PRESENT (the acceptor) and agreed in NEGOTIATE (the initiator chooses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Speaks {
    /// Versions spoken.
    pub versions: VersionRange,
    /// Capabilities had.
    pub caps: Capabilities,
}

impl Speaks {
    /// What this build speaks: versions [`MIN_PROTOCOL_VERSION`] to
    /// [`PROTOCOL_VERSION`], every capability it has.
    pub const CURRENT: Self = Self {
        versions: VersionRange::new(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION),
        caps: Capabilities::ALL,
    };
}

impl Default for Speaks {
    fn default() -> Self {
        Self::CURRENT
    }
}

/// What a channel's two ends agreed: one version, the shared capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Agreed {
    /// The version both speak on this channel.
    pub version: u8,
    /// The capabilities both have.
    pub caps: Capabilities,
}

impl Agreed {
    /// Two nodes of this build.
    pub const CURRENT: Self = Self {
        version: PROTOCOL_VERSION,
        caps: Capabilities::ALL,
    };
}

impl Default for Agreed {
    fn default() -> Self {
        Self::CURRENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_print_by_name_and_unknown_bits_in_hex() {
        assert_eq!(Capabilities::ALL.to_string(), "packed,leaving,line");
        assert_eq!(Capabilities::NONE.to_string(), "none");
        assert_eq!(
            Capabilities::PACKED
                .union(Capabilities(1 << 40))
                .to_string(),
            "packed,0x10000000000"
        );
        assert_eq!(VersionRange::new(7, 8).to_string(), "7..=8");
        assert_eq!(VersionRange::exactly(7).to_string(), "7");
    }
}
