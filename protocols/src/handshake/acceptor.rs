//! The acceptor's machine: PRESENT out, NEGOTIATE in (the decision and the
//! answer belong to the site's ComObject).

use super::*;
use crate::byte_buffer::ByteBuffer;
use crate::error::{OpenError, ProtocolError};
use crate::frame::{FrameKind, PROTOCOL_VERSION};
use crate::site::SiteId;

/// The acceptor's side of the open protocol, up to NEGOTIATE. The decision
/// and the answer belong to the site's ComObject ([`crate::link`]).
#[derive(Debug)]
pub struct Acceptor {
    local_site: SiteId,
    /// This handshake's nonce, sent in PRESENT.
    nonce: Nonce,
    done: bool,
    /// PRESENT could not be written (this node's listen list does not fit).
    unwritable: bool,
}

impl Acceptor {
    /// Starts an accepted channel: writes PRESENT to `output`. `nonce`
    /// must be drawn at random for this handshake (the initiator's proof
    /// of continuity is bound to it).
    pub fn new(local: &LocalInfo, nonce: Nonce, output: &mut ByteBuffer) -> Self {
        let present = Present {
            version: PROTOCOL_VERSION,
            site: local.site,
            listen: local.listen.clone(),
            nonce,
        };
        // If PRESENT cannot be written, the first call to `handle_input`
        // says so (`LocalInfo::validate` catches it when the node starts).
        let unwritable = !write_control(output, FrameKind::Present, &present);
        Self {
            local_site: local.site,
            nonce,
            done: false,
            unwritable,
        }
    }

    /// The nonce this acceptor presented: the site's ComObject checks the
    /// NEGOTIATE's proof against it.
    pub fn nonce(&self) -> Nonce {
        self.nonce
    }

    /// Feeds received bytes; `Ok(Some(negotiate))` once NEGOTIATE arrived and
    /// is valid.
    pub fn handle_input(&mut self, input: &mut ByteBuffer) -> Result<Option<Negotiate>, OpenError> {
        if self.done {
            return Ok(None);
        }
        if self.unwritable {
            self.done = true;
            return Err(OpenError::LocalConfig(
                "PRESENT does not fit the handshake payload limit or the output ring; \
                 check LocalInfo::validate"
                    .into(),
            ));
        }
        let Some((h, payload)) =
            read_frame(input, MAX_HANDSHAKE_PAYLOAD).map_err(first_frame_error)?
        else {
            return Ok(None);
        };
        self.done = true;
        if h.kind != FrameKind::Negotiate {
            return Err(ProtocolError::Unexpected {
                kind: h.kind,
                state: "expecting NEGOTIATE",
            }
            .into());
        }
        let n: Negotiate = decode("NEGOTIATE", &payload)?;
        if n.version != PROTOCOL_VERSION {
            return Err(OpenError::VersionMismatch {
                local: PROTOCOL_VERSION,
                peer: n.version,
            });
        }
        if n.site == self.local_site {
            return Err(OpenError::SelfConnection(n.site));
        }
        if n.buffer_size < MIN_BUFFER || n.listen.len() > MAX_LISTEN {
            return Err(ProtocolError::Malformed {
                what: "NEGOTIATE",
                reason: format!(
                    "buffer size {} below {MIN_BUFFER} or {} listen addresses",
                    n.buffer_size,
                    n.listen.len()
                ),
            }
            .into());
        }
        // Its successor must exist: last_generation + 1 <= MAX_GENERATION.
        if n.last_generation >= MAX_GENERATION {
            return Err(ProtocolError::Malformed {
                what: "NEGOTIATE",
                reason: format!(
                    "last generation {} at or beyond {MAX_GENERATION}",
                    n.last_generation
                ),
            }
            .into());
        }
        Ok(Some(n))
    }
}
