//! Timers as data: a small table of named deadlines. A session keeps one
//! for its relay ([`RelayTimer`]), the engine one for its own work
//! ([`EngineTimer`]); the next wake-up is the earliest entry of all tables.
//! A timer firing early or twice is harmless: what it wakes checks its
//! state again.

use crate::clock::Instant;

/// What a relay session waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelayTimer {
    /// Failed Layer 2+3 items are planned again.
    Replan,
    /// A failed Layer 1 historic sync is tried again.
    Layer1Retry,
    /// Live subscriptions are rebuilt after one was refused.
    RebuildLive,
    /// Live filters that did not fit are polled with `since` (this timer
    /// belongs to the connection: it is cleared when the connection closes).
    Poll,
}

/// What the engine itself waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EngineTimer {
    /// The daily re-sync of every connected relay.
    Daily,
    /// The check for relays nothing lists any more.
    DisconnectCheck,
    /// The self-subscriber's batch window closes (started by the first
    /// event the own relay accepted, not reset by later ones).
    OwnBatch,
}

/// Named deadlines, at most one per kind.
#[derive(Clone, Debug)]
pub(crate) struct TimerTable<K> {
    entries: Vec<(K, Instant)>,
}

impl<K> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            entries: Vec::new(),
        }
    }
}

impl<K: Copy + PartialEq> TimerTable<K> {
    /// Sets `kind` to fire at `at`, replacing an earlier setting.
    pub(crate) fn set(&mut self, kind: K, at: Instant) {
        self.clear(kind);
        self.entries.push((kind, at));
    }

    /// Sets `kind` to fire at `at` unless it is set already.
    pub(crate) fn set_unless_set(&mut self, kind: K, at: Instant) {
        if !self.is_set(kind) {
            self.entries.push((kind, at));
        }
    }

    /// Clears `kind`.
    pub(crate) fn clear(&mut self, kind: K) {
        self.entries.retain(|(entry, _)| *entry != kind);
    }

    /// When `kind` fires, if it is set.
    pub(crate) fn at(&self, kind: K) -> Option<Instant> {
        self.entries
            .iter()
            .find(|(entry, _)| *entry == kind)
            .map(|(_, at)| *at)
    }

    /// `true` if `kind` is set.
    pub(crate) fn is_set(&self, kind: K) -> bool {
        self.at(kind).is_some()
    }

    /// `true` if `kind` is set and due at `now`.
    pub(crate) fn is_due(&self, kind: K, now: Instant) -> bool {
        self.at(kind).is_some_and(|at| at <= now)
    }

    /// `true` (and `kind` cleared) if `kind` is due at `now`.
    pub(crate) fn fire(&mut self, kind: K, now: Instant) -> bool {
        let due = self.is_due(kind, now);
        if due {
            self.clear(kind);
        }
        due
    }

    /// The earliest entry.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.entries.iter().map(|(_, at)| *at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Instant {
        Instant::ZERO + std::time::Duration::from_secs(secs)
    }

    #[test]
    fn one_entry_per_kind_and_the_earliest_wins() {
        let mut table = TimerTable::default();
        table.set(RelayTimer::Replan, at(9));
        table.set(RelayTimer::Poll, at(5));
        table.set(RelayTimer::Replan, at(7));
        assert_eq!(table.earliest(), Some(at(5)));
        table.set_unless_set(RelayTimer::Poll, at(1));
        assert_eq!(table.at(RelayTimer::Poll), Some(at(5)), "kept");
        assert!(!table.fire(RelayTimer::Replan, at(6)), "not due yet");
        assert!(table.fire(RelayTimer::Replan, at(7)));
        assert!(!table.fire(RelayTimer::Replan, at(8)), "fired once");
        table.clear(RelayTimer::Poll);
        assert_eq!(table.earliest(), None);
    }
}
