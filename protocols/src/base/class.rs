//! The classes a site's output counts in: the four application priority
//! levels and the node's own messages. A message knows its class (wire),
//! and the output bounds share room by class (connection), so the rule
//! lives below both.

use crate::base::priority::Priority;

/// Output classes of a site: the four application levels (indexed as
/// [`Priority::index`](crate::base::priority::Priority::index), lowest first) and the
/// node's own messages ([`SYSTEM_CLASS`]).
pub const CLASSES: usize = 5;

/// The class of the node's own messages: error and "no reply" answers,
/// the built-in services' replies — every message whose type id is
/// reserved ([`RESERVED_TYPE_IDS`]). User data never takes its room.
pub const SYSTEM_CLASS: usize = 4;

/// Type ids from here on are the node's own (the runtime's reserved ids).
pub const RESERVED_TYPE_IDS: u32 = 0xFFFF_0000;

/// The class a message of `priority` and `type_id` counts in.
pub fn class_of(priority: Priority, type_id: u32) -> usize {
    if type_id >= RESERVED_TYPE_IDS {
        SYSTEM_CLASS
    } else {
        priority.index()
    }
}
