//! Timers as data: each relay's next deadline is kept in a table, updated
//! for the relay an input touched (every relay after an input that reached
//! further), so [`SyncEngine::poll_timeout`] reads the earliest one and
//! [`SyncEngine::handle_timeout`] pops the relays that are due
//! ([`DeadlineTable::pop_due`]) instead of scanning every relay,
//! subscription and batch.
//!
//! A deadline kept too early only wakes the engine for nothing (harmless);
//! every change that can make a relay's deadline earlier happens while an
//! input about that relay is handled, and that relay's entry is refreshed
//! after it. A relay popped as due is refreshed once its session fired its
//! timers.

use std::collections::{BTreeSet, HashMap};

use nostr::prelude::RelayUrl;

use crate::clock::Instant;

/// Each relay's next deadline, and the relays in deadline order.
#[derive(Debug, Default)]
pub(super) struct DeadlineTable {
    by_relay: HashMap<RelayUrl, Instant>,
    queue: BTreeSet<(Instant, RelayUrl)>,
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
            self.queue.remove(&(old, relay.clone()));
        }
        if let Some(at) = at {
            self.queue.insert((at, relay.clone()));
        }
    }

    /// The earliest deadline of any relay.
    pub(super) fn first(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// The relays whose deadline is due at `now`, earliest first (a tie in
    /// URL order), taken out of the table: the caller fires their timers
    /// and sets their next deadline.
    pub(super) fn pop_due(&mut self, now: Instant) -> Vec<RelayUrl> {
        let mut due = Vec::new();
        while self.queue.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, relay)) = self.queue.pop_first() {
                self.by_relay.remove(&relay);
                due.push(relay);
            }
        }
        due
    }

    pub(super) fn clear(&mut self) {
        self.by_relay.clear();
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(n: u8) -> RelayUrl {
        RelayUrl::parse(&format!("wss://r{n}.example.com")).expect("url")
    }

    fn at(s: u64) -> Instant {
        Instant::ZERO + std::time::Duration::from_secs(s)
    }

    #[test]
    fn the_table_keeps_the_earliest_deadline_of_any_relay() {
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

    #[test]
    fn pop_due_takes_every_due_relay_earliest_first_and_only_those() {
        let mut table = DeadlineTable::default();
        table.set(&relay(1), Some(at(9)));
        table.set(&relay(2), Some(at(3)));
        table.set(&relay(3), Some(at(5)));
        table.set(&relay(4), Some(at(5)));
        table.set(&relay(5), Some(at(2)));
        table.set(&relay(5), Some(at(6)));
        assert_eq!(table.pop_due(at(1)), Vec::<RelayUrl>::new());
        assert_eq!(
            table.pop_due(at(5)),
            vec![relay(2), relay(3), relay(4)],
            "the due ones, earliest first; relay 5 moved to 6"
        );
        assert_eq!(table.first(), Some(at(6)));
        assert_eq!(table.pop_due(at(5)), Vec::<RelayUrl>::new(), "popped once");
        table.set(&relay(3), Some(at(4)));
        assert_eq!(table.pop_due(at(20)), vec![relay(3), relay(5), relay(1)]);
        assert_eq!(table.first(), None);
    }
}
