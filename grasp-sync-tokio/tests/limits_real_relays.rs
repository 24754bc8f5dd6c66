//! The adapter against real relays (nostr-relay-builder on 127.0.0.1) that
//! enforce the limits strfry enforces: the connection dropped on any frame
//! over 131 072 bytes, every result list clamped to 500, NIP-11 announcing
//! `max_message_length`. Plus an own relay that refuses writes with
//! `rate-limited:` for a while, and a relay whose NIP-11 endpoint never
//! answers. "Done" is the manager's explicit `historic_sync_complete` state,
//! never a quiet period.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::EngineConfig;
use grasp_sync_core::RepoRef;
use grasp_sync_tokio::{RelayStore, Summary, SyncManager, SyncStatus};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config, sign, tag, TestRelay, TestRelayConfig};
use tokio::sync::watch;

/// Bound on waiting for historic sync to complete.
const WAIT: Duration = Duration::from_secs(240);

fn engine_config() -> EngineConfig {
    let mut config = loopback_engine_config();
    config.timeouts.negentropy_timeout = Duration::from_secs(5);
    config
}

fn manager(own: &TestRelay) -> SyncManager {
    SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(engine_config())
        .registry(prometheus::Registry::new())
        .build()
        .unwrap()
}

/// Waits (bounded) for the manager's explicit "historic sync complete".
async fn complete(status: &mut watch::Receiver<SyncStatus>) -> SyncStatus {
    let waited = tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete)
            .await
            .map(|done| done.clone())
    })
    .await;
    match waited {
        Ok(Ok(done)) => done,
        Ok(Err(_)) => panic!("the manager stopped before historic sync completed"),
        Err(_) => panic!(
            "historic sync not complete in {WAIT:?}: {:?}",
            *status.borrow()
        ),
    }
}

/// Runs a manager on `own` until historic sync completes; returns its
/// summary after a clean shutdown.
async fn sync_once(own: &TestRelay) -> (Summary, SyncStatus) {
    let manager = manager(own);
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let done = complete(&mut status).await;
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("shutdown in time")
        .expect("run task");
    (summary, done)
}

/// `repos` repositories of `roots` issues each, one reply per issue. The
/// own relay holds the announcements and nine in ten issues; relay a holds
/// everything; relay b the even repositories. Returns what the own relay
/// must end with.
struct DataSet {
    expected: BTreeSet<EventId>,
    roots: usize,
}

async fn load(
    own: &TestRelay,
    a: &TestRelay,
    b: &TestRelay,
    repos: usize,
    roots: usize,
) -> DataSet {
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 100_000;
    let mut own_events = Vec::new();
    let mut a_events = Vec::new();
    let mut b_events = Vec::new();
    let mut expected = BTreeSet::new();
    for r in 0..repos {
        let maintainer = Keys::generate();
        let identifier = format!("repo-{r}");
        let (own_url, a_url, b_url) = (own.url(), a.url(), b.url());
        let mut relays = vec![&own_url, &a_url];
        if r % 2 == 0 {
            relays.push(&b_url);
        }
        let repo_announcement = announcement(&maintainer, &identifier, &relays, base);
        let repo = RepoRef::new(maintainer.public_key(), &identifier)
            .unwrap()
            .to_string();
        let mut repo_events = vec![repo_announcement.clone()];
        own_events.push(repo_announcement);
        for n in 0..roots {
            let at = base + 10 + (r * roots + n) as u64;
            let issue = sign(
                &user,
                1621,
                &format!("issue {r}/{n}"),
                vec![tag(&["a", &repo])],
                at,
            );
            let reply = sign(
                &user,
                1111,
                &format!("reply {r}/{n}"),
                vec![tag(&["E", &issue.id.to_hex()])],
                at + 50_000,
            );
            if n % 10 != 0 {
                own_events.push(issue.clone());
            }
            repo_events.push(issue);
            repo_events.push(reply);
        }
        expected.extend(repo_events.iter().map(|event| event.id));
        if r % 2 == 0 {
            b_events.extend(repo_events.iter().cloned());
        }
        a_events.extend(repo_events);
    }
    own.add_events(&own_events).await;
    a.add_events(&a_events).await;
    b.add_events(&b_events).await;
    DataSet {
        expected,
        roots: repos * roots,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strfry_limits_2000_roots_in_100_repositories_sync_exactly_and_resync_transfers_nothing() {
    let own = TestRelay::start(TestRelayConfig::strfry()).await;
    let a = TestRelay::start(TestRelayConfig::strfry()).await;
    let b = TestRelay::start(TestRelayConfig::strfry()).await;
    let data = load(&own, &a, &b, 100, 20).await;
    assert!(data.roots >= 2_000);

    let (first, status) = sync_once(&own).await;
    let held = own.event_ids().await;
    let missing = data.expected.difference(&held).count();
    let extra = held.difference(&data.expected).count();
    assert_eq!(
        (missing, extra),
        (0, 0),
        "exactly the data set: {status:?} {first:?}"
    );
    for (name, relay) in [("a", &a), ("b", &b)] {
        assert_eq!(
            relay.frames_too_large(),
            0,
            "{name}: no frame over 131 072 bytes"
        );
        assert_eq!(relay.connections_seen(), 1, "{name}: never reconnected");
        assert!(
            relay.largest_client_frame() <= 131_072,
            "{name}: {}",
            relay.largest_client_frame()
        );
    }
    assert!(
        a.largest_client_frame() > 64 * 1024,
        "the announced budget is used: {}",
        a.largest_client_frame()
    );

    // A second run over NIP-77: the local set (paged past the own relay's
    // clamp of 500) matches, nothing is transferred again.
    a.reset_counters();
    b.reset_counters();
    let (second, _) = sync_once(&own).await;
    assert!(a.neg_opens_seen() > 0, "reconciled by negentropy");
    assert_eq!(a.events_sent(), 0, "no event downloaded again from a");
    assert_eq!(b.events_sent(), 0, "no event downloaded again from b");
    assert_eq!(second.events_stored, 0);
    assert_eq!(own.event_ids().await, held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_relay_refusing_writes_with_rate_limited_for_a_while_loses_nothing() {
    // 300 writes a minute per connection (the store publishes on two
    // connections, and adds none once the relay answered `rate-limited:`),
    // refilled at 5 a second: writes go past the buckets and are refused
    // `rate-limited: slow down` for a while.
    let own = TestRelay::start(TestRelayConfig {
        notes_per_minute: Some(300),
        ..TestRelayConfig::default()
    })
    .await;
    let a = TestRelay::start(TestRelayConfig::default()).await;
    let b = TestRelay::start(TestRelayConfig::default()).await;
    let data = load(&own, &a, &b, 20, 40).await;

    let (summary, _) = sync_once(&own).await;
    let held = own.event_ids().await;
    let missing = data.expected.difference(&held).count();
    assert_eq!(missing, 0, "nothing lost: {summary:?}");
    assert!(
        summary.store_retries > 0,
        "the own relay did refuse writes for a while: {summary:?}"
    );
    assert_eq!(
        summary.events_rejected, 0,
        "a rate limit is not a rejection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_nip11_endpoint_never_answers_is_synced() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let a = TestRelay::start(TestRelayConfig {
        nip11_stall: true,
        ..TestRelayConfig::strfry()
    })
    .await;
    let b = TestRelay::start(TestRelayConfig {
        nip11_stall: true,
        ..TestRelayConfig::default()
    })
    .await;
    let data = load(&own, &a, &b, 10, 30).await;
    let (summary, _) = sync_once(&own).await;
    let held = own.event_ids().await;
    assert!(
        data.expected.is_subset(&held),
        "{} missing: {summary:?}",
        data.expected.difference(&held).count()
    );
    assert!(a.nip11_requests_seen() >= 1, "the document was asked for");
    assert_eq!(a.frames_too_large(), 0, "safe sizes without NIP-11");
}
