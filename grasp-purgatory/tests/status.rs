#![allow(clippy::unwrap_used)]
//! The purgatory's status on virtual time (`tokio::time::pause`) with the in-memory git
//! backend: held and queued after adding, the domain's fetches while they are in
//! flight, released and nothing ready afterwards, expired when the data never arrives.

mod events;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use events::memory_git::{MemoryGit, OneRepo};
use grasp_purgatory::{
    ChannelSink, MemoryAnnouncements, Origin, Purgatory, PurgatoryStatus, StoreSink,
};
use grasp_sync_core::purgatory::throttle_key;
use grasp_sync_test_support::ids::oid;
use grasp_sync_test_support::nip34::{pull_request, state, Announcement};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::*;
use tokio::sync::watch;

const HOST: &str = "git.example.com";
const DOWN: &str = "down.example.org";

/// Waits (virtual time) until the published status satisfies `done`.
async fn until(
    status: &mut watch::Receiver<PurgatoryStatus>,
    within: Duration,
    done: impl FnMut(&PurgatoryStatus) -> bool,
) -> PurgatoryStatus {
    let found = match tokio::time::timeout(within, status.wait_for(done)).await {
        Ok(Ok(found)) => Some(found.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("not within {within:?}: {:?}", *status.borrow()))
}

#[tokio::test(start_paused = true)]
async fn the_status_follows_events_from_held_to_released_and_expired() {
    let git = Arc::new(MemoryGit::with_delay(Duration::from_secs(3)));
    let announcements = Arc::new(MemoryAnnouncements::new());
    let (sink, _outputs) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements.clone())
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(git.clone())
        .sink(Arc::new(sink))
        .domain_concurrent(1)
        .build()
        .unwrap();
    let mut status = purgatory.status();
    assert!(
        status.borrow().nothing_ready,
        "an empty purgatory is settled"
    );
    assert_eq!(status.borrow().events_held, 0);
    let run = events::spawn_run(&purgatory);

    let owner = Keys::generate();
    for identifier in ["one", "two"] {
        let url = format!("https://{HOST}/{identifier}.git");
        announcements
            .add(
                Announcement::new(identifier)
                    .clone_urls(&[&url])
                    .sign(&owner),
            )
            .unwrap();
    }
    git.serve(&format!("https://{HOST}/one.git"), [oid(1)]);
    git.serve(&format!("https://{HOST}/two.git"), [oid(2)]);
    let add = |identifier: &str, tip: &str| {
        let event = pull_request(&Keys::generate(), &owner.public_key(), identifier, tip);
        purgatory.add_pr(event, Origin::Synced).unwrap();
    };

    // Held and queued; the add itself ends "nothing ready", without waiting for the loop.
    add("one", &oid(1));
    assert!(!status.borrow().nothing_ready, "never stale after an add");
    add("two", &oid(2));
    let now = purgatory.status_now();
    assert_eq!(now.events_held, 2);
    assert_eq!(now.identifiers_queued, 2);
    assert_eq!(
        now.identifiers_ready, 2,
        "debounced for the immediate delay"
    );
    let held = until(&mut status, Duration::from_millis(200), |s| {
        s.events_held == 2
    })
    .await;
    assert_eq!(held.identifiers_queued, 2);
    assert_eq!(held.identifiers_ready, 2);
    assert_eq!(held.fetches_in_flight, 0);
    assert_eq!(held.events_released, 0);
    assert!(!held.nothing_ready);

    // After the 500 ms debounce, one fetch runs (one at a time per domain); the other
    // identifier waits in the domain's queue.
    let fetching = until(&mut status, Duration::from_secs(1), |s| {
        s.fetches_in_flight == 1 && s.identifiers_waiting_for_domain == 1
    })
    .await;
    assert_eq!(
        fetching.fetches_by_domain,
        BTreeMap::from([(throttle_key(HOST), 1)]),
        "by throttle key (the registrable domain)"
    );
    assert_eq!(fetching.events_held, 2);
    assert_eq!(fetching.identifiers_ready, 0);
    assert!(!fetching.nothing_ready);
    assert_eq!(git.log().len(), 1);

    // Both fetched (3 s each, one after the other) and released.
    let released = until(&mut status, Duration::from_secs(10), |s| {
        s.events_released == 2 && s.nothing_ready
    })
    .await;
    assert_eq!(released.events_held, 0);
    assert_eq!(released.events_releasing, 0);
    assert_eq!(released.identifiers_queued, 0);
    assert_eq!(released.identifiers_waiting_for_domain, 0);
    assert_eq!(released.fetches_in_flight, 0);
    assert!(released.fetches_by_domain.is_empty());
    assert_eq!(released.oids_fetched, 2);
    assert_eq!(released.events_expired, 0);
    assert_eq!(git.log().len(), 2);

    // An unreachable server: after the failed attempt the event waits for its backoff
    // (nothing ready, still held), then expires after thirty minutes.
    let url = format!("https://{DOWN}/three.git");
    announcements
        .add(Announcement::new("three").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.fail(&url);
    add("three", &oid(3));
    assert!(!status.borrow().nothing_ready);
    let backing_off = until(&mut status, Duration::from_secs(10), |s| {
        s.nothing_ready && s.events_held == 1
    })
    .await;
    assert_eq!(backing_off.identifiers_queued, 1);
    assert_eq!(backing_off.identifiers_ready, 0);
    assert_eq!(git.log().len(), 3, "the failed attempt ran");
    let expired = until(&mut status, Duration::from_secs(2000), |s| {
        s.events_expired == 1
    })
    .await;
    assert_eq!(expired.events_held, 0);
    assert_eq!(expired.identifiers_queued, 0);
    assert_eq!(expired.events_released, 2);
    assert!(expired.nothing_ready);

    purgatory.shutdown();
    run.await.unwrap().unwrap();
    assert_eq!(purgatory.status_now(), *status.borrow());
}

/// A store that refuses every repository state for good, as strfry answers a state over
/// its event size (`OK false "invalid: event too large: …"`), and takes anything else.
#[derive(Default)]
struct RefusingStates {
    inner: grasp_sync_core::store::MemoryEventStore,
}

#[async_trait::async_trait]
impl grasp_sync_core::store::EventStore for RefusingStates {
    async fn ingest(
        &self,
        event: &Event,
    ) -> Result<grasp_sync_core::store::IngestOutcome, grasp_sync_core::store::StoreError> {
        if event.kind == Kind::Custom(30618) {
            return Ok(grasp_sync_core::store::IngestOutcome::rejected(
                "invalid: event too large: 102356",
            ));
        }
        self.inner.ingest(event).await
    }

    async fn contains(&self, id: &EventId) -> Result<bool, grasp_sync_core::store::StoreError> {
        self.inner.contains(id).await
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, grasp_sync_core::store::StoreError> {
        self.inner.negentropy_items(filter).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_released_event_the_store_refuses_for_good_is_dropped_counted_and_named() {
    let git = Arc::new(MemoryGit::default());
    let announcements = Arc::new(MemoryAnnouncements::new());
    let store = Arc::new(RefusingStates::default());
    let purgatory = Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(announcements.clone())
        .repo_locator(Arc::new(OneRepo("/memory".into())))
        .git_backend(git.clone())
        .sink(Arc::new(StoreSink::new(store.clone())))
        .build()
        .unwrap();
    let mut status = purgatory.status();
    let run = events::spawn_run(&purgatory);
    let owner = Keys::generate();
    let url = format!("https://{HOST}/big.git");
    announcements
        .add(Announcement::new("big").clone_urls(&[&url]).sign(&owner))
        .unwrap();
    git.serve(&url, [oid(1), oid(2)]);
    let refused = state(&owner, "big", &[&oid(1)], 1_700_000_000);
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "big", &oid(2));
    purgatory
        .add_state(refused.clone(), Origin::Synced)
        .unwrap();
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();

    // Fetched, released: the PR is taken, the state refused for good and dropped, not
    // offered again; everything is accounted for.
    let settled = until(&mut status, Duration::from_secs(10), |s| {
        s.all_accounted && s.events_held == 0
    })
    .await;
    assert_eq!(settled.events_released, 1);
    assert_eq!(settled.events_refused_by_store, 1);
    let line = settled.last_store_refusal.as_ref().map(ToString::to_string);
    assert_eq!(
        line.as_deref(),
        Some(
            format!(
                "kind 30618 {} of 30617:{}:big: invalid: event too large: 102356",
                refused.id,
                owner.public_key().to_hex()
            )
            .as_str()
        )
    );
    assert!(
        store.inner.ids().contains(&pr.id),
        "the PR reached the store"
    );
    assert!(!purgatory.contains(&refused.id));
    // Not offered again: one fetch, and nothing more after a long while.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let later = purgatory.status_now();
    assert_eq!(later.events_refused_by_store, 1);
    assert_eq!(git.log().len(), 1, "{:?}", git.log());
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
