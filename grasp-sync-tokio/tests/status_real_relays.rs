//! The status watch against real relays: per-relay detail, and historic
//! sync complete on every reachable relay while one bootstrap relay is
//! unreachable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::root;
use grasp_sync_tokio::{RelayStore, SyncManager, SyncStatus};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config, sign, tag, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(90);

/// A `ws://127.0.0.1:<port>` nobody listens on.
async fn closed_port_url() -> RelayUrl {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    RelayUrl::parse(&format!("ws://127.0.0.1:{port}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bootstrap_relay_is_reported_and_does_not_hold_historic_sync() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let a = TestRelay::start(TestRelayConfig::default()).await;
    let dead = closed_port_url().await;
    let maintainer = Keys::generate();
    let user = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &a.url()], base);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issue = root(&user, 1621, &repo, "issue", base + 1);
    let reply = sign(
        &user,
        1111,
        "reply",
        vec![tag(&["E", &issue.id.to_hex()])],
        base + 2,
    );
    own.add_event(&alpha).await;
    a.add_events(&[alpha.clone(), issue.clone(), reply.clone()])
        .await;

    let manager = SyncManager::builder()
        .own_relay(own.url())
        .bootstrap_relay(dead.clone())
        .engine_config(loopback_engine_config())
        .store(Arc::new(RelayStore::new(
            own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    let done: SyncStatus = tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete)
            .await
            .map(|status| status.clone())
    })
    .await
    .expect("historic sync completes although a relay is unreachable")
    .expect("manager running");
    shutdown.shutdown();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();

    let held = own.event_ids().await;
    assert!(
        held.contains(&issue.id) && held.contains(&reply.id),
        "{summary:?}"
    );
    assert_eq!(done.relays_unreachable, 1, "{done:?}");
    assert_eq!(done.repositories, 1);
    assert!(done.root_events >= 1);
    let relay = |url: &RelayUrl| done.relays.iter().find(|r| &r.report.relay == url).unwrap();
    let unreachable = relay(&dead);
    assert!(unreachable.report.unreachable && !unreachable.report.historic_confirmed);
    assert!(unreachable.report.last_error.is_some());
    let synced = relay(&a.url());
    assert!(synced.report.historic_confirmed && !synced.report.unreachable);
    assert!(synced.report.events_received >= 2, "{synced:?}");
    assert!(
        synced.bytes_received > 0 && synced.bytes_sent > 0,
        "{synced:?}"
    );
}
