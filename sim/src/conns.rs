//! The simulated connections, by id.
//!
//! Why not a `BTreeMap`: every event of a run looks its connection up,
//! several times, and at 1,000 sites the tree's searches were a tenth of the
//! simulator's time (cache misses on its nodes). Connection ids are handed
//! out in increasing order and connections end roughly in that order, so a
//! deque of slots indexed by `id - base` finds one in constant time, and
//! trimming the ended ones at its front keeps it as short as the span of
//! live ids. Iteration is in id order, exactly as the map's was, so no
//! trace or digest changes.

use std::collections::VecDeque;

use crate::net::Conn;

/// Live connections by id (ids increase; see the module doc).
#[derive(Default)]
pub(crate) struct Conns {
    /// The id of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<Box<Conn>>>,
}

impl Conns {
    fn slot(&self, c: u64) -> Option<usize> {
        let i = usize::try_from(c.checked_sub(self.base)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    pub(crate) fn get(&self, c: &u64) -> Option<&Conn> {
        self.slots.get(self.slot(*c)?)?.as_deref()
    }

    pub(crate) fn get_mut(&mut self, c: &u64) -> Option<&mut Conn> {
        let i = self.slot(*c)?;
        self.slots.get_mut(i)?.as_deref_mut()
    }

    /// Adds connection `c`, whose id is above every id added before.
    pub(crate) fn insert(&mut self, c: u64, conn: Conn) {
        if self.slots.is_empty() {
            self.base = c;
        }
        let end = self.base + self.slots.len() as u64;
        assert!(c >= end, "connection ids increase");
        self.slots
            .extend(std::iter::repeat_with(|| None).take((c - end) as usize));
        self.slots.push_back(Some(Box::new(conn)));
    }

    pub(crate) fn remove(&mut self, c: &u64) -> Option<Conn> {
        let i = self.slot(*c)?;
        let conn = self.slots[i].take()?;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        while matches!(self.slots.back(), Some(None)) {
            self.slots.pop_back();
        }
        Some(*conn)
    }

    /// The lowest and highest live ids.
    pub(crate) fn span(&self) -> Option<(u64, u64)> {
        // Both ends of the deque are live (trimmed on every removal).
        (!self.slots.is_empty()).then(|| (self.base, self.base + self.slots.len() as u64 - 1))
    }

    /// The first live id at or after `c`.
    pub(crate) fn at_or_after(&self, c: u64) -> Option<u64> {
        let from = c.saturating_sub(self.base) as usize;
        (from..self.slots.len())
            .find(|&i| self.slots[i].is_some())
            .map(|i| self.base + i as u64)
    }

    /// Every live connection, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Conn)> {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, s)| s.as_deref().map(|c| (base + i as u64, c)))
    }

    /// Every live connection, in id order, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Conn)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, s)| s.as_deref_mut().map(|c| (base + i as u64, c)))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.iter().count()
    }
}

impl std::ops::Index<&u64> for Conns {
    type Output = Conn;
    fn index(&self, c: &u64) -> &Conn {
        self.get(c).expect("a live connection")
    }
}

#[cfg(test)]
mod tests {
    use super::super::net::{End, Role};
    use super::*;

    fn conn() -> Conn {
        Conn {
            ends: [
                End::new(0, 0, 64, Role::NotYet),
                End::new(1, 0, 64, Role::NotYet),
            ],
            wire: Default::default(),
            used: [0; 2],
            link_free: [std::time::Duration::ZERO; 2],
            latency: std::time::Duration::ZERO,
            bandwidth: 1,
            blocked: [false; 2],
            mute: [false; 2],
            attempt: None,
        }
    }

    /// The deque answers as the ordered map it replaced: lookups, the span
    /// of live ids, the first live id at or after any id, iteration in id
    /// order — through removals at the front, the back and the middle.
    #[test]
    fn answers_as_an_ordered_map_of_increasing_ids() {
        let mut conns = Conns::default();
        let mut model = std::collections::BTreeSet::new();
        for c in [3, 4, 7, 8, 12] {
            conns.insert(c, conn());
            model.insert(c);
        }
        let check = |conns: &Conns, model: &std::collections::BTreeSet<u64>| {
            assert_eq!(conns.len(), model.len());
            let ids: Vec<u64> = conns.iter().map(|(c, _)| c).collect();
            assert_eq!(ids, model.iter().copied().collect::<Vec<_>>());
            assert_eq!(
                conns.span(),
                model.first().map(|&lo| (lo, *model.last().unwrap()))
            );
            for c in 0..15 {
                assert_eq!(conns.get(&c).is_some(), model.contains(&c), "id {c}");
                assert_eq!(
                    conns.at_or_after(c),
                    model.range(c..).next().copied(),
                    "id {c}"
                );
            }
        };
        check(&conns, &model);
        for c in [7, 3, 12, 5, 4, 8] {
            assert_eq!(conns.remove(&c).is_some(), model.remove(&c), "id {c}");
            check(&conns, &model);
        }
        conns.insert(20, conn());
        model.insert(20);
        check(&conns, &model);
    }
}
