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
#[non_exhaustive]
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
    pub(crate) fn new(now: Instant, delay: Duration) -> Self {
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
    pub(crate) fn is_ready(&self, now: Instant) -> bool {
        !self.in_progress && now >= self.next_attempt
    }

    /// A new event arrived: forget past failures and make sure a sync starts
    /// no later than `delay` after `now`. The deadline only ever moves
    /// earlier, so a burst of events cannot postpone a sync indefinitely.
    pub(crate) fn on_new_event(&mut self, now: Instant, delay: Duration) {
        self.attempt_count = 0;
        self.next_attempt = self.next_attempt.min(now + delay);
    }

    /// A sync of this identifier starts.
    pub(crate) fn mark_in_progress(&mut self) {
        self.in_progress = true;
    }

    /// A sync ended with work left. Unless a new event scheduled a later
    /// attempt while it ran, count the failure and back off from `now`.
    pub(crate) fn on_sync_complete(&mut self, now: Instant, config: &SyncQueueConfig) {
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
    pub(crate) fn remove(&mut self, identifier: &str) -> Option<SyncQueueEntry> {
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
mod tests;

#[cfg(test)]
mod proptests;
