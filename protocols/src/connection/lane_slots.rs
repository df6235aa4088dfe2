//! [`LaneSlots`]: one optional value per application lane (levels 1 to 4)
//! that costs one pointer while all four are empty.
//!
//! Why: a session keeps, per lane, the message it is partly sending and the
//! message it is partly receiving — a few hundred bytes each, inline. A
//! process with thousands of idle remote sites would pay for all of them;
//! boxed and allocated on first use, an idle site pays 16 bytes, and a busy
//! one a single allocation for as long as it stays busy (not one per
//! message).

/// See the module documentation.
#[derive(Debug)]
pub struct LaneSlots<T> {
    slots: Option<Box<[Option<T>; 4]>>,
    /// Bit `i` set: lane `i` holds a value (asked for every frame: kept
    /// here, not looked up behind the box).
    mask: u8,
}

impl<T> Default for LaneSlots<T> {
    fn default() -> Self {
        Self {
            slots: None,
            mask: 0,
        }
    }
}

impl<T> LaneSlots<T> {
    /// The value of lane `i` (index = level - 1).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.as_ref()?[i].as_ref()
    }

    /// The value of lane `i`, mutably.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.as_mut()?[i].as_mut()
    }

    /// True if lane `i` holds a value.
    #[inline]
    pub fn is_some(&self, i: usize) -> bool {
        self.mask & (1 << i) != 0
    }

    /// Puts `v` in lane `i` (allocating the slots on first use).
    #[inline]
    pub fn set(&mut self, i: usize, v: T) {
        self.slots
            .get_or_insert_with(|| Box::new([None, None, None, None]))[i] = Some(v);
        self.mask |= 1 << i;
    }

    /// Lane `i`'s value, made by `f` in place if the lane is empty (no
    /// copy of a large value through the stack on the per-message path).
    #[inline]
    pub fn get_or_insert_with(&mut self, i: usize, f: impl FnOnce() -> T) -> &mut T {
        let slots = self
            .slots
            .get_or_insert_with(|| Box::new([None, None, None, None]));
        self.mask |= 1 << i;
        slots[i].get_or_insert_with(f)
    }

    /// Takes lane `i`'s value.
    #[inline]
    pub fn take(&mut self, i: usize) -> Option<T> {
        let v = self.slots.as_mut()?[i].take();
        self.mask &= !(1 << i);
        v
    }

    /// Every value held, in lane order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flat_map(|s| s.iter().flatten())
    }

    /// Every value held, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flat_map(|s| s.iter_mut().flatten())
    }

    /// How many lanes hold a value.
    #[inline]
    pub fn count(&self) -> usize {
        self.mask.count_ones() as usize
    }

    /// True if no lane holds a value.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// Frees the slots if every lane is empty (the site went idle).
    pub fn shed(&mut self) {
        if self.is_empty() {
            self.slots = None;
        }
    }

    /// True while the slots are allocated.
    pub fn is_allocated(&self) -> bool {
        self.slots.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_slots_cost_two_words_and_are_shed_when_empty_again() {
        assert_eq!(
            std::mem::size_of::<LaneSlots<[u8; 200]>>(),
            2 * std::mem::size_of::<usize>()
        );
        let mut s = LaneSlots::default();
        assert!(s.is_empty() && !s.is_allocated());
        s.set(2, "a");
        s.set(0, "b");
        assert_eq!((s.get(2), s.count()), (Some(&"a"), 2));
        s.set(2, "c");
        assert_eq!(s.count(), 2, "replacing a value does not count it twice");
        assert_eq!(s.take(2), Some("c"));
        s.set(2, "a");
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), ["b", "a"]);
        s.shed();
        assert!(s.is_allocated(), "not shed while a lane is busy");
        assert_eq!(s.take(2), Some("a"));
        assert_eq!(s.take(0), Some("b"));
        assert_eq!(s.take(0), None);
        s.shed();
        assert!(!s.is_allocated());
        assert_eq!(s.get_mut(1), None);
    }
}
