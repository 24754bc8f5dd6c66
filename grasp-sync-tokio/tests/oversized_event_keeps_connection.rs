//! A single event over the event size limit (1 MiB) but under the message limit
//! (4 MiB) is refused and counted, and the connection stays open: the relay's other
//! events sync on the same connection, and nothing backs the relay off. Issue 44:
//! "a single oversized event is refused and counted, and the connection stays open
//! where the protocol allows"; a relay is unreachable only when it cannot be reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::DEFAULT_MAX_EVENT_BYTES;
use grasp_sync_core::RepoRef;
use grasp_sync_test_support::nip34::Announcement;
use grasp_sync_tokio::{ConnectionConfig, RelayStore, SyncManager, DEFAULT_MAX_MESSAGE_BYTES};
use nostr::prelude::*;
use support::{loopback_engine_config, sign, tag, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(60);
const ISSUES: u64 = 50;

/// What one sync of the remote's events saw: the summary's oversized count, the
/// remote's connections, whether the big event reached the own relay.
struct Seen {
    complete: bool,
    dropped_oversized: u64,
    connections: usize,
    big_stored: bool,
    unreachable: bool,
    negentropy_over_limit: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_over_the_event_limit_is_refused_and_the_connection_kept() {
    let seen = sync_with_one_big_event(ConnectionConfig::default(), WAIT).await;
    assert!(seen.complete, "the sync completed");
    assert!(!seen.big_stored, "the big event is refused");
    assert!(
        seen.dropped_oversized >= 1,
        "and counted: {}",
        seen.dropped_oversized
    );
    assert_eq!(
        seen.connections, 1,
        "one connection, kept through the refusal"
    );
    assert!(!seen.unreachable);
    assert_eq!(seen.negentropy_over_limit, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_old_128_kib_message_limit_the_same_event_costs_the_connection() {
    // The twin: the limit this issue raised. The frame cannot be skipped, so the
    // connection is lost (and the relay backed off) each time it is sent.
    let mut config = ConnectionConfig::default();
    config.max_message_size = 128 * 1024;
    config.max_frame_size = 128 * 1024;
    let seen = sync_with_one_big_event(config, Duration::from_secs(10)).await;
    assert!(!seen.big_stored);
    assert!(!seen.complete, "the sync cannot complete");
    assert!(
        seen.connections > 1,
        "the oversized message ended the connection: {} connections",
        seen.connections
    );
}

/// Syncs a repository whose remote holds 50 issues and one issue of 1.5 MiB,
/// with `connection` limits, until historic sync is complete with the 50 issues on
/// the own relay, or `wait` passed.
async fn sync_with_one_big_event(connection: ConnectionConfig, wait: Duration) -> Seen {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let keys = Keys::generate();
    let at = Timestamp::now().as_secs() - 10_000;
    let announcement = Announcement::new("repo")
        .relays([own.url(), remote.url()])
        .at(at)
        .sign(&keys);
    let repo = RepoRef::new(keys.public_key(), "repo").unwrap().to_string();
    let issues: Vec<Event> = (0..ISSUES)
        .map(|n| {
            sign(
                &keys,
                1621,
                &format!("issue {n}"),
                vec![tag(&["a", &repo])],
                at + 1 + n,
            )
        })
        .collect();
    // 1.5 MiB of content: over the event limit, within the message limit.
    let content = "x".repeat(DEFAULT_MAX_EVENT_BYTES + DEFAULT_MAX_EVENT_BYTES / 2);
    let big = sign(&keys, 1621, &content, vec![tag(&["a", &repo])], at + 500);
    assert!(big.as_json().len() > DEFAULT_MAX_EVENT_BYTES);
    assert!(big.as_json().len() + 100 < DEFAULT_MAX_MESSAGE_BYTES);
    own.add_event(&announcement).await;
    remote.add_event(&announcement).await;
    remote.add_events(&issues).await;
    remote.add_event(&big).await;

    let mut config = loopback_engine_config();
    config.identity.service_relays = vec![own.url()];
    let manager = SyncManager::builder()
        .own_relay(own.url())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .engine_config(config)
        .connection_config(connection)
        .build()
        .expect("a manager");
    let shutdown = manager.shutdown_handle();
    let mut status = manager.status();
    let run = tokio::spawn(manager.run());
    let expected: BTreeSet<EventId> = issues.iter().map(|issue| issue.id).collect();
    let deadline = tokio::time::Instant::now() + wait;
    let complete = loop {
        let complete = status.borrow_and_update().historic_sync_complete;
        if complete && expected.is_subset(&own.event_ids().await) {
            break true;
        }
        if tokio::time::Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let report = status
        .borrow()
        .relays
        .iter()
        .find(|relay| relay.report.relay == remote.url())
        .map(|relay| relay.report.clone())
        .expect("the remote is reported");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("stops")
        .expect("no panic");
    Seen {
        complete,
        dropped_oversized: summary.engine.dropped_oversized,
        connections: remote.connections_seen(),
        big_stored: own.event_ids().await.contains(&big.id),
        unreachable: report.unreachable,
        negentropy_over_limit: summary.engine.negentropy_over_limit,
    }
}
