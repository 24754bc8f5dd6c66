//! Timers as data: each relay's next deadline is kept in a table, updated
//! for the relay an input touched (every relay after an input that reached
//! further), so [`SyncEngine::poll_timeout`] reads the earliest one instead
//! of scanning every relay, subscription and batch after every input.
//!
//! A deadline kept too early only wakes the engine for nothing (harmless);
//! every change that can make a relay's deadline earlier happens while an
//! input about that relay is handled, and that relay's entry is refreshed
//! after it.

use std::collections::{BTreeMap, HashMap};

use nostr::prelude::RelayUrl;

use crate::clock::Instant;

/// Each relay's next deadline, and how many relays wait for each instant.
#[derive(Debug, Default)]
pub(super) struct DeadlineTable {
    by_relay: HashMap<RelayUrl, Instant>,
    instants: BTreeMap<Instant, usize>,
}

impl DeadlineTable {
    /// Sets (or clears) `relay`'s deadline.
    pub(super) fn set(&mut self, relay: &RelayUrl, at: Option<Instant>) {
        let old = match at {
            Some(at) => self.by_relay.insert(relay.clone(), at),
            None => self.by_relay.remove(relay),
        };
        if old == at {
            return;
        }
        if let Some(old) = old {
            if let Some(count) = self.instants.get_mut(&old) {
                *count -= 1;
                if *count == 0 {
                    self.instants.remove(&old);
                }
            }
        }
        if let Some(at) = at {
            *self.instants.entry(at).or_default() += 1;
        }
    }

    /// The earliest deadline of any relay.
    pub(super) fn first(&self) -> Option<Instant> {
        self.instants.keys().next().copied()
    }

    pub(super) fn clear(&mut self) {
        self.by_relay.clear();
        self.instants.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_keeps_the_earliest_deadline_of_any_relay() {
        let relay = |n: u8| RelayUrl::parse(&format!("wss://r{n}.example.com")).expect("url");
        let at = |s: u64| Instant::ZERO + std::time::Duration::from_secs(s);
        let mut table = DeadlineTable::default();
        table.set(&relay(1), Some(at(5)));
        table.set(&relay(2), Some(at(5)));
        table.set(&relay(3), Some(at(9)));
        assert_eq!(table.first(), Some(at(5)));
        table.set(&relay(1), Some(at(7)));
        assert_eq!(table.first(), Some(at(5)), "relay 2 still waits for 5");
        table.set(&relay(2), None);
        assert_eq!(table.first(), Some(at(7)));
        table.set(&relay(1), None);
        table.set(&relay(3), None);
        assert_eq!(table.first(), None);
    }
}
