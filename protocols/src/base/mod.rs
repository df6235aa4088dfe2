//! The leaf layer: the vocabulary and bounds every other layer shares —
//! site identities, priorities and output classes, the limits on what a
//! peer may list, the one enum of timers, and the switch for planted bugs.
//! It imports nothing of the crate.

pub mod class;
pub mod coverage;
pub mod limits;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod priority;
pub mod site;
pub mod timer;
