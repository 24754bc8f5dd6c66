//! Where verified events go, and what negentropy needs to know of them.
//!
//! The engine hands the store only events whose id and signature verified and
//! that matched the filter of the subscription they arrived on. The store says
//! whether each was new, so metrics count only newly saved events. For NIP-77
//! the store lists the `(id, created_at)` items it holds for a filter: the
//! local side of the reconciliation (never an empty set when we hold events).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use nostr::prelude::{Event, EventId, Filter, Kind, PublicKey, RelayUrl, Timestamp};

use crate::classify::{classify, Prefix};
use crate::relay_text::RelayText;

/// What happened to an ingested event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IngestOutcome {
    /// The event was new and is now stored.
    Stored,
    /// The store already had it (or a newer replaceable version).
    Duplicate,
    /// The store keeps the event outside what it serves until its git data
    /// arrives (a GRASP purgatory). For the sync it counts as stored: not
    /// fetched again, listed to negentropy as present. A held announcement
    /// (kind 30617) holds its repository: only its announcement and states
    /// are synced until the host promotes it.
    Held,
    /// The store refused it (its own policy).
    Rejected {
        /// Why, as the store put it (for logs and metrics).
        reason: String,
        /// Whether the refusal is for now or for good: what the sync
        /// decides on (retry or give up), never the text.
        refusal: Refusal,
    },
}

impl IngestOutcome {
    /// A refusal read from a relay's `OK false` message, for stores that
    /// relay one: its NIP-01 prefix says for how long
    /// ([`Refusal::of_reason`]). A `duplicate:` refusal is no refusal: it
    /// is [`IngestOutcome::Duplicate`].
    pub fn rejected(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        if classify(&reason).prefix == Prefix::Duplicate {
            return IngestOutcome::Duplicate;
        }
        let refusal = Refusal::of_reason(&reason);
        IngestOutcome::Rejected { reason, refusal }
    }

    /// A refusal for now (the store is busy, full, rate limits): the sync
    /// offers the event again after a backoff.
    pub fn refused_for_now(reason: impl Into<String>) -> Self {
        IngestOutcome::Rejected {
            reason: reason.into(),
            refusal: Refusal::ForNow,
        }
    }

    /// A refusal for good (the store's policy will not take it): the sync
    /// remembers it and does not download it again.
    pub fn refused_for_good(reason: impl Into<String>) -> Self {
        IngestOutcome::Rejected {
            reason: reason.into(),
            refusal: Refusal::ForGood,
        }
    }
}

/// Whether a store's refusal is for now or for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// For now: offered again after a backoff, for as long as it takes.
    ForNow,
    /// For good: remembered, not downloaded again.
    ForGood,
    /// Not known: offered again a few times
    /// ([`Timeouts::store_attempts`](crate::engine::Timeouts::store_attempts)),
    /// then taken as for good.
    Unclear,
}

impl Refusal {
    /// What a relay's `OK false` text says, by its NIP-01 prefix (strfry's
    /// `ERROR: ` decoration read through): `rate-limited:`, `error:` or a
    /// rate limit's wording are for now; `blocked:`, `invalid:`, `pow:`,
    /// `restricted:`, `mute:` (and `duplicate:`, nothing to retry) for
    /// good; anything else (`auth-required:`, no prefix) unclear.
    pub fn of_reason(reason: &str) -> Refusal {
        let classified = classify(reason);
        match classified.prefix {
            Prefix::RateLimited | Prefix::Error => Refusal::ForNow,
            Prefix::Blocked
            | Prefix::Invalid
            | Prefix::Pow
            | Prefix::Restricted
            | Prefix::Mute
            | Prefix::Duplicate => Refusal::ForGood,
            _ if classified.rate_limited => Refusal::ForNow,
            _ => Refusal::Unclear,
        }
    }
}

/// An event the store refused for good, as the sync keeps the last one for
/// its status: which event, from which relay, why, and when. Shown as one
/// line: `kind 30618 <event id> from <relay>: <reason>`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreRefusal {
    /// The event's kind.
    pub kind: Kind,
    /// The event's id.
    pub id: EventId,
    /// The relay it came from first.
    pub relay: RelayUrl,
    /// The store's reason (a relay store's `OK` text), clipped and cleaned
    /// ([`RelayText`]): it is the store relay's own words.
    pub reason: RelayText,
    /// When the refusal came (wall clock).
    pub at: Timestamp,
}

impl StoreRefusal {
    /// `event`, from `relay`, refused for `reason` at `at`.
    pub fn new(event: &Event, relay: &RelayUrl, reason: &str, at: Timestamp) -> Self {
        StoreRefusal {
            kind: event.kind,
            id: event.id,
            relay: relay.clone(),
            reason: RelayText::new(reason),
            at,
        }
    }
}

impl std::fmt::Display for StoreRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kind {} {} from {}: {}",
            self.kind.as_u16(),
            self.id,
            self.relay,
            self.reason
        )
    }
}

/// The store could not be reached, did not answer in time, or failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store cannot be reached (a relay store's connection is down or
    /// was refused).
    #[error("event store unavailable: {reason}")]
    Unavailable {
        /// What went wrong, as the connection put it.
        reason: String,
    },
    /// The store did not answer within the time allowed.
    #[error("event store did not answer within {0:?}")]
    TimedOut(std::time::Duration),
    /// The store has stopped (its task ended).
    #[error("event store stopped")]
    Stopped,
    /// The backend failed.
    #[error("event store backend failed: {0}")]
    Backend(#[source] std::sync::Arc<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// A backend failure from any error type.
    pub fn backend(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Backend(std::sync::Arc::new(error))
    }

    /// The store cannot be reached, for `reason`.
    pub fn unavailable(reason: impl std::fmt::Display) -> Self {
        StoreError::Unavailable {
            reason: reason.to_string(),
        }
    }
}

/// Two store errors are equal when they say the same (the backend's error
/// type is not comparable).
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for StoreError {}

/// A sink for verified events that can also list what it holds.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Stores a verified event and says whether it was new.
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError>;

    /// Stores several verified events; one answer per event, in their
    /// order. The default asks [`EventStore::ingest`] for all of them at
    /// once; a store that takes a batch more cheaply (one write for many
    /// events, one transaction) overrides it. The sync hands the events
    /// that are waiting together to this, never more than a few hundred.
    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        futures_util::future::join_all(events.iter().map(|event| self.ingest(event))).await
    }

    /// `true` if the store holds the event with this id (lets the caller skip
    /// verifying events it already has).
    async fn contains(&self, id: &EventId) -> Result<bool, StoreError>;

    /// What the store would answer for `event` without being offered it,
    /// when it knows already: a refusal for good by limits it states (a
    /// relay store: the relay's NIP-11 limits, an event over them is never
    /// sent). `None`: it may take it, and only offering it tells. A store in
    /// front of this one that holds events before handing them over (a
    /// purgatory gate) asks first, so an event this store can never take is
    /// refused at once (the sync counts it and says why), not held and its
    /// git data fetched for nothing. The default knows nothing in advance.
    async fn known_refusal(&self, event: &Event) -> Option<IngestOutcome> {
        let _ = event;
        None
    }

    /// The `(id, created_at)` of every stored event matching `filter`, for
    /// the local side of a NIP-77 reconciliation.
    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError>;
}

/// A shared store is a store: lets one store sit behind several users (for example a
/// purgatory's release sink and the sync engine).
#[async_trait]
impl<T: EventStore + ?Sized> EventStore for std::sync::Arc<T> {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        (**self).ingest(event).await
    }

    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        (**self).ingest_many(events).await
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        (**self).contains(id).await
    }

    async fn known_refusal(&self, event: &Event) -> Option<IngestOutcome> {
        (**self).known_refusal(event).await
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        (**self).negentropy_items(filter).await
    }
}

/// An in-memory [`EventStore`] that keeps only the newest version of
/// replaceable and addressable events, as relays do.
#[derive(Debug, Default)]
pub struct MemoryEventStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    events: BTreeMap<EventId, Event>,
    /// For replaceable (kind, author) and addressable (kind, author, d)
    /// events: the id of the version kept.
    latest: HashMap<(Kind, PublicKey, String), EventId>,
}

impl MemoryEventStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every stored event, by id.
    pub fn events(&self) -> Vec<Event> {
        self.lock().events.values().cloned().collect()
    }

    /// The ids of every stored event, sorted.
    pub fn ids(&self) -> Vec<EventId> {
        self.lock().events.keys().copied().collect()
    }

    /// Number of stored events.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// `true` when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryInner {
    fn ingest(&mut self, event: &Event) -> IngestOutcome {
        if self.events.contains_key(&event.id) {
            return IngestOutcome::Duplicate;
        }
        if let Some(key) = replacement_key(event) {
            if let Some(kept) = self.latest.get(&key).and_then(|id| self.events.get(id)) {
                if !is_newer(event, kept) {
                    return IngestOutcome::Duplicate;
                }
                let old = kept.id;
                self.events.remove(&old);
            }
            self.latest.insert(key, event.id);
        }
        self.events.insert(event.id, event.clone());
        IngestOutcome::Stored
    }
}

/// The key under which only one version is kept, for replaceable and
/// addressable kinds.
fn replacement_key(event: &Event) -> Option<(Kind, PublicKey, String)> {
    if event.kind.is_replaceable() {
        return Some((event.kind, event.pubkey, String::new()));
    }
    if event.kind.is_addressable() {
        let identifier = event.tags.identifier().unwrap_or_default();
        return Some((event.kind, event.pubkey, identifier));
    }
    None
}

/// NIP-01: the newer `created_at` wins; on a tie, the lowest id.
fn is_newer(candidate: &Event, kept: &Event) -> bool {
    (candidate.created_at, std::cmp::Reverse(candidate.id))
        > (kept.created_at, std::cmp::Reverse(kept.id))
}

#[async_trait]
impl EventStore for MemoryEventStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        Ok(self.lock().ingest(event))
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        Ok(self.lock().events.contains_key(id))
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        Ok(self
            .lock()
            .events
            .values()
            .filter(|event| crate::filters::matches(filter, event))
            .map(|event| (event.id, event.created_at))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use grasp_sync_test_support::nip34::{sign, Announcement};
    use nostr::prelude::Keys;

    fn note(keys: &Keys, content: &str, at: u64) -> Event {
        sign(keys, 1621, content, Vec::new(), at)
    }

    #[test]
    fn a_relay_s_refusal_text_is_read_by_its_nip01_prefix() {
        for (reason, refusal) in [
            ("rate-limited: slow down", Refusal::ForNow),
            ("error: disk full", Refusal::ForNow),
            ("ERROR: error: busy", Refusal::ForNow),
            ("too many requests", Refusal::ForNow),
            ("blocked: no", Refusal::ForGood),
            ("invalid: bad", Refusal::ForGood),
            ("pow: 20 bits", Refusal::ForGood),
            ("restricted: members", Refusal::ForGood),
            ("mute: muted", Refusal::ForGood),
            ("ERROR: blocked: too old", Refusal::ForGood),
            ("auth-required: log in", Refusal::Unclear),
            ("no thanks", Refusal::Unclear),
            ("", Refusal::Unclear),
        ] {
            assert_eq!(Refusal::of_reason(reason), refusal, "{reason:?}");
            assert_eq!(
                IngestOutcome::rejected(reason),
                IngestOutcome::Rejected {
                    reason: reason.into(),
                    refusal
                },
                "{reason:?}"
            );
        }
        assert_eq!(
            IngestOutcome::rejected("duplicate: have it"),
            IngestOutcome::Duplicate
        );
        assert_eq!(
            IngestOutcome::refused_for_now("x"),
            IngestOutcome::Rejected {
                reason: "x".into(),
                refusal: Refusal::ForNow
            }
        );
        assert_eq!(
            IngestOutcome::refused_for_good("x"),
            IngestOutcome::Rejected {
                reason: "x".into(),
                refusal: Refusal::ForGood
            }
        );
    }

    #[test]
    fn ingest_says_whether_the_event_was_new() {
        let store = MemoryEventStore::new();
        let keys = Keys::generate();
        let event = note(&keys, "hello", 10);
        assert_eq!(
            block_on(store.ingest(&event)).unwrap(),
            IngestOutcome::Stored
        );
        assert_eq!(
            block_on(store.ingest(&event)).unwrap(),
            IngestOutcome::Duplicate
        );
        assert!(block_on(store.contains(&event.id)).unwrap());
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn addressable_events_keep_only_the_newest_version() {
        let store = MemoryEventStore::new();
        let keys = Keys::generate();
        let old = Announcement::new("repo").at(10).sign(&keys);
        let new = Announcement::new("repo").at(20).sign(&keys);
        let other = Announcement::new("other").at(5).sign(&keys);
        assert_eq!(block_on(store.ingest(&new)).unwrap(), IngestOutcome::Stored);
        assert_eq!(
            block_on(store.ingest(&old)).unwrap(),
            IngestOutcome::Duplicate,
            "older loses"
        );
        assert_eq!(
            block_on(store.ingest(&other)).unwrap(),
            IngestOutcome::Stored
        );
        let newer = Announcement::new("repo").at(30).sign(&keys);
        assert_eq!(
            block_on(store.ingest(&newer)).unwrap(),
            IngestOutcome::Stored
        );
        assert!(!block_on(store.contains(&new.id)).unwrap(), "replaced");
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn negentropy_items_are_the_events_matching_the_filter() {
        let store = MemoryEventStore::new();
        let keys = Keys::generate();
        let a = note(&keys, "a", 10);
        let b = note(&keys, "b", 20);
        let c = Announcement::new("repo").at(30).sign(&keys);
        for event in [&a, &b, &c] {
            block_on(store.ingest(event)).unwrap();
        }
        let filter = Filter::new()
            .kind(Kind::Custom(1621))
            .since(Timestamp::from_secs(15));
        let items = block_on(store.negentropy_items(&filter)).unwrap();
        assert_eq!(items, vec![(b.id, b.created_at)]);
        let all = block_on(store.negentropy_items(&Filter::new())).unwrap();
        assert_eq!(all.len(), 3);
    }
}
