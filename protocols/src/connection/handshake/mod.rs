//! The open protocol, per channel: PRESENT from the acceptor, NEGOTIATE from
//! the initiator, an answer (NEGOTIATE_ANS) from the acceptor.
//!
//! ```text
//!  initiator                                  acceptor (anonymous until step 2)
//!  ExpectPresent   <──────── PRESENT ───────  (sent on accept)
//!    check version, identity
//!  ExpectAnswer    ──────── NEGOTIATE ──────> ExpectNegotiate
//!                                               check version; the site's ComObject
//!                                               decides (see [`crate::connection::link`])
//!  Done            <────── NEGOTIATE_ANS ───  Done (accept) / closed (refuse)
//! ```
//!
//! Both machines consume exactly their own frames from the input buffer; any
//! bytes after the last handshake frame belong to the session. Every wait is
//! bounded by the handshake timeout, which the driver enforces (the deadline
//! is given by [`HANDSHAKE_TIMEOUT`] unless configured).
//!
//! # Example
//!
//! Site A calls site B; one [`ByteBuffer`] per direction stands in for the
//! socket.
//!
//! ```
//! use sitenet_protocols::connection::handshake::{write_answer, MIN_BUFFER};
//! use sitenet_protocols::connection::link::{decide, Decision, LinkView};
//! use sitenet_protocols::{
//!     Acceptor, ByteBuffer, HandshakeNonces, Initiator, LocalInfo, NegotiateAns, SiteId, Speaks,
//! };
//!
//! let info = |id, address: &str| LocalInfo {
//!     site: SiteId(id),
//!     listen: vec![address.to_string()],
//!     buffer_size: 64 * 1024,
//!     max_message: 1 << 20,
//!     speaks: Speaks::CURRENT,
//! };
//! let mut to_a = ByteBuffer::new(MIN_BUFFER as usize);
//! let mut to_b = ByteBuffer::new(MIN_BUFFER as usize);
//! // B accepts the connection and presents itself at once, with a nonce
//! // drawn for this handshake (random in a real driver).
//! let mut b = Acceptor::new(&info(0xB, "tcp:10.0.0.2:7000"), [0xB0; 32], &mut to_a);
//! // A expects B's id; it has received nothing from B and seen no channel
//! // (0, 0), so it has no secret to prove: a new session.
//! let mut a = Initiator::new(info(0xA, "tcp:10.0.0.1:7000"), Some(SiteId(0xB)), 0, 0, [0xA0; 32]);
//! assert_eq!(a.handle_input(&mut to_a, &mut to_b)?, None); // PRESENT in, NEGOTIATE out
//! let negotiate = b.handle_input(&mut to_b, &mut to_a)?.expect("NEGOTIATE arrived");
//! assert_eq!((negotiate.site, negotiate.proof), (SiteId(0xA), None));
//!
//! // B's ComObject decides (no channel with A yet: accept) and answers.
//! let view = LinkView {
//!     local: SiteId(0xB),
//!     working: None,
//!     working_from: None,
//!     last_generation: 0,
//!     opening: false,
//!     closing: false,
//! };
//! let Decision::Accept { generation, .. } = decide(view, &negotiate) else { unreachable!() };
//! let answer = NegotiateAns::Accept {
//!     buffer_size: negotiate.buffer_size.min(64 * 1024), // never above the proposal
//!     max_message: 1 << 20,
//!     last_received: 0,
//!     generation,
//!     fresh: true,
//!     rekey: true, // A proved nothing: this handshake agrees the pair's secret
//!     cookie: None, // the open level: no cookie to prove (see `cookie`)
//!     session: 0,   // both were fresh: the pair's first numbering
//! };
//! assert!(write_answer(&mut to_a, &answer));
//! let opened = a.handle_input(&mut to_a, &mut to_b)?.expect("the channel works");
//! assert_eq!((opened.present.site, opened.generation), (SiteId(0xB), 1));
//! assert_eq!(opened.present.listen, ["tcp:10.0.0.2:7000"]);
//! // Both keep the secret this first handshake agreed; A's next NEGOTIATE
//! // to B proves it.
//! let hs = HandshakeNonces {
//!     acceptor: SiteId(0xB),
//!     acceptor_nonce: b.nonce(),
//!     initiator: SiteId(0xA),
//!     initiator_nonce: negotiate.nonce,
//! };
//! assert_eq!(opened.pair_secret, Some(hs.pair_secret()));
//! # Ok::<(), sitenet_protocols::OpenError>(())
//! ```

mod acceptor;
pub mod certificate;
pub mod continuity;
pub mod cookie;
mod initiator;
mod messages;
pub mod pair_memory;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use acceptor::Acceptor;
pub use certificate::PeerCertificate;
pub use continuity::{Claim, Continuity, HandshakeNonces, Nonce, PairSecret, Proof};
pub use cookie::{AuthFailure, Cookie, CookieError, Keyring};
pub use initiator::{Initiator, Opened};
pub use messages::{
    Attempt, CookieProof, Negotiate, NegotiateAns, Present, RefuseReason, SessionTag, Wait,
};
pub use pair_memory::PairMemory;

use crate::base::site::SiteId;
use crate::connection::error::{FrameError, OpenError, ProtocolError};
use crate::wire::byte_buffer::ByteBuffer;
use crate::wire::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::wire::version::{Capabilities, Speaks, VersionRange};

/// Default bound on the whole open protocol.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handshake payloads are small; a larger one is refused before allocating.
pub const MAX_HANDSHAKE_PAYLOAD: usize = 4000;

/// The smallest ByteBuffer a channel may negotiate.
pub const MIN_BUFFER: u32 = 4 * 1024;

pub use crate::base::limits::MAX_LISTEN;

/// Highest channel generation (2^63 - 1). A site pair counts its channels
/// from 1; honest peers never come near this, so a NEGOTIATE claiming a last
/// generation at or beyond it is malformed, and an answer beyond it is
/// refused: no arithmetic on a peer's generation can overflow, and no peer
/// can push a pair to a generation that has no successor.
pub const MAX_GENERATION: u64 = u64::MAX / 2;

/// Encodes a control frame with an rmp-serde payload into `out`.
///
/// # Example
///
/// ```
/// use sitenet_protocols::connection::handshake::{read_frame, write_control, MAX_HANDSHAKE_PAYLOAD};
/// use sitenet_protocols::{ByteBuffer, FrameKind, Present, SiteId, Speaks};
///
/// let present =
///     Present {
///         versions: Speaks::CURRENT.versions,
///         caps: Speaks::CURRENT.caps,
///         site: SiteId(0xB),
///         listen: vec!["mem:b".into()],
///         nonce: [7; 32],
///     };
/// let mut wire = ByteBuffer::new(4096);
/// assert!(write_control(&mut wire, FrameKind::Present, &present));
///
/// let (header, payload) = read_frame(&mut wire, MAX_HANDSHAKE_PAYLOAD)?.expect("a whole frame");
/// assert_eq!((header.kind, header.lane), (FrameKind::Present, 5));
/// let decoded: Present = rmp_serde::from_slice(&payload).expect("rmp-serde");
/// assert_eq!(decoded, present);
/// assert!(wire.is_empty()); // read_frame consumed exactly that frame
/// # Ok::<(), sitenet_protocols::FrameError>(())
/// ```
pub fn write_control<T: Serialize>(out: &mut ByteBuffer, kind: FrameKind, body: &T) -> bool {
    write_payload(out, kind, &encode_control(body))
}

/// Encodes a handshake message: rmp-serde with named fields (a map per
/// struct), so a later version can add fields this one skips.
pub fn encode_control<T: Serialize>(body: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(body).expect("handshake messages always serialise")
}

/// Writes a control frame around an already encoded payload; `false` if it
/// is over [`MAX_HANDSHAKE_PAYLOAD`] or `out` has no room.
pub fn write_payload(out: &mut ByteBuffer, kind: FrameKind, payload: &[u8]) -> bool {
    // The peer refuses a larger handshake frame: never write one.
    if payload.len() > MAX_HANDSHAKE_PAYLOAD || out.free() < HEADER_LEN + payload.len() {
        return false;
    }
    let mut hb = [0u8; HEADER_LEN];
    FrameHeader::control(kind, payload.len() as u32, 0).encode(&mut hb);
    out.push(&hb);
    out.push(payload);
    true
}

/// Reads one whole frame of at most `max_payload` bytes from `input`, if one
/// is there: `Ok(None)` means "need more bytes".
pub fn read_frame(
    input: &mut ByteBuffer,
    max_payload: usize,
) -> Result<Option<(FrameHeader, Vec<u8>)>, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    if !input.peek(0, &mut hb) {
        return Ok(None);
    }
    let h = FrameHeader::decode(&hb, max_payload)?;
    let mut payload = vec![0u8; h.payload_len as usize];
    if !input.peek(HEADER_LEN, &mut payload) {
        return Ok(None);
    }
    input.consume(HEADER_LEN + payload.len());
    Ok(Some((h, payload)))
}

fn decode<T: for<'de> Deserialize<'de>>(
    what: &'static str,
    payload: &[u8],
) -> Result<T, ProtocolError> {
    rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Malformed {
        what,
        reason: e.to_string(),
    })
}

/// Maps a header error in the first frame to a version mismatch if that is
/// what it is: a peer of another version fails the open protocol permanently.
fn first_frame_error(e: FrameError, speaks: &Speaks) -> OpenError {
    match e {
        // Up to version 6 byte 0 was the peer's protocol version.
        FrameError::Version(v) => OpenError::VersionMismatch {
            local: speaks.versions,
            peer: VersionRange::exactly(v),
        },
        e => OpenError::Protocol(e.into()),
    }
}

/// What this side says about itself in a handshake.
#[derive(Debug, Clone)]
pub struct LocalInfo {
    /// This node's site id.
    pub site: SiteId,
    /// Addresses it listens on.
    pub listen: Vec<String>,
    /// Its ByteBuffer size (the proposal, or the acceptor's ceiling).
    pub buffer_size: u32,
    /// Largest message it accepts.
    pub max_message: u64,
    /// The versions and capabilities it offers ([`Speaks::CURRENT`] but in
    /// tests that play an older or newer build).
    pub speaks: Speaks,
}

impl LocalInfo {
    /// Checks that this node's own PRESENT and NEGOTIATE fit the handshake
    /// payload limit (at most [`MAX_LISTEN`] listen addresses, and short
    /// enough), with the largest numbers NEGOTIATE can carry. A node calls
    /// it when it starts: a list that does not fit would make every
    /// handshake fail.
    pub fn validate(&self) -> Result<(), OpenError> {
        if self.listen.len() > MAX_LISTEN {
            return Err(OpenError::LocalConfig(format!(
                "{} listen addresses, at most {MAX_LISTEN}; listen on fewer addresses",
                self.listen.len()
            )));
        }
        let worst = Negotiate {
            version: u8::MAX,
            caps: Capabilities::from_bits(u64::MAX),
            site: self.site,
            listen: self.listen.clone(),
            buffer_size: u32::MAX,
            max_message: u64::MAX,
            last_received: u64::MAX,
            last_generation: u64::MAX,
            attempt: Attempt {
                opener: u64::MAX,
                seq: u64::MAX,
            },
            nonce: [u8::MAX; 32],
            proof: Some([u8::MAX; 16]),
            cookie: Some(CookieProof {
                key_id: u64::MAX,
                mac: [u8::MAX; 32],
            }),
            session: u64::MAX,
        };
        let len = encode_control(&worst).len();
        if len > MAX_HANDSHAKE_PAYLOAD {
            return Err(OpenError::LocalConfig(format!(
                "the listen addresses take {len} bytes of NEGOTIATE, more than the \
                 {MAX_HANDSHAKE_PAYLOAD}-byte handshake limit; listen on fewer or shorter addresses"
            )));
        }
        Ok(())
    }
}

/// Writes the acceptor's `WAIT` (its waiting line); `false` if
/// `output` has no room.
pub fn write_wait(output: &mut ByteBuffer, wait: &Wait) -> bool {
    write_control(output, FrameKind::Wait, wait)
}

/// Writes the acceptor's answer.
pub fn write_answer(output: &mut ByteBuffer, ans: &NegotiateAns) -> bool {
    write_control(output, FrameKind::NegotiateAns, ans)
}
