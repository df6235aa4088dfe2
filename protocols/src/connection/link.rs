//! Which channel a site pair keeps: simultaneous connects and new channels
//! for a site that is already working.
//!
//! Each site pair counts the channels that reached working (the generation).
//! NEGOTIATE carries the generation of the last channel its sender saw
//! working. The acceptor's ComObject decides, atomically with its own state:
//!
//! * **Working** with generation `g`: adopt the new channel only if the peer's
//!   last-seen generation is `>= g` (the peer has lost the working channel),
//!   or if the working channel was accepted here from an earlier attempt of
//!   the same opener (the peer gave that attempt up before learning `g`: the
//!   channel is dead, its EOF still on the way). Then the old channel is
//!   closed and the session resumes from the handshake's last-received.
//!   Otherwise the new channel is stale: refuse.
//! * **Opening** its own channel to the same peer (a simultaneous connect):
//!   keep the channel whose initiator has the smaller site id (compared as
//!   big-endian bytes). Both sides apply the same rule, so they agree.
//! * Otherwise: accept.
//!
//! Generations are checked: a NEGOTIATE whose last generation has no
//! successor below [`MAX_GENERATION`] is malformed, a decision that would
//! pass it refuses, and an initiator refuses an answer outside
//! `last_generation + 1 ..= MAX_GENERATION` — no peer can make the
//! arithmetic overflow (a debug panic, or a wrap to 0 in release) or lock a
//! site pair out with a generation that has no successor.
//!
//! The numbers judged here are those of a claim that proved the pair's
//! continuity; the ComObject judges one that did not as having seen no
//! channel (see [`continuity`](crate::connection::handshake::continuity)), so no
//! stranger's claim can pick a generation.
//!
//! A side that becomes working by one channel abandons its own handshake in
//! progress (so a NEGOTIATE it sends always states the generation it saw), and
//! session state always stays with the existing ComObject.

use crate::base::coverage::{hit, Point};
use crate::base::site::SiteId;
use crate::connection::handshake::{Attempt, Negotiate, RefuseReason, MAX_GENERATION};

/// The acceptor ComObject's view of its link with the initiating site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkView {
    /// This node's id.
    pub local: SiteId,
    /// Generation of the working channel, if one is working.
    pub working: Option<u64>,
    /// The peer's open attempt that created the working channel, if this side
    /// accepted it (`None` if this side initiated it or none is working).
    pub working_from: Option<Attempt>,
    /// Highest generation this side has seen working (0 if none).
    pub last_generation: u64,
    /// True while this side runs its own open protocol towards the peer.
    pub opening: bool,
    /// True if the site was declared permanently failed or is shutting down.
    pub closing: bool,
}

/// The acceptor's decision on a NEGOTIATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Accept with this generation. `replaces_working` tells the ComObject to
    /// close its old channel; `abandon_opening` to drop its own handshake.
    Accept {
        /// The new channel's generation.
        generation: u64,
        /// An old working channel must be closed.
        replaces_working: bool,
        /// The local open in progress must be abandoned.
        abandon_opening: bool,
    },
    /// Refuse the new channel.
    Refuse(RefuseReason),
}

/// Decides on an incoming NEGOTIATE (see the module documentation).
///
/// # Example
///
/// ```
/// use sitenet_protocols::{decide, Decision, LinkView, RefuseReason};
/// # use sitenet_protocols::{Attempt, Negotiate, SiteId, PROTOCOL_VERSION};
/// # fn negotiate(from: u128, last_generation: u64) -> Negotiate {
/// #     Negotiate {
/// #         version: PROTOCOL_VERSION, site: SiteId(from), listen: vec![],
/// #         buffer_size: 65536, max_message: 1 << 20, last_received: 0,
/// #         last_generation, attempt: Attempt::UNKNOWN, nonce: [0; 32], proof: None, cookie: None,
/// #         session: 0,
/// #         caps: sitenet_protocols::Capabilities::ALL,
/// #     }
/// # }
///
/// // `negotiate(from, last_generation)` builds site `from`'s NEGOTIATE.
/// let view = |local, working| LinkView {
///     local: SiteId(local),
///     working,
///     working_from: None,
///     last_generation: working.unwrap_or(0),
///     opening: working.is_none(),
///     closing: false,
/// };
/// // Sites 1 and 2 call each other at once. Site 2 keeps the channel that
/// // site 1 (the smaller id) initiated; site 1 refuses the other one.
/// let at_2 = decide(view(2, None), &negotiate(1, 0));
/// assert!(matches!(at_2, Decision::Accept { generation: 1, abandon_opening: true, .. }));
/// let at_1 = decide(view(1, None), &negotiate(2, 0));
/// assert_eq!(at_1, Decision::Refuse(RefuseReason::LostTie));
///
/// // Channel 3 works: a NEGOTIATE that has not seen it is stale; one that
/// // saw it (the peer lost it) replaces it.
/// let stale = decide(view(2, Some(3)), &negotiate(1, 2));
/// assert_eq!(stale, Decision::Refuse(RefuseReason::Stale));
/// let again = decide(view(2, Some(3)), &negotiate(1, 3));
/// assert!(matches!(again, Decision::Accept { generation: 4, replaces_working: true, .. }));
/// // One that saw a later generation than the working channel's replaces
/// // it too, numbered after the later one.
/// let later = decide(view(2, Some(3)), &negotiate(1, 5));
/// assert!(matches!(later, Decision::Accept { generation: 6, replaces_working: true, .. }));
/// ```
pub fn decide(view: LinkView, neg: &Negotiate) -> Decision {
    if view.closing {
        hit(Point::LinkRefuseClosing);
        return Decision::Refuse(RefuseReason::Closing);
    }
    // Checked: a peer's number never overflows (NEGOTIATE's decoder already
    // refuses a last generation without a successor; this holds even if a
    // caller skipped it).
    let Some(generation) = view
        .last_generation
        .max(neg.last_generation)
        .checked_add(1)
        .filter(|&g| g <= MAX_GENERATION)
    else {
        hit(Point::LinkRefuseNoGeneration);
        return Decision::Refuse(RefuseReason::Stale);
    };
    if let Some(g) = view.working {
        let peer_lost_it = neg.last_generation >= g;
        #[cfg(feature = "planted-bugs")]
        let peer_lost_it =
            if crate::base::planted::active(crate::base::planted::Bug::SameGenerationStale) {
                neg.last_generation > g
            } else {
                peer_lost_it
            };
        let peer_abandoned_it = view
            .working_from
            .is_some_and(|from| neg.attempt.supersedes(&from));
        #[cfg(feature = "planted-bugs")]
        let peer_abandoned_it = peer_abandoned_it
            && !crate::base::planted::active(crate::base::planted::Bug::AbandonedAttemptStale);
        return if peer_lost_it || peer_abandoned_it {
            hit(match neg.last_generation.cmp(&g) {
                std::cmp::Ordering::Equal => Point::LinkReplaceLostSame,
                std::cmp::Ordering::Greater => Point::LinkReplaceLostLater,
                std::cmp::Ordering::Less => Point::LinkReplaceAbandoned,
            });
            Decision::Accept {
                generation,
                replaces_working: true,
                abandon_opening: false,
            }
        } else {
            hit(Point::LinkRefuseStale);
            Decision::Refuse(RefuseReason::Stale)
        };
    }
    if view.opening {
        // The channel initiated by the smaller id wins; here the initiator is
        // the peer, so the incoming channel wins iff the peer's id is smaller.
        return if neg.site.to_bytes() < view.local.to_bytes() {
            hit(Point::LinkWinsTie);
            Decision::Accept {
                generation,
                replaces_working: false,
                abandon_opening: true,
            }
        } else {
            hit(Point::LinkRefuseLostTie);
            Decision::Refuse(RefuseReason::LostTie)
        };
    }
    hit(Point::LinkAccept);
    Decision::Accept {
        generation,
        replaces_working: false,
        abandon_opening: false,
    }
}
