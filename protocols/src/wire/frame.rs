//! The frame header: the unit every sitenet byte stream is cut into.
//!
//! Every frame starts with a fixed [`HEADER_LEN`]-byte header, followed by
//! `payload_len` bytes of payload. The layout (all integers little-endian) is
//! documented byte by byte in `docs/protocol.md`:
//!
//! ```text
//!  0      format       u8   FRAME_FORMAT (7); anything else is a framing error
//!  1      kind         u8   FrameKind
//!  2      lane         u8   priority lane 1..=5 (5 for protocol frames)
//!  3      flags        u8   FLAG_FIRST | FLAG_LAST (fragment flags); other bits must be 0
//!  4..8   payload_len  u32  bytes following the header
//!  8..16  ack          u64  sender's last received message number (piggy-backed ack)
//! 16..24  msg_number   u64  number of the message whose LAST fragment this is, else 0
//! 24..32  frag_offset  u64  byte offset of this fragment inside its message (reserved
//!                           for streamed bodies: tells a restart after a reconnect)
//! ```
//!
//! The header is fixed-size so a reader can decide from the first 32 bytes
//! whether the frame is complete, and process the piggy-backed ack before the
//! payload has arrived.

use thiserror::Error;

/// A frame header that cannot be valid: the byte stream is corrupt or speaks
/// another protocol. The channel must be closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The first byte is not [`PROTOCOL_VERSION`].
    #[error("frame has format byte {0}, this node reads format {fmt} (an older or newer sitenet, or not sitenet at all)", fmt = FRAME_FORMAT)]
    Version(u8),
    /// The frame kind code is unknown.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Undefined flag bits are set.
    #[error("undefined fragment flags {0:#04x}")]
    Flags(u8),
    /// The payload is larger than this side accepts.
    #[error("frame payload of {len} bytes exceeds the negotiated maximum of {max}")]
    TooLarge {
        /// Announced payload length.
        len: usize,
        /// Largest payload accepted.
        max: usize,
    },
    /// A data frame on a lane other than 1..=4.
    #[error("data frame on lane {0}; application lanes are 1 to 4")]
    Lane(u8),
    /// A message number where there must be none, or none where there must be one.
    #[error("message number {number} on a fragment with last={last}")]
    Numbering {
        /// Whether the frame was flagged as a message's last fragment.
        last: bool,
        /// The number it carried.
        number: u64,
    },
    /// A first fragment with a non-zero offset.
    #[error("first fragment has offset {0}, expected 0")]
    Offset(u64),
    /// A control frame with data-frame fields set.
    #[error("{0:?} frame with lane, flags, number or offset of a data frame")]
    ControlFields(FrameKind),
    /// A packed frame that is not whole messages (both fragment flags),
    /// numbered (`msg_number` of its first message, not 0), at offset 0.
    #[error("packed frame with flags {flags:#04x}, number {number}, offset {offset}: it must carry whole numbered messages (flags 0x03, number > 0, offset 0)")]
    PackedFields {
        /// The flags it carried.
        flags: u8,
        /// The number it carried.
        number: u64,
        /// The offset it carried.
        offset: u64,
    },
}

/// The newest wire protocol version this build speaks (the oldest is
/// [`MIN_PROTOCOL_VERSION`](crate::wire::version::MIN_PROTOCOL_VERSION)).
///
/// Version 2 added `PACKED` frames (several small messages in one frame);
/// version 3 the message kinds `Forward` and `DelegatedReply` (delegation);
/// version 4 the handshake's nonces and NEGOTIATE's proof of continuity
/// (`handshake::continuity`); version 5 32-byte nonces and the cookie
/// proofs in NEGOTIATE and NEGOTIATE_ANS (`handshake::cookie`); version 6
/// the session tags of NEGOTIATE and NEGOTIATE_ANS (which numbering of the
/// pair each side is in: `handshake::SessionTag`) and the `LEAVING` frame
/// (a graceful shutdown). Up to 6 the
/// versions had to match exactly. Version 7 negotiates: PRESENT
/// offers a range of versions and a set of capabilities, NEGOTIATE chooses
/// the highest common version and the shared capabilities
/// ([`crate::wire::version`]), and the handshake's messages carry named fields so
/// a later version can add some. A version-6 node cannot read a version-7
/// handshake: the two refuse each other permanently, as before.
pub const PROTOCOL_VERSION: u8 = 7;

/// Byte 0 of every frame: the frame header's layout. It was the protocol
/// version up to 6; from 7 on the version is negotiated in the handshake
/// and this byte only changes if the header itself does, so a peer of
/// another layout is told apart at its first frame.
pub const FRAME_FORMAT: u8 = 7;

/// Length of the fixed frame header in bytes.
pub const HEADER_LEN: usize = 32;

/// Hard upper bound on a frame's payload, whatever was negotiated: frames are
/// at most 64 KiB including the header (docs/architecture.md, "The design": defaults).
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// Largest payload a frame may carry under the hard frame bound.
pub const MAX_FRAME_PAYLOAD: usize = MAX_FRAME_LEN - HEADER_LEN;

/// Fragment flag: this frame carries the first bytes of its message.
pub const FLAG_FIRST: u8 = 0x01;
/// Fragment flag: this frame carries the last bytes of its message.
pub const FLAG_LAST: u8 = 0x02;
const FLAGS_KNOWN: u8 = FLAG_FIRST | FLAG_LAST;

/// What a frame carries. The codes are part of the wire format.
///
/// # Example
///
/// ```
/// use sitenet_protocols::{FrameError, FrameKind};
///
/// assert_eq!(FrameKind::from_u8(5), Ok(FrameKind::Heartbeat));
/// assert_eq!(FrameKind::Heartbeat as u8, 5);
/// // Protocol frames travel on lane 5; only DATA and PACKED carry messages.
/// assert!(FrameKind::Heartbeat.is_control());
/// assert!(!FrameKind::Data.is_control());
/// assert_eq!(FrameKind::from_u8(99), Err(FrameError::UnknownKind(99)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// A fragment of an application message (lanes 1..=4) .
    Data = 0,
    /// An explicit acknowledgement: only the header's `ack` field matters.
    Ack = 1,
    /// Acceptor → initiator: who the acceptor is (open protocol, step 1).
    Present = 2,
    /// Initiator → acceptor: who the initiator is and what it proposes (step 2).
    Negotiate = 3,
    /// Acceptor → initiator: accept (with the settled parameters) or refuse (step 3).
    NegotiateAns = 4,
    /// Keep-alive on an idle channel.
    Heartbeat = 5,
    /// "I no longer need this channel"; the peer may refuse.
    CloseWeak = 6,
    /// "Resources are short"; must be granted.
    CloseHard = 7,
    /// Answer granting a close.
    CloseAccept = 8,
    /// Answer refusing a weak close.
    CloseReject = 9,
    /// "I hold no more references to you."
    ClearReference = 10,
    /// Several whole small messages of one lane (lanes 1..=4), each behind
    /// a compact entry head (`packed.rs`); `msg_number` numbers the first.
    Packed = 11,
    /// "My site shuts down for good" (wire version 6): written before a
    /// node's final close, so the peer fails the site at once — handing
    /// back what is pending — instead of taking the close for a lost
    /// channel and reconnecting for ever to a site that will not return
    /// (a restarted process is a new site).
    Leaving = 12,
    /// Acceptor → initiator, during the open protocol, after NEGOTIATE and
    /// before the answer: "my channel slots are full; you are in my
    /// waiting line, and I answer when a slot frees" (the `line`
    /// capability; docs/protocol.md §4.12). The answer (NEGOTIATE_ANS)
    /// comes when the initiator's turn does: it is the grant.
    Wait = 13,
}

impl FrameKind {
    /// Decodes a kind code; unknown codes are a framing error (the peer speaks
    /// something else, so the channel cannot continue).
    pub fn from_u8(v: u8) -> Result<Self, FrameError> {
        Ok(match v {
            0 => Self::Data,
            1 => Self::Ack,
            2 => Self::Present,
            3 => Self::Negotiate,
            4 => Self::NegotiateAns,
            5 => Self::Heartbeat,
            6 => Self::CloseWeak,
            7 => Self::CloseHard,
            8 => Self::CloseAccept,
            9 => Self::CloseReject,
            10 => Self::ClearReference,
            11 => Self::Packed,
            12 => Self::Leaving,
            13 => Self::Wait,
            other => return Err(FrameError::UnknownKind(other)),
        })
    }

    /// Protocol frames travel on lane 5 and never carry an application message.
    pub fn is_control(self) -> bool {
        !matches!(self, Self::Data | Self::Packed)
    }
}

/// A decoded frame header. See the module documentation for the layout.
///
/// # Example
///
/// ```
/// use sitenet_protocols::wire::frame::{FLAG_FIRST, FLAG_LAST};
/// use sitenet_protocols::{FrameError, FrameHeader, FrameKind, HEADER_LEN};
///
/// // The only fragment of message 1 on lane 3, acknowledging the peer's message 7.
/// let header = FrameHeader {
///     kind: FrameKind::Data,
///     lane: 3,
///     flags: FLAG_FIRST | FLAG_LAST,
///     payload_len: 100,
///     ack: 7,
///     msg_number: 1,
///     frag_offset: 0,
/// };
/// let mut wire = [0u8; HEADER_LEN];
/// header.encode(&mut wire);
/// assert_eq!(FrameHeader::decode(&wire, 1024), Ok(header));
/// // The payload's size is checked before anything is allocated for it.
/// assert_eq!(
///     FrameHeader::decode(&wire, 64),
///     Err(FrameError::TooLarge { len: 100, max: 64 })
/// );
///
/// // A control frame: lane 5, one fragment, no message number.
/// let heartbeat = FrameHeader::control(FrameKind::Heartbeat, 0, 7);
/// assert_eq!((heartbeat.lane, heartbeat.is_first(), heartbeat.is_last()), (5, true, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// Priority lane (1..=5); a message keeps its lane for life.
    pub lane: u8,
    /// Fragment flags ([`FLAG_FIRST`], [`FLAG_LAST`]).
    pub flags: u8,
    /// Number of payload bytes after the header.
    pub payload_len: u32,
    /// The sender's last received message number.
    pub ack: u64,
    /// The message number, on a message's last fragment; 0 otherwise.
    pub msg_number: u64,
    /// Offset of this fragment's payload within its message.
    pub frag_offset: u64,
}

impl FrameHeader {
    /// A control frame header (lane 5, no fragments, no message number).
    pub fn control(kind: FrameKind, payload_len: u32, ack: u64) -> Self {
        Self::whole(kind, 5, 0, payload_len, ack)
    }

    /// The header of a frame that holds whole messages (a DATA frame with
    /// one message, or a PACKED frame) on `lane`, the first numbered
    /// `msg_number`.
    pub fn whole(kind: FrameKind, lane: u8, msg_number: u64, payload_len: u32, ack: u64) -> Self {
        Self {
            kind,
            lane,
            flags: FLAG_FIRST | FLAG_LAST,
            payload_len,
            ack,
            msg_number,
            frag_offset: 0,
        }
    }

    /// True if this frame starts a message.
    pub fn is_first(&self) -> bool {
        self.flags & FLAG_FIRST != 0
    }

    /// True if this frame ends a message.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }

    /// Writes the header into `out`.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[0] = FRAME_FORMAT;
        out[1] = self.kind as u8;
        out[2] = self.lane;
        out[3] = self.flags;
        out[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        out[8..16].copy_from_slice(&self.ack.to_le_bytes());
        out[16..24].copy_from_slice(&self.msg_number.to_le_bytes());
        out[24..32].copy_from_slice(&self.frag_offset.to_le_bytes());
    }

    /// Decodes and validates a header. `max_payload` is the largest payload
    /// this side accepts (the negotiated frame size minus the header); it is
    /// checked here, before anything is allocated for the payload.
    pub fn decode(b: &[u8; HEADER_LEN], max_payload: usize) -> Result<Self, FrameError> {
        // "a version mismatch … is a permanent failure": a frame from another
        // protocol version cannot be interpreted at all.
        if b[0] != FRAME_FORMAT {
            return Err(FrameError::Version(b[0]));
        }
        let kind = FrameKind::from_u8(b[1])?;
        let lane = b[2];
        let flags = b[3];
        let payload_len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
        let ack = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        let msg_number = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        let frag_offset = u64::from_le_bytes(b[24..32].try_into().expect("8 bytes"));
        if flags & !FLAGS_KNOWN != 0 {
            return Err(FrameError::Flags(flags));
        }
        if payload_len as usize > max_payload {
            return Err(FrameError::TooLarge {
                len: payload_len as usize,
                max: max_payload,
            });
        }
        let header = Self {
            kind,
            lane,
            flags,
            payload_len,
            ack,
            msg_number,
            frag_offset,
        };
        // Application messages use lanes 1..=4; lane 5 is the protocol's.
        if !kind.is_control() && !(1..=4).contains(&lane) {
            return Err(FrameError::Lane(lane));
        }
        match kind {
            FrameKind::Data => {
                // The number is carried on the last fragment and only there.
                if header.is_last() == (msg_number == 0) {
                    return Err(FrameError::Numbering {
                        last: header.is_last(),
                        number: msg_number,
                    });
                }
                if header.is_first() && frag_offset != 0 {
                    return Err(FrameError::Offset(frag_offset));
                }
            }
            FrameKind::Packed => {
                // Whole messages only, numbered from `msg_number`.
                if flags != FLAGS_KNOWN || msg_number == 0 || frag_offset != 0 {
                    return Err(FrameError::PackedFields {
                        flags,
                        number: msg_number,
                        offset: frag_offset,
                    });
                }
            }
            _ => {
                if lane != 5 || flags != FLAGS_KNOWN || msg_number != 0 || frag_offset != 0 {
                    return Err(FrameError::ControlFields(kind));
                }
            }
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(flags: u8, n: u64) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Data,
            lane: 3,
            flags,
            payload_len: 10,
            ack: 7,
            msg_number: n,
            frag_offset: 0,
        }
    }

    #[test]
    fn round_trip() {
        let h = data(FLAG_FIRST | FLAG_LAST, 9);
        let mut b = [0; HEADER_LEN];
        h.encode(&mut b);
        assert_eq!(FrameHeader::decode(&b, 100).unwrap(), h);
    }

    #[test]
    fn rejects_wrong_version_kind_flags_size() {
        let mut b = [0; HEADER_LEN];
        data(FLAG_FIRST | FLAG_LAST, 1).encode(&mut b);
        for other in [0, 1, 6, FRAME_FORMAT + 1] {
            let mut v = b;
            v[0] = other;
            assert_eq!(
                FrameHeader::decode(&v, 100),
                Err(FrameError::Version(other))
            );
        }
        let mut k = b;
        k[1] = 99;
        assert_eq!(
            FrameHeader::decode(&k, 100),
            Err(FrameError::UnknownKind(99))
        );
        let mut f = b;
        f[3] = 0x80 | FLAG_LAST;
        assert!(matches!(
            FrameHeader::decode(&f, 100),
            Err(FrameError::Flags(_))
        ));
        assert!(matches!(
            FrameHeader::decode(&b, 9),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn number_only_on_last_fragment() {
        let mut b = [0; HEADER_LEN];
        data(FLAG_FIRST, 4).encode(&mut b);
        assert!(matches!(
            FrameHeader::decode(&b, 100),
            Err(FrameError::Numbering { .. })
        ));
        data(FLAG_LAST, 0).encode(&mut b);
        assert!(matches!(
            FrameHeader::decode(&b, 100),
            Err(FrameError::Numbering { .. })
        ));
    }

    #[test]
    fn packed_frames_hold_whole_numbered_messages_on_application_lanes() {
        let packed = |lane, flags, n, off| FrameHeader {
            kind: FrameKind::Packed,
            lane,
            flags,
            payload_len: 10,
            ack: 0,
            msg_number: n,
            frag_offset: off,
        };
        let decode = |h: FrameHeader| {
            let mut b = [0; HEADER_LEN];
            h.encode(&mut b);
            FrameHeader::decode(&b, 100)
        };
        let ok = packed(2, FLAG_FIRST | FLAG_LAST, 5, 0);
        assert_eq!(decode(ok), Ok(ok));
        assert!(!FrameKind::Packed.is_control());
        assert_eq!(decode(packed(5, 3, 5, 0)), Err(FrameError::Lane(5)));
        assert_eq!(decode(packed(0, 3, 5, 0)), Err(FrameError::Lane(0)));
        for (flags, n, off) in [(FLAG_FIRST, 5, 0), (FLAG_LAST, 5, 0), (3, 0, 0), (3, 5, 9)] {
            assert_eq!(
                decode(packed(2, flags, n, off)),
                Err(FrameError::PackedFields {
                    flags,
                    number: n,
                    offset: off
                })
            );
        }
    }

    #[test]
    fn data_lane_must_be_application() {
        let mut h = data(FLAG_FIRST | FLAG_LAST, 1);
        for lane in [0u8, 5, 6, 255] {
            h.lane = lane;
            let mut b = [0; HEADER_LEN];
            h.encode(&mut b);
            assert_eq!(FrameHeader::decode(&b, 100), Err(FrameError::Lane(lane)));
        }
    }
}
