//! A host that keeps announcements in a purgatory of its own, embedding the
//! manager over a real relay: its store answers `Held` for an announcement,
//! so only the repository's announcement and states are synced until the
//! host promotes it through `HeldRepositories`; then its issues are. And
//! `SyncManagerBuilder::negentropy(false)`: a relay that does NIP-77 is
//! synced by REQ only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::store::{EventStore, IngestOutcome, MemoryEventStore, StoreError};
use grasp_sync_core::RepoRef;
use grasp_sync_tokio::{ManagerStopped, SyncManager};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config, sign, tag, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(30);

/// A store that holds announcements (answers `Held`, keeps them out of
/// what it lists) while `holding`, and stores everything else.
#[derive(Default)]
struct HoldingStore {
    holding: AtomicBool,
    store: MemoryEventStore,
}

#[async_trait]
impl EventStore for HoldingStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        if event.kind == Kind::Custom(30617) && self.holding.load(Ordering::SeqCst) {
            return Ok(IngestOutcome::Held);
        }
        self.store.ingest(event).await
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        self.store.contains(id).await
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        self.store.negentropy_items(filter).await
    }
}

/// Waits until `done` holds, for at most [`WAIT`].
async fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

fn ids(store: &HoldingStore) -> BTreeSet<EventId> {
    store.store.ids().into_iter().collect()
}

/// A manager embedded in a host whose service is `service`, finding
/// repositories on `bootstrap`, storing into `store`.
fn manager(
    service: &RelayUrl,
    bootstrap: &RelayUrl,
    store: Arc<HoldingStore>,
    negentropy: bool,
) -> SyncManager {
    SyncManager::builder()
        .engine_config(loopback_engine_config())
        .service_relay(service.clone())
        .bootstrap_relay(bootstrap.clone())
        .negentropy(negentropy)
        .store(store)
        .build()
        .expect("a manager")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_repository_gets_its_issues_only_once_the_host_promotes_it() {
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let service = RelayUrl::parse("wss://host.example.com").unwrap();
    let maintainer = Keys::generate();
    let at = Timestamp::now().as_secs() - 1_000;
    let ann = announcement(&maintainer, "alpha", &[&service, &remote.url()], at);
    let repo = RepoRef::new(maintainer.public_key(), "alpha").unwrap();
    let state = sign(
        &maintainer,
        30618,
        "",
        vec![
            tag(&["d", "alpha"]),
            tag(&[
                "refs/heads/main",
                "0123456789abcdef0123456789abcdef01234567",
            ]),
        ],
        at + 1,
    );
    let issue = sign(
        &maintainer,
        1621,
        "issue",
        vec![tag(&["a", &repo.to_string()])],
        at + 2,
    );
    remote
        .add_events(&[ann.clone(), state.clone(), issue.clone()])
        .await;

    let store = Arc::new(HoldingStore::default());
    store.holding.store(true, Ordering::SeqCst);
    let manager = manager(&service, &remote.url(), store.clone(), true);
    let held = manager.held_repositories();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());

    assert!(
        wait_for(
            || ids(&store).contains(&state.id) && status.borrow_and_update().historic_sync_complete
        )
        .await,
        "the held repository's state is synced and historic sync completes"
    );
    // A few more batch windows: nothing of its Layer 2 comes.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!ids(&store).contains(&issue.id), "no issue while held");
    assert!(
        !ids(&store).contains(&ann.id),
        "the host holds the announcement"
    );
    assert_eq!(
        held.list().await,
        Ok(vec![repo.clone()]),
        "the manager lists what it holds"
    );

    // Its git data arrived: the host keeps the announcement and promotes.
    store.holding.store(false, Ordering::SeqCst);
    store.store.ingest(&ann).await.unwrap();
    held.promote(repo.clone()).await.expect("the manager runs");
    assert!(
        wait_for(|| ids(&store).contains(&issue.id)).await,
        "the issue is synced once promoted"
    );
    assert_eq!(held.list().await, Ok(Vec::new()), "promoted: not held");

    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
    assert_eq!(summary.events_held, 1, "the announcement, held once");
    assert_eq!(summary.engine.events_held, 1);
    assert_eq!(summary.engine.batches_failed, 0);
    assert_eq!(
        held.hold(repo).await,
        Err(ManagerStopped),
        "nothing reaches a stopped manager"
    );
    assert_eq!(held.dropped(vec![issue.id]).await, Err(ManagerStopped));
    assert_eq!(held.list().await, Err(ManagerStopped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nip77_off_a_relay_that_does_it_gets_req_only() {
    for negentropy in [false, true] {
        let remote = TestRelay::start(TestRelayConfig::default()).await;
        let service = RelayUrl::parse("wss://host.example.com").unwrap();
        let maintainer = Keys::generate();
        let at = Timestamp::now().as_secs() - 1_000;
        let ann = announcement(&maintainer, "alpha", &[&service, &remote.url()], at);
        let repo = RepoRef::new(maintainer.public_key(), "alpha").unwrap();
        let issue = sign(
            &maintainer,
            1621,
            "issue",
            vec![tag(&["a", &repo.to_string()])],
            at + 2,
        );
        remote.add_events(&[ann.clone(), issue.clone()]).await;
        let store = Arc::new(HoldingStore::default());
        let manager = manager(&service, &remote.url(), store.clone(), negentropy);
        let mut status = manager.status();
        let shutdown = manager.shutdown_handle();
        let run = tokio::spawn(manager.run());
        assert!(
            wait_for(|| ids(&store).contains(&issue.id)
                && status.borrow_and_update().historic_sync_complete)
            .await,
            "synced (NIP-77 {negentropy})"
        );
        shutdown.shutdown();
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("stops")
            .expect("no panic");
        if negentropy {
            assert!(remote.neg_opens_seen() > 0, "NIP-77 on: reconciled");
        } else {
            assert_eq!(remote.neg_opens_seen(), 0, "NIP-77 off: no NEG-OPEN");
            assert!(remote.reqs_seen() > 0);
        }
    }
}
