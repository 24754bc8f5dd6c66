//! A bounded set of event ids, the oldest forgotten first.

use std::collections::{HashSet, VecDeque};

use nostr::prelude::EventId;

/// The ids stored lately: an id arriving again (from another relay, another
/// filter, a re-sync) is not handed to the store a second time.
#[derive(Debug)]
pub(crate) struct RecentIds {
    ids: HashSet<EventId>,
    order: VecDeque<EventId>,
    capacity: usize,
}

impl RecentIds {
    /// Remembers at most `capacity` ids.
    pub(crate) fn new(capacity: usize) -> Self {
        RecentIds {
            ids: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// `true` if `id` is remembered.
    pub(crate) fn contains(&self, id: &EventId) -> bool {
        self.ids.contains(id)
    }

    /// Remembers `id`, forgetting the oldest past the capacity.
    pub(crate) fn insert(&mut self, id: EventId) {
        if self.capacity == 0 || !self.ids.insert(id) {
            return;
        }
        self.order.push_back(id);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
    }

    /// Forgets `id`; `true` if it was remembered. (Its place in the order
    /// stays until it comes up: forgetting it then removes nothing.)
    pub(crate) fn take(&mut self, id: &EventId) -> bool {
        self.ids.remove(id)
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.order.clear();
    }
}

impl Default for RecentIds {
    fn default() -> Self {
        RecentIds::new(STORED_REMEMBERED)
    }
}

/// How many stored ids the engine remembers (≈ 6 MiB at most).
pub(crate) const STORED_REMEMBERED: usize = 65_536;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_forgotten_past_the_capacity() {
        let id = |n: u8| EventId::from_byte_array([n; 32]);
        let mut recent = RecentIds::new(2);
        recent.insert(id(1));
        recent.insert(id(2));
        recent.insert(id(2));
        recent.insert(id(3));
        assert!(!recent.contains(&id(1)));
        assert!(recent.contains(&id(2)) && recent.contains(&id(3)));
        recent.clear();
        assert!(!recent.contains(&id(3)));
    }

    #[test]
    fn a_taken_id_is_forgotten_once() {
        let id = |n: u8| EventId::from_byte_array([n; 32]);
        let mut recent = RecentIds::new(4);
        recent.insert(id(1));
        assert!(recent.take(&id(1)));
        assert!(!recent.take(&id(1)));
        assert!(!recent.contains(&id(1)));
    }
}
