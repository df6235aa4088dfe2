//! Version agreement: the rule that picks what a pair of nodes speaks
//! from what each announces ([`Speaks`]), and the acceptor's check of the
//! initiator's choice. The announced ranges are wire data
//! ([`crate::wire::version`]); failing to agree is an open failure
//! ([`OpenError::VersionMismatch`]), a connection-layer outcome.

use crate::connection::error::{OpenError, ProtocolError};
use crate::wire::version::{Agreed, Speaks, VersionRange};

impl Speaks {
    /// What a pair of nodes uses: the highest version both speak and the
    /// capabilities both have. `Err(VersionMismatch)` if they share no
    /// version — a permanent failure: one side must be upgraded.
    pub fn agree(&self, peer: &Speaks) -> Result<Agreed, OpenError> {
        let version =
            self.versions
                .highest_common(&peer.versions)
                .ok_or(OpenError::VersionMismatch {
                    local: self.versions,
                    peer: peer.versions,
                })?;
        Ok(Agreed {
            version,
            caps: self.caps.intersection(peer.caps),
        })
    }

    /// Checks a peer's choice (the acceptor's side of NEGOTIATE): the
    /// version must be one this node speaks and the capabilities ones it
    /// has — an initiator may only choose from what PRESENT offered.
    pub fn check_choice(&self, chosen: Agreed) -> Result<(), OpenError> {
        if !self.versions.contains(chosen.version) {
            return Err(OpenError::VersionMismatch {
                local: self.versions,
                peer: VersionRange::exactly(chosen.version),
            });
        }
        if !self.caps.contains(chosen.caps) {
            return Err(ProtocolError::Malformed {
                what: "NEGOTIATE",
                reason: format!(
                    "chose capabilities {} where this node has {}",
                    chosen.caps, self.caps
                ),
            }
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::frame::PROTOCOL_VERSION;
    use crate::wire::version::Capabilities;

    fn range() -> impl Strategy<Value = VersionRange> {
        (0u8..12, 0u8..4).prop_map(|(min, len)| VersionRange::new(min, min + len))
    }

    proptest! {
        /// Rule: the pair uses the highest version both speak, the same
        /// whichever side computes it, and only if there is one.
        #[test]
        fn both_sides_agree_on_the_highest_common_version(
            a in range(), b in range(), ca in any::<u64>(), cb in any::<u64>(),
        ) {
            let (x, y) = (
                Speaks { versions: a, caps: Capabilities::from_bits(ca) },
                Speaks { versions: b, caps: Capabilities::from_bits(cb) },
            );
            let common: Vec<u8> = (0..=20).filter(|v| a.contains(*v) && b.contains(*v)).collect();
            match (x.agree(&y), common.last()) {
                (Ok(agreed), Some(&top)) => {
                    prop_assert_eq!(agreed.version, top);
                    prop_assert_eq!(agreed.caps.bits(), ca & cb);
                    prop_assert_eq!(y.agree(&x).unwrap(), agreed);
                    // Each side accepts the other's choice.
                    prop_assert!(x.check_choice(agreed).is_ok());
                    prop_assert!(y.check_choice(agreed).is_ok());
                }
                (Err(OpenError::VersionMismatch { local, peer }), None) => {
                    prop_assert_eq!((local, peer), (a, b));
                    prop_assert!(y.agree(&x).is_err());
                }
                (got, want) => prop_assert!(false, "{:?} with common {:?}", got, want),
            }
        }
    }

    #[test]
    fn a_choice_outside_what_was_offered_is_refused() {
        let this = Speaks::CURRENT;
        let too_new = Agreed {
            version: PROTOCOL_VERSION + 1,
            caps: Capabilities::ALL,
        };
        assert!(matches!(
            this.check_choice(too_new),
            Err(OpenError::VersionMismatch { .. })
        ));
        let unknown_cap = Agreed {
            version: PROTOCOL_VERSION,
            caps: Capabilities::ALL.union(Capabilities::from_bits(1 << 50)),
        };
        assert!(matches!(
            this.check_choice(unknown_cap),
            Err(OpenError::Protocol(_))
        ));
    }
}
