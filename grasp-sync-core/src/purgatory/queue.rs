//! The main sync queue: when each identifier may be synced next.
//!
//! One [`SyncQueueEntry`] per identifier holds the debounce/backoff deadline,
//! the number of failed attempts and whether a sync task is running.
//! [`SyncQueue`] keeps them in insertion order so that every answer is
//! deterministic.
//!
//! Driving contract:
//! - an event arrives → [`SyncQueue::enqueue`] with
//!   [`SyncQueueConfig::default_delay`] (user-submitted, a `git push` is
//!   expected to follow) or [`SyncQueueConfig::immediate_delay`] (arrived by
//!   sync, batch the burst);
//! - on a tick or at [`SyncQueue::poll_timeout`] → [`SyncQueue::take_ready`]
//!   and start one sync per returned identifier;
//! - when a sync ends → [`SyncQueue::complete`] with `done = true` if nothing
//!   is left to fetch (the entry is removed) or `false` (backoff applies).

use std::time::Duration;

use indexmap::IndexMap;

use crate::backoff::ExponentialBackoff;
use crate::clock::Instant;

/// Delays of the sync queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncQueueConfig {
    /// Backoff after failed attempts: 20 s, 40 s, 80 s, then 120 s.
    pub backoff: ExponentialBackoff,
    /// Debounce for user-submitted events (180 s): a push is expected to follow.
    pub default_delay: Duration,
    /// Debounce for events that arrived by sync (500 ms): batches bursts.
    pub immediate_delay: Duration,
}

impl Default for SyncQueueConfig {
    fn default() -> Self {
        SyncQueueConfig {
            backoff: ExponentialBackoff::new(Duration::from_secs(20), Duration::from_secs(120)),
            default_delay: Duration::from_secs(180),
            immediate_delay: Duration::from_millis(500),
        }
    }
}

/// When and how to sync one identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncQueueEntry {
    /// No sync starts before this instant.
    pub next_attempt: Instant,
    /// Failed attempts since the last new event (drives the backoff).
    pub attempt_count: u32,
    /// Whether a sync of this identifier is running.
    pub in_progress: bool,
}

impl SyncQueueEntry {
    /// An entry that becomes ready `delay` after `now`.
    pub fn new(now: Instant, delay: Duration) -> Self {
        SyncQueueEntry {
            next_attempt: now + delay,
            attempt_count: 0,
            in_progress: false,
        }
    }

    /// The backoff for the current attempt count: 20 s, 20 s, 40 s, 80 s,
    /// 120 s, 120 s… for counts 0, 1, 2, 3, 4, 5… with the default config.
    pub fn backoff(&self, config: &SyncQueueConfig) -> Duration {
        config.backoff.delay(self.attempt_count)
    }

    /// Whether a sync may start at `now`: not running and the deadline passed.
    pub fn is_ready(&self, now: Instant) -> bool {
        !self.in_progress && now >= self.next_attempt
    }

    /// A new event arrived: forget past failures and make sure a sync starts
    /// no later than `delay` after `now`. The deadline only ever moves
    /// earlier, so a burst of events cannot postpone a sync indefinitely.
    pub fn on_new_event(&mut self, now: Instant, delay: Duration) {
        self.attempt_count = 0;
        self.next_attempt = self.next_attempt.min(now + delay);
    }

    /// A sync of this identifier starts.
    pub fn mark_in_progress(&mut self) {
        self.in_progress = true;
    }

    /// A sync ended with work left. Unless a new event scheduled a later
    /// attempt while it ran, count the failure and back off from `now`.
    pub fn on_sync_complete(&mut self, now: Instant, config: &SyncQueueConfig) {
        self.in_progress = false;
        if self.next_attempt <= now {
            self.attempt_count = self.attempt_count.saturating_add(1);
            self.next_attempt = now + self.backoff(config);
        }
    }
}

/// The identifiers waiting for a sync, in insertion order.
#[derive(Clone, Debug, Default)]
pub struct SyncQueue {
    config: SyncQueueConfig,
    entries: IndexMap<String, SyncQueueEntry>,
}

impl SyncQueue {
    /// An empty queue with `config`.
    pub fn new(config: SyncQueueConfig) -> Self {
        SyncQueue {
            config,
            entries: IndexMap::new(),
        }
    }

    /// The delays this queue uses.
    pub fn config(&self) -> &SyncQueueConfig {
        &self.config
    }

    /// An event for `identifier` arrived at `now`: add it with `delay`, or
    /// reset its backoff and move its deadline earlier if already queued.
    pub fn enqueue(&mut self, identifier: &str, now: Instant, delay: Duration) {
        match self.entries.get_mut(identifier) {
            Some(entry) => entry.on_new_event(now, delay),
            None => {
                self.entries
                    .insert(identifier.to_owned(), SyncQueueEntry::new(now, delay));
            }
        }
    }

    /// The identifiers ready at `now`, in queue order, each marked in
    /// progress so it is not returned again until [`SyncQueue::complete`].
    pub fn take_ready(&mut self, now: Instant) -> Vec<String> {
        let mut ready = Vec::new();
        for (identifier, entry) in self.entries.iter_mut() {
            if entry.is_ready(now) {
                entry.mark_in_progress();
                ready.push(identifier.clone());
            }
        }
        ready
    }

    /// The sync of `identifier` ended at `now`: `done` removes it (nothing
    /// left to fetch), otherwise the backoff applies. Unknown identifiers are
    /// ignored.
    pub fn complete(&mut self, identifier: &str, now: Instant, done: bool) {
        if done {
            self.remove(identifier);
        } else if let Some(entry) = self.entries.get_mut(identifier) {
            entry.on_sync_complete(now, &self.config);
        }
    }

    /// Forgets every identifier that is not being synced and for which `keep` is false
    /// (for example identifiers whose events were all released by a domain queue).
    /// Returns how many were forgotten.
    pub fn retain_idle(&mut self, mut keep: impl FnMut(&str) -> bool) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|identifier, entry| entry.in_progress || keep(identifier));
        before - self.entries.len()
    }

    /// Forgets `identifier` (for example when its events expired).
    ///
    /// Removing an identifier whose sync is still running forgets that it
    /// runs: a later [`SyncQueue::enqueue`] can make it ready again before the
    /// first sync ends. Drivers end running syncs through
    /// [`SyncQueue::complete`].
    pub fn remove(&mut self, identifier: &str) -> Option<SyncQueueEntry> {
        self.entries.shift_remove(identifier)
    }

    /// The entry of `identifier`, if queued.
    pub fn get(&self, identifier: &str) -> Option<&SyncQueueEntry> {
        self.entries.get(identifier)
    }

    /// How many identifiers are queued (running or waiting).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no identifier is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The earliest deadline among identifiers that are not running: when
    /// [`SyncQueue::take_ready`] will next return something. `None` when every
    /// entry is running or the queue is empty.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter(|entry| !entry.in_progress)
            .map(|entry| entry.next_attempt)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retain_idle_keeps_running_syncs() {
        let mut queue = SyncQueue::default();
        queue.enqueue("running", Instant::ZERO, Duration::ZERO);
        queue.enqueue("released", Instant::ZERO, Duration::ZERO);
        queue.enqueue("waiting", Instant::ZERO, Duration::from_secs(9));
        assert_eq!(queue.take_ready(Instant::ZERO), vec!["running", "released"]);
        queue.complete("released", Instant::ZERO, false);
        let forgotten = queue.retain_idle(|identifier| identifier == "waiting");
        assert_eq!(forgotten, 1);
        assert!(queue.get("running").is_some());
        assert!(queue.get("released").is_none());
        assert!(queue.get("waiting").is_some());
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn default_config_matches_the_spec() {
        let config = SyncQueueConfig::default();
        assert_eq!(config.default_delay, secs(180));
        assert_eq!(config.immediate_delay, Duration::from_millis(500));
        assert_eq!(config.backoff.base, secs(20));
        assert_eq!(config.backoff.max, secs(120));
    }

    #[test]
    fn backoff_grows_20_40_80_then_caps_at_120() {
        let config = SyncQueueConfig::default();
        let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
        let mut now = Instant::ZERO;
        let mut delays = Vec::new();
        for _ in 0..6 {
            entry.mark_in_progress();
            entry.on_sync_complete(now, &config);
            delays.push(entry.next_attempt.saturating_duration_since(now).as_secs());
            now = entry.next_attempt;
        }
        assert_eq!(delays, vec![20, 40, 80, 120, 120, 120]);
        assert_eq!(entry.attempt_count, 6);
    }

    #[test]
    fn new_entry_waits_for_its_delay() {
        let entry = SyncQueueEntry::new(Instant::from_secs(10), secs(180));
        assert!(!entry.is_ready(Instant::from_secs(189)));
        assert!(entry.is_ready(Instant::from_secs(190)));
    }

    #[test]
    fn in_progress_entry_is_never_ready() {
        let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
        entry.mark_in_progress();
        assert!(!entry.is_ready(Instant::from_secs(1_000)));
    }

    #[test]
    fn on_new_event_resets_attempts_and_only_moves_earlier() {
        let config = SyncQueueConfig::default();
        let mut entry = SyncQueueEntry::new(Instant::ZERO, secs(180));
        entry.attempt_count = 3;

        entry.on_new_event(Instant::from_secs(1), Duration::from_millis(500));
        assert_eq!(entry.attempt_count, 0);
        assert_eq!(entry.next_attempt, Instant::from_millis(1_500));

        // A later deadline (user-submitted delay) does not postpone the sync.
        entry.on_new_event(Instant::from_secs(1), config.default_delay);
        assert_eq!(entry.next_attempt, Instant::from_millis(1_500));
    }

    #[test]
    fn event_during_sync_restarts_backoff_at_first_step() {
        let config = SyncQueueConfig::default();
        let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::ZERO);
        entry.attempt_count = 3;
        entry.mark_in_progress();
        entry.on_new_event(Instant::from_secs(5), config.immediate_delay);
        entry.on_sync_complete(Instant::from_secs(10), &config);
        assert!(!entry.in_progress);
        assert_eq!(entry.attempt_count, 1);
        assert_eq!(entry.next_attempt, Instant::from_secs(30));
    }

    #[test]
    fn sync_ending_before_a_pending_deadline_counts_no_failure() {
        let config = SyncQueueConfig::default();
        let mut entry = SyncQueueEntry::new(Instant::ZERO, Duration::from_secs(60));
        entry.mark_in_progress();
        entry.on_sync_complete(Instant::from_secs(10), &config);
        assert!(!entry.in_progress);
        assert_eq!(entry.attempt_count, 0);
        assert_eq!(entry.next_attempt, Instant::from_secs(60));
    }

    #[test]
    fn time_going_backwards_does_not_panic() {
        let config = SyncQueueConfig::default();
        let mut entry = SyncQueueEntry::new(Instant::from_secs(100), secs(1));
        assert!(!entry.is_ready(Instant::from_secs(50)));
        entry.on_new_event(Instant::ZERO, Duration::ZERO);
        assert_eq!(entry.next_attempt, Instant::ZERO);
        entry.on_sync_complete(Instant::ZERO, &config);
        assert_eq!(entry.next_attempt, Instant::from_secs(20));

        let mut queue = SyncQueue::default();
        queue.enqueue("a", Instant::from_secs(100), Duration::ZERO);
        assert!(queue.take_ready(Instant::from_secs(10)).is_empty());
        queue.enqueue("a", Instant::ZERO, Duration::ZERO);
        assert_eq!(queue.take_ready(Instant::ZERO), vec!["a".to_owned()]);
    }

    #[test]
    fn huge_instants_saturate() {
        let config = SyncQueueConfig::default();
        let end = Instant::from_duration(Duration::MAX);
        let mut entry = SyncQueueEntry::new(end, secs(180));
        assert_eq!(entry.next_attempt, end);
        entry.attempt_count = u32::MAX;
        entry.on_sync_complete(end, &config);
        assert_eq!(entry.attempt_count, u32::MAX);
        assert_eq!(entry.next_attempt, end);
    }

    #[test]
    fn burst_of_ten_events_yields_one_fetch() {
        let mut queue = SyncQueue::default();
        let delay = queue.config().immediate_delay;
        let mut fetches = Vec::new();
        for i in 0..10u64 {
            let now = Instant::from_millis(i * 10);
            queue.enqueue("repo", now, delay);
            fetches.extend(queue.take_ready(now));
        }
        assert!(fetches.is_empty());
        assert_eq!(queue.poll_timeout(), Some(Instant::from_millis(500)));
        for ms in (100..=2_000).step_by(50) {
            fetches.extend(queue.take_ready(Instant::from_millis(ms)));
        }
        assert_eq!(fetches, vec!["repo".to_owned()]);
    }

    #[test]
    fn take_ready_is_in_queue_order_and_marks_in_progress() {
        let mut queue = SyncQueue::default();
        queue.enqueue("c", Instant::ZERO, secs(1));
        queue.enqueue("a", Instant::ZERO, secs(1));
        queue.enqueue("b", Instant::ZERO, secs(5));
        let now = Instant::from_secs(10);
        assert_eq!(
            queue.take_ready(now),
            vec!["c".to_owned(), "a".to_owned(), "b".to_owned()]
        );
        assert!(queue.take_ready(now).is_empty());
        assert!(queue.get("a").is_some_and(|e| e.in_progress));
        assert_eq!(queue.poll_timeout(), None);
    }

    #[test]
    fn complete_removes_when_done_and_backs_off_otherwise() {
        let mut queue = SyncQueue::default();
        queue.enqueue("a", Instant::ZERO, Duration::ZERO);
        queue.enqueue("b", Instant::ZERO, Duration::ZERO);
        assert_eq!(queue.take_ready(Instant::ZERO).len(), 2);

        queue.complete("a", Instant::from_secs(3), true);
        queue.complete("b", Instant::from_secs(3), false);
        queue.complete("unknown", Instant::from_secs(3), false);

        assert_eq!(queue.len(), 1);
        assert!(queue.get("a").is_none());
        assert_eq!(queue.poll_timeout(), Some(Instant::from_secs(23)));
        assert!(queue.take_ready(Instant::from_secs(22)).is_empty());
        assert_eq!(
            queue.take_ready(Instant::from_secs(23)),
            vec!["b".to_owned()]
        );
    }

    #[test]
    fn new_event_resets_backoff_of_queued_identifier() {
        let mut queue = SyncQueue::default();
        queue.enqueue("a", Instant::ZERO, Duration::ZERO);
        for round in 0..3u64 {
            let now = queue.poll_timeout().unwrap_or(Instant::ZERO);
            assert_eq!(queue.take_ready(now).len(), 1, "round {round}");
            queue.complete("a", now, false);
        }
        assert_eq!(queue.get("a").map(|e| e.attempt_count), Some(3));
        // The third failure at 60 s backed off to 140 s; the event moves it up.
        assert_eq!(queue.poll_timeout(), Some(Instant::from_secs(140)));
        queue.enqueue("a", Instant::from_secs(100), Duration::from_millis(500));
        assert_eq!(queue.get("a").map(|e| e.attempt_count), Some(0));
        assert_eq!(queue.poll_timeout(), Some(Instant::from_millis(100_500)));
    }

    #[test]
    fn remove_and_is_empty() {
        let mut queue = SyncQueue::new(SyncQueueConfig::default());
        assert!(queue.is_empty());
        queue.enqueue("a", Instant::ZERO, secs(1));
        assert!(queue.remove("a").is_some());
        assert!(queue.remove("a").is_none());
        assert!(queue.is_empty());
        assert_eq!(queue.poll_timeout(), None);
    }
}

#[cfg(test)]
mod proptests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Enqueue { id: u8, delay_ms: u64 },
        TakeReady,
        Complete { id: u8, done: bool },
        Remove { id: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..4, 0u64..200_000).prop_map(|(id, delay_ms)| Op::Enqueue { id, delay_ms }),
            Just(Op::TakeReady),
            (0u8..4, any::<bool>()).prop_map(|(id, done)| Op::Complete { id, done }),
            (0u8..4).prop_map(|id| Op::Remove { id }),
        ]
    }

    /// Mostly forward steps, sometimes a jump backwards.
    fn time_step() -> impl Strategy<Value = i64> {
        prop_oneof![8 => 0i64..150_000, 1 => -100_000i64..0]
    }

    fn step(now: Instant, delta_ms: i64) -> Instant {
        let magnitude = Duration::from_millis(delta_ms.unsigned_abs());
        if delta_ms >= 0 {
            now + magnitude
        } else {
            now.checked_sub(magnitude).unwrap_or(Instant::ZERO)
        }
    }

    proptest! {
        #[test]
        fn backoff_is_monotone_and_capped(a in 0u32..200, b in 0u32..200) {
            let config = SyncQueueConfig::default();
            let entry = |n| SyncQueueEntry { next_attempt: Instant::ZERO, attempt_count: n, in_progress: false };
            let (low, high) = (a.min(b), a.max(b));
            prop_assert!(entry(low).backoff(&config) <= entry(high).backoff(&config));
            prop_assert!(entry(high).backoff(&config) <= config.backoff.max);
            prop_assert!(entry(low).backoff(&config) >= config.backoff.base.min(config.backoff.max));
        }

        #[test]
        fn ready_identifiers_are_never_in_progress_twice(
            ops in proptest::collection::vec((op(), time_step()), 1..200)
        ) {
            let mut queue = SyncQueue::default();
            let mut now = Instant::ZERO;
            // Identifiers whose sync the driver started and did not end yet.
            let mut running: BTreeSet<String> = BTreeSet::new();
            for (op, delta) in ops {
                now = step(now, delta);
                match op {
                    Op::Enqueue { id, delay_ms } => {
                        queue.enqueue(&id.to_string(), now, Duration::from_millis(delay_ms));
                    }
                    Op::TakeReady => {
                        let ready = queue.take_ready(now);
                        let distinct: BTreeSet<&String> = ready.iter().collect();
                        prop_assert_eq!(distinct.len(), ready.len());
                        for id in ready {
                            prop_assert!(running.insert(id.clone()), "{} returned while running", id);
                        }
                    }
                    Op::Complete { id, done } => {
                        let id = id.to_string();
                        if running.remove(&id) {
                            queue.complete(&id, now, done);
                        }
                    }
                    Op::Remove { id } => {
                        // Driver contract: running syncs end through complete().
                        let id = id.to_string();
                        if !running.contains(&id) {
                            queue.remove(&id);
                        }
                    }
                }
                for id in &running {
                    prop_assert!(queue.get(id).is_some_and(|e| e.in_progress));
                }
            }
        }
    }
}
