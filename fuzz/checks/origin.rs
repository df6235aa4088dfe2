//! The origin block of a forwarded request (docs/protocol.md §2.6) and the
//! site descriptor inside it: text a peer controls, decoded by every site a
//! request is delegated to. Never panics; a block that unwraps wraps back
//! to the same bytes; a descriptor that parses prints to a text that
//! parses to the same descriptor (what a site hands on when it forwards
//! again, or puts in a message as a `SiteRef`), within the descriptor's
//! bounds (the count and length of its addresses); wrapping any
//! text, however long, is refused or done, never a panic.

use bytes::Bytes;
use sitenet_protocols::base::site::{MAX_DESCRIPTOR_ADDRESSES, MAX_DESCRIPTOR_LEN};
use sitenet_protocols::connection::address_book::MAX_ADDRESS_LEN;
use sitenet_protocols::wire::message::{unwrap_origin, wrap_origin};
use sitenet_protocols::SiteDescriptor;

/// The check, for one input.
pub fn check(data: &[u8]) {
    let header = Bytes::copy_from_slice(data);
    if let Some((origin, typed)) = unwrap_origin(&header) {
        assert_eq!(
            wrap_origin(origin, &typed).as_deref(),
            Some(data),
            "unwrap/wrap round trip changed the block"
        );
        descriptor(origin);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        descriptor(text);
        // Any text wraps, or is refused for its length; never a panic.
        assert_eq!(wrap_origin(text, b"").is_some(), text.len() <= 65_535);
    }
}

fn descriptor(text: &str) {
    if let Ok(d) = text.parse::<SiteDescriptor>() {
        let printed = d.to_string();
        assert_eq!(
            printed.parse::<SiteDescriptor>().as_ref(),
            Ok(&d),
            "{text:?} printed as {printed:?}, which parses differently"
        );
        assert!(d
            .addresses
            .iter()
            .all(|a| !a.is_empty() && !a.contains(',') && a.len() <= MAX_ADDRESS_LEN));
        assert!(d.addresses.len() <= MAX_DESCRIPTOR_ADDRESSES);
        assert!(printed.len() <= MAX_DESCRIPTOR_LEN);
        assert!(wrap_origin(&printed, b"").is_some());
    }
}
