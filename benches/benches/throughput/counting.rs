//! A store wrapper that notes when the last wanted event was stored: the
//! sync's status is refreshed at most every 100 ms and, once nothing
//! changes, only every 2 s, too coarse to time a run of a few seconds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use grasp_sync_tokio::core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{Event, EventId, Filter, Timestamp};

/// Counts events newly stored by `inner`; remembers when `want` was reached.
pub(crate) struct CountingStore<S> {
    inner: S,
    want: u64,
    /// When set, only these events count (the Sync+ paths: the relay lists
    /// the store takes too are not waited for).
    only: Option<HashSet<EventId>>,
    /// With `only` set: every event newly stored, counted or not (to tell
    /// which events reached the store).
    seen: Mutex<HashSet<EventId>>,
    stored: AtomicU64,
    reached: Mutex<Option<Instant>>,
    /// Listings of the store's items (for NIP-77), and the items they gave.
    listings: AtomicU64,
    listed: AtomicU64,
}

impl<S: EventStore> CountingStore<S> {
    /// Wraps `inner`, waiting for `want` new events.
    pub(crate) fn new(inner: S, want: u64) -> Arc<Self> {
        Arc::new(CountingStore {
            inner,
            want,
            only: None,
            seen: Mutex::default(),
            stored: AtomicU64::new(0),
            reached: Mutex::new(None),
            listings: AtomicU64::new(0),
            listed: AtomicU64::new(0),
        })
    }

    /// Wraps `inner`, waiting for every event of `ids` to be newly
    /// stored (others are stored but not counted).
    pub(crate) fn of_ids(inner: S, ids: HashSet<EventId>) -> Arc<Self> {
        Arc::new(CountingStore {
            inner,
            want: ids.len() as u64,
            only: Some(ids),
            seen: Mutex::default(),
            stored: AtomicU64::new(0),
            reached: Mutex::new(None),
            listings: AtomicU64::new(0),
            listed: AtomicU64::new(0),
        })
    }

    /// Counts a newly stored event; notes when it is the `want`-th.
    fn count(&self, event: &Event, outcome: &Result<IngestOutcome, StoreError>) {
        let stored = matches!(outcome, Ok(IngestOutcome::Stored));
        if stored && self.only.is_some() {
            self.seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(event.id);
        }
        if stored
            && self.only.as_ref().is_none_or(|ids| ids.contains(&event.id))
            && self.stored.fetch_add(1, Ordering::SeqCst) + 1 == self.want
        {
            *self.reached.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
    }

    /// How many listings the sync asked of the store, and how many items
    /// they gave in all.
    pub(crate) fn listings(&self) -> (u64, u64) {
        (
            self.listings.load(Ordering::SeqCst),
            self.listed.load(Ordering::SeqCst),
        )
    }

    /// How many of `ids` were newly stored (only recorded when built with
    /// [`CountingStore::of_ids`]).
    pub(crate) fn stored_of(&self, ids: &[EventId]) -> usize {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        ids.iter().filter(|id| seen.contains(id)).count()
    }

    /// When the `want`-th new event was stored, if it was.
    pub(crate) fn reached(&self) -> Option<Instant> {
        *self.reached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl<S: EventStore> EventStore for CountingStore<S> {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        let outcome = self.inner.ingest(event).await;
        self.count(event, &outcome);
        outcome
    }

    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        let outcomes = self.inner.ingest_many(events).await;
        for (event, outcome) in events.iter().zip(&outcomes) {
            self.count(event, outcome);
        }
        outcomes
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        self.inner.contains(id).await
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let items = self.inner.negentropy_items(filter).await;
        self.listings.fetch_add(1, Ordering::SeqCst);
        if let Ok(items) = &items {
            self.listed.fetch_add(items.len() as u64, Ordering::SeqCst);
        }
        items
    }
}
