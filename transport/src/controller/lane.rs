//! The thread a channel's work runs on, as the slot table counts it
//! (`sitenet_protocols::slots` `lanes.rs`): under
//! `Admission::Share` a freed slot goes to a peer whose channel runs on a
//! thread with fewer working holders first, so the holders stay spread
//! over the threads instead of piling up on one while the others idle.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::thread::ThreadId;

/// A thread, named by a number the slot table compares: the same for
/// every channel whose work runs on that thread. Made from the thread's
/// id, so any code that knows which thread will own a channel (not only
/// that thread itself) can name its lane.
///
/// ```
/// use sitenet_transport::controller::Lane;
///
/// let here = Lane::current();
/// assert_eq!(here, Lane::of(std::thread::current().id()));
/// let there = std::thread::spawn(Lane::current).join().unwrap();
/// assert_ne!(here, there);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lane(pub u32);

impl Lane {
    /// The lane of thread `t`.
    pub fn of(t: ThreadId) -> Lane {
        // A fixed hasher: the number only has to be one per thread (a
        // collision makes two threads count as one, which only weakens
        // the spreading).
        let mut h = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
        std::hash::Hash::hash(&t, &mut h);
        let v = h.finish();
        Lane((v ^ (v >> 32)) as u32)
    }

    /// The calling thread's lane.
    pub fn current() -> Lane {
        Lane::of(std::thread::current().id())
    }
}
