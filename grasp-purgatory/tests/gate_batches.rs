#![allow(clippy::unwrap_used)]
//! `PurgatoryGate::ingest_many`: the events purgatory never holds reach the inner store
//! as one batch (its own `ingest_many`), states and pull requests go to purgatory, and
//! every event gets its answer in its place.

mod events;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use events::memory_git::{MemoryGit, OneRepo};
use grasp_purgatory::{ChannelSink, MemoryAnnouncements, Purgatory, PurgatoryGate};
use grasp_sync_core::store::{EventStore, IngestOutcome, MemoryEventStore, StoreError};
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, reply, root, state};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;
use IngestOutcome::{Duplicate, Stored};

/// A memory store that records the batches it is handed.
#[derive(Default)]
struct Recording {
    inner: MemoryEventStore,
    batches: Mutex<Vec<Vec<EventId>>>,
}

#[async_trait]
impl EventStore for Recording {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        self.inner.ingest(event).await
    }

    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        let ids = events.iter().map(|event| event.id).collect();
        self.batches.lock().unwrap().push(ids);
        let mut outcomes = Vec::new();
        for event in events {
            outcomes.push(self.inner.ingest(event).await);
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
        self.inner.negentropy_items(filter).await
    }
}

/// The gate's answers to `batch`, in order (none may fail).
async fn answers(gate: &PurgatoryGate<Arc<Recording>>, batch: &[&Event]) -> Vec<IngestOutcome> {
    gate.ingest_many(batch)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn passed_events_reach_the_inner_store_as_one_batch_and_held_ones_purgatory() {
    let (sink, _output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(Arc::new(MemoryGit::default()))
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let store = Arc::new(Recording::default());
    let gate = PurgatoryGate::new(store.clone(), purgatory.clone());

    let owner = Keys::generate();
    let user = Keys::generate();
    let repo = format!("30617:{}:alpha", owner.public_key().to_hex());
    let issue = root(&user, 1621, &repo, "issue", 1_700_000_000);
    let pr = pull_request(&user, &owner.public_key(), "alpha", &oid(1));
    let comment = reply(&user, &issue.id, "reply", 1_700_000_001);
    let repo_state = state(&owner, "alpha", &[&oid(2)], 1_700_000_002);
    let batch = [&issue, &pr, &comment, &repo_state];
    // Held already: its answer tells its place from the others'.
    store.inner.ingest(&comment).await.unwrap();

    let outcomes = answers(&gate, &batch).await;
    assert_eq!(
        outcomes,
        vec![Stored, Stored, Duplicate, Stored],
        "each answered in its place"
    );
    assert_eq!(
        *store.batches.lock().unwrap(),
        vec![vec![issue.id, comment.id]],
        "the passed events went to the inner store as one batch"
    );
    assert!(purgatory.contains(&pr.id) && purgatory.contains(&repo_state.id));
    assert!(!store.inner.contains(&pr.id).await.unwrap());

    // Again: the inner store's and purgatory's own answers, in place.
    let again = answers(&gate, &batch).await;
    assert_eq!(again, vec![Duplicate; 4]);
}

/// A memory store that says in advance it refuses every state (30618), as a relay store
/// does for a state over its relay's NIP-11 message limit.
#[derive(Default)]
struct RefusingStates {
    inner: MemoryEventStore,
}

#[async_trait]
impl EventStore for RefusingStates {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        match self.known_refusal(event).await {
            Some(refusal) => Ok(refusal),
            None => self.inner.ingest(event).await,
        }
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        self.inner.contains(id).await
    }

    async fn known_refusal(&self, event: &Event) -> Option<IngestOutcome> {
        (event.kind == Kind::Custom(30618))
            .then(|| IngestOutcome::refused_for_good("invalid: over the relay's limit"))
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        self.inner.negentropy_items(filter).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_state_the_inner_store_would_refuse_is_refused_at_once_and_not_held() {
    let (sink, _output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(Arc::new(MemoryAnnouncements::new()))
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(Arc::new(MemoryGit::default()))
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let store = Arc::new(RefusingStates::default());
    let gate = PurgatoryGate::new(store.clone(), purgatory.clone());
    let owner = Keys::generate();
    let repo_state = state(&owner, "alpha", &[&oid(2)], 1_700_000_002);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "alpha", &oid(1));

    let refused = IngestOutcome::refused_for_good("invalid: over the relay's limit");
    assert_eq!(gate.ingest(&repo_state).await.unwrap(), refused);
    assert_eq!(gate.known_refusal(&repo_state).await, Some(refused.clone()));
    let batch = [&repo_state, &pr];
    let outcomes: Vec<IngestOutcome> = gate
        .ingest_many(&batch)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(outcomes, vec![refused, Stored]);
    assert!(
        !purgatory.contains(&repo_state.id),
        "not held: its data is never fetched"
    );
    assert!(
        purgatory.contains(&pr.id),
        "what the store may take is held"
    );
}
