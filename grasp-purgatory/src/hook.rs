//! Wiring to proactive sync: an [`EventStore`] that sends the events sync brings in and
//! that wait for git data (states, PRs, PR updates) to purgatory, with the immediate
//! delay, and everything else straight to the relay's store.
//!
//! Give a [`PurgatoryGate`] to `grasp_sync_tokio::SyncManagerBuilder::store` in place of
//! the relay's store, and build the purgatory with a
//! [`StoreSink`](crate::StoreSink) over that same store so released events land there:
//!
//! ```no_run
//! # async fn wire(
//! #     store: std::sync::Arc<grasp_sync_core::store::MemoryEventStore>,
//! #     announcements: std::sync::Arc<grasp_purgatory::MemoryAnnouncements>,
//! # ) -> Result<(), grasp_purgatory::PurgatoryBuildError> {
//! use std::sync::Arc;
//! use grasp_purgatory::{Purgatory, PurgatoryGate, StoreSink};
//!
//! let purgatory = Purgatory::builder()
//!     .announcements(announcements)
//!     .repos_root("/srv/git")
//!     .sink(Arc::new(StoreSink::new(Arc::clone(&store))))
//!     .build()?;
//! let gate = PurgatoryGate::new(store, purgatory.clone());
//! // SyncManager::builder().store(Arc::new(gate)) ... ; tokio::spawn(purgatory.run())
//! # Ok(()) }
//! ```

use async_trait::async_trait;
use futures_util::future::join_all;
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{Event, EventId, Filter, Timestamp};

use crate::held::{is_held_kind, Origin};
use crate::service::Purgatory;
use crate::store::{AddError, Inserted};

/// An [`EventStore`] in front of the relay's store that holds git-data events in
/// purgatory.
///
/// A held event counts as stored for the sync engine ([`IngestOutcome::Stored`]), is
/// reported by [`EventStore::contains`] and listed in negentropy items, so sync neither
/// fetches it again nor re-adds it; it reaches the inner store when its data is present
/// (through the purgatory's sink), or expires (reported by the sink). (It is not
/// [`IngestOutcome::Held`]: this purgatory answers `contains` and negentropy for its
/// held events itself.) An event purgatory refuses is [`IngestOutcome::Rejected`] with
/// a NIP-01 prefixed reason and its [`Refusal`](grasp_sync_core::store::Refusal):
/// `invalid:` for malformed refs or tips (for good), `rate-limited:` when purgatory is
/// full (see [`HeldLimits`](crate::HeldLimits)) and `error:` when its journal cannot be
/// written (for now); the sync engine retries those two later, so nothing is lost. An
/// event the inner store says it would refuse for good
/// ([`EventStore::known_refusal`]: a relay store, an event over the relay's NIP-11
/// limits) gets that refusal at once and is not held: its git data would be fetched
/// for an event that can never be served.
#[derive(Debug)]
pub struct PurgatoryGate<S> {
    inner: S,
    purgatory: Purgatory,
}

impl<S> PurgatoryGate<S> {
    /// Sends git-data events to `purgatory`, everything else to `inner`.
    pub fn new(inner: S, purgatory: Purgatory) -> Self {
        PurgatoryGate { inner, purgatory }
    }

    /// The store behind the gate.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: EventStore> EventStore for PurgatoryGate<S> {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        if !is_held_kind(event.kind.as_u16()) || self.inner.contains(&event.id).await? {
            self.purgatory.track_announcement(event);
            return self.inner.ingest(event).await;
        }
        // An event the store will never take is not held (nor its data fetched):
        // the sync hears the store's refusal now.
        if let Some(refusal) = self.inner.known_refusal(event).await {
            return Ok(refusal);
        }
        Ok(match self.purgatory.add(event.clone(), Origin::Synced) {
            Ok(Inserted::New | Inserted::Replaced { .. }) => IngestOutcome::Stored,
            Ok(Inserted::Duplicate | Inserted::Superseded) => IngestOutcome::Duplicate,
            Err(error) => rejection(&error),
        })
    }

    /// The events purgatory never holds go to the inner store together (its
    /// own `ingest_many`: a [`RelayStore`]'s batch stays one batch); the
    /// others each as [`EventStore::ingest`] takes them, all at once. The
    /// answers come back in the events' order.
    ///
    /// [`RelayStore`]: https://docs.rs/grasp-sync-tokio/latest/grasp_sync_tokio/struct.RelayStore.html
    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        let (held, passed): (Vec<usize>, Vec<usize>) =
            (0..events.len()).partition(|&n| is_held_kind(events[n].kind.as_u16()));
        let passed_events: Vec<&Event> = passed.iter().map(|&n| events[n]).collect();
        for event in &passed_events {
            self.purgatory.track_announcement(event);
        }
        let (passed_outcomes, held_outcomes) = tokio::join!(
            self.inner.ingest_many(&passed_events),
            join_all(held.iter().map(|&n| self.ingest(events[n]))),
        );
        let mut outcomes: Vec<Option<Result<IngestOutcome, StoreError>>> = vec![None; events.len()];
        let answered = passed.iter().zip(passed_outcomes);
        for (&n, outcome) in answered.chain(held.iter().zip(held_outcomes)) {
            outcomes[n] = Some(outcome);
        }
        // An event the inner store gave no answer for fails, and the
        // engine offers it again.
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| Err(StoreError::unavailable("the store gave no answer")))
            })
            .collect()
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        if self.purgatory.contains(id) {
            return Ok(true);
        }
        self.inner.contains(id).await
    }

    async fn known_refusal(&self, event: &Event) -> Option<IngestOutcome> {
        self.inner.known_refusal(event).await
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let mut items = self.inner.negentropy_items(filter).await?;
        items.extend(
            self.purgatory
                .all_held_events()
                .into_iter()
                .filter(|held| grasp_sync_core::filters::matches(filter, &held.event))
                .map(|held| (held.event.id, held.event.created_at)),
        );
        items.sort_unstable();
        items.dedup();
        Ok(items)
    }
}

/// Purgatory's refusal of an event: malformed refs or tips for good
/// (`invalid:`); a full purgatory (`rate-limited:`) or an unwritable
/// journal (`error:`) for now, so the sync offers it again later.
fn rejection(error: &AddError) -> IngestOutcome {
    match error {
        AddError::Malformed(_) => {
            IngestOutcome::refused_for_good(format!("invalid: purgatory: {error}"))
        }
        AddError::Full { .. } => {
            IngestOutcome::refused_for_now(format!("rate-limited: purgatory: {error}"))
        }
        _ => IngestOutcome::refused_for_now(format!("error: purgatory: {error}")),
    }
}
