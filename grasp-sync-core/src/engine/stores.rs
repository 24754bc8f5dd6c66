//! Store outcomes: every verified event handed to the store is tracked until
//! the store says what it did with it. A batch confirms only when all of its
//! events are stored; a store that refuses for now (`rate-limited:`,
//! `error:`), fails or does not answer gets the event again, in order, with
//! backoff; a refusal for good (`blocked:`, `invalid:`, `pow:`,
//! `restricted:` …) is remembered so a re-sync does not download the event
//! again.

use std::collections::{HashMap, VecDeque};

use indexmap::IndexMap;
use nostr::filter::MatchEventOptions;
use nostr::prelude::{Event, EventId, Filter, Kind, RelayUrl, Timestamp};
use tracing::{debug, warn};

use super::classify::{classify, Prefix};
use super::{Command, SyncEngine};
use crate::backoff::ExponentialBackoff;
use crate::clock::{Instant, Now};
use crate::model::BatchId;
use crate::nip34::{is_root_kind, KIND_REPO_ANNOUNCEMENT};
use crate::store::{IngestOutcome, StoreError};

/// What the engine makes of one store answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreVerdict {
    /// Newly stored.
    Stored,
    /// The store already had it.
    Duplicate,
    /// Refused for now: offered again after a backoff.
    Retry(String),
    /// Refused for good: remembered, not downloaded again.
    Refused(String),
}

impl StoreVerdict {
    /// Reads a store's answer. NIP-01 prefixes `rate-limited:` and `error:`
    /// (strfry's `ERROR: ` decoration included) and backend failures are
    /// transient; every other refusal is permanent.
    pub fn of(result: &Result<IngestOutcome, StoreError>) -> StoreVerdict {
        match result {
            Ok(IngestOutcome::Stored) => StoreVerdict::Stored,
            Ok(IngestOutcome::Duplicate) => StoreVerdict::Duplicate,
            Ok(IngestOutcome::Rejected { reason }) => {
                let classified = classify(reason);
                let transient = classified.rate_limited
                    || matches!(classified.prefix, Prefix::RateLimited | Prefix::Error);
                if transient {
                    StoreVerdict::Retry(reason.clone())
                } else {
                    StoreVerdict::Refused(reason.clone())
                }
            }
            Err(error) => StoreVerdict::Retry(error.to_string()),
        }
    }
}

/// An event handed to the store and not answered for yet.
#[derive(Debug)]
struct InFlight {
    event: Event,
    relay: RelayUrl,
    /// Batches that confirm only once it is stored.
    batches: Vec<BatchId>,
    /// When it was last handed to the store.
    sent_at: Instant,
    /// Waiting in the retry queue.
    retrying: bool,
}

/// Every event between `Command::Store` and the store's answer.
#[derive(Debug, Default)]
pub(crate) struct StoreTracker {
    in_flight: HashMap<EventId, InFlight>,
    /// Sent order, for the store timeout (stale entries are skipped).
    sent: VecDeque<(Instant, EventId)>,
    /// Events refused for now, in the order they were first stored.
    retry: VecDeque<EventId>,
    retry_at: Option<Instant>,
    failures_in_a_row: u32,
    /// Refused for good: `(created_at, event)` kept to answer negentropy.
    refused: IndexMap<EventId, Event>,
}

impl StoreTracker {
    /// Events waiting for the store's answer.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Events waiting for a retry.
    pub(crate) fn retrying(&self) -> usize {
        self.retry.len()
    }

    /// `true` if the store refused `id` for good.
    pub(crate) fn is_refused(&self, id: &EventId) -> bool {
        self.refused.contains_key(id)
    }

    /// Items of refused events matching `filter`, so negentropy does not
    /// count them as missing.
    pub(crate) fn refused_items(&self, filter: &Filter) -> Vec<(EventId, Timestamp)> {
        self.refused
            .values()
            .filter(|event| filter.match_event(event, MatchEventOptions::new()))
            .map(|event| (event.id, event.created_at))
            .collect()
    }

    /// The next store deadline: a retry or the oldest unanswered event.
    pub(crate) fn next_deadline(&self, timeout: std::time::Duration) -> Option<Instant> {
        let oldest = self.sent.iter().find_map(|(at, id)| {
            self.in_flight
                .get(id)
                .filter(|waiting| waiting.sent_at == *at)
                .map(|_| *at + timeout)
        });
        [self.retry_at, oldest].into_iter().flatten().min()
    }
}

impl SyncEngine {
    /// Hands a verified event to the store, unless it is already on its way
    /// (then `batch` waits for the same answer) or refused for good.
    pub(super) fn store(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        event: Event,
        batch: Option<BatchId>,
    ) {
        if self.stores.is_refused(&event.id) {
            return;
        }
        if let Some(waiting) = self.stores.in_flight.get_mut(&event.id) {
            if let Some(batch) = batch {
                if !waiting.batches.contains(&batch) {
                    waiting.batches.push(batch);
                    self.count_store(now, batch, 1);
                }
            }
            return;
        }
        self.stats.events_accepted += 1;
        if let Some(batch) = batch {
            self.count_store(now, batch, 1);
        }
        self.stores.sent.push_back((now.instant, event.id));
        self.stores.in_flight.insert(
            event.id,
            InFlight {
                event: event.clone(),
                relay: relay.clone(),
                batches: batch.into_iter().collect(),
                sent_at: now.instant,
                retrying: false,
            },
        );
        self.emit(Command::Store {
            relay: relay.clone(),
            event: Box::new(event),
        });
    }

    /// The store's answer to [`Command::Store`] for the event `id`.
    pub fn handle_store_outcome(
        &mut self,
        now: Now,
        id: &EventId,
        outcome: Result<IngestOutcome, StoreError>,
    ) {
        self.observe(now);
        let verdict = StoreVerdict::of(&outcome);
        self.apply_store_verdict(now, id, verdict);
        self.maintain(now);
    }

    fn apply_store_verdict(&mut self, now: Now, id: &EventId, verdict: StoreVerdict) {
        let waiting = self.stores.in_flight.get_mut(id);
        if waiting.as_ref().is_none_or(|waiting| waiting.retrying) {
            // Late answer to an event already settled or queued for a retry.
            return;
        }
        match verdict {
            StoreVerdict::Retry(reason) => {
                self.stats.store_retries += 1;
                if let Some(waiting) = waiting {
                    waiting.retrying = true;
                }
                self.stores.retry.push_back(*id);
                if self.stores.retry_at.is_none() {
                    // One round of retries per backoff step, however many
                    // events the store refused in it.
                    self.stores.failures_in_a_row = self.stores.failures_in_a_row.saturating_add(1);
                    let delay = ExponentialBackoff::new(
                        self.config.store_retry_base,
                        self.config.store_retry_max,
                    )
                    .delay(self.stores.failures_in_a_row);
                    debug!(%id, reason, ?delay, "store refused for now; retrying");
                    self.stores.retry_at = Some(now.instant + delay);
                }
            }
            StoreVerdict::Refused(reason) => {
                self.stores.failures_in_a_row = 0;
                self.stats.store_refused += 1;
                if let Some(done) = self.settle(now, id) {
                    warn!(id = %done.event.id, relay = %done.relay, reason, "store refused event; not downloading it again");
                    self.remember_refused(done.event);
                }
            }
            StoreVerdict::Stored | StoreVerdict::Duplicate => {
                self.stores.failures_in_a_row = 0;
                if let Some(done) = self.settle(now, id) {
                    if verdict == StoreVerdict::Stored {
                        self.stats.events_stored += 1;
                        self.plan_stored(now, done.event);
                    }
                }
            }
        }
    }

    /// Forgets an answered event and lets its batches confirm.
    fn settle(&mut self, now: Now, id: &EventId) -> Option<InFlight> {
        let done = self.stores.in_flight.remove(id)?;
        for batch in &done.batches {
            self.count_store(now, *batch, -1);
        }
        Some(done)
    }

    fn remember_refused(&mut self, event: Event) {
        self.stores.refused.insert(event.id, event);
        while self.stores.refused.len() > self.config.refused_memory {
            self.stores.refused.shift_remove_index(0);
        }
    }

    /// A stored announcement or root event is ours (the store accepted it):
    /// plan it like one the self-subscription reports, so a relay that
    /// embeds the library gets Layer 3 without glue.
    fn plan_stored(&mut self, now: Now, event: Event) {
        let ours = event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) || is_root_kind(event.kind);
        if ours {
            self.queue_own_events(now, [event]);
        }
    }

    /// Offers refused-for-now events again, in order, and events the store
    /// did not answer within the store timeout.
    pub(super) fn run_store_timers(&mut self, now: Now) {
        if self.stores.retry_at.is_some_and(|at| at <= now.instant) {
            self.stores.retry_at = None;
            let ids: Vec<EventId> = self.stores.retry.drain(..).collect();
            for id in ids {
                self.resend_store(now, &id);
            }
        }
        let timeout = self.config.store_timeout;
        while let Some((at, id)) = self.stores.sent.front().copied() {
            let current = self
                .stores
                .in_flight
                .get(&id)
                .is_some_and(|waiting| waiting.sent_at == at);
            if current && at + timeout > now.instant {
                break;
            }
            self.stores.sent.pop_front();
            let retrying = self
                .stores
                .in_flight
                .get(&id)
                .is_some_and(|waiting| waiting.retrying);
            if current && !retrying {
                warn!(%id, "store did not answer; offering the event again");
                self.stats.store_retries += 1;
                self.resend_store(now, &id);
            }
        }
    }

    fn resend_store(&mut self, now: Now, id: &EventId) {
        let Some(waiting) = self.stores.in_flight.get_mut(id) else {
            return;
        };
        waiting.sent_at = now.instant;
        waiting.retrying = false;
        let command = Command::Store {
            relay: waiting.relay.clone(),
            event: Box::new(waiting.event.clone()),
        };
        self.stores.sent.push_back((now.instant, *id));
        self.emit(command);
    }
}
