//! Site identity.

use serde::{Deserialize, Serialize};

/// A site's globally unique identity: 128 random bits drawn when a node
/// starts, so the id doubles as the incarnation nonce — a process restarted at
/// the same address is a different site, and the old one can be declared
/// permanently failed. Ids compare as big-endian byte strings (the
/// simultaneous-connect tie-break uses this order).
///
/// # Example
///
/// ```
/// use sitenet_protocols::SiteId;
///
/// let id = SiteId(0xabc);
/// let text = id.to_string(); // always 32 hex digits
/// assert_eq!(text, "00000000000000000000000000000abc");
/// assert_eq!(SiteId::parse_hex(&text), Some(id));
/// assert_eq!(SiteId::parse_hex("abc"), None);
/// // The order of the numbers is the order of the big-endian bytes.
/// assert!(SiteId(1) < SiteId(1 << 120));
/// assert!(SiteId(1).to_bytes() < SiteId(1 << 120).to_bytes());
/// ```
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

/// A site's identity and every address it listens on: what one site hands
/// another so that it can be reached by the best transport the two share
/// (`mem:` in one process, `unix:` on one host, `tcp:` otherwise; see
/// [`AddressBook`](crate::connection::address_book::AddressBook)). The id makes the addresses safe to
/// try: whoever answers at one of them must prove it is this site, so a
/// stale or wrong address is skipped, never mistaken for the site.
///
/// Text form (`Display`, `FromStr`): the id's 32 hex digits, `@`, and the
/// addresses separated by commas —
/// `0123…cdef@mem:a,unix:/tmp/a.sock,tcp:127.0.0.1:7000`. (A Unix path with
/// a comma in it cannot be written this way; build the struct instead.)
///
/// # Example
///
/// ```
/// use sitenet_protocols::{DescriptorError, SiteDescriptor, SiteId};
///
/// let text = "00000000000000000000000000000abc@mem:a,tcp:127.0.0.1:7000";
/// let site: SiteDescriptor = text.parse()?;
/// assert_eq!(site.id, SiteId(0xabc));
/// assert_eq!(site.addresses, ["mem:a", "tcp:127.0.0.1:7000"]);
/// assert_eq!(site.to_string(), text);
///
/// let no_id = "tcp:127.0.0.1:7000".parse::<SiteDescriptor>();
/// assert!(matches!(no_id, Err(DescriptorError::NoAt(_))));
/// # Ok::<(), DescriptorError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SiteDescriptor {
    /// The site's id (its incarnation).
    pub id: SiteId,
    /// The addresses it listens on (empty: it can only call others).
    pub addresses: Vec<String>,
}

/// Most addresses a descriptor may list: as many as an address book keeps
/// (a site's whole listen list and the address it was given).
pub const MAX_DESCRIPTOR_ADDRESSES: usize = crate::base::limits::MAX_ADDRESSES;

/// Longest descriptor text, in bytes: an id, `@`, and
/// [`MAX_DESCRIPTOR_ADDRESSES`] addresses of at most
/// [`MAX_ADDRESS_LEN`](crate::base::limits::MAX_ADDRESS_LEN) bytes with
/// their commas. Well under the 64 KiB an origin block can carry.
pub const MAX_DESCRIPTOR_LEN: usize =
    32 + 1 + MAX_DESCRIPTOR_ADDRESSES * (crate::base::limits::MAX_ADDRESS_LEN + 1);

/// Why a text is not a [`SiteDescriptor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// No `@` between the id and the addresses.
    #[error("site descriptor {0:?} has no '@': expected ID@ADDRESS[,ADDRESS…], the form `sitenet node` prints")]
    NoAt(String),
    /// The part before `@` is not 32 hex digits.
    #[error("site descriptor {0:?} does not start with a site id (32 hex digits)")]
    Id(String),
    /// An empty address between commas.
    #[error("site descriptor {0:?} has an empty address")]
    EmptyAddress(String),
    /// Longer than [`MAX_DESCRIPTOR_LEN`] (its length).
    #[error("site descriptor of {0} bytes, at most {MAX_DESCRIPTOR_LEN}")]
    TooLong(usize),
    /// More than [`MAX_DESCRIPTOR_ADDRESSES`] addresses.
    #[error("site descriptor {0:?} lists more than {MAX_DESCRIPTOR_ADDRESSES} addresses")]
    TooManyAddresses(String),
    /// An address longer than
    /// [`MAX_ADDRESS_LEN`](crate::base::limits::MAX_ADDRESS_LEN) (its
    /// length).
    #[error("site descriptor with an address of {0} bytes, at most {max}", max = crate::base::limits::MAX_ADDRESS_LEN)]
    AddressTooLong(usize),
}

impl std::fmt::Display for SiteDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.addresses.join(","))
    }
}

impl std::str::FromStr for SiteDescriptor {
    type Err = DescriptorError;

    /// Parses the text form within its bounds: at most
    /// [`MAX_DESCRIPTOR_LEN`] bytes, [`MAX_DESCRIPTOR_ADDRESSES`] addresses
    /// of at most [`MAX_ADDRESS_LEN`](crate::base::limits::MAX_ADDRESS_LEN)
    /// bytes each (a descriptor from a peer is a claim on this node's
    /// memory and dials).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_DESCRIPTOR_LEN {
            return Err(DescriptorError::TooLong(s.len()));
        }
        let (id, rest) = s
            .split_once('@')
            .ok_or_else(|| DescriptorError::NoAt(s.into()))?;
        let id = SiteId::parse_hex(id).ok_or_else(|| DescriptorError::Id(s.into()))?;
        let addresses = if rest.is_empty() {
            Vec::new()
        } else {
            if rest.split(',').count() > MAX_DESCRIPTOR_ADDRESSES {
                return Err(DescriptorError::TooManyAddresses(s.into()));
            }
            rest.split(',')
                .map(|a| {
                    if a.is_empty() {
                        Err(DescriptorError::EmptyAddress(s.into()))
                    } else if a.len() > crate::base::limits::MAX_ADDRESS_LEN {
                        Err(DescriptorError::AddressTooLong(a.len()))
                    } else {
                        Ok(a.to_owned())
                    }
                })
                .collect::<Result<_, _>>()?
        };
        Ok(Self { id, addresses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_round_trips_through_its_text_form() {
        let d = SiteDescriptor {
            id: SiteId(0xabc),
            addresses: vec!["mem:a".into(), "tcp:127.0.0.1:7".into()],
        };
        let text = d.to_string();
        assert_eq!(text, format!("{}@mem:a,tcp:127.0.0.1:7", SiteId(0xabc)));
        assert_eq!(text.parse::<SiteDescriptor>(), Ok(d));
        let none: SiteDescriptor = format!("{}@", SiteId(1)).parse().unwrap();
        assert!(none.addresses.is_empty());
        assert!(matches!(
            "mem:a".parse::<SiteDescriptor>(),
            Err(DescriptorError::NoAt(_))
        ));
        assert!(matches!(
            "12@mem:a".parse::<SiteDescriptor>(),
            Err(DescriptorError::Id(_))
        ));
        let gap = format!("{}@mem:a,,tcp:h:1", SiteId(1));
        assert!(matches!(
            gap.parse::<SiteDescriptor>(),
            Err(DescriptorError::EmptyAddress(_))
        ));
    }

    /// A descriptor is a peer's words: the number and the length of its
    /// addresses are bounded, so a learned descriptor always fits the
    /// 64 KiB origin block every forward of its site's requests carries.
    #[test]
    fn descriptors_have_count_and_length_bounds() {
        let long = format!("{}@tcp:{}:1", SiteId(1), "h".repeat(100_000));
        assert!(long.parse::<SiteDescriptor>().is_err(), "a 100 kB address");
        let many: Vec<String> = (0..1000).map(|i| format!("tcp:h:{i}")).collect();
        let many = format!("{}@{}", SiteId(1), many.join(","));
        assert!(many.parse::<SiteDescriptor>().is_err(), "1,000 addresses");
        // The largest descriptor within the bounds parses and prints back.
        let max = crate::base::limits::MAX_ADDRESS_LEN;
        let widest: Vec<String> = (0..MAX_DESCRIPTOR_ADDRESSES)
            .map(|i| format!("tcp:{}:{i:05}", "h".repeat(max - 10)))
            .collect();
        let widest = format!("{}@{}", SiteId(1), widest.join(","));
        assert!(widest.len() <= MAX_DESCRIPTOR_LEN);
        let d: SiteDescriptor = widest.parse().unwrap();
        assert_eq!(d.to_string(), widest);
        assert!(matches!(
            format!("{widest}xx").parse::<SiteDescriptor>(),
            Err(DescriptorError::TooLong(_))
        ));
        let short: Vec<String> = (0..=MAX_DESCRIPTOR_ADDRESSES)
            .map(|i| format!("tcp:h:{i}"))
            .collect();
        let too_many = format!("{}@{}", SiteId(1), short.join(","));
        assert!(matches!(
            too_many.parse::<SiteDescriptor>(),
            Err(DescriptorError::TooManyAddresses(_))
        ));
        let one_long = format!("{}@tcp:{}:1", SiteId(1), "h".repeat(max));
        assert!(matches!(
            one_long.parse::<SiteDescriptor>(),
            Err(DescriptorError::AddressTooLong(_))
        ));
    }

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
