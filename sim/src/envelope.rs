//! What the headers of the simulator's messages carry (the envelope the
//! applications' sends wrap): the message's id, and for a one-way message
//! that names a site, that site's descriptor. The checkers read them to
//! follow each message from its send to its delivery or hand-back.

/// The message id an envelope's header carries.
pub(crate) fn envelope_id(header: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(header.get(..8)?.try_into().ok()?))
}

/// The site a one-way message's envelope names after its id
/// ([`AppCtx::send_site_ref`]), as a descriptor's text; `None` if it names
/// none, `Some(Err)` if what follows the id is not a descriptor.
pub(crate) fn envelope_site(
    header: &[u8],
) -> Option<Result<sitenet_protocols::base::site::SiteDescriptor, String>> {
    let rest = header.get(8..).filter(|r| !r.is_empty())?;
    Some(
        std::str::from_utf8(rest)
            .map_err(|e| e.to_string())
            .and_then(|t| t.parse().map_err(|e| format!("{e}"))),
    )
}

/// The message id of a message of `kind` (a forwarded request's is inside
/// its origin block).
pub(crate) fn message_id(
    kind: sitenet_protocols::wire::message::MessageKind,
    header: &[u8],
) -> Option<u64> {
    if kind == sitenet_protocols::wire::message::MessageKind::Forward {
        let (_, inner) = sitenet_protocols::wire::message::unwrap_origin(
            &bytes::Bytes::copy_from_slice(header),
        )?;
        envelope_id(&inner)
    } else {
        envelope_id(header)
    }
}
