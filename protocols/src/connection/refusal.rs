//! Why an open ends refused: the acceptor's refusal reasons (carried in
//! NEGOTIATE's answer) and the ways authentication fails. Both are named by
//! the errors of the open protocol ([`crate::connection::error::OpenError`])
//! and by the handshake that decides them, so they sit below both.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why an acceptor refused a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefuseReason {
    /// Simultaneous connect: the other channel (initiated by the smaller site
    /// id) is kept.
    LostTie,
    /// The acceptor has a working channel that the initiator has not seen lost.
    Stale,
    /// The acceptor declared the initiator's site permanently failed (and
    /// refuses it for as long as its node keeps that entry), or it shuts
    /// down. The initiator fails the site in turn
    /// ([`SiteFailure::Refused`](crate::connection::com_object::SiteFailure::Refused)),
    /// handing back what it held: calling again would be refused too.
    Closing,
    /// The NEGOTIATE names a site the acceptor has a confirmed session
    /// with, and does not prove that session's secret: a stranger claiming
    /// the site's id (or a peer that forgot the session while the acceptor
    /// still owes it something). The session is left untouched.
    Unproven,
    /// Authentication failed (see [`cookie`](crate::connection::handshake::cookie)): the
    /// initiator proved no cookie, or one the acceptor does not hold, or
    /// proves one while the acceptor holds none. A permanent failure.
    Unauthenticated,
}

/// Why a handshake failed authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AuthFailure {
    /// This node holds a cookie and the peer proved none.
    #[error("the peer proved no cookie")]
    Missing,
    /// The peer proves a cookie and this node holds none.
    #[error("the peer proves a cookie and this node holds none")]
    NotHeld,
    /// The peer proves a cookie this node does not hold.
    #[error("the peer's cookie (key id {0:016x}) is not one this node holds")]
    UnknownKey(u64),
    /// The MAC does not match the cookie named.
    #[error("the peer's proof does not match the cookie")]
    BadProof,
    /// The acceptor refused this node's proof (or its lack of one).
    #[error("the peer refused this node's cookie (or its lack of one)")]
    Refused,
}
