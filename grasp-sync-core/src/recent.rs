//! A bounded map keyed by event id, the oldest entry forgotten first: the
//! signatures verified lately ([`crate::verified::SeenSignatures`]), the ids
//! stored lately and the root events stored new lately (the engine's store
//! tracker).

use std::collections::{HashMap, VecDeque};

use nostr::prelude::EventId;

/// At most `capacity` ids, each with a value; the oldest goes first.
#[derive(Clone, Debug)]
pub(crate) struct RecentIds<V = ()> {
    /// Each id's value and the sequence number of its insertion.
    entries: HashMap<EventId, (V, u64)>,
    /// Insertion order; an entry whose sequence number no longer matches
    /// (taken, then inserted again) is stale and skipped.
    order: VecDeque<(EventId, u64)>,
    next: u64,
    capacity: usize,
}

impl<V> RecentIds<V> {
    /// Remembers at most `capacity` ids (0 remembers none).
    pub(crate) fn new(capacity: usize) -> Self {
        RecentIds {
            entries: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            capacity,
        }
    }

    /// How many ids are remembered.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` if `id` is remembered.
    pub(crate) fn contains(&self, id: &EventId) -> bool {
        self.entries.contains_key(id)
    }

    /// The value remembered with `id`.
    pub(crate) fn get(&self, id: &EventId) -> Option<&V> {
        self.entries.get(id).map(|(value, _)| value)
    }

    /// Remembers `id` with `value` (an id already remembered keeps its
    /// value and place), forgetting the oldest past the capacity.
    pub(crate) fn insert(&mut self, id: EventId, value: V) {
        if self.capacity == 0 || self.entries.contains_key(&id) {
            return;
        }
        let sequence = self.next;
        self.next += 1;
        self.entries.insert(id, (value, sequence));
        self.order.push_back((id, sequence));
        while self.entries.len() > self.capacity {
            let Some((oldest, sequence)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&oldest)
                .is_some_and(|(_, s)| *s == sequence)
            {
                self.entries.remove(&oldest);
            }
        }
        if self.order.len() > 2 * self.capacity + 16 {
            // Taken ids left stale places behind: drop them.
            let entries = &self.entries;
            self.order
                .retain(|(id, sequence)| entries.get(id).is_some_and(|(_, s)| s == sequence));
        }
    }

    /// Forgets `id`, returning its value if it was remembered.
    pub(crate) fn take(&mut self, id: &EventId) -> Option<V> {
        self.entries.remove(id).map(|(value, _)| value)
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }
}

impl<V> Default for RecentIds<V> {
    fn default() -> Self {
        RecentIds::new(REMEMBERED)
    }
}

/// How many ids the engine's sets remember by default (≈ 6 MiB at most).
pub(crate) const REMEMBERED: usize = 65_536;

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    #[test]
    fn the_oldest_is_forgotten_past_the_capacity() {
        let mut recent = RecentIds::new(2);
        recent.insert(id(1), 'a');
        recent.insert(id(2), 'b');
        recent.insert(id(2), 'x');
        recent.insert(id(3), 'c');
        assert!(!recent.contains(&id(1)));
        assert_eq!(recent.get(&id(2)), Some(&'b'), "the first value stays");
        assert_eq!(recent.len(), 2);
        recent.clear();
        assert!(!recent.contains(&id(3)));
        let mut none = RecentIds::new(0);
        none.insert(id(1), ());
        assert!(!none.contains(&id(1)) && none.len() == 0);
    }

    #[test]
    fn an_id_taken_and_inserted_again_counts_from_its_new_place() {
        let mut recent = RecentIds::new(2);
        recent.insert(id(1), ());
        recent.insert(id(2), ());
        assert_eq!(recent.take(&id(1)), Some(()));
        assert_eq!(recent.take(&id(1)), None);
        recent.insert(id(1), ());
        recent.insert(id(3), ());
        // 2 is the oldest now; 1's stale first place does not evict it.
        assert!(!recent.contains(&id(2)));
        assert!(recent.contains(&id(1)) && recent.contains(&id(3)));
    }

    #[test]
    fn stale_places_do_not_grow_the_order_without_bound() {
        let mut recent = RecentIds::new(4);
        for _ in 0..1_000 {
            recent.insert(id(7), ());
            recent.take(&id(7));
        }
        recent.insert(id(8), ());
        assert!(recent.order.len() <= 2 * 4 + 16 + 1);
    }
}
