//! Timers as data: a small table of named deadlines. A session keeps one
//! for its relay ([`RelayTimer`]), the engine one for its own work
//! ([`EngineTimer`]); the next wake-up is the earliest entry of all tables.
//! Every deadline a session has, set in its table or implied by its state,
//! is named by a [`Deadline`]. A timer firing early or twice is harmless:
//! what it wakes checks its state again.

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

/// Every kind of deadline a relay session has: its [`RelayTimer`]s, and
/// those its state (its link, its connection, its health) implies (computed when asked, not stored).
/// `RelaySession::next_deadline` names the earliest, so a log or a test
/// can say which one is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// A connection attempt is abandoned (its link's deadline,
    /// `Link::Connecting`).
    ConnectTimeout,
    /// [`RelayTimer::Replan`].
    Replan,
    /// [`RelayTimer::Layer1Retry`].
    Layer1Retry,
    /// [`RelayTimer::RebuildLive`].
    RebuildLive,
    /// [`RelayTimer::Poll`].
    Poll,
    /// The relay's health answer changes: its reconnect backoff or its
    /// rate-limit cooldown ends, or it counts as dead
    /// (`RelayHealth::poll_timeout`).
    Health,
    /// A NIP-77 session's NEG-OPEN goes unanswered for the negentropy
    /// timeout.
    NegentropyUnanswered,
    /// The learned rate's window frees an opening for queued work.
    RateWindow,
    /// A historic REQ counts as dropped by the relay
    /// (`RelayConn::req_stalls_at`).
    ReqStall,
    /// A live subscription is unanswered while the relay is silent
    /// (`RelaySession::live_unanswered`).
    LiveUnanswered,
    /// A batch with a running job stalls
    /// (`RelaySession::batch_stalls_at`).
    BatchStall,
}

impl From<RelayTimer> for Deadline {
    fn from(timer: RelayTimer) -> Self {
        match timer {
            RelayTimer::Replan => Deadline::Replan,
            RelayTimer::Layer1Retry => Deadline::Layer1Retry,
            RelayTimer::RebuildLive => Deadline::RebuildLive,
            RelayTimer::Poll => Deadline::Poll,
        }
    }
}

/// The earliest of named deadlines offered one at a time (the first
/// offered wins a tie).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Earliest<K> {
    earliest: Option<(K, Instant)>,
}

impl<K> Default for Earliest<K> {
    fn default() -> Self {
        Earliest { earliest: None }
    }
}

impl<K: Copy> Earliest<K> {
    /// Offers `kind` due at `at`, if it is set.
    pub(crate) fn consider(&mut self, kind: K, at: Option<Instant>) {
        let Some(at) = at else {
            return;
        };
        if self.earliest.is_none_or(|(_, earliest)| at < earliest) {
            self.earliest = Some((kind, at));
        }
    }

    /// The earliest deadline offered, with its kind.
    pub(crate) fn get(&self) -> Option<(K, Instant)> {
        self.earliest
    }
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
    /// The next Sync+ pass (GRASP-03): the selection of participants and
    /// outbox relays moves on.
    SyncPlusPass,
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
        self.earliest_entry().map(|(_, at)| at)
    }

    /// The earliest entry, with its kind.
    pub(crate) fn earliest_entry(&self) -> Option<(K, Instant)> {
        let mut earliest = Earliest::default();
        for (kind, at) in &self.entries {
            earliest.consider(*kind, Some(*at));
        }
        earliest.get()
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
        assert_eq!(table.earliest_entry(), Some((RelayTimer::Poll, at(5))));
        table.set_unless_set(RelayTimer::Poll, at(1));
        assert_eq!(table.at(RelayTimer::Poll), Some(at(5)), "kept");
        assert!(!table.fire(RelayTimer::Replan, at(6)), "not due yet");
        assert!(table.fire(RelayTimer::Replan, at(7)));
        assert!(!table.fire(RelayTimer::Replan, at(8)), "fired once");
        table.clear(RelayTimer::Poll);
        assert_eq!(table.earliest(), None);
    }

    #[test]
    fn the_earliest_deadline_is_named_and_the_first_offered_wins_a_tie() {
        let mut earliest = Earliest::default();
        earliest.consider(Deadline::BatchStall, Some(at(9)));
        earliest.consider(Deadline::Health, None);
        earliest.consider(Deadline::ReqStall, Some(at(4)));
        earliest.consider(Deadline::LiveUnanswered, Some(at(4)));
        assert_eq!(earliest.get(), Some((Deadline::ReqStall, at(4))));
    }
}
