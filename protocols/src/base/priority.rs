//! Priority levels and lanes.

use serde::{Deserialize, Serialize};

/// The five priority levels of the design (docs/architecture.md). Levels 4, 3 and 2 share the channel
/// by bytes sent, with configurable weights; level 1 is sent only when nothing
/// else waits (and is promoted periodically so it cannot starve); level 5 is
/// reserved for sitenet's own protocol frames and cannot be chosen by users.
///
/// The level is also the message's *lane* on the wire: at most one message per
/// lane is partly sent at a time, which keeps each level FIFO while levels
/// interleave.
///
/// # Example
///
/// ```
/// use sitenet_protocols::Priority;
///
/// assert_eq!(Priority::default(), Priority::Medium);
/// assert!(Priority::High > Priority::Low);
/// assert_eq!(Priority::High.lane(), 4);
/// assert_eq!(Priority::from_lane(1), Some(Priority::Background));
/// assert_eq!(Priority::from_lane(5), None); // lane 5 is the protocol's own
/// // Per-lane arrays are indexed 0..4, lowest level first.
/// let mut sent = [0u64; 4];
/// sent[Priority::High.index()] += 1;
/// assert_eq!(sent, [0, 0, 0, 1]);
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Priority {
    /// Level 1: background traffic.
    Background = 1,
    /// Level 2: application, low.
    Low = 2,
    /// Level 3: application, medium (the default).
    #[default]
    Medium = 3,
    /// Level 4: application, high.
    High = 4,
}

impl Priority {
    /// All application levels, lowest first.
    pub const ALL: [Priority; 4] = [Self::Background, Self::Low, Self::Medium, Self::High];

    /// The wire lane (1..=4).
    pub fn lane(self) -> u8 {
        self as u8
    }

    /// The level for a lane number, if it is an application lane.
    pub fn from_lane(lane: u8) -> Option<Self> {
        match lane {
            1 => Some(Self::Background),
            2 => Some(Self::Low),
            3 => Some(Self::Medium),
            4 => Some(Self::High),
            _ => None,
        }
    }

    /// Index 0..4 for per-lane arrays.
    pub fn index(self) -> usize {
        self as usize - 1
    }
}
