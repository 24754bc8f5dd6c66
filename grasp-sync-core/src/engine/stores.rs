//! Store outcomes: every verified event handed to the store is tracked until
//! the store says what it did with it. A batch confirms only when all of its
//! events are stored; a store that refuses for now (`rate-limited:`,
//! `error:`), fails or does not answer gets the event again, in order, with
//! backoff; a refusal for good (`blocked:`, `invalid:`, `pow:`,
//! `restricted:` …) is remembered so a re-sync does not download the event
//! again.

use crate::health::Retry;
use std::collections::{HashMap, VecDeque};

use nostr::filter::MatchEventOptions;
use nostr::prelude::{Event, EventId, Filter, Kind, RelayUrl, Timestamp};
use tracing::{debug, warn};

use super::classify::{classify, Prefix};
use super::{Command, SyncEngine};
use crate::clock::{Instant, Now};
use crate::model::BatchId;
use crate::nip34::{is_root_kind, KIND_REPO_ANNOUNCEMENT};
use crate::recent::RecentIds;
use crate::store::{IngestOutcome, StoreError};
use crate::verified::VerifiedEvent;

/// What the engine makes of one store answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreVerdict {
    /// Newly stored.
    Stored,
    /// The store already had it.
    Duplicate,
    /// Refused for now (`rate-limited:`, `error:`, a failure): offered again
    /// after a backoff, for as long as it takes.
    Retry(String),
    /// Refused with a reason we cannot classify (no NIP-01 prefix,
    /// `auth-required:`): offered again a few times
    /// ([`EngineConfig::store_attempts`](super::EngineConfig::store_attempts)),
    /// then taken as refused for good.
    Unclear(String),
    /// Refused for good (`blocked:`, `invalid:`, `pow:`, `restricted:`,
    /// `mute:`): remembered, not downloaded again.
    Refused(String),
}

impl StoreVerdict {
    /// Reads a store's answer. NIP-01 prefixes `rate-limited:` and `error:`
    /// (strfry's `ERROR: ` decoration included) and backend failures are
    /// transient; `blocked:`, `invalid:`, `pow:`, `restricted:`, `mute:` are
    /// permanent; anything else is unclear.
    pub fn of(result: &Result<IngestOutcome, StoreError>) -> StoreVerdict {
        match result {
            Ok(IngestOutcome::Stored) => StoreVerdict::Stored,
            Ok(IngestOutcome::Duplicate) => StoreVerdict::Duplicate,
            Ok(IngestOutcome::Rejected { reason }) => {
                let classified = classify(reason);
                match classified.prefix {
                    Prefix::RateLimited | Prefix::Error => StoreVerdict::Retry(reason.clone()),
                    Prefix::Duplicate => StoreVerdict::Duplicate,
                    Prefix::Blocked
                    | Prefix::Invalid
                    | Prefix::Pow
                    | Prefix::Restricted
                    | Prefix::Mute => StoreVerdict::Refused(reason.clone()),
                    _ if classified.rate_limited => StoreVerdict::Retry(reason.clone()),
                    _ => StoreVerdict::Unclear(reason.clone()),
                }
            }
            Err(error) => StoreVerdict::Retry(error.to_string()),
        }
    }
}

/// An event handed to the store and not answered for yet.
#[derive(Debug)]
struct InFlight {
    event: VerifiedEvent,
    relay: RelayUrl,
    /// Batches (of their relays) that confirm only once it is stored.
    batches: Vec<(RelayUrl, BatchId)>,
    /// Waiting in the retry queue.
    retrying: bool,
    /// Unclear refusals so far.
    unclear: u32,
}

/// Every event between `Command::Store` and the store's answer.
#[derive(Debug, Default)]
pub(crate) struct StoreTracker {
    in_flight: HashMap<EventId, InFlight>,
    /// Events refused for now, in the order they were first stored.
    retry: VecDeque<EventId>,
    retry_at: Option<Instant>,
    /// The store's refusals for now in a row and their backoff
    /// ([`HealthConfig::store_backoff`](crate::health::HealthConfig::store_backoff));
    /// `None` once it takes or settles an event.
    pub(super) refusals: Option<Retry>,
    /// The store's last sign of life (an answer, or the first event handed
    /// to an idle store): with events waiting and no answer for the store
    /// timeout after it, the store is taken for stalled.
    alive_at: Option<Instant>,
    /// Refused for good, stripped of their content, to answer negentropy.
    refused: HashMap<EventId, Event>,
    /// `refused` in the order remembered, oldest first.
    refused_order: VecDeque<EventId>,
    /// Stored (or held already) lately: not handed to the store again.
    /// Forgotten at the daily re-sync, which compares with the store itself.
    pub(super) stored_lately: RecentIds,
    /// Root events the store took as new lately: their replies are new to
    /// us too, so they are fetched by REQ without reconciling first.
    pub(super) fresh_roots: RecentIds,
}

impl StoreTracker {
    /// Events waiting for the store's answer or a retry.
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

    /// The next store deadline: a retry, or the store's silence reaching the
    /// timeout while events wait for its answer.
    pub(crate) fn next_deadline(&self, timeout: std::time::Duration) -> Option<Instant> {
        let waiting = self.in_flight.len() > self.retry.len();
        let stalled = self.alive_at.filter(|_| waiting).map(|at| at + timeout);
        [self.retry_at, stalled].into_iter().flatten().min()
    }
}

impl SyncEngine {
    /// Hands a verified event to the store, unless it is already on its way
    /// (then `batch` waits for the same answer) or refused for good.
    pub(super) fn store(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        event: VerifiedEvent,
        batch: Option<BatchId>,
    ) {
        // Whatever follows, the store has it, is asked for it or refused it.
        self.note_sent_reply(relay, &event);
        if self.stores.is_refused(&event.id) {
            return;
        }
        if self.stores.stored_lately.contains(&event.id) {
            self.stats.already_stored += 1;
            return;
        }
        if let Some(waiting) = self.stores.in_flight.get_mut(&event.id) {
            if let Some(batch) = batch {
                let waits = (relay.clone(), batch);
                if !waiting.batches.contains(&waits) {
                    waiting.batches.push(waits);
                    self.count_store(now, relay, batch, 1);
                }
            }
            return;
        }
        self.stats.events_accepted += 1;
        if let Some(batch) = batch {
            self.count_store(now, relay, batch, 1);
        }
        if self.stores.in_flight.len() == self.stores.retry.len() {
            // The store had nothing to answer: its silence counts from now.
            self.stores.alive_at = Some(now.instant);
        }
        self.stores.in_flight.insert(
            event.id,
            InFlight {
                event: event.clone(),
                relay: relay.clone(),
                batches: batch
                    .map(|batch| (relay.clone(), batch))
                    .into_iter()
                    .collect(),
                retrying: false,
                unclear: 0,
            },
        );
        self.emit(Command::Store {
            relay: relay.clone(),
            event,
        });
    }

    /// Counts an event `relay` sent, and whether it sent it lately already.
    pub(super) fn note_received(&mut self, relay: &RelayUrl, id: EventId) {
        let capacity = self.config.received_ids_per_relay;
        let known = self.knowledge(relay);
        known.events_received += 1;
        let lately = known
            .received_lately
            .get_or_insert_with(|| RecentIds::new(capacity));
        if lately.contains(&id) {
            known.events_received_again += 1;
            self.stats.events_received_again += 1;
        } else {
            lately.insert(id, ());
        }
    }

    /// Of the ids a negentropy round of `batch` found missing, those to
    /// fetch: not one stored lately (the store has it), nor one on its way
    /// to the store already (`batch` then waits for that answer, so it
    /// confirms only once the event is stored). Counted in
    /// [`EngineStats::fetches_saved`](super::EngineStats::fetches_saved).
    pub(super) fn still_to_fetch(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        batch: BatchId,
        need: Vec<EventId>,
    ) -> Vec<EventId> {
        let mut fetch = Vec::with_capacity(need.len());
        for id in need {
            if self.stores.stored_lately.contains(&id)
                || self.wait_for_store(now, relay, batch, &id)
            {
                self.stats.fetches_saved += 1;
            } else {
                fetch.push(id);
            }
        }
        fetch
    }

    /// If `id` is on its way to the store, `batch` confirms only once it is
    /// stored (`true`); `false` if it is not waiting for the store.
    pub(super) fn wait_for_store(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        batch: BatchId,
        id: &EventId,
    ) -> bool {
        let Some(waiting) = self.stores.in_flight.get_mut(id) else {
            return false;
        };
        let waits = (relay.clone(), batch);
        if !waiting.batches.contains(&waits) {
            waiting.batches.push(waits);
            self.count_store(now, relay, batch, 1);
        }
        true
    }

    /// The store's answer to [`Command::Store`] for the event `id`.
    pub fn handle_store_outcome(
        &mut self,
        now: Now,
        id: &EventId,
        outcome: Result<IngestOutcome, StoreError>,
    ) {
        self.observe(now);
        let before = self.reach();
        self.stores.alive_at = Some(now.instant);
        let verdict = StoreVerdict::of(&outcome);
        self.apply_store_verdict(now, id, verdict);
        self.maintain_after(now, None, before);
    }

    fn apply_store_verdict(&mut self, now: Now, id: &EventId, verdict: StoreVerdict) {
        let attempts = self.config.store_attempts;
        let Some(waiting) = self.stores.in_flight.get_mut(id) else {
            self.stats.inputs_ignored += 1;
            debug!(%id, "store answer for an event not waiting (already settled)");
            return;
        };
        if waiting.retrying {
            // A late answer to an event already queued for a retry.
            self.stats.inputs_ignored += 1;
            return;
        }
        let verdict = match verdict {
            StoreVerdict::Unclear(reason) => {
                waiting.unclear = waiting.unclear.saturating_add(1);
                if waiting.unclear >= attempts {
                    StoreVerdict::Refused(reason)
                } else {
                    StoreVerdict::Retry(reason)
                }
            }
            verdict => verdict,
        };
        match verdict {
            StoreVerdict::Retry(reason) => {
                waiting.retrying = true;
                self.stats.store_retries += 1;
                self.stores.retry.push_back(*id);
                if self.stores.retry_at.is_none() {
                    // One round of retries per backoff step, however many
                    // events the store refused in it.
                    let backoff = self.config.health.store_backoff;
                    let delay = Retry::fail_in(&mut self.stores.refusals, backoff);
                    debug!(%id, reason, ?delay, "store refused for now; retrying");
                    self.stores.retry_at = Some(now.instant + delay);
                }
            }
            StoreVerdict::Refused(reason) | StoreVerdict::Unclear(reason) => {
                self.stores.refusals = None;
                self.stats.store_refused += 1;
                if let Some(done) = self.settle(now, id) {
                    warn!(id = %done.event.id, relay = %done.relay, reason, "store refused event; not downloading it again");
                    self.remember_refused(&done.event);
                }
            }
            StoreVerdict::Stored | StoreVerdict::Duplicate => {
                self.stores.refusals = None;
                self.stores.stored_lately.insert(*id, ());
                if let Some(done) = self.settle(now, id) {
                    if verdict == StoreVerdict::Stored {
                        if is_root_kind(done.event.kind) {
                            self.stores.fresh_roots.insert(*id, ());
                        }
                        self.stats.events_stored += 1;
                        if let Some(known) = self.relays.get_mut(&done.relay) {
                            known.events_stored += 1;
                        }
                    }
                    self.plan_stored(now, *done.event.into_event());
                }
            }
        }
    }

    /// Forgets an answered event and lets its batches confirm.
    fn settle(&mut self, now: Now, id: &EventId) -> Option<InFlight> {
        let done = self.stores.in_flight.remove(id)?;
        for (relay, batch) in &done.batches {
            self.count_store(now, relay, *batch, -1);
        }
        Some(done)
    }

    /// Keeps what negentropy needs of a refused event (its content can be
    /// large), forgetting the oldest beyond the configured memory.
    pub(super) fn remember_refused(&mut self, event: &Event) {
        let stripped = Event::new(
            event.id,
            event.pubkey,
            event.created_at,
            event.kind,
            event.tags.clone(),
            String::new(),
            event.sig,
        );
        if self.stores.refused.insert(event.id, stripped).is_none() {
            self.stores.refused_order.push_back(event.id);
        }
        while self.stores.refused.len() > self.config.refused_memory {
            let Some(oldest) = self.stores.refused_order.pop_front() else {
                break;
            };
            self.stores.refused.remove(&oldest);
        }
    }

    /// Forgets the refused events `forget` picks (they became ours), so the
    /// next sync downloads them again.
    pub(super) fn forget_refused(&mut self, forget: impl Fn(&Event) -> bool) {
        let StoreTracker {
            refused,
            refused_order,
            ..
        } = &mut self.stores;
        refused.retain(|_, event| !forget(event));
        refused_order.retain(|id| refused.contains_key(id));
    }

    /// A stored (or already held) announcement or root event is ours: plan
    /// it like one the self-subscription reports, so a relay that embeds the
    /// library gets Layer 3 without glue. Planning it twice is harmless.
    fn plan_stored(&mut self, now: Now, event: Event) {
        let ours = event.kind == Kind::Custom(KIND_REPO_ANNOUNCEMENT) || is_root_kind(event.kind);
        if ours {
            self.queue_own_events(now, [event]);
        }
    }

    /// Offers refused-for-now events again, in order; when the store has
    /// been silent for the store timeout with events waiting, offers those
    /// again too (a store that is merely busy keeps answering and is left
    /// alone).
    pub(super) fn run_store_timers(&mut self, now: Now) {
        if self.stores.retry_at.is_some_and(|at| at <= now.instant) {
            self.stores.retry_at = None;
            let ids: Vec<EventId> = self.stores.retry.drain(..).collect();
            if !ids.is_empty() {
                // The store's silence about them counts from their resending.
                self.stores.alive_at = Some(now.instant);
            }
            for id in ids {
                self.resend_store(&id);
            }
        }
        let waiting = self.stores.in_flight.len() > self.stores.retry.len();
        let stalled = waiting
            && self
                .stores
                .alive_at
                .is_some_and(|at| at + self.config.store_timeout <= now.instant);
        if stalled {
            self.stores.alive_at = Some(now.instant);
            let waiting: Vec<EventId> = self
                .stores
                .in_flight
                .iter()
                .filter(|(_, waiting)| !waiting.retrying)
                .map(|(id, _)| *id)
                .collect();
            warn!(
                events = waiting.len(),
                "store did not answer for the store timeout; offering its events again"
            );
            self.stats.store_retries += waiting.len() as u64;
            for id in waiting {
                self.resend_store(&id);
            }
        }
    }

    fn resend_store(&mut self, id: &EventId) {
        let Some(waiting) = self.stores.in_flight.get_mut(id) else {
            return;
        };
        waiting.retrying = false;
        let command = Command::Store {
            relay: waiting.relay.clone(),
            event: waiting.event.clone(),
        };
        self.emit(command);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(reason: &str) -> StoreVerdict {
        StoreVerdict::of(&Ok(IngestOutcome::Rejected {
            reason: reason.into(),
        }))
    }

    #[test]
    fn store_answers_are_read_as_transient_permanent_or_unclear() {
        assert_eq!(
            StoreVerdict::of(&Ok(IngestOutcome::Stored)),
            StoreVerdict::Stored
        );
        assert_eq!(
            StoreVerdict::of(&Ok(IngestOutcome::Duplicate)),
            StoreVerdict::Duplicate
        );
        for transient in [
            "rate-limited: slow down",
            "error: disk full",
            "ERROR: error: busy",
        ] {
            assert!(
                matches!(rejected(transient), StoreVerdict::Retry(_)),
                "{transient}"
            );
        }
        assert!(matches!(
            StoreVerdict::of(&Err(StoreError::TimedOut(std::time::Duration::from_secs(
                10
            )))),
            StoreVerdict::Retry(_)
        ));
        for permanent in [
            "blocked: not on the allow list",
            "invalid: bad signature",
            "pow: difficulty 20 required",
            "restricted: members only",
            "mute: muted",
            "ERROR: blocked: too old",
        ] {
            assert!(
                matches!(rejected(permanent), StoreVerdict::Refused(_)),
                "{permanent}"
            );
        }
        assert_eq!(rejected("duplicate: have it"), StoreVerdict::Duplicate);
        for unclear in ["auth-required: log in", "no thanks", ""] {
            assert!(
                matches!(rejected(unclear), StoreVerdict::Unclear(_)),
                "{unclear:?}"
            );
        }
    }
}
